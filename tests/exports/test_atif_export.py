"""ATIF export: every file valid against the format, every tool call paired with its result."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_evalserver import __version__
from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.exports.atif import atif_trajectory
from mcp_evalserver.engine.exports.transcripts import (
    NOT_RECORDED,
    SUBMITTED,
    ExportedTrajectory,
    turns,
)
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.server.mcp_app import create_server
from mcp_evalserver.spec.campaign import CampaignSpec
from tests.exports.atif_schema import Trajectory
from tests.exports.campaign import answered_campaign, exported_over_mcp

pytestmark = pytest.mark.anyio


async def cli(*args: str) -> int:
    """The command line, in a worker thread as from a shell (Inspect writes with its own loop)."""
    return await anyio.to_thread.run_sync(main, list(args))


async def test_every_trajectory_is_written_as_a_valid_atif_file_with_calls_and_results_paired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store, state = await answered_campaign(tmp_path, monkeypatch)
    out = tmp_path / "atif"
    argv = ["--state-dir", str(store.state_dir), "export", state.id, "--format", "atif"]
    assert await cli(*argv, "--out", str(out)) == 0
    assert "wrote 4 trajectory.json file(s)" in capsys.readouterr().err

    files = sorted(out.rglob("trajectory.json"))
    assert [f.parent.name for f in files] == ["t3@0", "t3@1", "t4@0", "t4@1"]
    for path in files:
        document = Trajectory.model_validate_json(path.read_text())
        tid = path.parent.name
        trajectory = state.trajectories[tid]
        assert document.session_id == f"{state.id}/{tid}"
        assert (document.agent.name, document.agent.version) == ("openai", __version__)
        assert document.agent.model_name == "scripted-model"
        assert [s.source for s in document.steps] == ["system", "user", "agent", "agent"]
        assert (
            document.steps[1].message
            == {"t4": "What is 4 squared?", "t3": "What is 3 squared?"}[trajectory.task_id]
        )
        # Every call has exactly one result, in its own step, and nothing else is a result.
        for step in document.steps:
            calls = [c.tool_call_id for c in step.tool_calls or []]
            results = (
                [r.source_call_id for r in step.observation.results] if step.observation else []
            )
            assert results == calls
        lookup, submit = document.steps[2], document.steps[3]
        assert lookup.message == "Let me look that up."
        assert lookup.tool_calls is not None
        assert lookup.observation is not None
        assert lookup.tool_calls[0].function_name == "lookup"
        assert lookup.tool_calls[0].arguments == {"query": document.steps[1].message}
        assert lookup.observation.results[0].content == (
            "error: no tool named 'lookup'; the tools are: submit"
        )
        assert submit.tool_calls is not None
        assert submit.observation is not None
        answer = {"t4": "16", "t3": "8"}[trajectory.task_id]
        assert submit.tool_calls[0].arguments == {"answer": answer}
        assert submit.observation.results[0].content == SUBMITTED
        # Per step: the model call's tokens; in all: the trajectory's usage.
        assert lookup.metrics is not None
        assert submit.metrics is not None
        assert (lookup.metrics.prompt_tokens, lookup.metrics.completion_tokens) == (40, 9)
        assert (submit.metrics.prompt_tokens, submit.metrics.completion_tokens) == (60, 20)
        assert document.final_metrics is not None
        assert document.final_metrics.total_prompt_tokens == 100
        assert document.final_metrics.total_completion_tokens == 29
        assert document.final_metrics.total_steps == 4
        assert document.extra is not None
        assert document.extra["outcome"] == trajectory.outcome
        assert document.extra["score"] == trajectory.score


async def test_the_mcp_tool_gives_the_same_documents_as_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, state = await answered_campaign(tmp_path, monkeypatch)
    out = tmp_path / "atif"
    argv = ["--state-dir", str(store.state_dir), "export", state.id, "--format", "atif"]
    assert await cli(*argv, "--out", str(out)) == 0
    async with Client(create_server(store.state_dir)) as client:
        with anyio.fail_after(30):
            text, pages = await exported_over_mcp(client, state.id, "atif", max_chars=1000)
    documents = json.loads(text)["trajectories"]
    # Pages of at most max_chars, joined back into the file written at the first.
    assert len(pages) > 1
    assert all(len(page["text"]) <= 1000 for page in pages)
    assert Path(pages[0]["path"]).read_text() == text
    assert pages[-1]["total_chars"] == len(text)
    on_disk = {
        p.parent.name: json.loads(p.read_text()) for p in sorted(out.rglob("trajectory.json"))
    }
    assert {d["extra"]["trajectory"]: d for d in documents} == on_disk


async def test_agents_without_a_transcript_export_the_prompt_and_what_they_handed_in(
    tmp_path: Path,
) -> None:
    spec = CampaignSpec.model_validate(
        {
            "name": "oracle",
            "tasks": [{"id": "t2", "prompt": "2 squared?", "answer": "4"}],
            "agent": {"type": "oracle"},
        }
    )
    store = CampaignStore(tmp_path / "state")
    campaign_id = await store.create(spec)
    with anyio.fail_after(30):
        await CampaignRunner(store, campaign_id).run()
    out = tmp_path / "atif"
    argv = ["--state-dir", str(store.state_dir), "export", campaign_id, "--format", "atif"]
    assert await cli(*argv, "--out", str(out)) == 0

    document = Trajectory.model_validate_json((out / "t2@0" / "trajectory.json").read_text())
    assert [(s.source, s.message) for s in document.steps] == [
        ("user", "2 squared?"),
        ("agent", "4"),
    ]
    assert document.agent.model_name is None
    assert document.extra is not None
    assert document.extra["outcome"] == "resolved"


def test_a_command_agents_calls_become_agent_steps_each_with_its_recorded_outcome() -> None:
    transcript = [
        {"event": "started", "command": ["agent.py"], "url": "http://127.0.0.1:1/mcp"},
        {"tool": "sandbox_exec", "arguments": {"command": "ls"}, "exit_code": 0},
        {"tool": "read_file", "arguments": {"path": "a.py"}},
        {"tool": "submit", "arguments": {"answer": None}},
        {"event": "exited", "exit_code": 0, "stdout": "", "stderr": ""},
    ]
    found = turns(transcript, "Fix the bug.")
    assert [(t.role, t.text) for t in found] == [("user", "Fix the bug.")] + [("agent", "")] * 3
    assert [c.result for t in found for c in t.calls] == [
        '{"exit_code": 0}',
        NOT_RECORDED,
        SUBMITTED,
    ]
    assert found[0].events[0]["event"] == "started"
    assert found[-1].events[0]["event"] == "exited"


def test_a_transcript_without_an_agent_turn_ends_with_what_was_handed_in() -> None:
    provenance = {"event": "prediction", "source": "gold", "instance_id": "x__y-1"}
    found = turns([provenance], "Fix the bug.", patch="--- a/x\n+++ b/x\n")
    assert [(t.role, t.text) for t in found] == [
        ("user", "Fix the bug."),
        ("agent", "--- a/x\n+++ b/x\n"),
    ]
    assert found[0].events == [provenance]


async def test_a_transcript_that_breaks_the_rules_still_exports_valid_atif(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a model or program may record: arguments that are no JSON object, a tool result
    naming no call, a call never answered, entries that are no objects."""
    _, state = await answered_campaign(tmp_path, monkeypatch)
    trajectory = state.trajectories["t4@0"]
    transcript = [
        {"role": "user", "content": [{"type": "text", "text": "part one"}, "part two"]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "exec", "arguments": "ls -l"}},
            {"id": "b", "type": "function", "function": {"name": "exec", "arguments": "[1]"}},
        ]},
        {"role": "tool", "tool_call_id": "a", "content": "total 0"},
        {"role": "tool", "tool_call_id": "zzz", "content": "from nowhere"},
        "a bare string",
    ]  # fmt: skip
    task = state.spec.task_list()[0]
    item = ExportedTrajectory(trajectory, task, None, None, transcript)
    document = Trajectory.model_validate(atif_trajectory(state, item))
    agent = document.steps[1]
    assert document.steps[0].message == "part one\npart two"
    assert agent.tool_calls is not None
    assert agent.observation is not None
    assert [c.arguments for c in agent.tool_calls] == [{"raw": "ls -l"}, {"raw": "[1]"}]
    assert [r.content for r in agent.observation.results] == ["total 0", NOT_RECORDED]
    assert agent.extra is not None
    assert [e["event"] for e in agent.extra["events"]] == ["unmatched_tool_result", "entry"]
