"""The bootstrap's resamplers: the counts (multinomial) one must be the plain one, only cheaper."""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter

import pytest
from scipy import stats as scipy_stats  # type: ignore[import-untyped]

from mcp_evalserver.scoring.stats.resampling import (
    VALUES_PER_LEVEL,
    Binomial,
    counts_resampled_means,
    plain_resampled_means,
    resampled_means,
)
from mcp_evalserver.scoring.stats.summary import bootstrap_mean_ci, percentile

DRAWS = 20_000


@pytest.mark.parametrize(
    ("n", "p"),
    [
        (1, 0.5),
        (7, 0.3),  # inversion
        (40, 0.29),  # inversion, mean just under the switch
        (41, 0.3),  # rejection, mean just over it
        (60, 0.5),
        (2000, 0.2),  # a level's count among 2,000 tasks
        (2000, 0.013),
        (900, 0.97),  # above 1/2: drawn as failures of the complementary chance
        (100_000, 0.4),
    ],
)
def test_binomial_draws_follow_the_exact_binomial_distribution(n: int, p: float) -> None:
    rng = random.Random(n)
    sampler = Binomial(n, p)
    seen = Counter(sampler.draw(rng) for _ in range(DRAWS))
    assert all(0 <= k <= n for k in seen)
    # Chi-square over bins of at least 5 expected draws (the tails pooled into their edges).
    pmf = scipy_stats.binom(n, p)
    low, high = int(pmf.ppf(1e-4)), int(pmf.ppf(1 - 1e-4))
    observed = [sum(c for k, c in seen.items() if k <= low)]
    expected = [pmf.cdf(low) * DRAWS]
    for k in range(low + 1, high):
        observed.append(seen[k])
        expected.append(pmf.pmf(k) * DRAWS)
    observed.append(sum(c for k, c in seen.items() if k >= high))
    expected.append(pmf.sf(high - 1) * DRAWS)
    merged_observed, merged_expected, o, e = [], [], 0.0, 0.0
    for ob, ex in zip(observed, expected, strict=True):
        o, e = o + ob, e + ex
        if e >= 5:
            merged_observed.append(o)
            merged_expected.append(e)
            o = e = 0.0
    merged_observed[-1] += o
    merged_expected[-1] += e
    scale = DRAWS / sum(merged_expected)  # what the 1e-4 tails left out, spread evenly
    test = scipy_stats.chisquare(merged_observed, [x * scale for x in merged_expected])
    assert test.pvalue > 1e-3, (n, p, test)
    mean = math.fsum(k * c for k, c in seen.items()) / DRAWS
    assert abs(mean - n * p) < 5 * math.sqrt(n * p * (1 - p) / DRAWS)


def test_binomial_edge_chances_are_certain() -> None:
    rng = random.Random(0)
    assert {Binomial(12, 0.0).draw(rng) for _ in range(50)} == {0}
    assert {Binomial(12, 1.0).draw(rng) for _ in range(50)} == {12}
    assert {Binomial(0, 0.4).draw(rng) for _ in range(50)} == {0}
    with pytest.raises(ValueError, match="0 <= p <= 1"):
        Binomial(3, 1.5)


def _mc_tolerance(values: list[float], resamples: int) -> float:
    """Five standard errors of the difference of two bootstrap 2.5% quantiles, each from
    `resamples` resamples (quantile SE = sqrt(q(1-q)/R) / density at the quantile)."""
    spread = statistics.pstdev(values) / math.sqrt(len(values))
    density = math.exp(-(1.96**2) / 2) / math.sqrt(2 * math.pi) / spread
    return 5 * math.sqrt(2) * math.sqrt(0.025 * 0.975 / resamples) / density


@pytest.mark.parametrize(
    "levels",
    [
        [0.0, 1.0],  # one sample per task
        [0.0, 0.2, 0.4, 0.6, 0.8, 1.0],  # five samples per task
        [-1.0, -0.5, 0.0, 0.0, 0.0, 0.5, 1.0],  # a paired comparison's differences
        [0.0, 0.1, 0.35, 0.9, 1.0, 2.5],  # scores on uneven levels
    ],
)
def test_counts_resampler_agrees_with_the_plain_bootstrap_within_monte_carlo_error(
    levels: list[float],
) -> None:
    data = random.Random(len(levels))
    values = [data.choice(levels) for _ in range(300)]
    resamples = 4000
    counts = counts_resampled_means(Counter(values), resamples, random.Random(1))
    plain = plain_resampled_means(values, resamples, random.Random(2))
    # The resampled means have the mean of the values and variance pvariance / n.
    n, mean = len(values), statistics.fmean(values)
    for means in (counts, plain):
        assert abs(statistics.fmean(means) - mean) < 5 * statistics.pstdev(values) / math.sqrt(
            n * resamples
        )
        ratio = statistics.pvariance(means) / (statistics.pvariance(values) / n)
        assert abs(ratio - 1) < 5 * math.sqrt(2 / resamples), ratio
    tolerance = _mc_tolerance(values, resamples)
    counts.sort()
    plain.sort()
    for q in (0.025, 0.5, 0.975):
        assert abs(percentile(counts, q) - percentile(plain, q)) < tolerance, q


def test_counts_resampler_is_reproducible_by_seed_and_ignores_the_values_order() -> None:
    values = [float(k % 3) / 2 for k in range(500)]
    shuffled = values[:]
    random.Random(4).shuffle(shuffled)
    first = resampled_means(values, 2000, random.Random(11))
    assert first == resampled_means(values, 2000, random.Random(11))
    assert first == resampled_means(shuffled, 2000, random.Random(11))
    assert first != resampled_means(values, 2000, random.Random(12))
    interval = bootstrap_mean_ci(values, seed=11)
    assert (interval.low, interval.high) == (percentile(first, 0.025), percentile(first, 0.975))


def test_the_bootstrap_resamples_counts_only_when_the_values_take_few_levels() -> None:
    few = [float(k % 5 == 0) for k in range(2 * VALUES_PER_LEVEL)]
    many = [k / 7 for k in range(2 * VALUES_PER_LEVEL)]
    assert resampled_means(few, 300, random.Random(0)) == sorted(
        counts_resampled_means(Counter(few), 300, random.Random(0))
    )
    assert resampled_means(many, 300, random.Random(0)) == sorted(
        plain_resampled_means(many, 300, random.Random(0))
    )
