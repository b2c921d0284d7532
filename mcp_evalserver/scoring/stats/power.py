"""Power and sample size for comparing two campaigns on the same tasks, from a pilot.

A task's outcome in one sample is 0/1 with the task's own chance p_i of passing. Over tasks,
the chances vary (between-task variance, Var(p_i)); within a task, samples vary around p_i
(within-task variance, E[p_i (1 - p_i)]). The mean over n tasks of k samples each has variance
(between + within / k) / n. Comparing B with A on the same tasks, the per-task difference has
between-task variance Var(p_Bi - p_Ai) = Var(p_A) + Var(p_B) - 2 Cov(p_A, p_B), where the
covariance is what two campaigns on the same tasks share (the correlation of task
difficulty), and within-task variance within_A + within_B.

Estimates (one-way random effects, method of moments): within from the pooled sample variance
of each task's outcomes (needs tasks with 2+ samples); between as the variance of per-task
means less within times the mean of 1/k_i; the covariance of two campaigns' task means is
unbiased as it stands (their sampling noise is independent). With clusters (repositories), a
design effect (clustered over naive variance of the pilot's task means, at least 1) scales the
variance. The test is two-sided at `alpha`, a t test over tasks with n - 1 degrees of freedom,
and its power is the noncentral t's (as statsmodels' `TTestPower` computes it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from statistics import NormalDist

from pydantic import BaseModel, ConfigDict

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.stats.clustered import cluster_robust_mean
from mcp_evalserver.scoring.stats.distributions import noncentral_t_cdf, t_quantile

#: Samples per task the plan tabulates (besides the pilot's own).
SAMPLE_OPTIONS = (1, 2, 4, 8, 16)
_MAX_TASKS = 10**9
_MAX_SAMPLES = 1000


class TaskCounts(BaseModel):
    """One task in one campaign: resolved attempts out of attempts (infrastructure aside)."""

    model_config = ConfigDict(frozen=True)

    successes: int
    attempts: int


class VarianceComponents(BaseModel):
    """The variance of the per-task difference B - A, by source, from a pilot."""

    model_config = ConfigDict(frozen=True)

    tasks: int
    #: Mean samples per task in the pilot (over both campaigns when there are two).
    samples_per_task: float
    #: Var(p_B - p_A) over tasks (or, one campaign, 2 Var(p) under `correlation` 0).
    between_task: float
    #: within_A + within_B, None when every task had one sample (then it is in `between_task`).
    within_task: float | None
    #: The correlation of the two campaigns' task pass rates; None with one campaign.
    correlation: float | None
    #: Clustered over naive variance of the pilot's per-task means (1 without clusters).
    design_effect: float
    clusters: int
    assumption: str


class PlanOption(BaseModel):
    """Tasks needed at one number of samples per task."""

    model_config = ConfigDict(frozen=True)

    samples_per_task: int
    tasks: int | None
    trajectories_per_campaign: int | None


class SampleSizePlan(BaseModel):
    """How many tasks x samples detect `delta`, and what the pilot's size can detect."""

    model_config = ConfigDict(frozen=True)

    delta: float
    power: float
    alpha: float
    components: VarianceComponents
    options: list[PlanOption]
    #: With the pilot's tasks: the samples per task needed (None: no number is enough).
    pilot_tasks: int
    samples_needed_with_pilot_tasks: int | None
    #: The difference the pilot's design (its tasks x samples) detects at `power`.
    detectable_difference: float | None
    notes: list[str]


def variance_components(
    a: Mapping[str, TaskCounts],
    b: Mapping[str, TaskCounts] | None = None,
    clusters: Mapping[str, str] | None = None,
) -> VarianceComponents:
    """The components of the per-task difference's variance from one pilot campaign (`a`; a
    comparison with another like it, task difficulty assumed uncorrelated) or two (`a`, `b`:
    on the tasks both scored).

    Raises:
        InvalidInput: fewer than two tasks with attempts (shared ones, with two campaigns).
    """
    tasks = sorted(t for t, c in a.items() if c.attempts and (b is None or _scored(b, t)))
    if len(tasks) < 2:
        raise InvalidInput(
            "a plan needs a pilot with at least two scored tasks (shared by both campaigns)"
        )
    within_a = _within(a[t] for t in tasks)
    inverse_k_a = math.fsum(1 / a[t].attempts for t in tasks) / len(tasks)
    means_a = {t: a[t].successes / a[t].attempts for t in tasks}
    notes = []
    if b is None:
        between_a = max(0.0, _variance(list(means_a.values())) - (within_a or 0.0) * inverse_k_a)
        values = means_a
        between = 2 * between_a
        within = None if within_a is None else 2 * within_a
        correlation = None
        samples = math.fsum(a[t].attempts for t in tasks) / len(tasks)
        notes.append(
            "one pilot campaign: planned for comparing two campaigns like it whose task pass"
            " rates are uncorrelated (a cautious assumption; plan with two campaigns on the"
            " same tasks to use their real correlation, which usually needs fewer tasks)"
        )
    else:
        within_b = _within(b[t] for t in tasks)
        inverse_k_b = math.fsum(1 / b[t].attempts for t in tasks) / len(tasks)
        means_b = {t: b[t].successes / b[t].attempts for t in tasks}
        values = {t: means_b[t] - means_a[t] for t in tasks}
        noise = (within_a or 0.0) * inverse_k_a + (within_b or 0.0) * inverse_k_b
        between = max(0.0, _variance(list(values.values())) - noise)
        within = None if within_a is None or within_b is None else within_a + within_b
        between_a = max(0.0, _variance(list(means_a.values())) - (within_a or 0.0) * inverse_k_a)
        between_b = max(0.0, _variance(list(means_b.values())) - (within_b or 0.0) * inverse_k_b)
        covariance = _covariance([means_a[t] for t in tasks], [means_b[t] for t in tasks])
        correlation = (
            max(-1.0, min(1.0, covariance / math.sqrt(between_a * between_b)))
            if between_a > 0 and between_b > 0
            else None
        )
        samples = math.fsum(a[t].attempts + b[t].attempts for t in tasks) / (2 * len(tasks))
    if within is None:
        notes.append(
            "one sample per task: samples cannot be told apart from tasks, so the plan counts"
            " all variance as between tasks (more samples per task would not help)"
        )
    design_effect, groups = _design_effect(values, clusters)
    if groups < len(tasks):
        notes.append(
            f"tasks in {groups} clusters: the variance is scaled by the design effect"
            f" {design_effect:.2f} (clustered over naive)"
        )
    return VarianceComponents(
        tasks=len(tasks),
        samples_per_task=samples,
        between_task=between,
        within_task=within,
        correlation=correlation,
        design_effect=design_effect,
        clusters=groups,
        assumption="; ".join(notes),
    )


def _scored(counts: Mapping[str, TaskCounts], task_id: str) -> bool:
    found = counts.get(task_id)
    return found is not None and found.attempts > 0


def _within(counts: Iterable[TaskCounts]) -> float | None:
    """Pooled within-task variance of 0/1 outcomes: sum c(k-c)/k over sum (k-1)."""
    numerator = denominator = 0.0
    for c in counts:
        if c.attempts >= 2:
            numerator += c.successes * (c.attempts - c.successes) / c.attempts
            denominator += c.attempts - 1
    return numerator / denominator if denominator else None


def _variance(values: Sequence[float]) -> float:
    mean = math.fsum(values) / len(values)
    return math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)


def _covariance(x: Sequence[float], y: Sequence[float]) -> float:
    mean_x, mean_y = math.fsum(x) / len(x), math.fsum(y) / len(y)
    return math.fsum((p - mean_x) * (q - mean_y) for p, q in zip(x, y, strict=True)) / (len(x) - 1)


def _design_effect(
    values: Mapping[str, float], clusters: Mapping[str, str] | None
) -> tuple[float, int]:
    naive = cluster_robust_mean(values)
    clustered = cluster_robust_mean(values, clusters)
    if (
        clustered.clusters == naive.clusters
        or clustered.standard_error is None
        or not naive.standard_error
    ):
        return 1.0, clustered.clusters
    return max(1.0, (clustered.standard_error / naive.standard_error) ** 2), clustered.clusters


def variance_of_difference(components: VarianceComponents, tasks: int, samples: int) -> float:
    """Variance of the mean per-task difference over `tasks` tasks of `samples` samples."""
    within = components.within_task or 0.0
    return components.design_effect * (components.between_task + within / samples) / tasks


def power_of_t_test(delta: float, standard_error: float, df: float, alpha: float) -> float:
    """Power of the two-sided t test at `alpha` against a true difference `delta`.

    Raises:
        InvalidInput: alpha outside (0, 1) or df <= 0.
    """
    if not 0 < alpha < 1:
        raise InvalidInput(f"alpha must be strictly between 0 and 1; got {alpha}")
    if standard_error <= 0:
        return 1.0 if delta else alpha
    critical = t_quantile(1 - alpha / 2, df)
    shift = abs(delta) / standard_error
    return 1 - noncentral_t_cdf(critical, df, shift) + noncentral_t_cdf(-critical, df, shift)


def detectable_difference(standard_error: float, df: float, alpha: float, power: float) -> float:
    """The smallest true difference the two-sided t test detects with `power`."""
    _check_power(power, alpha)
    if standard_error <= 0:
        return 0.0
    low, high = 0.0, standard_error
    while power_of_t_test(high, standard_error, df, alpha) < power:
        low, high = high, 2 * high
    while high - low > 1e-7:
        middle = (low + high) / 2
        if power_of_t_test(middle, standard_error, df, alpha) < power:
            low = middle
        else:
            high = middle
    return high


def tasks_needed(
    components: VarianceComponents, samples: int, delta: float, alpha: float, power: float
) -> int | None:
    """The fewest tasks (of `samples` samples each) whose test detects `delta` with `power`."""

    def enough(n: int) -> bool:
        se = math.sqrt(variance_of_difference(components, n, samples))
        return power_of_t_test(delta, se, n - 1, alpha) >= power

    if not enough(_MAX_TASKS):
        return None
    # The z test's answer is a little below the t test's: start the search around it.
    z = NormalDist().inv_cdf
    variance_one = variance_of_difference(components, 1, samples)
    guess = max(2, math.ceil((z(1 - alpha / 2) + z(power)) ** 2 * variance_one / delta**2))
    low = max(1, guess // 2)  # enough(high) once found; never enough at 1 task (no df)
    if low > 1 and enough(low):
        low = 1
    high = max(low + 1, guess)
    while not enough(high):
        low, high = high, high * 2
    return _fewest(enough, low, high)


def samples_needed(
    components: VarianceComponents, tasks: int, delta: float, alpha: float, power: float
) -> int | None:
    """The fewest samples per task with which `tasks` tasks detect `delta` (None: none do)."""
    if tasks < 2:
        return None

    def enough(k: int) -> bool:
        se = math.sqrt(variance_of_difference(components, tasks, k))
        return power_of_t_test(delta, se, tasks - 1, alpha) >= power

    if not enough(_MAX_SAMPLES):
        return None
    if components.within_task is None:
        return 1  # more samples do not change the planned variance
    low, high = 0, _MAX_SAMPLES
    return _fewest(enough, low, high)


def plan_sample_size(
    components: VarianceComponents, *, delta: float, power: float = 0.8, alpha: float = 0.05
) -> SampleSizePlan:
    """Tasks needed at 1, 2, 4, 8, 16 (and the pilot's) samples per task to detect `delta`;
    the samples needed with the pilot's tasks; the difference the pilot's design detects.

    Raises:
        InvalidInput: delta not in (0, 1], or power/alpha outside (0, 1).
    """
    if not 0 < delta <= 1:
        raise InvalidInput(f"delta is a difference in pass rate, in (0, 1]; got {delta}")
    _check_power(power, alpha)
    pilot_k = max(1, round(components.samples_per_task))
    options = []
    for k in sorted({*SAMPLE_OPTIONS, pilot_k}):
        n = tasks_needed(components, k, delta, alpha, power)
        options.append(
            PlanOption(
                samples_per_task=k, tasks=n, trajectories_per_campaign=None if n is None else n * k
            )
        )
    pilot_se = math.sqrt(variance_of_difference(components, components.tasks, pilot_k))
    notes = [components.assumption] if components.assumption else []
    needed = samples_needed(components, components.tasks, delta, alpha, power)
    if needed is None:
        notes.append(
            f"with {components.tasks} tasks no number of samples per task is enough: the"
            " variance between tasks alone is too large; add tasks"
        )
    return SampleSizePlan(
        delta=delta,
        power=power,
        alpha=alpha,
        components=components,
        options=options,
        pilot_tasks=components.tasks,
        samples_needed_with_pilot_tasks=needed,
        detectable_difference=detectable_difference(pilot_se, components.tasks - 1, alpha, power),
        notes=notes,
    )


def _check_power(power: float, alpha: float) -> None:
    if not 0 < power < 1 or not 0 < alpha < 1:
        raise InvalidInput(f"power and alpha must be in (0, 1); got power={power}, alpha={alpha}")


def _fewest(enough: Callable[[int], bool], low: int, high: int) -> int:
    """The least n in (low, high] that is `enough`, by bisection: `enough` must hold from some n
    on, and hold at `high` but not at `low`."""
    while high - low > 1:
        middle = (low + high) // 2
        if enough(middle):
            high = middle
        else:
            low = middle
    return high
