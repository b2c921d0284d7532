"""Rewrites `mcp_evalserver/runtime/prices.json` from the price map litellm ships in its wheel.

The package's table must be the providers' list prices, not anyone's memory of them; litellm's
bundled map is maintained from those lists and is on this machine whenever the `minisweagent`
extra is (no network needed). Run it after upgrading litellm:

    .venv/bin/python scripts/update_prices.py

It keeps the chat models of the providers people point the `openai` agent and the judge at
directly (OpenAI, Anthropic, Google's Gemini API, DeepSeek), by their names without a provider
prefix, in US dollars per million tokens. A dated name whose undated name has the same prices
is left out: the lookup drops a date suffix. `tests/agents/test_prices.py` checks the file
against the installed litellm.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PROVIDERS = ("openai", "anthropic", "gemini", "deepseek")
TABLE = Path(__file__).resolve().parents[1] / "mcp_evalserver" / "runtime" / "prices.json"


def litellm_map() -> dict[str, Any]:
    """litellm's bundled map, read as a file: importing litellm is slow, and fetches a newer
    map from the network unless told not to."""
    wheel = metadata.distribution("litellm")
    path = Path(str(wheel.locate_file("litellm/model_prices_and_context_window_backup.json")))
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def per_million(entry: dict[str, Any]) -> dict[str, float] | None:
    """An entry's prices per million tokens, or None when it lacks input or output prices."""
    read = entry.get("input_cost_per_token")
    write = entry.get("output_cost_per_token")
    if not isinstance(read, int | float) or not isinstance(write, int | float):
        return None
    if read == 0 and write == 0:  # an experimental model's "free" or a price nobody filled in:
        return None  # left unknown, never a guessed 0
    price = {"input": round(read * 1e6, 6)}
    if isinstance(cached := entry.get("cache_read_input_token_cost"), int | float):
        price["cached_input"] = round(cached * 1e6, 6)
    price["output"] = round(write * 1e6, 6)
    return price


def table(source: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The shipped models: each direct provider's chat models, by bare name."""
    found: dict[str, dict[str, float]] = {}
    for key, entry in source.items():
        if not isinstance(entry, dict) or entry.get("mode") != "chat":
            continue
        if (provider := entry.get("litellm_provider")) not in PROVIDERS:
            continue
        name = key.removeprefix(f"{provider}/")
        if "/" in name or (price := per_million(entry)) is None:
            continue
        found[name] = price
    return {
        name: price
        for name, price in sorted(found.items())
        if found.get(_undated(name)) != price or _undated(name) == name
    }


def _undated(name: str) -> str:
    # The same suffixes runtime/pricing.py drops when it looks a model up.
    from mcp_evalserver.runtime.pricing import undated

    return undated(name)


def main() -> int:
    version = metadata.version("litellm")
    models = table(litellm_map())
    document = {
        "source": f"litellm {version}'s bundled model price map (scripts/update_prices.py)",
        "note": "US dollars per million tokens, standard tier. Override with "
        "$MCP_EVALSERVER_PRICES or a spec's `prices`.",
        "models": models,
    }
    lines = [f'    "{name}": {json.dumps(price)}' for name, price in models.items()]
    head = json.dumps({k: v for k, v in document.items() if k != "models"}, indent=2)[:-2]
    TABLE.write_text(head + ',\n  "models": {\n' + ",\n".join(lines) + "\n  }\n}\n")
    print(f"{TABLE}: {len(models)} models from litellm {version}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
