"""Kill -9 a run whose trajectory forked, resume it: finished branches are kept, nothing runs
twice, and the unfinished branch starts again at its parent's checkpoint (which died with the
run's supervisor: only what the ledger kept brings it back), or, when that is gone too, from a
clean copy of the task, and the ledger says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.campaigns import CampaignStore
from mcp_evalserver.ledger import LEDGER_FILE, read_ledger
from mcp_evalserver.report import build_report, render_markdown
from tests.server.helpers import git_repo, require_root

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "tests" / "agents" / "command_program.py"
CHECK = "python3 -B -c 'import calc; assert calc.add(2, 2) == 4'"
CAMPAIGN = "forked"


def _cli(state_dir: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "mcp_evalserver.cli", "--state-dir", str(state_dir), *args],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # killed as a group: the run and its supervisor
    )


async def _wait_for_ready(fifo: Path) -> None:
    def read() -> None:
        while True:
            with open(fifo) as events:
                if any(line.strip() == "ready" for line in events):
                    return

    with anyio.fail_after(180):
        await anyio.to_thread.run_sync(read, abandon_on_cancel=True)


@pytest.mark.parametrize("checkpoint_kept", [True, False], ids=["kept", "lost"])
async def test_a_killed_run_resumes_its_unfinished_branch_from_the_parents_checkpoint(
    tmp_path: Path, checkpoint_kept: bool
) -> None:
    require_root()
    notes, state_dir = tmp_path / "notes", tmp_path / "state"
    notes.mkdir()
    os.mkfifo(notes / "events")
    campaign_dir = CampaignStore(state_dir).directory(CAMPAIGN)
    spec = {
        "name": "fork-crash",
        "tasks": [{"id": "calc", "path": str(git_repo(tmp_path / "repo")), "prompt": "fix add"}],
        "agent": {
            "type": "command",
            "command": [
                sys.executable,
                str(PROGRAM),
                "branch-crash",
                str(notes),
                str(campaign_dir),
            ],
        },
        "scorer": {"type": "command", "command": CHECK},
        "limits": {"retry_base_delay_s": 0},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))

    run = _cli(state_dir, "run", str(tmp_path / "spec.json"), "--id", CAMPAIGN, "--no-progress")
    try:
        await _wait_for_ready(notes / "events")  # the root and branch .1 are scored
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # the run, its supervisor, its workspaces
        _, err = run.communicate(timeout=60)
        hanging = notes / "hanging.pid"
        if hanging.exists():  # the branch's program runs in a session of its own
            os.kill(int(hanging.read_text()), signal.SIGKILL)
    assert run.returncode == -signal.SIGKILL, err.decode()
    interrupted = CampaignStore(state_dir).load(CAMPAIGN)
    (start,) = {t.start["path"] for t in interrupted.trajectories.values() if t.start}
    if not checkpoint_kept:
        (campaign_dir / start).unlink()

    resume = _cli(state_dir, "resume", CAMPAIGN, "--no-progress")
    out, err = resume.communicate(timeout=300)
    assert resume.returncode == 0, (out + err).decode()

    state = CampaignStore(state_dir).load(CAMPAIGN)
    outcomes = {tid: t.outcome for tid, t in state.trajectories.items()}
    assert outcomes == {"calc@0": "failed", "calc@0.1": "failed", "calc@0.2": "resolved"}
    records = read_ledger(campaign_dir / LEDGER_FILE).records
    for kind in ("generated", "scored"):  # nothing finished ran twice
        counts = Counter(r["trajectory"] for r in records if r["kind"] == kind)
        assert counts == {"calc@0": 1, "calc@0.1": 1, "calc@0.2": 1}, kind
    (restarted,) = [r for r in records if r["kind"] == "branch_restarted"]
    assert restarted["trajectory"] == "calc@0.2"
    seen = json.loads((notes / "calc@0.2.json").read_text())
    assert seen["attempt"] != "1"
    if checkpoint_kept:
        # The root's files at the fork (nothing it wrote after), though the supervisor that
        # held that checkpoint died with the run.
        assert seen["files"] == ["calc.py", "note.txt"]
        assert restarted["source"] == "checkpoint"
        assert state.trajectories["calc@0.2"].started_clean is None
    else:
        assert seen["files"] == ["calc.py"]
        assert restarted["source"] == "clean"
        assert "is missing" in restarted["reason"]
        assert state.trajectories["calc@0.2"].started_clean == restarted["reason"]
    report = build_report(state)
    (tree,) = report["branches"]["roots"]
    assert (tree["resolved_branches"], tree["resolved"]) == (1, True)
    said = [b["started_clean"] for b in tree["branches"]]
    assert said == [None, None if checkpoint_kept else restarted["reason"]]
    assert ("restarted from a clean copy" in render_markdown(report)) is not checkpoint_kept
