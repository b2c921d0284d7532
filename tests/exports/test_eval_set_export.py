"""A set exported as `inspect eval-set` lays out its log directory: Inspect's own readers find
one log per agent, each tagged with the set's id, and the set's manifest (issue 42)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import anyio
import pytest
from inspect_ai._eval.evalset import read_eval_set_info
from inspect_ai._util.log_layout import eval_log_name
from inspect_ai.log import list_eval_logs, read_eval_log

from mcp_evalserver.engine.eval_sets import EvalSetStore, run_set
from mcp_evalserver.engine.exports.eval_set_logs import write_eval_set_logs
from mcp_evalserver.engine.store import CampaignStore
from tests.exports.test_inspect_export import export

pytestmark = pytest.mark.anyio

SCRIPTED = {"type": "python", "factory": "tests.plugins.scripted:agent"}


async def _finished_set(state_dir: Path) -> None:
    sets = EvalSetStore(CampaignStore(state_dir))
    spec = {
        "name": "pair",
        "tasks": [{"id": f"t{n}", "answer": str(n * n)} for n in range(1, 4)],
        "samples": 2,
        "agents": {"scripted": SCRIPTED, "noop": {"type": "noop"}},
        "scorer": {"type": "exact"},
    }
    with anyio.fail_after(60):
        await run_set(sets, await sets.create(spec, None, "s"))


async def test_a_set_exported_on_a_running_loop_leaves_asyncio_unpatched(tmp_path: Path) -> None:
    """Inspect's manifest writer reads the logs back with its sync reader, which would patch
    asyncio process-wide from a thread whose loop runs (see test_inspect_export.py's twin)."""
    state_dir = tmp_path / "state"
    await _finished_set(state_dir)
    tasks_before = asyncio.Task
    written = write_eval_set_logs(EvalSetStore(CampaignStore(state_dir)), "s", tmp_path / "logs")
    assert len(written) == 2
    assert not getattr(asyncio, "_nest_patched", False)
    assert asyncio.Task is tasks_before
    assert (tmp_path / "logs" / "logs.json").is_file()


async def test_a_set_exports_one_inspect_log_per_agent_as_inspect_eval_set_lays_them_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = tmp_path / "state"
    await _finished_set(state_dir)
    out = tmp_path / "logs"
    assert await export(state_dir, "s", "--format", "inspect", "--out", str(out)) == 0
    assert f"wrote 2 log(s) of set s under {out}" in capsys.readouterr().err

    logs = {}
    for info in await anyio.to_thread.run_sync(list_eval_logs, str(out)):
        log = await anyio.to_thread.run_sync(read_eval_log, info.name)
        logs[log.eval.task_id] = (Path(info.name.removeprefix("file://")).name, log)
    assert sorted(logs) == ["s.noop", "s.scripted"]
    for task_id, (name, log) in logs.items():
        assert log.eval.eval_set_id == "s", task_id
        assert log.status == "success"
        expected = eval_log_name(
            task=log.eval.task, task_id=task_id, created=log.eval.created, model=log.eval.model
        )
        assert name == f"{expected}.eval", "named as Inspect names its logs"
    scripted, noop = logs["s.scripted"][1], logs["s.noop"][1]
    assert scripted.samples is not None
    assert noop.samples is not None
    assert len(scripted.samples) == len(noop.samples) == 6
    # t3 is the scripted agent's wrong answer; noop answers nothing.
    assert scripted.results is not None
    assert noop.results is not None
    assert scripted.results.scores[0].metrics["accuracy"].value == pytest.approx(4 / 6)
    assert noop.results.scores[0].metrics["accuracy"].value == 0

    eval_set = read_eval_set_info(str(out))
    assert eval_set is not None
    assert eval_set.eval_set_id == "s"
    assert [task.task_id for task in eval_set.tasks] == ["s.scripted", "s.noop"]
    manifest = json.loads((out / "logs.json").read_text())
    assert sorted(manifest) == sorted(name for name, _ in logs.values())


async def test_a_set_is_not_exported_as_atif_nor_into_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = tmp_path / "state"
    await _finished_set(state_dir)
    assert await export(state_dir, "s", "--format", "atif", "--out", str(tmp_path / "a")) != 0
    err = capsys.readouterr().err
    assert "export it with `--format inspect --out DIR`" in err
    assert "s.scripted, s.noop" in err
    file = tmp_path / "file.eval"
    file.write_text("")
    assert await export(state_dir, "s", "--format", "inspect", "--out", str(file)) != 0
    assert "is a file" in capsys.readouterr().err
