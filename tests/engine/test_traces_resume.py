"""A campaign killed mid-trajectory (SIGKILL) and resumed: the resumed trace says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testsupport.events import announced
from testsupport.otlp import receiving

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _spec(directory: Path, control: Path) -> Path:
    options = {"control_dir": str(control)}
    scripted = "tests.plugins.scripted"
    spec = {
        "name": "traced",
        "tasks": [{"id": "t1", "answer": "1"}, {"id": "t2", "answer": "4"}],
        "agent": {"type": "python", "factory": f"{scripted}:agent", "options": options},
        "scorer": {"type": "python", "factory": f"{scripted}:scorer", "options": options},
    }
    path = directory / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def _cli(state_dir: Path, endpoint: str, *args: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(REPO), OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    command = [sys.executable, "-m", "mcp_evalserver.cli", "--state-dir", str(state_dir), *args]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )


async def test_a_trajectory_resumed_after_a_crash_says_so_in_its_trace(tmp_path: Path) -> None:
    control = tmp_path / "control"
    control.mkdir()
    os.mkfifo(control / "events")
    state_dir = tmp_path / "state"
    spec = _spec(tmp_path, control)
    (control / "block-score-t1@0").touch()
    with receiving() as receiver:
        first = _cli(state_dir, receiver.url, "run", str(spec), "--id", "c", "--no-progress")
        try:
            await announced(control / "events", "scoring t1@0")  # generated (durably), being scored
        finally:
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=30)
        (control / "block-score-t1@0").unlink()
        second = _cli(state_dir, receiver.url, "resume", "c", "--no-progress")
        _, err = second.communicate(timeout=120)
        assert second.returncode == 0, err.decode()
        # The resumed run flushed its spans before it exited.
        spans = list(receiver.spans)

    runs = [s for s in spans if s.name == "campaign c"]
    (run,) = [s for s in runs if s.attributes["mcp_evalserver.campaign.run"] == 2]
    assert run.attributes["mcp_evalserver.campaign.resumed"] is True
    roots = {
        s.attributes["mcp_evalserver.trajectory.id"]: s
        for s in spans
        if s.name.startswith("trajectory ") and s.links == [(run.trace_id, run.span_id)]
    }
    resumed = roots["t1@0"]
    assert resumed.attributes["mcp_evalserver.trajectory.resumed"] is True
    assert resumed.attributes["mcp_evalserver.trajectory.resumed_from"] in ("generated", "scoring")
    assert resumed.attributes["mcp_evalserver.trajectory.outcome"] == "resolved"
    trace = [s for s in spans if s.trace_id == resumed.trace_id]
    # Its generation was done before the crash: this run only scored it.
    assert sorted(s.name for s in trace) == ["score python", "trajectory t1@0"]
