"""Kill -9 the real CLI in the middle of an adaptive campaign's second round, resume, and
compare with an uninterrupted run: the same plan, the same results, nothing run twice."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from mcp_evalserver.engine.ledger import LEDGER_FILE, read_ledger
from mcp_evalserver.engine.records import SamplesPlanned
from mcp_evalserver.engine.store import CampaignStore
from tests.engine.test_adaptive_sampling import decisions
from tests.engine.test_crash_resume import _finish, _results, _run_killed_at

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TASKS = 12
CHANCES = (0.0, 1.0, 0.5, 0.3, 0.8)


def _write_spec(directory: Path, control_dir: Path) -> Path:
    options = {"control_dir": str(control_dir), "delay_s": 0.01}
    rates = {f"t{n}": CHANCES[n % len(CHANCES)] for n in range(1, TASKS + 1)}
    spec = {
        "name": "adaptive-crash",
        "tasks": [{"id": f"t{n}", "answer": str(n * n)} for n in range(1, TASKS + 1)],
        "samples": {"min": 2, "max": 8, "target_half_width": 0.15},
        "agent": {"type": "python", "factory": "tests.plugins.scripted:agent", "options": options},
        "scorer": {
            "type": "python",
            "factory": "tests.plugins.scripted:scorer",
            "options": {**options, "pass_rates": rates, "seed": 3},
        },
        "limits": {"concurrency": 4, "per_instance": 4, "retry_base_delay_s": 0},
    }
    path = directory / "spec.json"
    path.write_text(json.dumps(spec))
    return path


async def test_an_adaptive_campaign_killed_mid_round_resumes_to_the_same_plan(
    tmp_path: Path,
) -> None:
    reference_control = tmp_path / "reference-control"
    reference_control.mkdir()
    reference_state = tmp_path / "reference-state"
    spec = _write_spec(reference_control, reference_control)
    _finish(reference_state, "run", str(spec), "--id", "ref", "--no-progress")
    plan = decisions(reference_state, "ref")
    assert len(plan) >= 2, "at least one round of more samples, then the stop"
    first_round = plan[0]["added"]
    task = next(iter(first_round))
    victim = f"{task}@2"  # the first sample the first round added

    control = tmp_path / "control"
    control.mkdir()
    os.mkfifo(control / "events")
    state_dir = tmp_path / "state"
    spec = _write_spec(tmp_path, control)

    # 1. Killed while generating a sample the first round planned.
    (control / f"block-generate-{victim}").touch()
    await _run_killed_at(
        state_dir, ["run", str(spec), "--id", "c", "--no-progress"], control, f"generating {victim}"
    )
    state = CampaignStore(state_dir).load("c")
    assert state.sampling is not None
    assert len(state.sampling.rounds) == 1
    assert state.status == "running"
    assert state.trajectories[victim].phase in ("pending", "generating")

    # 2. Resumed and killed again while scoring it.
    (control / f"block-generate-{victim}").unlink()
    (control / f"block-score-{victim}").touch()
    await _run_killed_at(state_dir, ["resume", "c", "--no-progress"], control, f"scoring {victim}")
    assert CampaignStore(state_dir).load("c").trajectories[victim].phase in (
        "generated",
        "scoring",
    )

    # 3. Resumed to the end.
    (control / f"block-score-{victim}").unlink()
    _finish(state_dir, "resume", "c", "--no-progress")

    final = CampaignStore(state_dir).load("c")
    assert final.status == "finished"
    assert decisions(state_dir, "c") == plan, "the same plan as the uninterrupted run"
    assert _results(state_dir, "c") == _results(reference_state, "ref")
    records = read_ledger(state_dir / "campaigns" / "c" / LEDGER_FILE).records
    rounds = [r.round for r in records if isinstance(r, SamplesPlanned)]
    assert rounds == sorted(set(rounds)), "no round was planned twice"
    generated = Counter(r.trajectory for r in records if r.kind == "generated")
    scored = Counter(r.trajectory for r in records if r.kind == "scored")
    assert set(generated.values()) == set(scored.values()) == {1}, "nothing ran twice"
    assert len(scored) == len(final.trajectories) == final.sampling.total  # type: ignore[union-attr]
    assert Counter((control / "generated.log").read_text().split())[victim] == 1
