"""The shipped price table: made from litellm's bundled map by `scripts/update_prices.py`, never
typed from memory, and read the way the runtime looks models up."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

from mcp_evalserver.runtime.pricing import PriceTable, shipped_prices

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "update_prices.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("update_prices", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entry(provider: str, read: float, write: float, **more: Any) -> dict[str, Any]:
    return {
        "litellm_provider": provider,
        "mode": "chat",
        "input_cost_per_token": read,
        "output_cost_per_token": write,
        **more,
    }


def test_the_script_keeps_direct_providers_chat_models_per_million_tokens_by_bare_name() -> None:
    source = {
        "gpt-x": _entry("openai", 1.25e-6, 10e-6, cache_read_input_token_cost=0.125e-6),
        "gemini/gemini-x": _entry("gemini", 0.3e-6, 2.5e-6),
        "azure/gpt-x": _entry("azure", 9e-6, 9e-6),
        "openrouter/openai/gpt-x": _entry("openrouter", 9e-6, 9e-6),
        "text-embedding-x": {**_entry("openai", 1e-7, 0), "mode": "embedding"},
        "claude-x": {"litellm_provider": "anthropic", "mode": "chat"},
        "gemini/gemini-free": _entry("gemini", 0, 0),
        "sample_spec": "a string, as litellm's map holds one",
    }
    assert _script().table(source) == {
        "gemini-x": {"input": 0.3, "output": 2.5},
        "gpt-x": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
    }


def test_a_dated_name_is_kept_only_when_its_prices_differ_from_the_undated_name() -> None:
    source = {
        "claude-x": _entry("anthropic", 3e-6, 15e-6),
        "claude-x-20250929": _entry("anthropic", 3e-6, 15e-6),
        "claude-y": _entry("anthropic", 3e-6, 15e-6),
        "claude-y-20240101": _entry("anthropic", 15e-6, 75e-6),
    }
    assert list(_script().table(source)) == ["claude-x", "claude-y", "claude-y-20240101"]


def test_the_shipped_table_names_its_source_and_prices_every_model_it_lists() -> None:
    document = json.loads(
        (SCRIPT.parents[1] / "mcp_evalserver" / "runtime" / "prices.json").read_text()
    )
    assert document["source"].startswith("litellm ")
    prices = shipped_prices()
    assert len(prices) >= 20
    assert all(p.input > 0 or p.output > 0 for p in prices.values())
    # A dated or prefixed name finds its model, as a provider's reply names it.
    table = PriceTable(prices)
    assert table.lookup("openai/gpt-5-2025-08-07") == prices["gpt-5"]
