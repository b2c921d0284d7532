"""A restarted server resumes the campaigns that were running, and lists them until it does."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.server.mcp_app import create_server
from mcp_evalserver.spec.campaign import parse_spec
from tests.server.helpers import answer_spec
from testsupport.servers import call

pytestmark = pytest.mark.anyio


def _server(state_dir: Path, *, resume_running: bool) -> Client:
    return Client(create_server(state_dir, resume_running=resume_running))


async def _three_stopped_campaigns(state_dir: Path) -> None:
    """`stopped`: its server stopped; `crashed`: its process died; `kept`: a person cancelled."""
    async with _server(state_dir, resume_running=True) as client:
        external = answer_spec(1, agent="external")
        await call(client, "start_campaign", spec=external, campaign_id="stopped")
        await call(client, "start_campaign", spec=external, campaign_id="kept")
        await call(client, "cancel_campaign", campaign_id="kept")
    # Created, never run: what a server killed right after start_campaign leaves.
    await CampaignStore(state_dir).create(parse_spec(answer_spec(2)), "crashed")


def _load(state_dir: Path, campaign_id: str) -> CampaignState:
    return CampaignStore(state_dir).load(campaign_id)


async def test_list_campaigns_names_the_interrupted_ones_with_what_to_do(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    await _three_stopped_campaigns(state_dir)

    async with _server(state_dir, resume_running=False) as client:
        listing = await call(client, "list_campaigns")
        status = await call(client, "campaign_status", campaign_id="stopped")
        kept = await call(client, "campaign_status", campaign_id="kept")
    assert sorted(listing["interrupted"]) == ["crashed", "stopped"]
    assert "call resume" in listing["hint"]
    assert status["interrupted"] is True
    assert status["active"] is False
    assert "interrupted" in status["next_step"]
    assert kept["interrupted"] is False, "a campaign a person cancelled stays cancelled"
    assert _load(state_dir, "stopped").cancelled_by == "shutdown"
    assert _load(state_dir, "kept").cancelled_by == "request"


async def test_a_restarted_server_resumes_the_campaigns_that_were_running(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    await _three_stopped_campaigns(state_dir)

    async with _server(state_dir, resume_running=True) as client:
        with anyio.fail_after(60):
            # The external campaign waits for a client again: it was resumed, nobody asked.
            claim = await call(client, "claim_trajectory", campaign_id="stopped", wait_s=30)
            # Resuming what the server already resumed answers with its status, not an error.
            resumed = await call(client, "resume", campaign_id="stopped")
            await call(client, "submit", claim_id=claim["claim_id"], answer="1")
            stopped = await call(client, "campaign_status", campaign_id="stopped", wait_s=30)
            crashed = await call(client, "campaign_status", campaign_id="crashed", wait_s=30)
        kept = await call(client, "campaign_status", campaign_id="kept")
        listing = await call(client, "list_campaigns")
    assert (resumed["status"], resumed["active"], resumed["claimed"]) == ("running", True, 1)
    assert (stopped["status"], stopped["resolved"]) == ("finished", 1)
    assert (crashed["status"], crashed["resolved"]) == ("finished", 2)
    assert kept["status"] == "cancelled"
    assert kept["active"] is False
    assert listing["interrupted"] == []
    assert listing["hint"] is None
