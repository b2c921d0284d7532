"""Which paired test answers, and McNemar's exact test against scipy and statsmodels."""

from __future__ import annotations

import pytest
from scipy import stats  # type: ignore[import-untyped]
from statsmodels.stats.contingency_tables import mcnemar  # type: ignore[import-untyped]

from mcp_evalserver.scoring.stats.comparison import compare_campaigns
from mcp_evalserver.scoring.stats.paired import paired_tests
from mcp_evalserver.scoring.stats.summary import Outcome, Verdict


def one_sample_each(outcomes: list[tuple[bool, bool]]) -> tuple[list[Verdict], list[Verdict]]:
    def verdict(i: int, resolved: bool) -> Verdict:
        outcome: Outcome = "resolved" if resolved else "failed"
        return Verdict(task_id=f"t{i}", sample=0, outcome=outcome)

    a = [verdict(i, x) for i, (x, _) in enumerate(outcomes)]
    b = [verdict(i, y) for i, (_, y) in enumerate(outcomes)]
    return a, b


@pytest.mark.parametrize(
    ("only_a", "only_b", "both", "neither"), [(2, 9, 10, 30), (0, 5, 3, 1), (7, 7, 0, 2)]
)
def test_mcnemar_with_one_sample_per_side_equals_the_exact_binomial(
    only_a: int, only_b: int, both: int, neither: int
) -> None:
    pairs = (
        [(True, False)] * only_a
        + [(False, True)] * only_b
        + [(True, True)] * both
        + [(False, False)] * neither
    )
    a, b = one_sample_each(pairs)
    tests = paired_tests(a, b, compare_campaigns(a, b))
    assert tests.answered_by == "mcnemar_exact"
    assert tests.mcnemar is not None
    assert (tests.mcnemar.only_a_resolved, tests.mcnemar.only_b_resolved) == (only_a, only_b)
    reference = stats.binomtest(only_b, only_a + only_b, 0.5).pvalue
    assert tests.p_value == pytest.approx(reference, rel=1e-12)
    table = [[both, only_a], [only_b, neither]]
    assert tests.p_value == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-12)
    assert "one sample per task" in tests.reason


def test_several_samples_per_independent_task_leave_the_answer_to_the_permutation_test() -> None:
    a = [Verdict(task_id=f"t{i}", sample=s, outcome="failed") for i in range(6) for s in range(2)]
    b = [
        Verdict(task_id=f"t{i}", sample=s, outcome="resolved" if s <= i % 2 else "failed")
        for i in range(6)
        for s in range(2)
    ]
    comparison = compare_campaigns(a, b)
    tests = paired_tests(a, b, comparison)
    assert tests.mcnemar is None
    assert tests.answered_by == "permutation"
    assert tests.p_value == comparison.permutation_p_value
    # Each task its own cluster: the clustered t test is the paired t test.
    diffs = [0.5, 1.0] * 3
    assert tests.clustered_t_p_value == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue)


def test_clustered_tasks_are_answered_by_clusters_and_few_clusters_by_their_permutation() -> None:
    pairs = [(i % 3 == 0, i % 2 == 0) for i in range(60)]
    a, b = one_sample_each(pairs)
    comparison = compare_campaigns(a, b)
    many = {f"t{i}": f"repo{i // 2}" for i in range(60)}  # 30 repositories
    tests = paired_tests(a, b, comparison, many, cluster_field="repo")
    assert tests.answered_by == "clustered_t"
    assert tests.difference is not None
    assert tests.difference.clusters == 30
    assert tests.p_value == tests.clustered_t_p_value
    assert "30 clusters" in tests.reason
    few = {f"t{i}": f"repo{i % 4}" for i in range(60)}
    tests = paired_tests(a, b, comparison, few, cluster_field="repo")
    assert tests.answered_by == "cluster_permutation"
    assert tests.cluster_permutation_exact
    assert tests.p_value == tests.cluster_permutation_p_value
    assert tests.difference is not None
    assert tests.difference.warning is not None
