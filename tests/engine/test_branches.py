"""Branches in the ledger: replay rebuilds the tree, resume runs only the unfinished branches,
and the report counts a tree once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.ledger import LEDGER_FILE, LedgerWriter, read_ledger
from mcp_evalserver.engine.records import LedgerRecord, TrajectoryBranched, parse_record
from mcp_evalserver.engine.replay import concerning, replay
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.errors import LedgerCorrupt
from mcp_evalserver.spec.agents import OracleAgentConfig
from tests.engine.helpers import campaign_of_every_kind, numbered_tasks, run_campaign, spec_of

pytestmark = pytest.mark.anyio


async def test_resume_runs_the_unfinished_branches_and_keeps_every_finished_trajectory(
    tmp_path: Path,
) -> None:
    spec = spec_of(numbered_tasks(2)).model_copy(update={"agent": OracleAgentConfig()})
    runner, first = await run_campaign(tmp_path, spec)
    assert first.status == "finished"
    # A run branched t1@0 twice and t1@0.1 once more, then died before any branch ran.
    async with await LedgerWriter.open(runner.directory, runner.campaign_id) as ledger:
        for branch, parent in (("t1@0.1", "t1@0"), ("t1@0.2", "t1@0"), ("t1@0.1.1", "t1@0.1")):
            await ledger.append(
                TrajectoryBranched(trajectory=branch, parent=parent, checkpoint="cp1")
            )
    interrupted = runner.store.load(runner.campaign_id)
    assert interrupted.status == "running"
    assert interrupted.branches("t1@0") == ["t1@0.1", "t1@0.2", "t1@0.1.1"]
    assert interrupted.root_of("t1@0.1.1") == "t1@0"

    resumed = await CampaignRunner(runner.store, runner.campaign_id).run()
    assert resumed.status == "finished"
    attempts = {tid: t.attempts for tid, t in resumed.trajectories.items()}
    assert attempts == {"t1@0": 1, "t2@0": 1, "t1@0.1": 1, "t1@0.2": 1, "t1@0.1.1": 1}
    records = read_ledger(runner.directory / LEDGER_FILE).records
    generated = [str(r.trajectory) for r in records if r.kind == "generated"]
    assert sorted(generated) == ["t1@0", "t1@0.1", "t1@0.1.1", "t1@0.2", "t2@0"]

    report = build_report(resumed)
    assert (report["graded"], report["resolved"]) == (2, 2)  # two roots, not five samples
    tree = report["branches"]["roots"][0]
    assert (tree["root"], len(tree["branches"]), tree["resolved_branches"]) == ("t1@0", 3, 3)
    assert "| t1@0 | 3 | 3 of 3 | yes |" in render_markdown(report)
    assert build_report(resumed, branches_as_samples=True)["graded"] == 5
    # The CLI counts branches as samples only when asked.
    state_dir = str(tmp_path)
    for flags, graded in (([], 2), (["--branches-as-samples"], 5)):
        out = tmp_path / f"report{len(flags)}.json"
        args = ["report", runner.campaign_id, "--format", "json", "--out", str(out), *flags]
        assert main(["--state-dir", state_dir, *args]) == 0
        assert json.loads(out.read_text())["graded"] == graded


def test_a_branch_of_an_unknown_parent_or_a_second_branch_of_one_name_is_corruption() -> None:
    spec = spec_of(numbered_tasks(1))
    created = parse_record({"kind": "campaign_created", "seq": 0, "ts": 1.0, "campaign": "c",
                            "spec": spec.model_dump(mode="json")})  # fmt: skip

    def branch(seq: int, tid: str, parent: str) -> LedgerRecord:
        return parse_record({"kind": "trajectory_branched", "seq": seq, "ts": 2.0, "campaign": "c",
                             "trajectory": tid, "parent": parent, "checkpoint": "cp1"})  # fmt: skip

    state = replay([created, branch(1, "t1@0.1", "t1@0")])
    assert state.trajectories["t1@0.1"].parent == "t1@0"
    assert state.trajectories["t1@0.1"].task_id == "t1"
    with pytest.raises(LedgerCorrupt, match="the parent must exist"):
        replay([created, branch(1, "x@0.1", "x@0")])
    with pytest.raises(LedgerCorrupt, match="must not"):
        replay([created, branch(1, "t1@0.1", "t1@0"), branch(2, "t1@0.1", "t1@0")])
    start = {"path": "artifacts/x.tar", "sha256": "0" * 64, "size": 1}
    kept = {"kind": "checkpoint_kept", "seq": 2, "ts": 3.0, "campaign": "c", "checkpoint": "cp1",
            "trajectories": ["t1@0.1"], "start": start}  # fmt: skip
    branched = branch(1, "t1@0.1", "t1@0")
    assert replay([created, branched, parse_record(kept)]).trajectories["t1@0.1"].start == start
    with pytest.raises(LedgerCorrupt, match="no branch"):
        replay([created, branched, parse_record(kept | {"trajectories": ["t1@0"]})])


async def test_the_records_that_concern_one_trajectory_rebuild_it_as_the_whole_ledger_does(
    tmp_path: Path,
) -> None:
    runner = await campaign_of_every_kind(tmp_path)
    records = read_ledger(runner.directory / LEDGER_FILE).records
    whole = replay(records)
    kinds = {r.kind for r in records}
    assert {
        "trajectory_branched",
        "checkpoint_kept",
        "rescore_requested",
        "retry_requested",
    } <= kinds
    assert whole.trajectories["t3@0"].infra_history
    assert whole.spec.scorer.type == "exact"
    for tid, expected in whole.trajectories.items():
        concerned = concerning(records, tid)
        assert len(concerned) < len(records)
        assert replay(concerned).trajectories[tid] == expected, tid
