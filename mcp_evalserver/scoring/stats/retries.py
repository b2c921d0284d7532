"""Retries kept honest: do trajectories that survived an infrastructure failure pass as often?

A retry after an infrastructure failure should change nothing about the task's result. If the
retried trajectories pass more or less often than the others, the retries are not neutral
(a half-applied patch left behind, a model call replayed, a grader that saw a dirty
workspace), or the infrastructure fails more on some kinds of task. Either way the headline
rate deserves a second look, so the split is reported and a difference flagged.

The test is Fisher's exact test on the 2x2 table (retried or not, resolved or not), two-sided
as scipy computes it: the tables no more likely than the observed one. Beside it, the pass
rate the retried trajectories would have if they passed like their tasks' other samples, so a
difference that comes from which tasks failed over is told apart from one the retry made.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

#: A difference is flagged below this p.
FLAG_P = 0.05
_RELATIVE_TOLERANCE = 1 + 1e-7


class RetrySplit(BaseModel):
    """Pass rates of graded trajectories that needed an infrastructure retry and of the rest."""

    model_config = ConfigDict(frozen=True)

    retried: int
    retried_resolved: int
    retried_pass_rate: float | None
    not_retried: int
    not_retried_resolved: int
    not_retried_pass_rate: float | None
    #: What the retried ones would pass at like their tasks' samples without a retry (over
    #: the retried trajectories whose task has such samples).
    retried_expected_from_their_tasks: float | None
    fisher_p_value: float | None
    flagged: bool
    note: str


def retry_split(rows: Iterable[tuple[str, bool, bool]]) -> RetrySplit:
    """The split from (task id, needed a retry, resolved) per graded trajectory."""
    table = [[0, 0], [0, 0]]  # [retried][resolved]
    by_task: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # unretried: resolved, graded
    retried_tasks: list[str] = []
    for task_id, retried, resolved in rows:
        table[retried][resolved] += 1
        if retried:
            retried_tasks.append(task_id)
        else:
            by_task[task_id][0] += resolved
            by_task[task_id][1] += 1
    retried_n = sum(table[1])
    plain_n = sum(table[0])
    comparable = [by_task[t][0] / by_task[t][1] for t in retried_tasks if by_task[t][1]]
    p_value = fisher_exact_p(table[1][1], table[1][0], table[0][1], table[0][0])
    flagged = retried_n > 0 and plain_n > 0 and p_value < FLAG_P
    if not retried_n:
        note = "no graded trajectory needed a retry after an infrastructure failure"
    elif flagged:
        note = (
            f"retried trajectories pass at a different rate (Fisher's exact p = {p_value:.3g}):"
            " compare with what their tasks' other samples pass at before trusting the"
            " headline rate"
        )
    else:
        note = f"no significant difference (Fisher's exact p = {p_value:.3g})"
    return RetrySplit(
        retried=retried_n,
        retried_resolved=table[1][1],
        retried_pass_rate=table[1][1] / retried_n if retried_n else None,
        not_retried=plain_n,
        not_retried_resolved=table[0][1],
        not_retried_pass_rate=table[0][1] / plain_n if plain_n else None,
        retried_expected_from_their_tasks=(
            math.fsum(comparable) / len(comparable) if comparable else None
        ),
        fisher_p_value=p_value if retried_n and plain_n else None,
        flagged=flagged,
        note=note,
    )


def fisher_exact_p(a: int, b: int, c: int, d: int) -> float:
    """Two-sided Fisher's exact p of the table [[a, b], [c, d]]: the total probability of the
    tables with the same margins that are no more likely than it."""
    row, column, total = a + b, a + c, a + b + c + d
    low, high = max(0, column - (total - row)), min(row, column)

    # In logs: the binomials of a large campaign's table have thousands of digits.
    log_all = _log_comb(total, column)

    def probability(x: int) -> float:
        return math.exp(_log_comb(row, x) + _log_comb(total - row, column - x) - log_all)

    observed = probability(a)
    tail = math.fsum(
        p for x in range(low, high + 1) if (p := probability(x)) <= observed * _RELATIVE_TOLERANCE
    )
    return min(1.0, tail)


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
