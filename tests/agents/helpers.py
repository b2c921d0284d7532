"""Builders shared by the agent tests: campaigns whose agent comes from the spec, ledger reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp_evalserver.engine.ledger import LEDGER_FILE, read_ledger
from mcp_evalserver.engine.records import record_json
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.runtime.artifacts import read_artifact
from mcp_evalserver.scoring.base import Scorer
from mcp_evalserver.server.mcp_app import serve_trajectory
from mcp_evalserver.spec.campaign import CampaignSpec

KEY_ENV = "EVALSERVER_TEST_OPENAI_KEY"
KEY = "sk-test-0123"


def openai_agent(url: str, **fields: Any) -> dict[str, Any]:
    """An `openai` agent config for the fake endpoint, with no waiting between retries."""
    config: dict[str, Any] = {
        "type": "openai",
        "model": "scripted-model",
        "base_url": url,
        "api_key_env": KEY_ENV,
        "retry_base_delay_s": 0.0,
        "retry_attempts": 3,
    }
    return config | fields


def spec(
    tasks: list[dict[str, Any]],
    agent: dict[str, Any],
    *,
    samples: int = 1,
    scorer: dict[str, Any] | None = None,
    **limits: Any,
) -> CampaignSpec:
    limits.setdefault("retry_base_delay_s", 0.0)
    return CampaignSpec.model_validate(
        {
            "name": "agents",
            "tasks": tasks,
            "samples": samples,
            "agent": agent,
            "scorer": scorer or {"type": "exact"},
            "limits": limits,
        }
    )


async def run(
    state_dir: Path, campaign: CampaignSpec, scorer: Scorer | None = None
) -> tuple[CampaignState, Path]:
    """Runs a campaign built from its spec alone (the agent comes from `build_agent`)."""
    store = CampaignStore(state_dir)
    campaign_id = await store.create(campaign)
    state = await CampaignRunner(
        store, campaign_id, scorer=scorer, trajectory_endpoints=serve_trajectory
    ).run()
    return state, store.directory(campaign_id)


def records(directory: Path, kind: str) -> list[dict[str, Any]]:
    """The ledger's records of one kind, as the JSON objects its lines hold."""
    records = read_ledger(directory / LEDGER_FILE).records
    return [record_json(r) for r in records if r.kind == kind]


def artifact_text(directory: Path, ref: dict[str, Any]) -> str:
    return read_artifact(directory, ref).decode()
