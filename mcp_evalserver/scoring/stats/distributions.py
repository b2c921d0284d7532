"""Student's t distribution (CDF and quantiles) and exact binomial tails, in pure Python.

The package has no numerical dependency at run time, and intervals over a few clusters need
t quantiles (a normal quantile is too narrow there). The t CDF is the regularised incomplete
beta function, evaluated by its continued fraction (Lentz's method), accurate to ~1e-12.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

from mcp_evalserver.errors import InvalidInput

_EPSILON = 1e-15
_TINY = 1e-300
_MAX_TERMS = 500
#: Simpson intervals over the chi distribution's bulk (noncentral t): ~1e-9 accurate.
_SIMPSON_STEPS = 480
#: Past this many degrees of freedom t is the normal to ~1e-7, and the fraction is slow.
_NORMAL_DF = 1e7


def regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), the regularised incomplete beta function, for 0 <= x <= 1 and a, b > 0."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    # The continued fraction converges fast below the mean a / (a + b); above, use symmetry.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float) -> float:
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    result = d
    for m in range(1, _MAX_TERMS + 1):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            result *= c * d
        if abs(c * d - 1.0) < _EPSILON:
            break
    return result


def t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t with `df` degrees of freedom (df > 0).

    Raises:
        InvalidInput: df <= 0.
    """
    if not df > 0:
        raise InvalidInput(f"degrees of freedom must be > 0; got {df}")
    if df >= _NORMAL_DF:
        return NormalDist().cdf(x)
    tail = 0.5 * regularized_beta(df / (df + x * x), df / 2.0, 0.5)
    return 1.0 - tail if x > 0 else tail


@functools.lru_cache(maxsize=1024)  # intervals and plans ask for the same few again and again
def t_quantile(q: float, df: float) -> float:
    """The q-quantile of Student's t with `df` degrees of freedom (bisection on the CDF).

    Raises:
        InvalidInput: q outside (0, 1) or df <= 0.
    """
    if not 0.0 < q < 1.0:
        raise InvalidInput(f"a quantile needs 0 < q < 1; got {q}")
    if df >= _NORMAL_DF:
        return NormalDist().inv_cdf(q)
    if q < 0.5:
        return -t_quantile(1.0 - q, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < q:
        low, high = high, 2.0 * high
    for _ in range(200):
        middle = (low + high) / 2.0
        if t_cdf(middle, df) < q:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * max(1.0, high):
            break
    return (low + high) / 2.0


def noncentral_t_cdf(x: float, df: float, noncentrality: float) -> float:
    """P(T <= x) for the noncentral t: T = (Z + noncentrality) / sqrt(V / df), V ~ chi2(df).

    Integrates P(Z <= x * W / sqrt(df) - noncentrality) over the chi distribution of
    W = sqrt(V) (smooth for df >= 1) by Simpson's rule on its bulk, +/- 12 of its spread.

    Raises:
        InvalidInput: df < 1.
    """
    if not df >= 1:
        raise InvalidInput(f"degrees of freedom must be >= 1; got {df}")
    normal = NormalDist()
    if df >= _NORMAL_DF:
        return normal.cdf(x - noncentrality)
    root = math.sqrt(df)
    low, high = max(0.0, root - 12.0), root + 12.0
    steps = _SIMPSON_STEPS
    width = (high - low) / steps
    log_norm = (df / 2 - 1) * math.log(2) + math.lgamma(df / 2)
    total = []
    for i in range(steps + 1):
        w = low + i * width
        density = math.exp((df - 1) * math.log(w) - w * w / 2 - log_norm) if w > 0 else 0.0
        if df == 1 and w == 0:
            density = math.exp(-log_norm)
        weight = 1 if i in (0, steps) else (4 if i % 2 else 2)
        total.append(weight * density * normal.cdf(x * w / root - noncentrality))
    return min(1.0, max(0.0, math.fsum(total) * width / 3))


def t_two_sided_p(statistic: float, df: float) -> float:
    """Two-sided p-value of a t statistic."""
    return min(1.0, 2.0 * t_cdf(-abs(statistic), df))


def binomial_two_sided_p(successes: int, trials: int) -> float:
    """Exact two-sided p of `successes` in `trials` under Binomial(trials, 1/2) (the tails are
    symmetric, so twice the smaller one, at most 1).

    Raises:
        InvalidInput: counts out of range.
    """
    if trials < 0 or not 0 <= successes <= trials:
        raise InvalidInput(f"need 0 <= successes <= trials; got {successes}/{trials}")
    if trials == 0:
        return 1.0
    smaller = min(successes, trials - successes)
    tail = sum(math.comb(trials, i) for i in range(smaller + 1))
    return min(1.0, 2 * tail / (1 << trials))
