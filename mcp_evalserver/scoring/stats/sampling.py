"""Adaptive sampling: which tasks get more samples, so that the mean pass rate's interval
narrows fastest.

The mean over tasks of their pass rates has a variance with two parts (Miller, "Adding Error
Bars to Evals", 2024): how much tasks differ (no extra sample changes it) and each task's own
sampling noise, `p_i (1 - p_i) / m_i` for `m_i` graded samples, summed over tasks and scaled
by `k` (`1 / n**2` for n tasks; the cluster-robust estimator's `G / (G - 1) / n**2`). One
more sample of task i removes `k p_i (1 - p_i) / (m_i (m_i + 1))` of the variance: tasks whose
outcomes disagree (p near one half) and that have few samples narrow it most, and a task whose
outcomes all agree little. `p_i` is estimated as `(resolved + 1/2) / (graded + 1)`, so two
agreeing outcomes still leave a task some noise (they are what a coin shows half the time).

The interval measured is the report's (its half-width is given); the model only predicts how
much of it the planned samples remove: the variance the interval implies, less the noise part
now, plus the noise part after. Samples are given one by one to the task that removes most
(ties: the first task in the campaign's order) until the predicted half-width reaches the
target, every task is at `max`, or the round's budget is spent: at most as many samples as
were planned before (an early estimate cannot commit the whole budget) and at least an eighth
of them (rounds stay few). Pure and deterministic: the same counts give the same plan.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

#: A round adds at least this share of the samples planned before it (when any task may grow).
MIN_ROUND_SHARE = 1 / 8


@dataclass(frozen=True)
class TaskSamples:
    """One task as the planner sees it: samples planned, graded (infrastructure failures are
    not), resolved."""

    task_id: str
    planned: int
    graded: int
    resolved: int


@dataclass(frozen=True)
class SamplingPlan:
    """More samples per task (`added`), the half-width expected after them, and why."""

    added: dict[str, int]
    predicted_half_width: float
    reasons: dict[str, str]


def task_noise(resolved: int, graded: int) -> float:
    """The estimated variance of one outcome of a task, p (1 - p), p shrunk towards 1/2."""
    # (c + 1/2)(g - c + 1/2) / (g + 1)^2: symmetric to the last bit, so a task that always
    # passes and one that always fails tie exactly (and the task order breaks the tie).
    return (resolved + 0.5) * (graded - resolved + 0.5) / (graded + 1) ** 2


def plan_samples(
    tasks: Sequence[TaskSamples],
    *,
    half_width: float,
    quantile: float,
    clusters: int,
    target: float,
    max_samples: int,
) -> SamplingPlan | None:
    """The next round of samples, or None when no task is below `max_samples`.

    `half_width`: the interval's now; `quantile`: what its standard error is multiplied by
    (z, or Student's t with G - 1 df); `clusters`: G (the task count when each task is its
    own). Only tasks with at least one graded sample are in the interval; the others are given
    samples last.
    """
    open_tasks = [t for t in tasks if t.planned < max_samples]
    if not open_tasks:
        return None
    scored = [t for t in tasks if t.graded > 0]
    n = max(1, len(scored))
    g = max(2, clusters)
    scale = g / (g - 1) / (n * n)
    variance = (half_width / quantile) ** 2
    noise_now = scale * math.fsum(task_noise(t.resolved, t.graded) / t.graded for t in scored)
    if noise_now > variance > 0:
        # The interval shows less than the model's noise: the noise is all of it.
        scale *= variance / noise_now
        noise_now = variance
    # The part no sample changes: what the interval shows beyond the noise.
    between = variance - noise_now
    target_variance = (target / quantile) ** 2
    planned_before = sum(t.planned for t in tasks)
    room = sum(max_samples - t.planned for t in open_tasks)
    budget = min(room, max(1, planned_before))
    least = min(budget, max(1, math.ceil(planned_before * MIN_ROUND_SHARE)))

    order = {t.task_id: i for i, t in enumerate(tasks)}
    noise = {t.task_id: task_noise(t.resolved, t.graded) for t in tasks}
    graded = {t.task_id: t.graded for t in tasks}
    planned = {t.task_id: t.planned for t in tasks}
    added: dict[str, int] = {}

    def gain(task_id: str) -> float:
        m = graded[task_id] + added.get(task_id, 0)
        if m == 0:
            return 0.0  # not in the interval yet: given samples when nothing else gains
        return scale * noise[task_id] / (m * (m + 1))

    heap = [(-gain(t.task_id), order[t.task_id], t.task_id) for t in open_tasks]
    heapq.heapify(heap)
    predicted = between + noise_now
    given = 0
    while heap and given < budget and (given < least or predicted > target_variance):
        negative_gain, rank, task_id = heapq.heappop(heap)
        predicted += negative_gain
        added[task_id] = added.get(task_id, 0) + 1
        given += 1
        if planned[task_id] + added[task_id] < max_samples:
            heapq.heappush(heap, (-gain(task_id), rank, task_id))
    reasons = {t.task_id: _reason(t.resolved, t.graded) for t in tasks if t.task_id in added}
    ordered = {t.task_id: added[t.task_id] for t in tasks if t.task_id in added}
    return SamplingPlan(
        added=ordered,
        predicted_half_width=quantile * math.sqrt(max(0.0, predicted)),
        reasons=reasons,
    )


def _reason(resolved: int, graded: int) -> str:
    if graded == 0:
        return "no graded outcome yet (infrastructure failures only)"
    if 0 < resolved < graded:
        return f"{resolved}/{graded} resolved: its outcomes disagree"
    return f"{resolved}/{graded} resolved: its outcomes agree so far, but {graded} may be few"
