"""Paired comparison of two campaigns: exact and Monte Carlo permutation tests, sign test."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from mcp_evalserver.scoring.stats.comparison import compare_campaigns, sign_test_p_value
from mcp_evalserver.scoring.stats.summary import Outcome, Verdict


def verdicts(task_id: str, *outcomes: Outcome) -> list[Verdict]:
    return [Verdict(task_id=task_id, sample=i, outcome=o) for i, o in enumerate(outcomes)]


def test_sign_test_matches_the_binomial_tail() -> None:
    assert sign_test_p_value(9, 1) == pytest.approx(2 * (1 + 10) / 1024)
    assert sign_test_p_value(5, 5) == 1.0
    assert sign_test_p_value(0, 0) == 1.0


def test_paired_comparison_exact_permutation_p_equals_enumeration_of_all_sign_flips() -> None:
    outcomes_a: list[tuple[Outcome, ...]] = [
        ("failed", "failed"),
        ("resolved", "failed"),
        ("failed", "failed", "failed"),
        ("resolved", "resolved"),
        ("failed",),
        ("resolved", "failed", "failed"),
    ]
    outcomes_b: list[tuple[Outcome, ...]] = [
        ("resolved", "resolved"),
        ("resolved", "resolved"),
        ("resolved", "failed", "failed"),
        ("resolved", "failed"),
        ("resolved",),
        ("resolved", "failed", "failed"),
    ]
    a = [v for i, o in enumerate(outcomes_a) for v in verdicts(f"t{i}", *o)]
    b = [v for i, o in enumerate(outcomes_b) for v in verdicts(f"t{i}", *o)]
    b += verdicts("extra", "resolved")
    result = compare_campaigns(a, b)

    def rate(o: tuple[Outcome, ...]) -> Fraction:
        return Fraction(o.count("resolved"), len(o))

    diffs = [rate(y) - rate(x) for x, y in zip(outcomes_a, outcomes_b, strict=True)]
    observed = abs(sum(diffs, Fraction(0)))
    flips = list(itertools.product((1, -1), repeat=len(diffs)))
    extreme = sum(
        abs(sum((s * d for s, d in zip(f, diffs, strict=True)), Fraction(0))) >= observed
        for f in flips
    )
    assert result.permutation_exact
    assert result.permutation_p_value == pytest.approx(extreme / len(flips))
    assert result.mean_difference == pytest.approx(float(sum(diffs) / len(diffs)))
    assert (result.wins, result.losses, result.ties) == (4, 1, 1)
    assert result.sign_test_p_value == sign_test_p_value(4, 1)
    assert (result.shared_tasks, result.only_in_a, result.only_in_b) == (6, [], ["extra"])


def test_identical_campaigns_differ_by_nothing_with_p_value_one() -> None:
    campaign = verdicts("x", "resolved", "failed") + verdicts("y", "failed")
    result = compare_campaigns(campaign, campaign)
    assert result.mean_difference == 0.0
    assert result.permutation_p_value == 1.0
    assert result.difference_ci is not None
    assert (result.difference_ci.low, result.difference_ci.high) == (0.0, 0.0)


def test_permutation_test_falls_back_to_seeded_monte_carlo_when_sums_are_too_many() -> None:
    # Differences 1/p for 18 distinct primes: all 2^18 signed sums are distinct.
    primes = [p for p in range(2, 70) if all(p % d for d in range(2, p))][:18]
    a: list[Verdict] = []
    b: list[Verdict] = []
    for p in primes:
        failing: list[Outcome] = ["failed"] * p
        a += verdicts(f"t{p}", *failing)
        b += verdicts(f"t{p}", "resolved", *failing[1:])
    first = compare_campaigns(a, b, resamples=500, seed=11)
    again = compare_campaigns(a, b, resamples=500, seed=11)
    assert not first.permutation_exact
    assert first.permutation_p_value == again.permutation_p_value
    # Every task improved, so only the all-positive labelling is as extreme: p is 1/(R+1).
    assert first.permutation_p_value == pytest.approx(1 / 501)
    assert first.wins == 18
