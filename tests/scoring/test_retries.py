"""Pass rates split by whether a trajectory needed a retry: Fisher's exact test as scipy's."""

from __future__ import annotations

import pytest
from scipy import stats  # type: ignore[import-untyped]

from mcp_evalserver.scoring.stats.retries import fisher_exact_p, retry_split


@pytest.mark.parametrize("table", [(3, 1, 1, 3), (0, 5, 9, 2), (12, 30, 40, 41), (1, 0, 0, 0)])
def test_fisher_exact_p_is_scipys(table: tuple[int, int, int, int]) -> None:
    a, b, c, d = table
    reference = stats.fisher_exact([[a, b], [c, d]]).pvalue
    assert fisher_exact_p(a, b, c, d) == pytest.approx(reference, rel=1e-9)


def test_retried_trajectories_that_pass_less_are_flagged() -> None:
    rows = [(f"t{i}", True, i < 2) for i in range(20)]
    rows += [(f"t{i}", False, i % 10 < 8) for i in range(40)]
    split = retry_split(rows)
    assert (split.retried, split.retried_resolved, split.not_retried) == (20, 2, 40)
    assert split.retried_pass_rate == 0.1
    assert split.not_retried_pass_rate == 0.8
    assert split.flagged
    assert split.retried_expected_from_their_tasks == pytest.approx(0.8)


def test_without_retries_nothing_is_flagged() -> None:
    split = retry_split([("t1", False, True), ("t2", False, False)])
    assert (split.retried, split.flagged, split.fisher_p_value) == (0, False, None)
    assert "no graded trajectory needed a retry" in split.note


def test_fisher_exact_p_holds_on_a_large_campaigns_table() -> None:
    a, b, c, d = 180, 320, 4100, 5400
    reference = stats.fisher_exact([[a, b], [c, d]]).pvalue
    assert fisher_exact_p(a, b, c, d) == pytest.approx(reference, rel=1e-6)
