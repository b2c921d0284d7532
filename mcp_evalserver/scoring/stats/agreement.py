"""How well a grader agrees with people: rank correlations with bootstrap intervals.

Spearman's rho is Pearson's r over average ranks (ties share the mean of their ranks); Kendall's
tau is tau-b (ties in either list shrink the denominator), the variants scipy computes by
default. A correlation of a list without spread is undefined (None), never 0. Intervals are
percentile bootstraps over the pairs, from `random.Random(seed)` only, so the same inputs give
the same figures; resamples that come out without spread are left out (and counted).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.stats.summary import percentile

Correlation = Callable[[Sequence[float], Sequence[float]], float | None]


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks; tied values share the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        shared = (start + end) / 2 + 1
        for position in range(start, end + 1):
            ranks[order[position]] = shared
        start = end + 1
    return ranks


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r; None when either list has no spread."""
    _same_length(x, y)
    n = len(x)
    mean_x, mean_y = math.fsum(x) / n, math.fsum(y) / n
    dx = [v - mean_x for v in x]
    dy = [v - mean_y for v in y]
    sxx = math.fsum(d * d for d in dx)
    syy = math.fsum(d * d for d in dy)
    if sxx == 0 or syy == 0:
        return None
    r = math.fsum(a * b for a, b in zip(dx, dy, strict=True)) / math.sqrt(sxx * syy)
    return max(-1.0, min(1.0, r))


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho (ties by average ranks); None when either list has no spread."""
    return pearson(average_ranks(x), average_ranks(y))


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b; None when either list has no spread. O(n²): fine for label sets."""
    _same_length(x, y)
    concordant = discordant = tied_x = tied_y = 0
    n = len(x)
    for i in range(n):
        for j in range(i + 1, n):
            sx = (x[i] > x[j]) - (x[i] < x[j])
            sy = (y[i] > y[j]) - (y[i] < y[j])
            if sx == 0:
                tied_x += 1
            if sy == 0:
                tied_y += 1
            if sx and sy:
                if sx == sy:
                    concordant += 1
                else:
                    discordant += 1
    pairs = n * (n - 1) // 2
    denominator = math.sqrt((pairs - tied_x) * (pairs - tied_y))
    if denominator == 0:
        return None
    return (concordant - discordant) / denominator


@dataclass(frozen=True)
class Estimate:
    """A correlation, its percentile bootstrap interval, and how many resamples counted."""

    value: float | None
    low: float | None
    high: float | None
    confidence: float
    resamples_used: int

    def as_json(self) -> dict[str, float | int | None]:
        return {
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "resamples_used": self.resamples_used,
        }


def bootstrap_correlation(
    statistic: Correlation,
    x: Sequence[float],
    y: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Estimate:
    """The statistic over all pairs, and its interval from resampling the pairs.

    Raises:
        InvalidInput: lists of different lengths, fewer than 3 pairs, or a bad confidence.
    """
    _same_length(x, y)
    if len(x) < 3:
        raise InvalidInput(f"a correlation needs at least 3 labelled pairs; got {len(x)}")
    if not 0 < confidence < 1:
        raise InvalidInput(f"confidence must be strictly between 0 and 1; got {confidence}")
    rng = random.Random(seed)
    n = len(x)
    found: list[float] = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        value = statistic([x[i] for i in picks], [y[i] for i in picks])
        if value is not None:
            found.append(value)
    found.sort()
    alpha = 1 - confidence
    return Estimate(
        value=statistic(x, y),
        low=percentile(found, alpha / 2) if found else None,
        high=percentile(found, 1 - alpha / 2) if found else None,
        confidence=confidence,
        resamples_used=len(found),
    )


def _same_length(x: Sequence[float], y: Sequence[float]) -> None:
    if len(x) != len(y) or not x:
        raise InvalidInput(f"need two non-empty lists of the same length; got {len(x)}, {len(y)}")
