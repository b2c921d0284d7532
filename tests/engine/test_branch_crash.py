"""Kill -9 a run whose trajectory forked, resume it: finished branches are kept, nothing runs
twice, and the unfinished branch starts again at its parent's checkpoint (which died with the
run's supervisor: only what the ledger kept brings it back), or, when that is gone too, from a
clean copy of the task, and the ledger says so. The same when only the supervisor dies under
a running branch: its retry starts at the checkpoint."""

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

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.ledger import LEDGER_FILE, read_ledger
from mcp_evalserver.engine.records import (
    BranchRestarted,
    CheckpointKept,
    GenerationFailed,
    LedgerRecord,
)
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.sandbox.supervised import SupervisedWorkspace
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.submission import Submission
from tests.engine.helpers import spec_of
from tests.root import require_root
from testsupport.events import announced
from testsupport.repos import git_repo

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
        # Once the root and branch .1 are scored.
        await announced(notes / "events", "ready", timeout_s=180)
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
        counts = Counter(r.trajectory for r in records if r.kind == kind)
        assert counts == {"calc@0": 1, "calc@0.1": 1, "calc@0.2": 1}, kind
    (restarted,) = [r for r in records if isinstance(r, BranchRestarted)]
    assert restarted.trajectory == "calc@0.2"
    seen = json.loads((notes / "calc@0.2.json").read_text())
    assert seen["attempt"] != "1"
    if checkpoint_kept:
        # The root's files at the fork (nothing it wrote after), though the supervisor that
        # held that checkpoint died with the run.
        assert seen["files"] == ["calc.py", "note.txt"]
        assert restarted.source == "checkpoint"
        assert state.trajectories["calc@0.2"].started_clean is None
    else:
        assert seen["files"] == ["calc.py"]
        assert restarted.source == "clean"
        assert "is missing" in str(restarted.reason)
        assert state.trajectories["calc@0.2"].started_clean == restarted.reason
    report = build_report(state)
    (tree,) = report["branches"]["roots"]
    assert (tree["resolved_branches"], tree["resolved"]) == (1, True)
    said = [b["started_clean"] for b in tree["branches"]]
    assert said == [None, None if checkpoint_kept else restarted.reason]
    assert ("restarted from a clean copy" in render_markdown(report)) is not checkpoint_kept


class BranchingAgent(Agent):
    """The root writes a note, branches once and writes another; the branch's first attempt
    kills its instance's supervisor (an OOM kill, a crash) once the root is done, and finds its
    workspace gone; its retry lists the files it starts with."""

    def __init__(self) -> None:
        self.root_done, self.kept = anyio.Event(), anyio.Event()
        self.seen: dict[int, list[str]] = {}

    def on_record(self, state: CampaignState, record: LedgerRecord) -> None:
        if isinstance(record, CheckpointKept):
            self.kept.set()

    async def generate(self, context: TrajectoryContext) -> Submission:
        workspace = await context.sandbox.workspace()
        assert isinstance(workspace, SupervisedWorkspace)
        if context.trajectory_id == "calc@0":
            await workspace.write_file("note.txt", "before the fork\n")
            assert context.branch is not None
            await context.branch(1)
            await workspace.write_file("late.txt", "after the fork\n")
            self.root_done.set()
            return Submission(answer="root")
        if context.attempt == 1:
            await self.root_done.wait()
            await self.kept.wait()  # (killed before, it would start clean, and say so)
            os.kill(int(workspace.instance.info["pid"]), signal.SIGKILL)
            await workspace.exec("true")  # SandboxUnavailable: an infrastructure failure
        self.seen[context.attempt] = (await workspace.exec("ls")).stdout.split()
        return Submission(answer="branch")


async def test_a_branch_whose_supervisor_died_is_retried_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    require_root()
    task = Task(id="calc", path=str(git_repo(tmp_path / "repo")), answer="branch")
    agent = BranchingAgent()
    with anyio.fail_after(120):
        store = CampaignStore(tmp_path / "state")
        runner = CampaignRunner(
            store, await store.create(spec_of([task])), agent=agent, on_record=agent.on_record
        )
        state = await runner.run()

    assert state.trajectories["calc@0.1"].attempts == 2
    assert agent.seen == {2: ["calc.py", "note.txt"]}  # its checkpoint, on a new supervisor
    records = read_ledger(runner.directory / LEDGER_FILE).records
    failed = [r for r in records if isinstance(r, GenerationFailed)]
    assert [(r.trajectory, r.outcome) for r in failed] == [("calc@0.1", "infra_error")]
    (restarted,) = [r for r in records if isinstance(r, BranchRestarted)]
    assert (restarted.trajectory, restarted.source) == ("calc@0.1", "checkpoint")
    generated = Counter(r.trajectory for r in records if r.kind == "generated")
    assert generated == {"calc@0": 1, "calc@0.1": 1}
