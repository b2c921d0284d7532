"""SIGKILL the real CLI at every point of a campaign's creation: nothing is left half-made.

Whatever point the kill lands on, `resume` finishes the campaign or says (in one line) that it
was never created, and then `run --id` with the same id creates and finishes it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.engine.ledger import LEDGER_FILE, read_ledger
from mcp_evalserver.engine.store import CampaignStore
from tests.engine.creation_crash import POINTS

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]
KILLABLE = Path(__file__).with_name("creation_crash.py")


def _spec(directory: Path) -> Path:
    spec = {
        "name": "created",
        "tasks": [{"id": f"t{n}", "answer": str(n * n)} for n in range(1, 4)],
        "samples": 2,
        "agent": {"type": "oracle"},
    }
    path = directory / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO))


def _cli(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcp_evalserver.cli", "--state-dir", str(state_dir), *args],
        env=_env(),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def _start_run_stopping_at(
    point: str, state_dir: Path, spec: Path, fifo: Path
) -> subprocess.Popen[bytes]:
    command = [sys.executable, str(KILLABLE), point, str(fifo), "--state-dir", str(state_dir)]
    return subprocess.Popen(
        [*command, "run", str(spec), "--id", "c", "--no-progress"],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )


async def _kill_at(point: str, state_dir: Path, spec: Path, fifo: Path) -> None:
    process = _start_run_stopping_at(point, state_dir, spec, fifo)

    def announced() -> str:
        with open(fifo) as events:
            return events.readline().strip()

    try:
        with anyio.fail_after(60):
            heard = await anyio.to_thread.run_sync(announced, abandon_on_cancel=True)
    finally:
        process.send_signal(signal.SIGKILL)
        _, err = process.communicate(timeout=30)
    assert heard == f"stopped {point}", err.decode()
    assert process.returncode == -signal.SIGKILL, err.decode()


@pytest.mark.parametrize("point", POINTS)
async def test_a_campaign_killed_at_any_point_of_its_creation_is_finished_by_resume_or_run_id(
    memory_path: Path, point: str
) -> None:
    fifo = memory_path / "events"
    os.mkfifo(fifo)
    state_dir = memory_path / "state"
    spec = _spec(memory_path)

    await _kill_at(point, state_dir, spec, fifo)

    resumed = _cli(state_dir, "resume", "c", "--no-progress")
    if resumed.returncode != 0:
        # Not created: the user is told so in one line, with the command that creates it.
        assert resumed.returncode == 2, resumed.stderr
        assert resumed.stderr.startswith("mcp-evalserver: "), resumed.stderr
        assert resumed.stderr.count("\n") == 1, resumed.stderr
        assert "--id c" in resumed.stderr
        rerun = _cli(state_dir, "run", str(spec), "--id", "c", "--no-progress")
        assert rerun.returncode == 0, rerun.stderr

    state = CampaignStore(state_dir).load("c")
    assert state.status == "finished"
    assert state.count("resolved") == 6
    directory = state_dir / "campaigns" / "c"
    records = read_ledger(directory / LEDGER_FILE).records
    assert [r.kind for r in records].count("campaign_created") == 1
    assert records[0].kind == "campaign_created"
    assert sorted(p.name for p in directory.iterdir() if "ledger.jsonl" in p.name) == [
        LEDGER_FILE
    ], "no temporary file of an interrupted creation is left behind"
