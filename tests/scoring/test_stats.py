"""Statistics: estimators against brute force, intervals against simulation, infra kept apart."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import pytest

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.stats.summary import (
    Outcome,
    Verdict,
    bootstrap_mean_ci,
    flaky_graders,
    latency_stats,
    pass_at_k,
    pass_hat_k,
    percentile,
    summarise_campaign,
    task_stats,
    wilson_interval,
)


def verdicts(task_id: str, *outcomes: Outcome) -> list[Verdict]:
    return [Verdict(task_id=task_id, sample=i, outcome=o) for i, o in enumerate(outcomes)]


def brute_force(n: int, c: int, k: int) -> tuple[Fraction, Fraction]:
    """(share of k-subsets with at least one pass, share with only passes), by enumeration."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    return (
        Fraction(sum(any(s) for s in subsets), len(subsets)),
        Fraction(sum(all(s) for s in subsets), len(subsets)),
    )


def test_pass_at_k_and_pass_hat_k_equal_enumeration_over_every_k_subset() -> None:
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                at_least_one, all_pass = brute_force(n, c, k)
                assert pass_at_k(n, c, k) == pytest.approx(float(at_least_one), abs=1e-12)
                assert pass_hat_k(n, c, k) == pytest.approx(float(all_pass), abs=1e-12)


def test_pass_at_k_stays_accurate_where_the_binomials_are_astronomically_large() -> None:
    n, c, k = 2000, 7, 900
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    exact_hat = Fraction(math.comb(c, 5), math.comb(n, 5))
    assert pass_hat_k(n, c, 5) == pytest.approx(float(exact_hat), rel=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_counts_outside_their_ranges(n: int, c: int, k: int) -> None:
    with pytest.raises(InvalidInput):
        pass_at_k(n, c, k)
    with pytest.raises(InvalidInput):
        pass_hat_k(n, c, k)


def test_wilson_interval_matches_published_values() -> None:
    # Reference values from the Wilson formula as tabulated by Newcombe (1998), z = 1.96.
    zero = wilson_interval(0, 10)
    assert zero.low == 0.0
    assert zero.high == pytest.approx(0.2775, abs=1e-4)
    half = wilson_interval(5, 10)
    assert (half.low, half.high) == pytest.approx((0.2366, 0.7634), abs=1e-4)


def test_wilson_interval_covers_the_true_proportion_about_95_percent_of_the_time() -> None:
    rng = random.Random(1234)
    for p in (0.1, 0.5, 0.9):
        trials = 2000
        covered = 0
        for _ in range(trials):
            successes = sum(rng.random() < p for _ in range(50))
            interval = wilson_interval(successes, 50)
            covered += interval.low <= p <= interval.high
        assert 0.92 <= covered / trials <= 0.98, (p, covered / trials)


@pytest.mark.parametrize(
    ("tasks", "samples"),
    [
        (60, 4),  # few tasks for their levels: the plain resampler
        (400, 2),  # many tasks on three levels: the counts (multinomial) resampler
    ],
)
def test_bootstrap_interval_over_tasks_covers_the_true_mean_about_95_percent_of_the_time(
    tasks: int, samples: int
) -> None:
    rng = random.Random(99)
    trials = 200
    covered = 0
    for trial in range(trials):
        # Each trial draws fresh tasks (true rates uniform, mean 0.5) and a few samples per
        # task: the bootstrap must account for both sources of variation.
        true_rates = [rng.random() for _ in range(tasks)]
        observed = [sum(rng.random() < r for _ in range(samples)) / samples for r in true_rates]
        interval = bootstrap_mean_ci(observed, resamples=400, seed=trial)
        covered += interval.low <= 0.5 <= interval.high
    assert 0.89 <= covered / trials <= 0.99, covered / trials


def test_bootstrap_is_reproducible_with_a_seed_and_varies_across_seeds() -> None:
    rng = random.Random(5)
    values = [rng.random() for _ in range(12)]
    assert bootstrap_mean_ci(values, seed=7) == bootstrap_mean_ci(values, seed=7)
    assert bootstrap_mean_ci(values, seed=7) != bootstrap_mean_ci(values, seed=8)
    constant = bootstrap_mean_ci([0.5] * 10)
    assert (constant.low, constant.high) == (0.5, 0.5)


def test_percentile_interpolates_linearly_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == pytest.approx(50.5)
    assert percentile(values, 0.95) == pytest.approx(95.05)
    assert percentile([3.0], 0.95) == 3.0


def test_infrastructure_failures_are_not_attempts_and_do_not_dilute_the_pass_rate() -> None:
    stats = task_stats(verdicts("t", "resolved", "infra_error", "failed", "infra_error"))
    (only,) = stats
    assert (only.attempts, only.successes, only.infra_errors) == (2, 1, 2)
    assert only.pass_rate == 0.5
    assert sorted(only.pass_at_k) == [1, 2]
    assert only.pass_at_k[2] == 1.0
    assert only.pass_hat_k[2] == 0.0


def test_a_task_with_only_infrastructure_failures_has_no_pass_rate() -> None:
    summary = summarise_campaign(
        verdicts("broken", "infra_error", "infra_error") + verdicts("ok", "resolved")
    )
    assert (summary.tasks, summary.tasks_scored) == (2, 1)
    assert summary.mean_pass_rate == 1.0
    assert summary.infra_errors == 2
    assert summary.infra_error_rate == pytest.approx(2 / 3)
    assert summary.attempts == 1


def test_two_verdicts_for_the_same_trajectory_are_rejected() -> None:
    duplicate = [Verdict(task_id="t", sample=0, outcome="resolved")] * 2
    with pytest.raises(InvalidInput, match="t@0"):
        task_stats(duplicate)


def test_campaign_summary_macro_averages_tasks_and_keeps_outcomes_apart() -> None:
    campaign = (
        verdicts("a", "resolved", "resolved", "failed")
        + verdicts("b", "failed", "timeout", "error")
        + verdicts("c", "resolved", "infra_error", "resolved")
    )
    summary = summarise_campaign(campaign, seed=3)
    assert summary.mean_pass_rate == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert summary.outcomes == {
        "error": 1,
        "failed": 2,
        "infra_error": 1,
        "resolved": 4,
        "timeout": 1,
    }
    assert summary.task_error_rate == pytest.approx(2 / 8)
    # Task c has only two attempts left, so k stops at 2 for every task.
    assert sorted(summary.pass_at_k) == [1, 2]
    assert summary.pass_at_k[1] == pytest.approx(summary.mean_pass_rate)
    assert summary.pass_at_k[2] == pytest.approx((1 + 0 + 1) / 3)
    assert summary.wilson_ci is None
    ci = summary.mean_pass_rate_ci
    assert ci is not None
    assert ci.low <= (2 / 3 + 0 + 1) / 3 <= ci.high


def test_wilson_interval_is_reported_when_every_task_has_one_attempt() -> None:
    campaign = [
        Verdict(task_id=f"t{i}", sample=0, outcome="resolved" if i % 4 else "failed")
        for i in range(20)
    ]
    summary = summarise_campaign(campaign)
    assert summary.wilson_ci == wilson_interval(15, 20)


def test_latency_and_throughput_come_from_timestamps_of_countable_attempts() -> None:
    campaign = [
        Verdict(task_id="t", sample=i, outcome="resolved", started_at=100.0, finished_at=100.0 + i)
        for i in range(1, 11)
    ] + [Verdict(task_id="t", sample=11, outcome="infra_error", started_at=0.0, finished_at=999.0)]
    latency = summarise_campaign(campaign).latency
    assert latency.count == 10
    assert latency.p50_s == pytest.approx(5.5)
    assert latency.p95_s == pytest.approx(9.55)
    assert latency.throughput_per_s == pytest.approx(10 / 10)
    assert latency_stats([]).p50_s is None


def test_token_and_cost_totals_are_none_when_unknown_and_summed_when_known() -> None:
    unknown = summarise_campaign(verdicts("t", "resolved"))
    assert (unknown.input_tokens, unknown.cost_usd) == (None, None)
    known = summarise_campaign(
        [
            Verdict(task_id="t", sample=0, outcome="resolved", input_tokens=10, cost_usd=0.5),
            Verdict(task_id="t", sample=1, outcome="failed", input_tokens=5, cost_usd=0.25),
        ]
    )
    assert (known.input_tokens, known.cost_usd) == (15, 0.75)


def test_flaky_graders_lists_gold_runs_that_do_not_always_pass() -> None:
    gold = (
        verdicts("steady", "resolved", "resolved", "infra_error")
        + verdicts("flaky", "resolved", "failed", "resolved")
        + verdicts("broken", "failed", "error")
        + verdicts("down", "infra_error")
    )
    found = {f.task_id: (f.kind, f.runs, f.passes) for f in flaky_graders(gold)}
    assert found == {"flaky": ("flaky", 3, 2), "broken": ("never_passes", 2, 0)}
