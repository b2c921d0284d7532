"""Re-scoring grades submissions again without generating them again, and survives SIGKILL."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_evalserver.engine.ledger import LEDGER_FILE, LedgerWriter, read_ledger
from mcp_evalserver.engine.records import LedgerRecord
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.engine.rescoring import request_rescore
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import Conflict, InvalidInput, NotFound
from mcp_evalserver.spec.campaign import CampaignSpec, Limits
from tests.engine.helpers import numbered_tasks
from tests.engine.test_crash_resume import _cli, _finish
from testsupport.events import announced

pytestmark = pytest.mark.anyio

SCRIPTED = "tests.plugins.scripted"


def _spec(tasks: int, samples: int, control_dir: Path | None = None, **limits: Any) -> CampaignSpec:
    options = {"control_dir": str(control_dir)} if control_dir else {}
    return CampaignSpec.model_validate(
        {
            "name": "rescore",
            "tasks": [t.model_dump() for t in numbered_tasks(tasks)],
            "samples": samples,
            "agent": {"type": "python", "factory": f"{SCRIPTED}:agent", "options": options},
            "scorer": {"type": "exact"},
            "limits": Limits(retry_base_delay_s=0, **limits).model_dump(),
        }
    )


async def _run(store: CampaignStore, campaign_id: str) -> None:
    with anyio.fail_after(60):
        await CampaignRunner(store, campaign_id).run()


def _kinds_after(records: list[LedgerRecord], seq: int, kind: str) -> Counter[str]:
    return Counter(str(r.trajectory) for r in records if r.seq > seq and r.kind == kind)


async def test_rescoring_with_a_new_scorer_grades_again_and_generates_nothing(
    tmp_path: Path,
) -> None:
    store = CampaignStore(tmp_path)
    campaign_id = await store.create(_spec(6, 2))
    await _run(store, campaign_id)
    before = store.load(campaign_id)
    assert Counter(t.outcome for t in before.trajectories.values()) == {"resolved": 8, "failed": 4}

    chosen = await request_rescore(
        store, campaign_id, scorer={"type": "regex", "pattern": r"\d+|wrong"}
    )
    assert len(chosen) == 12
    pending = store.load(campaign_id)
    assert {t.phase for t in pending.trajectories.values()} == {"generated"}
    assert pending.spec.scorer.type == "regex"
    await _run(store, campaign_id)

    after = store.load(campaign_id)
    assert {t.outcome for t in after.trajectories.values()} == {"resolved"}
    assert after.rescores == 1
    assert "2 run(s), rescored 1 time(s); agent `python`, scorer `regex`" in render_markdown(
        build_report(after)
    )
    records = read_ledger(store.directory(campaign_id) / LEDGER_FILE).records
    assert Counter(r.kind for r in records)["generated"] == 12, "nothing generated again"
    assert Counter(r.kind for r in records)["scored"] == 24
    # The generation each trajectory was first given is the one scored again.
    assert all(
        after.trajectories[t].generated_seq == before.trajectories[t].generated_seq for t in chosen
    )


async def test_rescoring_can_be_narrowed_to_outcomes_or_trajectories(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    campaign_id = await store.create(_spec(6, 1))
    await _run(store, campaign_id)
    failed = await request_rescore(store, campaign_id, outcomes=["failed"])
    assert sorted(failed) == ["t3@0", "t6@0"]
    await _run(store, campaign_id)
    one = await request_rescore(store, campaign_id, trajectories=["t1@0"])
    assert one == ["t1@0"]
    state = store.load(campaign_id)
    assert [t.id for t in state.trajectories.values() if t.phase == "generated"] == ["t1@0"]
    with pytest.raises(NotFound, match="no trajectory t9@0"):
        await request_rescore(store, campaign_id, trajectories=["t9@0"])
    with pytest.raises(InvalidInput, match="invalid scorer"):
        await request_rescore(store, campaign_id, scorer={"type": "regexp"})


async def test_a_campaign_being_run_cannot_be_rescored(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    campaign_id = await store.create(_spec(1, 1))
    async with await LedgerWriter.open(store.directory(campaign_id), campaign_id):
        with pytest.raises(Conflict, match="being run by another process"):
            await request_rescore(store, campaign_id)


@pytest.mark.slow
async def test_rescoring_100_trajectories_killed_midway_resumes_scoring_only_the_rest(
    tmp_path: Path,
) -> None:
    control = tmp_path / "control"
    control.mkdir()
    os.mkfifo(control / "events")
    state_dir = tmp_path / "state"
    spec = {
        "name": "rescore",
        "tasks": [{"id": f"t{n}", "answer": str(n * n)} for n in range(1, 51)],
        "samples": 2,
        "agent": {
            "type": "python",
            "factory": f"{SCRIPTED}:agent",
            "options": {"control_dir": str(control)},
        },
        "scorer": {"type": "exact"},
        "limits": {"concurrency": 8, "per_instance": 8, "scoring": 4, "retry_base_delay_s": 0},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    _finish(state_dir, "run", str(tmp_path / "spec.json"), "--id", "c", "--no-progress")
    expected = {t: s.outcome for t, s in CampaignStore(state_dir).load("c").trajectories.items()}
    assert Counter(expected.values()) == {"resolved": 68, "failed": 32}

    # Re-score with the scripted scorer (it grades like `exact`), blocked on t30@1: the CLI is
    # killed while it is scoring, some trajectories scored again and some not.
    scorer = {
        "type": "python",
        "factory": f"{SCRIPTED}:scorer",
        "options": {"control_dir": str(control), "score_delay_s": 0.005},
    }
    (control / "block-score-t30@1").touch()
    process = _cli(state_dir, "rescore", "c", "--scorer", json.dumps(scorer), "--no-progress")
    try:
        await announced(control / "events", "scoring t30@1")
    finally:
        process.send_signal(signal.SIGKILL)
        _, err = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL, err.decode()

    ledger = state_dir / "campaigns" / "c" / LEDGER_FILE
    records = read_ledger(ledger).records
    (request,) = [r for r in records if r.kind == "rescore_requested"]
    scored_before_kill = _kinds_after(records, request.seq, "scored")
    killed = CampaignStore(state_dir).load("c")
    missing = {t for t, s in killed.trajectories.items() if s.phase != "done"}
    assert "t30@1" in missing
    assert 0 < len(scored_before_kill) < 100
    assert missing == set(expected) - set(scored_before_kill)

    (control / "block-score-t30@1").unlink()
    (control / "scoring.log").unlink()
    _finish(state_dir, "resume", "c", "--no-progress")

    records = read_ledger(ledger).records
    resumed = max(r.seq for r in records if r.kind == "run_started")
    assert set(_kinds_after(records, resumed, "scored")) == missing, "only the missing"
    scored = _kinds_after(records, request.seq, "scored")
    assert set(scored) == set(expected)
    assert set(scored.values()) == {1}, "none scored twice since the request"
    assert not _kinds_after(records, request.seq, "generated"), "nothing generated again"
    final = CampaignStore(state_dir).load("c")
    assert {t: s.outcome for t, s in final.trajectories.items()} == expected
    assert final.spec.scorer.type == "python"
    # Bounded parallel: the resumed run scored up to `limits.scoring` at once, never more.
    depth = peak = 0
    for mark in (control / "scoring.log").read_text():
        depth += 1 if mark == "+" else -1
        peak = max(peak, depth)
    assert peak == 4
