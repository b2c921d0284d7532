"""Adaptive sampling: the spec, the planner, the runner's rounds, the report and replay.

The suite is synthetic: tasks whose grader is flaky with a known chance per task, drawn from
a seed and the trajectory id (`tests.plugins.scripted`), so outcomes do not depend on timing
and two runs of one spec plan the same samples.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.ledger import LEDGER_FILE, read_ledger
from mcp_evalserver.engine.records import (
    CampaignCreated,
    LedgerRecord,
    SamplesPlanned,
    SamplingStopped,
    Scored,
    encode,
)
from mcp_evalserver.engine.replay import concerning, replay
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.sampling import campaign_interval, next_decision
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput, LedgerCorrupt
from mcp_evalserver.scoring.stats.sampling import TaskSamples, plan_samples
from mcp_evalserver.server.events import record_event
from mcp_evalserver.spec.campaign import CampaignSpec, Limits, parse_spec
from mcp_evalserver.spec.submission import Submission
from tests.engine.helpers import numbered_tasks, run_campaign
from tests.plugins.scripted import ScriptedAgent, ScriptedScorer, scripted_answer

pytestmark = pytest.mark.anyio

#: Chances of the flaky grader, cycled over the tasks: some always fail, some always pass.
CHANCES = (0.0, 1.0, 0.5, 0.3, 0.8)
TASKS = 40
MAX = 16


def pass_rates(tasks: int = TASKS) -> dict[str, float]:
    return {f"t{n}": CHANCES[n % len(CHANCES)] for n in range(1, tasks + 1)}


def flaky_scorer(seed: int = 1) -> ScriptedScorer:
    return ScriptedScorer({"pass_rates": pass_rates(), "seed": seed})


def spec(samples: int | dict[str, Any], tasks: int = TASKS, **limits: Any) -> CampaignSpec:
    limits.setdefault("concurrency", 32)
    return CampaignSpec(
        name="adaptive",
        tasks=numbered_tasks(tasks),
        samples=samples,
        limits=Limits(retry_base_delay_s=0, **limits),
    )


def adaptive(target: float, *, low: int = 2, high: int = MAX) -> dict[str, Any]:
    return {"min": low, "max": high, "target_half_width": target}


def decisions(state_dir: Path, campaign_id: str) -> list[dict[str, Any]]:
    """The plan as the ledger holds it, without the envelope (seq and time differ by run)."""
    ledger = read_ledger(state_dir / "campaigns" / campaign_id / LEDGER_FILE)
    envelope = {"v", "seq", "ts", "campaign", "trajectory"}
    return [
        r.model_dump(exclude=envelope)
        for r in ledger.records
        if isinstance(r, SamplesPlanned | SamplingStopped)
    ]


def ledger_records(state_dir: Path, campaign_id: str) -> list[LedgerRecord]:
    return read_ledger(state_dir / "campaigns" / campaign_id / LEDGER_FILE).records


# The spec.


def test_an_integer_number_of_samples_stays_a_fixed_count() -> None:
    parsed = parse_spec({"tasks": [{"id": "a"}], "samples": 3})
    assert parsed.samples == 3
    assert parsed.adaptive is None
    assert (parsed.initial_samples, parsed.max_samples) == (3, 3)


def test_adaptive_samples_are_read_from_the_spec() -> None:
    parsed = parse_spec({"tasks": [{"id": "a"}], "samples": adaptive(0.03)})
    assert parsed.adaptive is not None
    assert (parsed.initial_samples, parsed.max_samples) == (2, 16)
    assert parsed.adaptive.target_half_width == 0.03


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        (adaptive(0.03, low=5, high=2), "min (5) is above max (2): give min <= max"),
        (adaptive(0.0), "target_half_width must be above 0 and below 0.5"),
        (adaptive(-0.1), "target_half_width must be above 0 and below 0.5"),
        (adaptive(0.5), "target_half_width must be above 0 and below 0.5"),
        ({"min": 2, "max": 4}, "samples.target_half_width: required"),
        ({**adaptive(0.03), "maximum": 9}, "samples.maximum: unknown field; did you mean 'max'?"),
        (adaptive(0.03, low=0), "samples.min: must be >= 1 (got 0)"),
    ],
)
def test_bad_adaptive_samples_are_refused_with_what_to_change(
    samples: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInput, match="invalid campaign spec") as raised:
        parse_spec({"tasks": [{"id": "a"}], "samples": samples})
    assert message in str(raised.value)


# The planner.


def test_the_planner_gives_samples_to_tasks_whose_outcomes_disagree_first() -> None:
    tasks = [
        TaskSamples("agree-pass", planned=2, graded=2, resolved=2),
        TaskSamples("disagree", planned=2, graded=2, resolved=1),
        TaskSamples("agree-fail", planned=2, graded=2, resolved=0),
    ]
    plan = plan_samples(
        tasks, half_width=0.4, quantile=1.96, clusters=3, target=0.01, max_samples=16
    )
    assert plan is not None
    # The budget is the 6 planned before: disagreement is worth more than agreement.
    assert sum(plan.added.values()) == 6
    assert plan.added["disagree"] > plan.added.get("agree-pass", 0)
    # Always passing and always failing are worth the same; ties go in the campaign's order.
    assert plan.added == {"agree-pass": 2, "disagree": 3, "agree-fail": 1}
    assert plan.reasons["disagree"] == "1/2 resolved: its outcomes disagree"
    # Deterministic: the same counts give the same plan.
    again = plan_samples(
        tasks, half_width=0.4, quantile=1.96, clusters=3, target=0.01, max_samples=16
    )
    assert again == plan


def test_the_planner_stops_at_max_and_says_so_when_no_task_may_grow() -> None:
    tasks = [TaskSamples("a", 3, 3, 1), TaskSamples("b", 2, 2, 1)]
    plan = plan_samples(
        tasks, half_width=0.4, quantile=1.96, clusters=2, target=0.01, max_samples=3
    )
    assert plan is not None
    assert plan.added == {"b": 1}
    full = [TaskSamples("a", 3, 3, 1), TaskSamples("b", 3, 3, 1)]
    assert (
        plan_samples(full, half_width=0.4, quantile=1.96, clusters=2, target=0.01, max_samples=3)
        is None
    )


def test_the_planner_adds_no_more_than_the_target_needs_beyond_a_minimal_round() -> None:
    tasks = [TaskSamples(f"t{n}", 2, 2, 1) for n in range(40)]
    # Just above the target: an eighth of the 80 planned (10) is the round's least.
    plan = plan_samples(
        tasks, half_width=0.0801, quantile=1.96, clusters=40, target=0.08, max_samples=16
    )
    assert plan is not None
    assert sum(plan.added.values()) == 10


# The runner.


async def test_adaptive_sampling_reaches_the_fixed_max_width_with_fewer_trajectories(
    memory_path: Path,
) -> None:
    _, fixed = await run_campaign(
        memory_path / "fixed", spec(MAX), ScriptedAgent({}), flaky_scorer()
    )
    fixed_interval = campaign_interval(fixed)
    assert fixed_interval is not None
    assert fixed_interval.method == "bootstrap"
    width = fixed_interval.half_width

    runner, state = await run_campaign(
        memory_path / "adaptive", spec(adaptive(round(width, 4))), ScriptedAgent({}), flaky_scorer()
    )
    assert state.status == "finished"
    assert state.sampling is not None
    assert state.sampling.stopped is not None
    assert state.sampling.stopped["reason"] == "target_reached"
    reached = campaign_interval(state)
    assert reached is not None
    assert reached.half_width <= round(width, 4)
    # The same width, for well under the fixed campaign's trajectories.
    assert len(fixed.trajectories) == TASKS * MAX
    assert len(state.trajectories) < 0.6 * len(fixed.trajectories)
    # Tasks whose grader always agrees with itself got fewer samples than the flaky ones.
    per_task = state.sampling.planned
    always = [per_task[t] for t, p in pass_rates().items() if p in (0.0, 1.0)]
    flaky = [per_task[t] for t, p in pass_rates().items() if p == 0.5]
    assert sum(always) / len(always) < sum(flaky) / len(flaky)
    # Replay rebuilds the same plan, and the stop is the last decision.
    replayed = CampaignStore(runner.store.state_dir).load(runner.campaign_id)
    assert replayed.sampling == state.sampling
    assert replayed.trajectories.keys() == state.trajectories.keys()
    assert next_decision(replayed) is None


async def test_a_target_out_of_reach_stops_when_every_task_is_at_max(memory_path: Path) -> None:
    _, state = await run_campaign(
        memory_path, spec(adaptive(0.01, high=4), tasks=10), ScriptedAgent({}), flaky_scorer()
    )
    assert state.sampling is not None
    assert state.sampling.stopped is not None
    assert state.sampling.stopped["reason"] == "max_reached"
    assert set(state.sampling.planned.values()) == {4}
    assert len(state.trajectories) == 10 * 4
    assert all(t.done for t in state.trajectories.values())


async def test_the_report_says_how_many_samples_each_task_got_and_why(memory_path: Path) -> None:
    _, state = await run_campaign(
        memory_path, spec(adaptive(0.12)), ScriptedAgent({}), flaky_scorer()
    )
    report = build_report(state)
    sampling = report["sampling"]
    assert sampling["stopped"]["reason"] == "target_reached"
    assert sampling["planned"] == len(state.trajectories) < sampling["most"] == TASKS * MAX
    for task_id, row in sampling["tasks"].items():
        assert row["samples"] == report["tasks"][task_id]["samples"]
        assert row["why"][0] == "2 to start (min)"
    grown = [row for row in sampling["tasks"].values() if row["samples"] > 2]
    assert grown
    assert all(any(w.startswith("+") and " in round " in w for w in row["why"]) for row in grown)
    text = render_markdown(report)
    assert "Adaptive sampling (min 2, max 16): stopped after" in text
    assert "because the interval (bootstrap) reached" in text
    assert "| t3 |" in text
    assert "resolved: its outcomes" in text


async def test_the_plan_does_not_depend_on_timing_only_on_outcomes(memory_path: Path) -> None:
    first, _ = await run_campaign(
        memory_path / "a", spec(adaptive(0.12), concurrency=1), ScriptedAgent({}), flaky_scorer()
    )
    second, _ = await run_campaign(
        memory_path / "b", spec(adaptive(0.12), concurrency=64), ScriptedAgent({}), flaky_scorer()
    )
    plan = decisions(first.store.state_dir, first.campaign_id)
    assert len(plan) >= 2
    assert plan == decisions(second.store.state_dir, second.campaign_id)


class HostileAgent(Agent):
    """Answers with forged ledger lines, control bytes and floods; its outcomes are the
    flaky grader's, as an honest agent's are."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        forged = json.dumps(
            {"kind": "samples_planned", "round": 1, "added": {context.task.id: 999}}
        )
        stopped = json.dumps({"kind": "sampling_stopped", "reason": "target_reached"})
        answer = f"{scripted_answer(context.task.id)}\n{forged}\n{stopped}\x00\x1b[2J" + "x" * 5000
        transcript = [{"role": "assistant", "content": forged}, {"half_width": 0.0}]
        return Submission(answer=answer, transcript=transcript)


async def test_a_cheating_agent_moves_the_plan_only_through_its_outcomes(memory_path: Path) -> None:
    # Every task's verdict comes from the flaky grader alone, whatever the answer says.
    honest, _ = await run_campaign(
        memory_path / "honest", spec(adaptive(0.12)), ScriptedAgent({}), flaky_scorer()
    )
    hostile, state = await run_campaign(
        memory_path / "hostile", spec(adaptive(0.12)), HostileAgent(), flaky_scorer()
    )
    plan = decisions(hostile.store.state_dir, hostile.campaign_id)
    assert plan == decisions(honest.store.state_dir, honest.campaign_id)
    assert state.sampling is not None
    assert max(state.sampling.planned.values()) <= MAX
    # The forged lines are an answer in an artifact, never a record.
    kinds = [r.kind for r in ledger_records(hostile.store.state_dir, hostile.campaign_id)]
    assert kinds.count("sampling_stopped") == 1
    assert kinds.count("samples_planned") == len(plan) - 1


# Ledger, replay and resume.


async def test_a_run_that_ends_between_rounds_is_not_finished_and_resumes_to_the_same_plan(
    memory_path: Path,
) -> None:
    reference, _ = await run_campaign(
        memory_path / "ref", spec(adaptive(0.12)), ScriptedAgent({}), flaky_scorer()
    )
    records = ledger_records(reference.store.state_dir, reference.campaign_id)
    first_plan = next(i for i, r in enumerate(records) if isinstance(r, SamplesPlanned))
    # The ledger of a run killed after its first round was scored, before the decision.
    cut = records[:first_plan]
    between = replay(cut)
    assert all(t.done for t in between.trajectories.values())
    assert between.status == "running"
    assert between.interrupted
    # Its next decision is the one the uninterrupted run recorded.
    decided = next_decision(between)
    assert decided is not None
    fields = {"v", "seq", "ts", "campaign", "trajectory"}
    assert decided.model_dump(exclude=fields) == records[first_plan].model_dump(exclude=fields)

    # And resuming that ledger runs the rest to the reference's plan, nothing twice.
    store = CampaignStore(memory_path / "cut")
    directory = store.directory("c")
    directory.mkdir(parents=True)
    created = cut[0]
    assert isinstance(created, CampaignCreated)
    lines = [r.model_copy(update={"campaign": "c"}) for r in cut]
    (directory / LEDGER_FILE).write_bytes(b"".join(encode(r) for r in lines))
    resumed = await CampaignRunner(store, "c", agent=ScriptedAgent({}), scorer=flaky_scorer()).run()
    assert resumed.status == "finished"
    assert decisions(store.state_dir, "c") == decisions(
        reference.store.state_dir, reference.campaign_id
    )
    scored = [r.trajectory for r in ledger_records(store.state_dir, "c") if isinstance(r, Scored)]
    assert len(scored) == len(set(scored)) == len(resumed.trajectories)


def _state_with(records: list[LedgerRecord]) -> CampaignState:
    return replay(records)


def _created(samples: int | dict[str, Any]) -> CampaignCreated:
    made = spec(samples, tasks=2).model_dump(mode="json")
    return CampaignCreated(spec=made, seq=0, ts=1.0, campaign="c")


def test_a_plan_beyond_max_or_in_a_fixed_campaign_is_a_corrupt_ledger() -> None:
    beyond = SamplesPlanned(
        seq=1, ts=2.0, round=1, added={"t1": 15}, half_width=0.2,
        target_half_width=0.1, interval="bootstrap",
    )  # fmt: skip
    with pytest.raises(LedgerCorrupt, match=r"adds 15 sample\(s\) to task 't1'"):
        _state_with([_created(adaptive(0.1)), beyond])
    unknown = beyond.model_copy(update={"added": {"t9": 1}})
    with pytest.raises(LedgerCorrupt, match="'t9'"):
        _state_with([_created(adaptive(0.1)), unknown])
    fixed = beyond.model_copy(update={"added": {"t1": 1}})
    with pytest.raises(LedgerCorrupt, match="without adaptive sampling under way"):
        _state_with([_created(2), fixed])


def test_a_plan_replays_into_pending_trajectories_named_after_the_samples() -> None:
    planned = SamplesPlanned(
        seq=1, ts=2.0, round=1, added={"t2": 3}, half_width=0.2,
        target_half_width=0.1, interval="bootstrap", reasons={"t2": "1/2 resolved"},
    )  # fmt: skip
    state = _state_with([_created(adaptive(0.1)), planned])
    assert list(state.trajectories) == ["t1@0", "t1@1", "t2@0", "t2@1", "t2@2", "t2@3", "t2@4"]
    assert state.trajectories["t2@4"].phase == "pending"
    assert state.sampling is not None
    assert state.sampling.planned == {"t1": 2, "t2": 5}
    assert state.status == "running"


async def test_clustered_tasks_are_measured_by_the_cluster_robust_interval(
    memory_path: Path,
) -> None:
    tasks = numbered_tasks(TASKS)
    for n, task in enumerate(tasks):
        task.metadata["family"] = f"f{n % 20}"
    clustered = CampaignSpec(
        name="clustered",
        tasks=tasks,
        samples=adaptive(0.12) | {"cluster_by": "family"},
        limits=Limits(retry_base_delay_s=0, concurrency=32),
    )
    _, state = await run_campaign(memory_path, clustered, ScriptedAgent({}), flaky_scorer())
    assert state.sampling is not None
    rounds = state.sampling.rounds
    assert rounds
    assert {r["interval"] for r in rounds} == {"cluster_robust_t"}
    assert state.sampling.stopped is not None
    # The report measures by the spec's clusters too, and gives the same half-width.
    report = build_report(state)
    figures = report["mean_pass_rate_clustered"]
    assert figures["cluster_field"] == "family"
    assert figures["clusters"] == 20
    half_width = (figures["high"] - figures["low"]) / 2
    assert round(half_width, 9) == state.sampling.stopped["half_width"]


async def test_one_trajectorys_records_replay_it_as_the_whole_adaptive_ledger_does(
    memory_path: Path,
) -> None:
    runner, whole = await run_campaign(
        memory_path, spec(adaptive(0.12)), ScriptedAgent({}), flaky_scorer()
    )
    records = ledger_records(runner.store.state_dir, runner.campaign_id)
    grown = [t for t in whole.trajectories.values() if t.sample >= 2]
    assert grown
    for trajectory in [*grown[:5], whole.trajectories["t1@0"]]:
        alone = replay(concerning(records, trajectory.id))
        assert alone.trajectories[trajectory.id] == trajectory


def test_a_follower_reads_each_decision_as_one_line() -> None:
    planned = SamplesPlanned(
        seq=1, ts=2.0, round=1, added={"t2": 3, "t1": 1}, half_width=0.2,
        target_half_width=0.1, interval="bootstrap",
    )  # fmt: skip
    state = _state_with([_created(adaptive(0.1)), planned])
    event = record_event(state, planned)
    assert event.level == "info"
    assert event.message == (
        "c: sampling round 1: 4 more samples for 2 task(s) (half-width 0.200, target 0.1)"
    )
    stopped = SamplingStopped(
        seq=2, ts=3.0, reason="max_reached", half_width=0.15, target_half_width=0.1, planned=9
    )
    assert record_event(state, stopped).message == (
        "c: sampling stopped, max reached (half-width 0.150, target 0.1; 9 trajectories)"
    )


@pytest.mark.slow
async def test_over_eight_seeds_adaptive_sampling_halves_the_trajectories_near_the_max_width(
    memory_path: Path,
) -> None:
    # Within 5% of the fixed-max width: every seed needs fewer trajectories, about half in all.
    fixed_total = adaptive_total = 0
    for seed in range(1, 9):
        _, fixed = await run_campaign(
            memory_path / f"fixed{seed}", spec(MAX), ScriptedAgent({}), flaky_scorer(seed)
        )
        width = campaign_interval(fixed)
        assert width is not None
        target = round(1.05 * width.half_width, 4)
        _, state = await run_campaign(
            memory_path / f"adaptive{seed}", spec(adaptive(target)), ScriptedAgent({}),
            flaky_scorer(seed),
        )  # fmt: skip
        reached = campaign_interval(state)
        assert reached is not None
        assert reached.half_width <= target
        assert len(state.trajectories) < len(fixed.trajectories), seed
        fixed_total += len(fixed.trajectories)
        adaptive_total += len(state.trajectories)
    assert adaptive_total < 0.6 * fixed_total
