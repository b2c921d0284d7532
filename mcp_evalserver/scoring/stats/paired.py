"""Which paired test answers a comparison of two campaigns, and why.

`comparison.compare_campaigns` gives the bootstrap interval, the permutation test and the sign
test over tasks. Here: the per-task differences' clustered standard error and t test,
McNemar's exact test when each side has one sample per task, a sign-flip permutation test
over clusters when tasks are clustered, and the choice among them:

- one sample per task on both sides: outcomes are 0/1 pairs, and McNemar's exact test (the
  binomial on the discordant tasks) is exact, with no approximation at all;
- tasks in 20 or more clusters: the clustered t test (tasks of one cluster are not
  independent, which the tests over tasks assume);
- tasks in fewer clusters: the sign-flip permutation test over cluster sums, exact, since
  a t interval over few clusters undercovers;
- otherwise: the paired permutation test over tasks (exact, or Monte Carlo on many tasks).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from fractions import Fraction
from typing import Literal

from pydantic import BaseModel, ConfigDict

from mcp_evalserver.scoring.stats.clustered import MIN_CLUSTERS, ClusteredMean, cluster_robust_mean
from mcp_evalserver.scoring.stats.comparison import PairedComparison, sign_flip_p_value
from mcp_evalserver.scoring.stats.distributions import binomial_two_sided_p, t_two_sided_p
from mcp_evalserver.scoring.stats.summary import Verdict, task_stats

Test = Literal["mcnemar_exact", "clustered_t", "cluster_permutation", "permutation"]


class McNemar(BaseModel):
    """McNemar's exact test on tasks with one sample per side: the discordant pairs."""

    model_config = ConfigDict(frozen=True)

    only_a_resolved: int
    only_b_resolved: int
    both_resolved: int
    neither_resolved: int
    p_value: float


class PairedTests(BaseModel):
    """The paired tests beside the bootstrap and permutation figures, and the one that answers."""

    model_config = ConfigDict(frozen=True)

    #: The mean of per-task differences (B minus A) with its clustered standard error.
    difference: ClusteredMean | None
    clustered_t_p_value: float | None
    mcnemar: McNemar | None
    cluster_permutation_p_value: float | None
    cluster_permutation_exact: bool | None
    answered_by: Test | None
    p_value: float | None
    reason: str


def paired_tests(
    a: list[Verdict],
    b: list[Verdict],
    comparison: PairedComparison,
    clusters: Mapping[str, str] | None = None,
    *,
    cluster_field: str | None = None,
    tasks_without_field: int = 0,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> PairedTests:
    """The paired tests of B against A on their shared tasks; `comparison` is what
    `compare_campaigns` found for the same verdicts (its permutation and sign tests)."""
    stats_a = {t.task_id: t for t in task_stats(a) if t.attempts}
    stats_b = {t.task_id: t for t in task_stats(b) if t.attempts}
    shared = sorted(stats_a.keys() & stats_b.keys())
    if not shared:
        return PairedTests(
            difference=None,
            clustered_t_p_value=None,
            mcnemar=None,
            cluster_permutation_p_value=None,
            cluster_permutation_exact=None,
            answered_by=None,
            p_value=None,
            reason="no task was scored by both campaigns",
        )
    exact = {
        t: Fraction(stats_b[t].successes, stats_b[t].attempts)
        - Fraction(stats_a[t].successes, stats_a[t].attempts)
        for t in shared
    }
    labels = {t: c for t, c in (clusters or {}).items() if t in exact}
    difference = cluster_robust_mean(
        {t: float(d) for t, d in exact.items()},
        labels,
        confidence=confidence,
        cluster_field=cluster_field,
        tasks_without_field=sum(1 for t in shared if t not in labels) if labels else 0,
    )
    t_p = None
    if difference.standard_error is not None:
        t_p = (
            t_two_sided_p(difference.mean / difference.standard_error, difference.clusters - 1)
            if difference.standard_error > 0
            else (1.0 if difference.mean == 0 else 0.0)
        )
    mcnemar = None
    if all(stats_a[t].attempts == 1 and stats_b[t].attempts == 1 for t in shared):
        only_a = sum(stats_a[t].successes > stats_b[t].successes for t in shared)
        only_b = sum(stats_b[t].successes > stats_a[t].successes for t in shared)
        both = sum(stats_a[t].successes == stats_b[t].successes == 1 for t in shared)
        mcnemar = McNemar(
            only_a_resolved=only_a,
            only_b_resolved=only_b,
            both_resolved=both,
            neither_resolved=len(shared) - only_a - only_b - both,
            p_value=binomial_two_sided_p(only_b, only_a + only_b),
        )
    clustered = difference.clusters < len(shared)
    permutation_p, permutation_exact = None, None
    if clustered:
        sums: dict[str, Fraction] = defaultdict(Fraction)
        for t, d in exact.items():
            sums[labels.get(t, f"\0task:{t}")] += d
        permutation_p, permutation_exact = sign_flip_p_value(list(sums.values()), resamples, seed)
    answered_by: Test
    p_value: float | None
    if mcnemar is not None and not clustered:
        answered_by, p_value = "mcnemar_exact", mcnemar.p_value
        reason = (
            "each side has one sample per task: the outcomes are 0/1 pairs, and McNemar's exact"
            f" test on the {mcnemar.only_a_resolved + mcnemar.only_b_resolved} discordant"
            " task(s) is exact"
        )
    elif clustered and difference.clusters >= MIN_CLUSTERS:
        answered_by, p_value = "clustered_t", t_p
        reason = (
            f"tasks come in {difference.clusters} clusters (by `{cluster_field}`): tasks of one"
            " cluster are not independent, so the clustered t test over the per-task"
            f" differences answers ({difference.clusters - 1} degrees of freedom)"
        )
    elif clustered:
        answered_by, p_value = "cluster_permutation", permutation_p
        reason = (
            f"tasks come in only {difference.clusters} clusters (by `{cluster_field}`): a"
            f" clustered t interval undercovers below {MIN_CLUSTERS}, so the sign-flip"
            " permutation test over cluster sums answers"
        )
    else:
        answered_by, p_value = "permutation", comparison.permutation_p_value
        reason = (
            "several samples per task, tasks independent (no clusters): the paired"
            " permutation test over per-task differences answers"
            f" ({'exact' if comparison.permutation_exact else 'Monte Carlo'}; it needs no"
            " normal approximation)"
        )
    return PairedTests(
        difference=difference,
        clustered_t_p_value=t_p,
        mcnemar=mcnemar,
        cluster_permutation_p_value=permutation_p,
        cluster_permutation_exact=permutation_exact,
        answered_by=answered_by,
        p_value=p_value,
        reason=reason,
    )
