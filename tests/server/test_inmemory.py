"""The MCP tools through the official client, in memory, in both protocol eras."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_evalserver.engine.ledger import LedgerWriter
from mcp_evalserver.server.mcp_app import create_server
from mcp_evalserver.server.service import EvalService
from tests.server.helpers import MODES, answer_spec
from testsupport.servers import call, call_error

pytestmark = pytest.mark.anyio

TOOLS = {
    "start_campaign", "campaign_status", "list_campaigns", "cancel_campaign", "resume",
    "claim_trajectory", "sandbox_exec", "read_file", "write_file", "edit_file", "search",
    "list_files", "get_diff", "submit", "score", "compare_campaigns", "sweep_concurrency",
    "sweep_status",
    "calibrate_judge", "checkpoint", "restore", "fork_trajectory", "export_results",
    "plan_sample_size", "report_usage", "start_eval_set", "cancel_eval_set",
}  # fmt: skip


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_the_server_lists_every_tool_with_a_description_and_schemas(
    tmp_path: Path, mode: str
) -> None:
    async with Client(create_server(tmp_path), mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert len(tool.description or "") > 40, tool.name
        assert tool.output_schema is not None, tool.name
    assert "tasks" in str(tools["start_campaign"].input_schema)


async def test_a_campaign_runs_in_the_background_and_reports_progress_until_finished(
    tmp_path: Path, mode: str
) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with Client(create_server(tmp_path), mode=mode) as client:
        started = await call(client, "start_campaign", spec=answer_spec(6))
        campaign_id = started["campaign_id"]
        assert started["trajectories"] == 6
        with anyio.fail_after(30):
            status = started
            while status["status"] != "finished":
                result = await client.call_tool(
                    "campaign_status",
                    {"campaign_id": campaign_id, "wait_s": 10},
                    progress_callback=on_progress,
                )
                assert not result.is_error
                assert result.structured_content is not None
                status = result.structured_content
        assert status["done"] == 6
        assert status["pass_rate"] == 1.0
        assert status["active"] is False
        # Progress while it ran, none once the answer was ready: the answer carries 6/6.
        assert seen
        assert all(total == 6 and done < 6 for done, total, _ in seen), seen
        assert campaign_id in str(seen[-1][2])
        report = await client.read_resource(f"campaign://{campaign_id}/report")
        text = getattr(report.contents[0], "text", "")
        assert f"# Campaign {campaign_id}" in text
        assert "100.0%" in text
        listed = await call(client, "list_campaigns")
        assert [c["campaign_id"] for c in listed["campaigns"]] == [campaign_id]
        scoring = await call(client, "score", campaign_id=campaign_id)
        assert scoring["scored"] == 6
        assert scoring["summary"]["mean_pass_rate"] == 1.0


async def test_errors_say_what_went_wrong_and_what_to_do_next(tmp_path: Path, mode: str) -> None:
    async with Client(create_server(tmp_path), mode=mode) as client:
        bad = await call_error(client, "start_campaign", spec={"tasks": [], "samples": 0})
        assert "samples" in bad
        unknown_agent = await call_error(
            client, "start_campaign", spec={"tasks": [{"id": "a"}], "agent": {"type": "gpt"}}
        )
        assert "agent" in unknown_agent
        assert "external" in unknown_agent
        missing = await call_error(client, "campaign_status", campaign_id="nope")
        assert "NotFound" in missing
        assert "call list_campaigns" in missing
        no_claim = await call_error(client, "sandbox_exec", claim_id="x", command="true")
        assert "claim_trajectory" in no_claim
        nothing = await call_error(client, "claim_trajectory")
        assert '{"type": "external"}' in nothing
        finished = await call(client, "start_campaign", spec=answer_spec(1), campaign_id="one")
        with anyio.fail_after(30):
            await call(client, "campaign_status", campaign_id="one", wait_s=20)
        assert "finished" in await call_error(client, "resume", campaign_id="one")
        assert "nothing to cancel" in await call_error(client, "cancel_campaign", campaign_id="one")
        taken = await call_error(client, "start_campaign", spec=answer_spec(1), campaign_id="one")
        assert "exists" in taken
        assert finished["campaign_id"] == "one"
        # The server is still serving after every failure.
        assert (await call(client, "list_campaigns"))["total"] == 1


async def test_a_claim_on_a_campaign_that_does_not_exist_is_refused_at_once(
    tmp_path: Path, mode: str
) -> None:
    async with Client(create_server(tmp_path), mode=mode) as client:
        spec = answer_spec(1, agent="external")
        await call(client, "start_campaign", spec=spec, campaign_id="real")
        with anyio.fail_after(10):  # not after wait_s
            typo = await call_error(client, "claim_trajectory", campaign_id="rael", wait_s=300)
            claimed = await call(client, "claim_trajectory", campaign_id="real", wait_s=10)
    assert "NotFound: no campaign 'rael' on this server (recent: real; call list_campaigns" in typo
    assert claimed["campaign_id"] == "real"


async def test_an_external_trajectory_is_claimed_answered_scored_and_then_closed(
    tmp_path: Path, mode: str
) -> None:
    async with Client(create_server(tmp_path), mode=mode) as client:
        started = await call(client, "start_campaign", spec=answer_spec(1, agent="external"))
        campaign_id = started["campaign_id"]
        with anyio.fail_after(30):
            claim = await call(client, "claim_trajectory", campaign_id=campaign_id, wait_s=10)
        assert claim["prompt"] == "1 squared?"
        assert claim["has_workspace"] is False
        no_workspace = await call_error(
            client, "sandbox_exec", claim_id=claim["claim_id"], command="ls"
        )
        assert "submit an `answer`" in no_workspace
        submitted = await call(client, "submit", claim_id=claim["claim_id"], answer="1")
        assert submitted["trajectory_id"] == "t1@0"
        again = await call_error(client, "submit", claim_id=claim["claim_id"], answer="1")
        assert "Conflict" in again
        assert "was submitted" in again
        with anyio.fail_after(30):
            status = await call(client, "campaign_status", campaign_id=campaign_id, wait_s=20)
        assert status["status"] == "finished"
        assert status["resolved"] == 1


async def test_a_running_campaign_is_cancelled_then_resumed_to_the_end(
    tmp_path: Path, mode: str
) -> None:
    async with Client(create_server(tmp_path), mode=mode) as client:
        started = await call(client, "start_campaign", spec=answer_spec(2, agent="external"))
        campaign_id = started["campaign_id"]
        cancelled = await call(client, "cancel_campaign", campaign_id=campaign_id)
        assert cancelled["status"] == "cancelled"
        assert cancelled["active"] is False
        assert "resume" in cancelled["next_step"]
        resumed = await call(client, "resume", campaign_id=campaign_id)
        assert resumed["active"] is True
        again = await call(client, "resume", campaign_id=campaign_id)
        assert (again["active"], again["status"]) == (True, "running"), "resume is idempotent"
        with anyio.fail_after(30):
            for _ in range(2):
                claim = await call(client, "claim_trajectory", wait_s=10)
                task = claim["task_id"]
                answer = str(int(task[1:]) ** 2)
                await call(client, "submit", claim_id=claim["claim_id"], answer=answer)
            status = await call(client, "campaign_status", campaign_id=campaign_id, wait_s=20)
        assert status["status"] == "finished"
        assert status["resolved"] == 2


async def test_two_campaigns_are_compared_task_by_task(tmp_path: Path, mode: str) -> None:
    async with Client(create_server(tmp_path), mode=mode) as client:
        await call(client, "start_campaign", spec=answer_spec(4, agent="noop"), campaign_id="a")
        await call(client, "start_campaign", spec=answer_spec(4), campaign_id="b")
        with anyio.fail_after(30):
            for campaign_id in ("a", "b"):
                await call(client, "campaign_status", campaign_id=campaign_id, wait_s=20)
        result = await call(client, "compare_campaigns", campaign_a="a", campaign_b="b")
    assert result["comparison"]["shared_tasks"] == 4
    assert result["comparison"]["mean_difference"] == 1.0
    assert "B wins 4" in result["markdown"]


async def test_an_unexpected_exception_becomes_an_error_with_a_logged_reference(
    tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: EvalService, limit: int = 50) -> None:
        raise RuntimeError("secret detail")

    monkeypatch.setattr(EvalService, "list", broken)
    async with Client(create_server(tmp_path), mode=mode) as client:
        message = await call_error(client, "list_campaigns")
        # The server keeps serving after the crash of one call.
        started = await call(client, "start_campaign", spec=answer_spec(1))
        assert started["trajectories"] == 1
    assert "internal error (reference " in message
    assert "secret detail" not in message
    reference = message.split("reference ")[1].split(")")[0]
    logged = [r for r in caplog.records if reference in r.getMessage()]
    assert logged
    assert logged[0].exc_info is not None


async def test_a_finished_campaign_is_scored_again_with_another_scorer(
    tmp_path: Path, mode: str
) -> None:
    wrong_scorer = {"type": "python", "factory": "tests.server.helpers:diff_scorer"}
    async with Client(create_server(tmp_path), mode=mode) as client:
        await call(
            client, "start_campaign", spec=answer_spec(3, scorer=wrong_scorer), campaign_id="c"
        )
        with anyio.fail_after(30):
            first = await call(client, "campaign_status", campaign_id="c", wait_s=20)
            assert first["resolved"] == 0
            again = await call(
                client, "score", campaign_id="c", rescore=True, scorer={"type": "exact"}
            )
            assert again["rescoring"] == 3
            second = await call(client, "campaign_status", campaign_id="c", wait_s=20)
        assert second["status"] == "finished"
        assert second["resolved"] == 3
        figures = await call(client, "score", campaign_id="c")
        assert figures["summary"]["mean_pass_rate"] == 1.0


async def test_resuming_a_campaign_another_process_runs_is_refused_with_the_reason(
    tmp_path: Path, mode: str
) -> None:
    async with Client(create_server(tmp_path), mode=mode) as client:
        spec = answer_spec(1, agent="external")
        await call(client, "start_campaign", spec=spec, campaign_id="held")
        await call(client, "cancel_campaign", campaign_id="held")
        # Another writer (as a CLI `resume` would be) holds the ledger's lock.
        async with await LedgerWriter.open(tmp_path / "campaigns" / "held", "held"):
            refused = await call_error(client, "resume", campaign_id="held")
        assert "being run by another process" in refused
        status = await call(client, "campaign_status", campaign_id="held")
        assert status["active"] is False
        assert (await call(client, "resume", campaign_id="held"))["active"] is True


def test_the_docs_document_every_tool() -> None:
    page = (Path(__file__).parents[2] / "docs" / "reference" / "mcp-tools.md").read_text()
    section = page.split("## Tools", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in row.split("`")[1::2]}
    assert documented == TOOLS


async def test_an_adaptive_campaign_shows_its_samples_planned_so_far_and_the_most(
    tmp_path: Path,
) -> None:
    spec = answer_spec(6, samples={"min": 2, "max": 4, "target_half_width": 0.01})
    async with Client(create_server(tmp_path)) as client:
        started = await call(client, "start_campaign", spec=spec)
        campaign_id = started["campaign_id"]
        assert started["trajectories"] == 12
        assert started["sampling"]["planned"] == 12
        assert started["sampling"]["most"] == 24
        with anyio.fail_after(30):
            status = started
            while status["status"] != "finished":
                status = await call(client, "campaign_status", campaign_id=campaign_id, wait_s=10)
        # The oracle resolves everything: the interval is a point after the first round.
        assert status["sampling"]["stopped"] == "target_reached"
        assert status["sampling"]["half_width"] == 0.0
        assert status["trajectories"] == status["done"] == 12
        report = await client.read_resource(f"campaign://{campaign_id}/report")
        text = getattr(report.contents[0], "text", "")
        assert "Adaptive sampling (min 2, max 4): stopped after 0 round(s)" in text
