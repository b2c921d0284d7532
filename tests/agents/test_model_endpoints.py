"""One endpoint rule for every model caller: the spec's `base_url`, else $OPENAI_BASE_URL, else
OpenAI's; what each caller of a spec will use, as reports and statuses say it."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_evalserver.agents.minisweagent.model import with_endpoint
from mcp_evalserver.runtime.endpoints import model_endpoints
from mcp_evalserver.scoring.judge import LlmJudgeScorer
from mcp_evalserver.spec.agents import DEFAULT_BASE_URL
from mcp_evalserver.spec.campaign import CampaignSpec

LOCAL = "http://127.0.0.1:8000/v1"
TASKS = [{"id": "t1", "prompt": "1?", "answer": "1"}]


def _spec(agent: dict[str, Any], scorer: dict[str, Any]) -> CampaignSpec:
    return CampaignSpec.model_validate({"tasks": TASKS, "agent": agent, "scorer": scorer})


def test_every_caller_takes_its_base_url_else_openai_base_url_else_openais(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    judge = {"type": "llm_judge", "model": "m", "rubric": ["right"]}
    scorer = {"type": "all_of", "scorers": [{"type": "exact"}, judge | {"base_url": LOCAL}, judge]}
    agent = {"type": "openai", "model": "m"}
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert model_endpoints(_spec(agent, scorer)) == {
        "agent": f"OpenAI's ({DEFAULT_BASE_URL})",
        "scorer.scorers[1]": LOCAL,
        "scorer.scorers[2]": f"OpenAI's ({DEFAULT_BASE_URL})",
    }
    monkeypatch.setenv("OPENAI_BASE_URL", "http://10.0.0.7:4000/v1")
    described = model_endpoints(_spec(agent, scorer))
    assert described["agent"] == described["scorer.scorers[2]"] == "$OPENAI_BASE_URL (the server's)"
    assert "10.0.0.7" not in str(described), "the operator's URL is named, never shown"
    # The judge sends there, and needs no key for it (a local server needs none).
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert LlmJudgeScorer(model="m").base_url == "http://10.0.0.7:4000/v1"


def test_mini_swe_agents_openai_models_follow_the_rule_and_other_providers_stay_litellms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", LOCAL)
    model, key = with_endpoint({"model_name": "openai/gpt-x", "model_kwargs": {"x": 1}})
    assert model["model_kwargs"] == {"x": 1, "api_base": LOCAL}
    assert key == LOCAL
    given = {"model_name": "openai/gpt-x", "model_kwargs": {"api_base": "http://h:1/v1"}}
    assert with_endpoint(given) == (given, "http://h:1/v1")
    other = {"model_name": "anthropic/claude-x"}
    assert with_endpoint(other) == (other, "anthropic/claude-x")
    spec = _spec({"type": "mini-swe-agent", "model": other}, {"type": "exact"})
    assert model_endpoints(spec) == {"agent": "litellm's endpoint for anthropic/claude-x"}


@pytest.mark.parametrize(
    ("provider", "variable", "own"),
    [
        ("openai", "OPENAI_BASE_URL", "https://api.openai.com/v1"),
        ("anthropic", "ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
        ("gemini", "GOOGLE_GEMINI_BASE_URL", "https://generativelanguage.googleapis.com"),
    ],
)
def test_each_provider_takes_the_specs_url_else_its_own_variable_else_its_own_endpoint(
    monkeypatch: pytest.MonkeyPatch, provider: str, variable: str, own: str
) -> None:
    from mcp_evalserver.runtime.endpoints import model_endpoint, operators_endpoints

    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    assert model_endpoint(None, provider).url == own
    assert operators_endpoints(provider) == [own]
    monkeypatch.setenv(variable, "http://127.0.0.1:9")
    chosen = model_endpoint(None, provider)
    assert (chosen.url, chosen.describe()) == ("http://127.0.0.1:9", f"${variable} (the server's)")
    assert operators_endpoints(provider) == [own, "http://127.0.0.1:9"]
    assert model_endpoint("http://127.0.0.1:7", provider).url == "http://127.0.0.1:7"
