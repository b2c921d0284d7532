"""Statistics over verdicts: pass rates, pass@k, pass^k, confidence intervals, latency.

Pure and deterministic: every function takes plain typed inputs and returns models that
serialise to JSON for reports. Randomised methods (bootstrap, Monte Carlo permutation) draw
from `random.Random(seed)` only, so the same inputs and seed give the same figures.

Infrastructure failures (outcome `infra_error`) are never counted as attempts: they appear in
their own counts and rates, and every pass rate, pass@k and interval is computed over the
attempts that the infrastructure let run. A trajectory's own time limit (outcome `timeout`) is
the task's failure, and so are tests that hang past a scorer's limit; `infra_error` is the
harness's own fault (the sandbox gone, the engine down).
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from statistics import NormalDist
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.stats.resampling import resampled_means

#: Same words as the ledger's outcomes; only `resolved` is a success.
Outcome = Literal["resolved", "failed", "error", "timeout", "infra_error"]
INFRA_FAILURES: frozenset[str] = frozenset({"infra_error"})

_Number = TypeVar("_Number", int, float)


class Verdict(BaseModel):
    """One scored trajectory, as the statistics need it.

    Timestamps are seconds since the epoch; latency is `finished_at - started_at`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    sample: int = Field(ge=0)
    outcome: Outcome
    started_at: float | None = None
    finished_at: float | None = None
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    cost_usd: float | None = Field(default=None, ge=0.0)

    @property
    def latency_s(self) -> float | None:
        """Wall time of the trajectory, when both ends are known."""
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at


class Interval(BaseModel):
    """A confidence interval for a proportion or a mean."""

    model_config = ConfigDict(frozen=True)

    low: float
    high: float
    confidence: float
    method: Literal["bootstrap", "wilson"]


class TaskStats(BaseModel):
    """One task over its samples; `attempts` excludes infrastructure failures."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    attempts: int
    successes: int
    task_failures: int
    infra_errors: int
    pass_rate: float | None
    pass_at_k: dict[int, float]
    pass_hat_k: dict[int, float]


class LatencyStats(BaseModel):
    """Latency percentiles (seconds) and throughput (trajectories per second of wall time)."""

    model_config = ConfigDict(frozen=True)

    count: int
    p50_s: float | None
    p95_s: float | None
    mean_s: float | None
    throughput_per_s: float | None


class CampaignSummary(BaseModel):
    """The figures of one campaign; infrastructure failures are counted apart throughout."""

    model_config = ConfigDict(frozen=True)

    tasks: int
    tasks_scored: int
    trajectories: int
    attempts: int
    outcomes: dict[str, int]
    infra_errors: int
    infra_error_rate: float | None
    task_error_rate: float | None
    mean_pass_rate: float | None
    mean_pass_rate_ci: Interval | None
    wilson_ci: Interval | None
    pass_at_k: dict[int, float]
    pass_hat_k: dict[int, float]
    latency: LatencyStats
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None


class FlakyGrader(BaseModel):
    """A task whose gold solution does not pass every time: its grader cannot be trusted."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    runs: int
    passes: int
    infra_errors: int
    kind: Literal["flaky", "never_passes"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k: the chance that at least one of k samples drawn from n passes.

    Computes 1 - C(n-c, k) / C(n, k) as 1 - prod_{i=n-c+1..n} (1 - k/i), which never forms the
    huge binomials (Chen et al., 2021).

    Raises:
        InvalidInput: unless 0 <= c <= n and 1 <= k <= n.
    """
    _check_counts(n, c, k)
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k: the chance that all of k samples drawn from n pass, C(c, k) / C(n, k).

    Computed as prod_{i=0..k-1} (c-i)/(n-i) for the same reason as `pass_at_k`.

    Raises:
        InvalidInput: unless 0 <= c <= n and 1 <= k <= n.
    """
    _check_counts(n, c, k)
    if c < k:
        return 0.0
    product = 1.0
    for i in range(k):
        product *= (c - i) / (n - i)
    return product


def _check_counts(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise InvalidInput(f"successes must be between 0 and n={n}; got c={c}")
    if not 1 <= k <= n:
        raise InvalidInput(f"k must be between 1 and n={n}; got k={k}")


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for a binomial proportion (good near 0 and 1, unlike Wald).

    Raises:
        InvalidInput: n < 1, successes outside [0, n], or confidence outside (0, 1).
    """
    if n < 1 or not 0 <= successes <= n:
        raise InvalidInput(f"need 0 <= successes <= n and n >= 1; got {successes}/{n}")
    z = _z(confidence)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # At 0 and n the bounds are exactly 0 and 1; rounding would leave them a hair off.
    return Interval(
        low=0.0 if successes == 0 else max(0.0, centre - half),
        high=1.0 if successes == n else min(1.0, centre + half),
        confidence=confidence,
        method="wilson",
    )


def bootstrap_mean_ci(
    values: Sequence[float], *, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Interval:
    """Percentile bootstrap interval for the mean of `values` (one value per task).

    Raises:
        InvalidInput: no values, resamples < 1, or confidence outside (0, 1).
    """
    if not values:
        raise InvalidInput("bootstrap needs at least one value")
    if resamples < 1:
        raise InvalidInput(f"resamples must be >= 1; got {resamples}")
    _z(confidence)
    means = resampled_means(values, resamples, random.Random(seed))
    alpha = 1 - confidence
    return Interval(
        low=percentile(means, alpha / 2),
        high=percentile(means, 1 - alpha / 2),
        confidence=confidence,
        method="bootstrap",
    )


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise InvalidInput(f"confidence must be strictly between 0 and 1; got {confidence}")
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of already sorted values, interpolating linearly between ranks.

    Raises:
        InvalidInput: no values or q outside [0, 1].
    """
    if not sorted_values or not 0 <= q <= 1:
        raise InvalidInput(f"percentile needs values and 0 <= q <= 1; got q={q}")
    position = (len(sorted_values) - 1) * q
    lower = math.floor(position)
    upper = min(lower + 1, len(sorted_values) - 1)
    fraction = position - lower
    return sorted_values[lower] + (sorted_values[upper] - sorted_values[lower]) * fraction


def _group_by_task(verdicts: Iterable[Verdict]) -> dict[str, list[Verdict]]:
    groups: dict[str, list[Verdict]] = defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for verdict in verdicts:
        key = (verdict.task_id, verdict.sample)
        if key in seen:
            raise InvalidInput(
                f"two verdicts for {verdict.task_id}@{verdict.sample}; pass only the final one"
            )
        seen.add(key)
        groups[verdict.task_id].append(verdict)
    return dict(sorted(groups.items()))


def task_stats(verdicts: Iterable[Verdict]) -> list[TaskStats]:
    """Per task: attempts, successes, pass rate, pass@k and pass^k for every k <= attempts.

    Raises:
        InvalidInput: two verdicts share a task and sample.
    """
    result = []
    for task_id, group in _group_by_task(verdicts).items():
        counts: Counter[str] = Counter(v.outcome for v in group)
        infra = sum(counts[o] for o in INFRA_FAILURES)
        n = len(group) - infra
        c = counts["resolved"]
        ks = range(1, n + 1)
        result.append(
            TaskStats(
                task_id=task_id,
                attempts=n,
                successes=c,
                task_failures=n - c,
                infra_errors=infra,
                pass_rate=c / n if n else None,
                pass_at_k={k: pass_at_k(n, c, k) for k in ks},
                pass_hat_k={k: pass_hat_k(n, c, k) for k in ks},
            )
        )
    return result


def latency_stats(verdicts: Sequence[Verdict]) -> LatencyStats:
    """Latency p50/p95/mean over verdicts with both timestamps; throughput over their span.

    Pass the verdicts you want measured: `summarise_campaign` passes the non-infra ones.
    """
    timed = [v for v in verdicts if v.latency_s is not None]
    latencies = sorted(v.latency_s for v in timed if v.latency_s is not None)
    if not latencies:
        return LatencyStats(count=0, p50_s=None, p95_s=None, mean_s=None, throughput_per_s=None)
    span = max(v.finished_at or 0.0 for v in timed) - min(v.started_at or 0.0 for v in timed)
    return LatencyStats(
        count=len(latencies),
        p50_s=percentile(latencies, 0.50),
        p95_s=percentile(latencies, 0.95),
        mean_s=math.fsum(latencies) / len(latencies),
        throughput_per_s=len(latencies) / span if span > 0 else None,
    )


def summarise_campaign(
    verdicts: Sequence[Verdict],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    per_task: Sequence[TaskStats] | None = None,
) -> CampaignSummary:
    """All the campaign's figures; the mean is the macro average of per-task pass rates.

    The bootstrap interval resamples tasks (samples of one task are not independent). The
    Wilson interval is given only when every scored task has exactly one attempt, where it
    estimates the same proportion under a binomial model. `per_task`: `task_stats(verdicts)`
    when the caller has it already (it is a large part of the cost over many tasks).

    Raises:
        InvalidInput: two verdicts share a task and sample, or a bad confidence/resamples.
    """
    if per_task is None:
        per_task = task_stats(verdicts)
    scored = [t for t in per_task if t.attempts > 0]
    rates = [t.pass_rate for t in scored if t.pass_rate is not None]
    outcomes: Counter[str] = Counter(v.outcome for v in verdicts)
    infra = sum(outcomes[o] for o in INFRA_FAILURES)
    attempts = len(verdicts) - infra
    task_errors = outcomes["error"] + outcomes["timeout"]
    max_k = min((t.attempts for t in scored), default=0)
    single = bool(scored) and all(t.attempts == 1 for t in scored)
    countable = [v for v in verdicts if v.outcome not in INFRA_FAILURES]
    return CampaignSummary(
        tasks=len(per_task),
        tasks_scored=len(scored),
        trajectories=len(verdicts),
        attempts=attempts,
        outcomes=dict(sorted(outcomes.items())),
        infra_errors=infra,
        infra_error_rate=infra / len(verdicts) if verdicts else None,
        task_error_rate=task_errors / attempts if attempts else None,
        mean_pass_rate=math.fsum(rates) / len(rates) if rates else None,
        mean_pass_rate_ci=(
            bootstrap_mean_ci(rates, confidence=confidence, resamples=resamples, seed=seed)
            if rates
            else None
        ),
        wilson_ci=(
            wilson_interval(sum(t.successes for t in scored), len(scored), confidence)
            if single
            else None
        ),
        # Only k that every scored task reached, so each figure averages the same task set.
        pass_at_k={k: _mean(t.pass_at_k[k] for t in scored) for k in range(1, max_k + 1)},
        pass_hat_k={k: _mean(t.pass_hat_k[k] for t in scored) for k in range(1, max_k + 1)},
        latency=latency_stats(countable),
        input_tokens=_total(v.input_tokens for v in verdicts),
        output_tokens=_total(v.output_tokens for v in verdicts),
        cost_usd=_total(v.cost_usd for v in verdicts),
    )


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return math.fsum(items) / len(items)


def _total(values: Iterable[_Number | None]) -> _Number | None:
    known = [v for v in values if v is not None]
    return sum(known[1:], known[0]) if known else None


def flaky_graders(gold_verdicts: Iterable[Verdict]) -> list[FlakyGrader]:
    """Tasks whose gold runs did not all resolve (infrastructure failures aside).

    `flaky`: some runs passed and some did not; `never_passes`: no run passed, so the task's
    tests or environment are broken for everyone.

    Raises:
        InvalidInput: two verdicts share a task and sample.
    """
    found = []
    for stats in task_stats(gold_verdicts):
        if stats.attempts == 0 or stats.successes == stats.attempts:
            continue
        found.append(
            FlakyGrader(
                task_id=stats.task_id,
                runs=stats.attempts,
                passes=stats.successes,
                infra_errors=stats.infra_errors,
                kind="flaky" if stats.successes else "never_passes",
            )
        )
    return found
