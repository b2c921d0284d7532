"""Inspect export: Inspect's own `read_eval_log` reads back a real campaign; bad input is
refused with a message that says what to do."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import anyio
import pytest
from inspect_ai.log import read_eval_log
from inspect_ai.model import ChatMessageAssistant, ChatMessageTool
from mcp import Client

from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.exports import write_export
from mcp_evalserver.engine.exports.transcripts import SUBMITTED
from mcp_evalserver.server.mcp_app import create_server
from tests.exports.campaign import answered_campaign, exported_over_mcp

pytestmark = pytest.mark.anyio


def cli(*args: str) -> int:
    return main(list(args))


async def export(state_dir: Path, campaign_id: str, *args: str) -> int:
    argv = ["--state-dir", str(state_dir), "export", campaign_id, *args]
    # In a worker thread, as from the command line: Inspect runs a loop of its own to write.
    return await anyio.to_thread.run_sync(cli, *argv)


async def test_read_eval_log_reads_a_campaign_back_with_its_samples_scores_and_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store, state = await answered_campaign(tmp_path, monkeypatch)
    out = tmp_path / "logs" / "campaign.eval"
    out.parent.mkdir()
    assert await export(store.state_dir, state.id, "--format", "inspect", "--out", str(out)) == 0
    assert f"wrote {out}" in capsys.readouterr().err

    log = await anyio.to_thread.run_sync(read_eval_log, str(out))
    assert log.status == "success"
    assert (log.eval.task, log.eval.run_id, log.eval.model) == (
        "agents",
        state.id,
        "openai/scripted-model",
    )
    assert log.eval.config.epochs == 2
    assert log.eval.dataset.samples == 2
    assert log.samples is not None
    # Samples with epochs are our samples: two tasks, two samples each.
    assert sorted((s.id, s.epoch) for s in log.samples) == [
        ("t3", 1), ("t3", 2), ("t4", 1), ("t4", 2)
    ]  # fmt: skip
    for sample in log.samples:
        trajectory = state.trajectories[f"{sample.id}@{sample.epoch - 1}"]
        assert sample.metadata["trajectory"] == trajectory.id
        assert sample.metadata["outcome"] == trajectory.outcome
        assert sample.scores is not None
        score = sample.scores["exact"]
        assert trajectory.score is not None
        assert score.value == trajectory.score["score"]
        assert score.answer == {"t4": "16", "t3": "8"}[str(sample.id)]
        assert score.explanation == trajectory.score["explanation"]
        assert score.metadata is not None
        assert score.metadata["status"] == trajectory.score["status"]
        assert (
            sample.input == {"t4": "What is 4 squared?", "t3": "What is 3 squared?"}[str(sample.id)]
        )
        assert sample.target == {"t4": "16", "t3": "9"}[str(sample.id)]
        # The messages are the transcript: system, prompt, the lookup and its result, submit.
        roles = [m.role for m in sample.messages]
        assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]
        lookup, result = sample.messages[2], sample.messages[3]
        assert isinstance(lookup, ChatMessageAssistant)
        assert isinstance(result, ChatMessageTool)
        assert lookup.text == "Let me look that up."
        assert lookup.tool_calls is not None
        assert lookup.tool_calls[0].function == "lookup"
        assert result.tool_call_id == lookup.tool_calls[0].id
        assert result.text.startswith("error: no tool named 'lookup'")
        assert sample.messages[-1].text == SUBMITTED
        usage = sample.model_usage["openai/scripted-model"]
        assert (usage.input_tokens, usage.output_tokens) == (100, 29)
    assert log.results is not None
    assert log.results.total_samples == log.results.completed_samples == 4
    (scores,) = log.results.scores
    assert scores.metrics["accuracy"].value == 0.5
    assert log.stats.model_usage["openai/scripted-model"].input_tokens == 400
    assert log.reductions is not None
    assert {s.sample_id: s.value for s in log.reductions[0].samples} == {"t4": 1.0, "t3": 0.0}


async def test_an_export_called_on_a_running_loop_leaves_asyncio_unpatched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inspect's writer re-enters a running loop with nest_asyncio, which patches asyncio for
    the whole process (it made every later litellm call in a thread leak an event loop): a
    caller that exports on its loop's thread (a library user, an async test) gets the log and
    keeps asyncio as it was."""
    store, state = await answered_campaign(tmp_path, monkeypatch)
    tasks_before = asyncio.Task
    out = tmp_path / "on-the-loop.eval"
    assert write_export(store, state.id, "inspect", out) == [out]
    assert not getattr(asyncio, "_nest_patched", False)
    assert asyncio.Task is tasks_before
    log = await anyio.to_thread.run_sync(read_eval_log, str(out))
    assert log.samples is not None
    assert len(log.samples) == 4


async def test_the_mcp_tool_gives_inspects_json_log_which_read_eval_log_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, state = await answered_campaign(tmp_path, monkeypatch)
    async with Client(create_server(store.state_dir)) as client:
        with anyio.fail_after(60):
            text, _ = await exported_over_mcp(client, state.id, "inspect")
            missing = await client.call_tool(
                "export_results", {"campaign_id": "nope", "format": "inspect"}
            )
            unpaged = await client.call_tool(
                "export_results", {"campaign_id": "nope", "format": "inspect", "offset": 5}
            )
            past = await client.call_tool(
                "export_results",
                {"campaign_id": state.id, "format": "inspect", "offset": len(text) + 1},
            )
    saved = tmp_path / "from-mcp.json"
    saved.write_text(text)
    log = await anyio.to_thread.run_sync(read_eval_log, str(saved))
    assert log.samples is not None
    assert len(log.samples) == 4
    assert log.eval.run_id == state.id
    assert missing.is_error
    assert "no campaign 'nope' on this server; call list_campaigns" in missing.content[0].text  # type: ignore[union-attr]
    assert "no campaign 'nope' on this server" in unpaged.content[0].text  # type: ignore[union-attr]
    assert f"past the end of the export ({len(text)} characters)" in past.content[0].text  # type: ignore[union-attr]


async def test_bad_input_is_refused_with_what_to_do_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store, state = await answered_campaign(tmp_path, monkeypatch)
    state_dir = store.state_dir

    async def refused(campaign_id: str, *args: str) -> str:
        capsys.readouterr()
        assert await export(state_dir, campaign_id, *args) == 2
        return capsys.readouterr().err

    assert f"no campaign 'nope' in {state_dir}; known: {state.id}" in await refused(
        "nope", "--format", "inspect", "--out", str(tmp_path / "x.eval")
    )
    with pytest.raises(SystemExit):
        await export(state_dir, state.id, "--format", "csv", "--out", str(tmp_path / "x"))
    assert "invalid choice: 'csv' (choose from 'inspect', 'atif')" in capsys.readouterr().err
    missing_dir = tmp_path / "no-such-dir" / "x.eval"
    said = await refused(state.id, "--format", "inspect", "--out", str(missing_dir))
    assert "No such file or directory; choose another --out, in a directory that exists" in said
    said = await refused(state.id, "--format", "inspect", "--out", str(tmp_path / "x.txt"))
    assert "name it FILE.eval (Inspect's zip log" in said
    said = await refused(state.id, "--format", "inspect", "--out", str(tmp_path))
    assert f"--out {tmp_path} is a directory; name the log file, e.g. {tmp_path}/NAME.eval" in said
    (tmp_path / "a-file").write_text("")
    said = await refused(state.id, "--format", "atif", "--out", str(tmp_path / "a-file"))
    assert "is a file; ATIF is written as one trajectory.json per trajectory" in said
    # Tests run as root, who writes anywhere: nobody can write below a file.
    said = await refused(state.id, "--format", "atif", "--out", str(tmp_path / "a-file" / "dir"))
    assert "cannot write" in said
    assert "choose another --out" in said
    # Without Inspect installed: the export says which extra to install.
    monkeypatch.setitem(sys.modules, "inspect_ai.log", None)
    said = await refused(state.id, "--format", "inspect", "--out", str(tmp_path / "y.eval"))
    assert "pip install 'mcp-evalserver[inspect]'" in said
    assert not (tmp_path / "y.eval").exists()
