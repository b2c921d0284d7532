"""Bootstrap resampling of a mean, exact and cheap when the values take few distinct levels.

Resampling n values with replacement and taking the mean only depends on how many times each
distinct value was drawn: those counts are multinomial(n, share of each value). Per-task pass
rates take few levels (0/1 outcomes; k/samples with a few samples per task), so a resample is
a handful of binomial draws instead of n uniform ones: the same distribution of resampled
means, at O(levels) instead of O(n) per resample. With many distinct values the plain
resampler (`random.choices`) is the cheaper one and is kept.

Everything draws from the `random.Random` it is given, through `random()` and `choices()`
only, so a seed reproduces the figures on every Python version that keeps `random()`'s
stream (the one the standard library promises).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence

#: A multinomial resample costs a few microseconds per level, a plain one a fraction of a
#: microsecond per value: counts are used when the values have at most n / this many levels.
VALUES_PER_LEVEL = 16
#: Below this mean (n * p) a binomial is drawn by inversion (a short walk up its CDF);
#: above it by rejection under a log-concave envelope, whose cost does not grow with n.
INVERSION_MEAN = 12.0


def resampled_means(values: Sequence[float], resamples: int, rng: random.Random) -> list[float]:
    """`resamples` bootstrap means of `values` (each over n draws with replacement), sorted.

    The method is chosen from the values alone (their count and number of distinct levels),
    so the same values and seed always give the same means.
    """
    n = len(values)
    levels = Counter(values)
    if len(levels) * VALUES_PER_LEVEL <= n:
        means = counts_resampled_means(levels, resamples, rng)
    else:
        means = plain_resampled_means(values, resamples, rng)
    means.sort()
    return means


def plain_resampled_means(
    values: Sequence[float], resamples: int, rng: random.Random
) -> list[float]:
    """The textbook bootstrap: n draws with replacement per resample."""
    n = len(values)
    return [math.fsum(rng.choices(values, k=n)) / n for _ in range(resamples)]


def counts_resampled_means(
    levels: Counter[float], resamples: int, rng: random.Random
) -> list[float]:
    """Bootstrap means drawn as multinomial counts of each distinct value (`levels`: value ->
    how many times it occurs).

    The multinomial is drawn as a chain of binomials: the count of one level among the draws
    not yet assigned, with that level's share of the values not yet assigned. Levels go in a
    fixed order (by value) so the stream does not depend on the input's order; the most
    frequent level is last, where its count is what is left and costs no draw.
    """
    n = sum(levels.values())
    ordered = sorted(levels.items())
    last = max(range(len(ordered)), key=lambda i: (ordered[i][1], -i))
    ordered.append(ordered.pop(last))
    drawn = ordered[:-1]
    last_value = ordered[-1][0]
    # The chain meets the same (draws left, level) pairs again and again: their samplers
    # (the envelope's set-up is most of a draw's cost) are built once.
    samplers: dict[tuple[int, int], Binomial] = {}
    means = []
    for _ in range(resamples):
        left = n  # draws not yet assigned to a level
        weight = n  # values of the levels not yet visited
        total = []
        for index, (value, count) in enumerate(drawn):
            sampler = samplers.get((left, index))
            if sampler is None:
                sampler = samplers[left, index] = Binomial(left, count / weight)
            k = sampler.draw(rng)
            total.append(value * k)
            left -= k
            weight -= count
        total.append(last_value * left)
        means.append(math.fsum(total) / n)
    return means


class Binomial:
    """Draws of Binomial(n, p), exact up to floating point, from `rng.random()` only.

    Below a mean of `INVERSION_MEAN` by inversion: walk P(0), P(1), ... until they exceed one
    uniform draw (about n * p steps). Above it by rejection from an envelope the binomial
    provably lies under. The binomial is log-concave: P(k+1)/P(k) = (n-k)/(k+1) * p/(1-p)
    falls as k grows. So around the mode m, inside [m-d, m+d], P(k) <= P(m); to the right,
    P(m+d+j) <= P(m+d) * r**j with r = P(m+d+1)/P(m+d); to the left, P(m-d-j) <=
    P(m-d) * s**j with s = P(m-d-1)/P(m-d). The envelope is that flat top and two geometric
    tails; with d about one standard deviation it holds about 1.3 of probability, so about
    1.3 proposals per draw whatever n is.

    Raises:
        ValueError: n < 0 or p outside [0, 1].
    """

    def __init__(self, n: int, p: float) -> None:
        if n < 0 or not 0.0 <= p <= 1.0:
            raise ValueError(f"a binomial needs n >= 0 and 0 <= p <= 1; got n={n}, p={p}")
        # The samplers assume p <= 1/2; above, count the failures of the complementary chance.
        self.n = n
        self.flipped = p > 0.5
        p = 1.0 - p if self.flipped else p
        self.p = p
        self.constant = n == 0 or p == 0.0
        self.by_inversion = n * p < INVERSION_MEAN
        if self.constant:
            return
        if self.by_inversion:
            self.odds = p / (1.0 - p)
            self.zero_mass = (1.0 - p) ** n
            return
        self.log_p, self.log_q = math.log(p), math.log1p(-p)
        self.log_n_factorial = math.lgamma(n + 1)
        mode = int((n + 1) * p)
        d = max(1, round(math.sqrt(n * p * (1.0 - p))))
        self.low, self.high = max(0, mode - d), min(n, mode + d)
        self.log_top = self.log_mass(mode)
        self.top = math.exp(self.log_top)
        self.flat = self.top * (self.high - self.low + 1)
        # Tails only where there is support beyond the flat part; r, s < 1 there because
        # high > mode > low.
        self.right = self.left = self.log_r = self.log_s = 0.0
        self.log_right_edge = self.log_left_edge = 0.0
        if self.high < n:
            self.log_r = math.log((n - self.high) / (self.high + 1) * p / (1.0 - p))
            self.log_right_edge = self.log_mass(self.high)
            r = math.exp(self.log_r)
            self.right = math.exp(self.log_right_edge) * r / (1.0 - r)
        if self.low > 0:
            self.log_s = math.log(self.low / (n - self.low + 1) * (1.0 - p) / p)
            self.log_left_edge = self.log_mass(self.low)
            s = math.exp(self.log_s)
            self.left = math.exp(self.log_left_edge) * s / (1.0 - s)
        self.total = self.flat + self.right + self.left

    def log_mass(self, k: int) -> float:
        """log P(k) of the (unflipped) binomial."""
        return (
            self.log_n_factorial
            - math.lgamma(k + 1)
            - math.lgamma(self.n - k + 1)
            + k * self.log_p
            + (self.n - k) * self.log_q
        )

    def draw(self, rng: random.Random) -> int:
        if self.constant:
            k = 0
        elif self.by_inversion:
            k = self._by_inversion(rng)
        else:
            k = self._by_rejection(rng)
        return self.n - k if self.flipped else k

    def _by_inversion(self, rng: random.Random) -> int:
        n, odds, mass = self.n, self.odds, self.zero_mass
        u = rng.random()
        k = 0
        while u >= mass and k < n:  # k < n: rounding may leave u a hair above the total
            u -= mass
            mass *= (n - k) / (k + 1) * odds
            k += 1
        return k

    def _by_rejection(self, rng: random.Random) -> int:
        # Attributes read once into locals: this loop is most of a bootstrap's time.
        random_ = rng.random
        log, n, total, flat, top = math.log, self.n, self.total, self.flat, self.top
        low, high, right_end, left = self.low, self.high, self.flat + self.right, self.left
        while True:
            u = random_() * total
            if u < flat:
                k = min(high, low + int(u / top))
                log_envelope = self.log_top
            elif u < right_end:
                # A geometric step j >= 1 with P(j) proportional to r**j.
                j = 1 + int(log(1.0 - random_()) / self.log_r)
                k = high + j
                log_envelope = self.log_right_edge + j * self.log_r
            elif left:
                j = 1 + int(log(1.0 - random_()) / self.log_s)
                k = low - j
                log_envelope = self.log_left_edge + j * self.log_s
            else:  # u rounded up to `total`
                continue
            if 0 <= k <= n and log(1.0 - random_()) + log_envelope <= self.log_mass(k):
                return k
