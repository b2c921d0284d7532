"""A real campaign to export: the `openai` agent against a scripted endpoint on loopback.

Two answer tasks, two samples each. The model looks something up first (a tool it was not
offered: the agent answers with an error, a real tool result), then submits: right for `t4`,
wrong for `t3`. So the export has resolved and failed samples, tool calls with results, usage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from tests.agents.fake_openai import FakeOpenAI, Reply, Response, serving
from tests.agents.helpers import KEY, KEY_ENV, openai_agent, run, spec
from testsupport.servers import call

TASKS = [
    {"id": "t4", "prompt": "What is 4 squared?", "answer": "16"},
    {"id": "t3", "prompt": "What is 3 squared?", "answer": "9"},
]
#: What the scripted model submits for each prompt.
SUBMITS = {"What is 4 squared?": "16", "What is 3 squared?": "8"}


def _model(body: dict[str, Any]) -> Response:
    """Looks up first, then submits: decided by the conversation, not by the order requests
    arrive in (trajectories run concurrently)."""
    messages = body["messages"]
    prompt = messages[1]["content"]
    if messages[-1]["role"] == "user":
        return Reply(
            content="Let me look that up.",
            tool_calls=(("lookup", {"query": prompt}),),
            prompt_tokens=40,
            completion_tokens=9,
        )
    return Reply(tool_calls=(("submit", {"answer": SUBMITS[prompt]}),), prompt_tokens=60)


async def answered_campaign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[CampaignStore, CampaignState]:
    """Runs the campaign to its end; returns its store and state."""
    monkeypatch.setenv(KEY_ENV, KEY)
    with serving(FakeOpenAI([], then=_model)) as fake, anyio.fail_after(60):
        state, _ = await run(tmp_path / "state", spec(TASKS, openai_agent(fake.url), samples=2))
    return CampaignStore(tmp_path / "state"), state


async def exported_over_mcp(
    client: Client, campaign_id: str, fmt: str, max_chars: int = 20_000
) -> tuple[str, list[dict[str, Any]]]:
    """The whole export through `export_results`, its pages joined; and the pages' answers."""
    pages: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        arguments = {"campaign_id": campaign_id, "format": fmt, "offset": offset}
        page = await call(client, "export_results", **arguments, max_chars=max_chars)
        pages.append(page)
        offset = page["next_offset"]
    return "".join(page["text"] for page in pages), pages
