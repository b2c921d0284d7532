"""Kill -9 a set run by the real CLI while every agent has a trajectory in flight, resume it,
and find every campaign finished with nothing generated or scored twice (issue 42)."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from mcp_evalserver.engine.ledger import LEDGER_FILE, read_ledger
from mcp_evalserver.engine.store import CampaignStore
from tests.engine.test_crash_resume import _cli
from testsupport.events import announced

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AGENTS = ("a", "b", "c")
TASKS = 6
SAMPLES = 2


def _write_set(directory: Path, controls: dict[str, Path]) -> Path:
    """Three scripted agents, each with a control directory of its own (its FIFO, its log)."""

    def scripted(role: str, control: Path) -> dict[str, object]:
        options = {"control_dir": str(control)}
        return {"type": "python", "factory": f"tests.plugins.scripted:{role}", "options": options}

    spec = {
        "name": "crash",
        "tasks": [{"id": f"t{n}", "answer": str(n * n)} for n in range(1, TASKS + 1)],
        "samples": SAMPLES,
        "agents": {agent: scripted("agent", control) for agent, control in controls.items()},
        # One scorer for the set (a set grades every agent alike): it blocks on `a`'s control.
        "scorer": scripted("scorer", controls["a"]),
        "limits": {"concurrency": 4, "per_instance": 4, "retry_base_delay_s": 0},
    }
    path = directory / "set.json"
    path.write_text(json.dumps(spec))
    return path


async def _kill_once_announced(
    state_dir: Path, args: list[str], announcements: list[tuple[Path, str, int]]
) -> None:
    process = _cli(state_dir, *args)
    try:
        for fifo, event, times in announcements:
            await announced(fifo, event, times=times)
    finally:
        process.send_signal(signal.SIGKILL)
        _, err = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL, err.decode()


def _kinds_per_trajectory(state_dir: Path, agent: str) -> Counter[tuple[str, str]]:
    ledger = state_dir / "campaigns" / f"s.{agent}" / LEDGER_FILE
    return Counter(
        (r.kind, r.trajectory)
        for r in read_ledger(ledger).records
        if r.kind in ("generated", "scored") and r.trajectory is not None
    )


async def test_a_set_killed_mid_run_resumes_every_campaign_without_running_anything_twice(
    memory_path: Path,
) -> None:
    controls = {agent: memory_path / f"control-{agent}" for agent in AGENTS}
    for control in controls.values():
        control.mkdir()
        os.mkfifo(control / "events")
    state_dir = memory_path / "state"
    spec = _write_set(memory_path, controls)

    # 1. Killed while each of the three agents is generating its t2@1 (the set's concurrency
    # of 4 holds all three at once: the agents interleave rather than wait for one another).
    for control in controls.values():
        (control / "block-generate-t2@1").touch()
    await _kill_once_announced(
        state_dir,
        ["run", str(spec), "--id", "s"],
        [(control / "events", "generating t2@1", 1) for control in controls.values()],
    )
    store = CampaignStore(state_dir)
    for agent in AGENTS:
        state = store.load(f"s.{agent}")
        assert state.status != "finished", agent
        assert state.trajectories["t2@1"].phase in ("pending", "generating"), agent

    # 2. Killed while each agent's t2@1 (that none had generated before) is being scored, once
    # the generations were let go: each generation is then durable, so none may run again.
    for control in controls.values():
        (control / "block-generate-t2@1").unlink()
    (controls["a"] / "block-score-t2@1").touch()
    await _kill_once_announced(
        state_dir, ["resume", "s"], [(controls["a"] / "events", "scoring t2@1", len(AGENTS))]
    )
    (controls["a"] / "block-score-t2@1").unlink()

    finish = _cli(state_dir, "resume", "s")
    out, err = finish.communicate(timeout=120)
    assert finish.returncode == 0, err.decode()
    assert "# Evaluation set s" in out.decode()

    store = CampaignStore(state_dir)
    everyone = {f"t{n}@{k}" for n in range(1, TASKS + 1) for k in range(SAMPLES)}
    for agent in AGENTS:
        state = store.load(f"s.{agent}")
        assert state.status == "finished", agent
        assert Counter(t.outcome for t in state.trajectories.values()) == {
            "resolved": 8,
            "failed": 4,
        }, agent
        counts = _kinds_per_trajectory(state_dir, agent)
        assert set(counts.values()) == {1}, f"{agent}: a record twice: {counts}"
        assert {t for kind, t in counts if kind == "generated"} == everyone, agent
        assert {t for kind, t in counts if kind == "scored"} == everyone, agent
        # t2@1 was generated once: killed while generating, then scored from the ledger.
        log = Counter((controls[agent] / "generated.log").read_text().split())
        assert log["t2@1"] == 1, agent
