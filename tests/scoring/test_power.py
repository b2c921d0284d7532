"""The power planner: statsmodels' power functions as reference, and its answer by simulation."""

from __future__ import annotations

import math
import random

import pytest
from statsmodels.stats.power import TTestPower  # type: ignore[import-untyped]

from mcp_evalserver.scoring.stats.clustered import clustered_t_test
from mcp_evalserver.scoring.stats.power import (
    TaskCounts,
    detectable_difference,
    plan_sample_size,
    power_of_t_test,
    tasks_needed,
    variance_components,
)


@pytest.mark.parametrize(
    ("tasks", "effect"),
    [(3, 0.8), (3, 2.0), (8, 0.35), (8, 1.2), (20, 0.1), (20, 0.6), (75, 0.2), (400, 0.1)],
)
def test_the_power_of_the_t_test_is_statsmodels_ttestpower(tasks: int, effect: float) -> None:
    ours = power_of_t_test(effect, 1 / math.sqrt(tasks), tasks - 1, 0.05)
    reference = TTestPower().power(effect_size=effect, nobs=tasks, alpha=0.05)
    assert ours == pytest.approx(float(reference), abs=1e-9)


@pytest.mark.parametrize(("delta", "sd", "power"), [(0.05, 0.3, 0.8), (0.1, 0.25, 0.9)])
def test_tasks_needed_and_detectable_difference_agree_with_statsmodels(
    delta: float, sd: float, power: float
) -> None:
    components = variance_components(
        {"a": TaskCounts(successes=1, attempts=1), "b": TaskCounts(successes=0, attempts=1)}
    ).model_copy(update={"between_task": sd**2, "within_task": None, "design_effect": 1.0})
    n = tasks_needed(components, 1, delta, 0.05, power)
    assert n is not None
    solved = TTestPower().solve_power(effect_size=delta / sd, alpha=0.05, power=power)
    assert n == math.ceil(solved)
    mde = detectable_difference(sd / math.sqrt(n), n - 1, 0.05, power)
    reference = TTestPower().solve_power(nobs=n, alpha=0.05, power=power) * sd
    # statsmodels' root finder stops at ~1e-5; ours at 1e-7 (its power is exactly `power`).
    assert mde == pytest.approx(float(reference), rel=1e-4)
    power_there = TTestPower().power(effect_size=mde / sd, nobs=n, alpha=0.05)
    assert float(power_there) == pytest.approx(power, abs=1e-6)


def simulated_pair(
    rng: random.Random, tasks: int, samples: int, delta: float
) -> tuple[dict[str, TaskCounts], dict[str, TaskCounts]]:
    """Two campaigns on the same tasks: A passes task i with p_i ~ U(0.15, 0.7); B with
    p_i + delta + u_i, u_i ~ U(-0.1, 0.1): correlated difficulty, varying gains."""
    a, b = {}, {}
    for i in range(tasks):
        p = 0.15 + 0.55 * rng.random()
        q = p + delta + 0.2 * (rng.random() - 0.5)
        a[f"t{i}"] = TaskCounts(successes=sum(rng.random() < p for _ in range(samples)),
                                attempts=samples)  # fmt: skip
        b[f"t{i}"] = TaskCounts(successes=sum(rng.random() < q for _ in range(samples)),
                                attempts=samples)  # fmt: skip
    return a, b


def test_the_planned_tasks_reach_the_asked_power_in_simulation() -> None:
    rng = random.Random(31)
    delta = 0.15
    pilot_a, pilot_b = simulated_pair(rng, tasks=600, samples=4, delta=delta)
    components = variance_components(pilot_a, pilot_b)
    assert components.correlation is not None
    assert components.correlation > 0.5
    plan = plan_sample_size(components, delta=delta, power=0.8, alpha=0.05)
    n = next(o.tasks for o in plan.options if o.samples_per_task == 2)
    assert n is not None
    assert 20 < n < 200
    runs = 800
    detected = 0
    for _ in range(runs):
        a, b = simulated_pair(rng, tasks=n, samples=2, delta=delta)
        diffs = {t: b[t].successes / 2 - a[t].successes / 2 for t in a}
        _, p = clustered_t_test(diffs)
        detected += p is not None and p < 0.05
    assert 0.75 <= detected / runs <= 0.85


def test_one_sample_per_task_plans_as_if_more_samples_would_not_help() -> None:
    rng = random.Random(5)
    pilot = {f"t{i}": TaskCounts(successes=int(rng.random() < 0.4), attempts=1) for i in range(50)}
    plan = plan_sample_size(variance_components(pilot), delta=0.1)
    assert plan.components.within_task is None
    tasks = {o.samples_per_task: o.tasks for o in plan.options}
    assert tasks[1] == tasks[16]
    assert any("one sample per task" in note for note in plan.notes)
    assert any("uncorrelated" in note for note in plan.notes)
    assert plan.detectable_difference is not None
    assert plan.detectable_difference > 0.1
