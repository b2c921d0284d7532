"""Paired comparison of two campaigns on the tasks both scored.

The unit is the task, its pass rate over its attempts (infrastructure failures aside, as in
`stats`); differences are campaign B minus campaign A. Deterministic for a given seed.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from fractions import Fraction

from pydantic import BaseModel, ConfigDict

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.stats.summary import Interval, Verdict, bootstrap_mean_ci, task_stats

#: Past this many distinct partial sums the exact permutation test hands over to Monte Carlo.
_EXACT_PERMUTATION_LIMIT = 50_000


class PairedComparison(BaseModel):
    """Campaign B against campaign A on the tasks both scored; differences are B minus A."""

    model_config = ConfigDict(frozen=True)

    shared_tasks: int
    only_in_a: list[str]
    only_in_b: list[str]
    mean_a: float | None
    mean_b: float | None
    mean_difference: float | None
    difference_ci: Interval | None
    wins: int
    losses: int
    ties: int
    permutation_p_value: float | None
    permutation_exact: bool
    sign_test_p_value: float | None


def compare_campaigns(
    a: Sequence[Verdict],
    b: Sequence[Verdict],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> PairedComparison:
    """Paired comparison of B against A on the tasks both campaigns scored.

    The unit is the task: its pass rate over its attempts in each campaign. Reports the mean
    difference, a bootstrap interval over tasks, a two-sided sign-flip permutation test on the
    differences (exact when the number of distinct sums stays small, else Monte Carlo with
    `resamples` draws) and a two-sided exact sign test on wins and losses.

    Raises:
        InvalidInput: two verdicts share a task and sample, or a bad confidence/resamples.
    """
    rates_a = _exact_rates(a)
    rates_b = _exact_rates(b)
    shared = sorted(rates_a.keys() & rates_b.keys())
    diffs = [rates_b[t] - rates_a[t] for t in shared]
    wins = sum(d > 0 for d in diffs)
    losses = sum(d < 0 for d in diffs)
    p_perm, exact = sign_flip_p_value(diffs, resamples, seed) if diffs else (None, False)
    float_diffs = [float(d) for d in diffs]
    return PairedComparison(
        shared_tasks=len(shared),
        only_in_a=sorted(rates_a.keys() - rates_b.keys()),
        only_in_b=sorted(rates_b.keys() - rates_a.keys()),
        mean_a=float(sum(rates_a[t] for t in shared) / len(shared)) if shared else None,
        mean_b=float(sum(rates_b[t] for t in shared) / len(shared)) if shared else None,
        mean_difference=float(sum(diffs) / len(diffs)) if diffs else None,
        difference_ci=(
            bootstrap_mean_ci(float_diffs, confidence=confidence, resamples=resamples, seed=seed)
            if diffs
            else None
        ),
        wins=wins,
        losses=losses,
        ties=len(diffs) - wins - losses,
        permutation_p_value=p_perm,
        permutation_exact=exact,
        sign_test_p_value=sign_test_p_value(wins, losses) if diffs else None,
    )


def _exact_rates(verdicts: Iterable[Verdict]) -> dict[str, Fraction]:
    # Fractions keep the permutation test's sums exact, so ties with the observed sum count.
    return {
        t.task_id: Fraction(t.successes, t.attempts) for t in task_stats(verdicts) if t.attempts
    }


def sign_flip_p_value(diffs: Sequence[Fraction], resamples: int, seed: int) -> tuple[float, bool]:
    """Two-sided p of |sum of differences| under random signs; (p, whether it is exact)."""
    # Scaled to integers by the common denominator: exact ties, and much faster than Fractions.
    scale = math.lcm(*(d.denominator for d in diffs))
    scaled = [int(d * scale) for d in diffs]
    observed = abs(sum(scaled))
    nonzero = [abs(d) for d in scaled if d != 0]
    distribution: dict[int, int] = {0: 1}
    for d in nonzero:
        step: dict[int, int] = defaultdict(int)
        for total, count in distribution.items():
            step[total + d] += count
            step[total - d] += count
        distribution = step
        if len(distribution) > _EXACT_PERMUTATION_LIMIT:
            break
    else:
        extreme = sum(count for total, count in distribution.items() if abs(total) >= observed)
        return extreme / (1 << len(nonzero)), True
    if resamples < 1:
        raise InvalidInput(f"resamples must be >= 1; got {resamples}")
    rng = random.Random(seed)
    extreme = sum(
        abs(sum(d if rng.random() < 0.5 else -d for d in nonzero)) >= observed
        for _ in range(resamples)
    )
    # The +1s count the observed labelling itself, which keeps p valid (never 0).
    return (extreme + 1) / (resamples + 1), False


def sign_test_p_value(wins: int, losses: int) -> float:
    """Exact two-sided sign test: ties are dropped, wins ~ Binomial(wins + losses, 1/2).

    Raises:
        InvalidInput: a negative count.
    """
    if wins < 0 or losses < 0:
        raise InvalidInput(f"counts must be >= 0; got wins={wins}, losses={losses}")
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1))
    return min(1.0, 2 * tail / (1 << n))
