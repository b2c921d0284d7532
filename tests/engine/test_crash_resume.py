"""Kill -9 the real CLI at several points, resume, and compare with an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mcp_evalserver.engine.ledger import LEDGER_FILE, read_ledger
from mcp_evalserver.engine.records import LedgerRepaired
from mcp_evalserver.engine.store import CampaignStore
from testsupport.events import announced

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TASKS = 12
SAMPLES = 2


def _write_spec(directory: Path, control_dir: Path) -> Path:
    options = {"control_dir": str(control_dir), "delay_s": 0.01}
    spec = {
        "name": "crash",
        "tasks": [{"id": f"t{n}", "answer": str(n * n)} for n in range(1, TASKS + 1)],
        "samples": SAMPLES,
        "agent": {"type": "python", "factory": "tests.plugins.scripted:agent", "options": options},
        "scorer": {
            "type": "python",
            "factory": "tests.plugins.scripted:scorer",
            "options": options,
        },
        "limits": {"concurrency": 4, "per_instance": 4, "retry_base_delay_s": 0},
    }
    path = directory / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def _cli(state_dir: Path, *args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-m", "mcp_evalserver.cli", "--state-dir", str(state_dir), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )


async def _run_killed_at(state_dir: Path, args: list[str], control: Path, event: str) -> None:
    process = _cli(state_dir, *args)
    try:
        await announced(control / "events", event)
    finally:
        process.send_signal(signal.SIGKILL)
        _, err = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL, err.decode()


def _finish(state_dir: Path, *args: str) -> None:
    process = _cli(state_dir, *args)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err.decode()


def _results(state_dir: Path, campaign_id: str) -> dict[str, Any]:
    state = CampaignStore(state_dir).load(campaign_id)
    return {
        tid: (t.outcome, (t.submission or {}).get("answer"), (t.score or {}).get("status"))
        for tid, t in state.trajectories.items()
    }


async def test_a_campaign_killed_at_several_points_resumes_to_the_uninterrupted_result(
    memory_path: Path,
) -> None:
    # The uninterrupted reference run.
    reference_control = memory_path / "reference-control"
    reference_control.mkdir()
    reference_state = memory_path / "reference-state"
    spec = _write_spec(memory_path / "reference-control", reference_control)
    _finish(reference_state, "run", str(spec), "--id", "ref", "--no-progress")
    expected = _results(reference_state, "ref")
    assert Counter(outcome for outcome, _, _ in expected.values()) == {
        "resolved": 16,
        "failed": 8,
    }

    control = memory_path / "control"
    control.mkdir()
    os.mkfifo(control / "events")
    state_dir = memory_path / "state"
    spec = _write_spec(memory_path, control)

    # 1. Killed in the middle of a generation.
    (control / "block-generate-t5@1").touch()
    await _run_killed_at(
        state_dir, ["run", str(spec), "--id", "c", "--no-progress"], control, "generating t5@1"
    )
    state = CampaignStore(state_dir).load("c")
    # `attempt_started` acknowledges nothing, so it may still be queued when the kill lands.
    assert state.trajectories["t5@1"].phase in ("pending", "generating")

    # 2. Killed between generation and scoring (the agent is no longer blocked).
    (control / "block-generate-t5@1").unlink()
    (control / "block-score-t5@1").touch()
    await _run_killed_at(state_dir, ["resume", "c", "--no-progress"], control, "scoring t5@1")
    state = CampaignStore(state_dir).load("c")
    # `scoring_started` acknowledges nothing, so it may still be queued when the kill lands.
    assert state.trajectories["t5@1"].phase in ("generated", "scoring")
    generated_before = state.trajectories["t5@1"].generated_seq

    # 3. Killed in the middle of a ledger write: the torn line a kill inside write() leaves.
    (control / "block-score-t5@1").unlink()
    ledger = state_dir / "campaigns" / "c" / LEDGER_FILE
    whole = json.dumps({"v": 1, "seq": state.last_seq + 1, "kind": "scored", "trajectory": "t5@1"})
    with open(ledger, "ab") as handle:
        handle.write(whole.encode()[: len(whole) // 2])
    assert read_ledger(ledger).torn_tail

    _finish(state_dir, "resume", "c", "--no-progress")

    assert _results(state_dir, "c") == expected
    records = read_ledger(ledger).records
    generated = Counter(r.trajectory for r in records if r.kind == "generated")
    scored = Counter(r.trajectory for r in records if r.kind == "scored")
    assert set(generated.values()) == {1}, "no trajectory was generated twice"
    assert set(scored.values()) == {1}, "no trajectory was scored twice"
    assert len(generated) == len(scored) == TASKS * SAMPLES, "none is missing"
    assert sum(r.kind == "run_started" for r in records) == 3
    assert [r.dropped_bytes for r in records if isinstance(r, LedgerRepaired)] == [len(whole) // 2]
    final = CampaignStore(state_dir).load("c")
    # The generation recorded before the second kill is the one that was scored.
    assert final.trajectories["t5@1"].generated_seq == generated_before
    # The agent finished each generation the ledger did not already hold at most once more.
    log = Counter((control / "generated.log").read_text().split())
    assert log["t5@1"] == 1
