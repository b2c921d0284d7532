"""Concurrency limits per model endpoint, fixed or adaptive (AIMD), and their changes.

An adaptive limit finds the provider's real ceiling while a campaign runs, the way TCP finds a
link's: it grows while calls succeed and the limit is what holds them back (by one per
success until the first congestion, "slow start", then by one per window of `limit`
successes), and shrinks to `DECREASE`× on a 429, a 5xx, a timeout or a connection failure.
One congestion event shrinks it once: failures of calls that started before the last decrease
were caused by the old limit and are not counted again. A `Retry-After` hint pauses every new
call to the endpoint until it has passed.

Every change of the limit goes to an observer (the runner records it in the ledger, so a
resumed campaign starts from the last limit and the report shows the history).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

from mcp_evalserver.errors import ExcInfo

#: What a congestion event multiplies the limit by. 0.8 rather than TCP's 0.5: an endpoint's
#: ceiling is a count of open requests, not a queue that must drain, so a gentle cut loses
#: less throughput and stays near the ceiling.
DECREASE = 0.8


@dataclass(frozen=True)
class LimitChange:
    """The limit of `endpoint` went from `previous` to `limit` because of `reason`."""

    endpoint: str
    previous: int
    limit: int
    reason: str
    retry_after_s: float | None = None


LimitObserver = Callable[[LimitChange], Awaitable[None]]


@dataclass(frozen=True)
class AdaptiveStart:
    """Where an adaptive limit starts: its bounds, and (on resume) its last recorded state."""

    minimum: int
    maximum: int
    limit: int
    congested_before: bool = False


class CallSlot:
    """One call's permission to reach the endpoint; the caller says how the call went."""

    def __init__(self, epoch: int, binding: bool) -> None:
        self.epoch = epoch
        #: Whether the limit held this call back (every slot was taken): only then does a
        #: success show that a higher limit would be used.
        self.binding = binding
        self.outcome: str | None = None
        self.reason = ""
        self.retry_after_s: float | None = None

    def succeeded(self) -> None:
        self.outcome = "ok"

    def congested(self, reason: str, retry_after_s: float | None = None) -> None:
        """The endpoint refused or failed the call for load (429, 5xx, timeout, connection)."""
        self.outcome = "congested"
        self.reason = reason
        self.retry_after_s = retry_after_s


class EndpointLimiter:
    """Bounds the calls in flight to one endpoint; `async with limiter:` takes a plain slot,
    `async with limiter.call() as slot:` one whose outcome adapts the limit (when adaptive)."""

    def __init__(
        self,
        endpoint: str,
        limit: int,
        *,
        adaptive: AdaptiveStart | None = None,
        observer: LimitObserver | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.adaptive = adaptive
        start = adaptive.limit if adaptive is not None else limit
        self._limiter = anyio.CapacityLimiter(start)
        self._limit = float(start)
        self._slow_start = adaptive is not None and not adaptive.congested_before
        self._epoch = 0
        self._paused_until = 0.0
        self._observer = observer
        self._lock = anyio.Lock()
        #: Calls by how they went: "ok", or the refusal ("HTTP 429", "HTTP 503", "APITimeoutError").
        self.calls: Counter[str] = Counter()

    @property
    def limit(self) -> int:
        """Calls allowed in flight now."""
        return int(self._limiter.total_tokens)

    def statistics(self) -> anyio.CapacityLimiterStatistics:
        return self._limiter.statistics()

    async def __aenter__(self) -> None:
        await self._limiter.acquire()

    async def __aexit__(self, *exc_info: *ExcInfo) -> None:
        self._limiter.release()

    @asynccontextmanager
    async def call(self) -> AsyncIterator[CallSlot]:
        """A slot for one call, held for the call only (never across a backoff)."""
        wait = self._paused_until - time.monotonic()
        if wait > 0:
            await anyio.sleep(wait)
        slot: CallSlot | None = None
        try:
            async with self._limiter:
                stats = self._limiter.statistics()
                slot = CallSlot(self._epoch, binding=stats.borrowed_tokens >= stats.total_tokens)
                yield slot
        finally:
            # Also when the call raised (the caller marks a refusal, then re-raises); shielded
            # so the limiter and its recorded history never part ways.
            if slot is not None and slot.outcome is not None:
                self.calls["ok" if slot.outcome == "ok" else slot.reason] += 1
            if self.adaptive is not None and slot is not None and slot.outcome is not None:
                with anyio.CancelScope(shield=True):
                    await self._adapt(slot)

    async def _adapt(self, slot: CallSlot) -> None:
        assert self.adaptive is not None
        async with self._lock:
            previous = self.limit
            if slot.outcome == "ok":
                if not slot.binding:
                    return
                self._limit += 1.0 if self._slow_start else 1.0 / max(1, previous)
                reason = "slow start" if self._slow_start else "increase"
            else:
                if slot.retry_after_s:
                    self._paused_until = max(
                        self._paused_until, time.monotonic() + slot.retry_after_s
                    )
                if slot.epoch != self._epoch:
                    return  # the same congestion event already shrank the limit
                self._epoch += 1
                self._slow_start = False
                self._limit = self._limit * DECREASE
                reason = slot.reason
            self._limit = min(float(self.adaptive.maximum), max(self.adaptive.minimum, self._limit))
            limit = max(self.adaptive.minimum, math.floor(self._limit))
            if limit == previous:
                return
            self._limiter.total_tokens = limit
            change = LimitChange(self.endpoint, previous, limit, reason, slot.retry_after_s)
            if self._observer is not None:
                await self._observer(change)
