"""Concurrency limits and retry policy shared by everything a campaign runs.

Limits are anyio CapacityLimiters: a global one for trajectories in flight, one per instance
(trajectories sharing an environment), one per model endpoint (agents calling an API; fixed or
adaptive, see `adaptive.py`), one for
instance provisioning (container engines stall under many parallel creations) and one for
evaluations. Limiters are keyed lazily, so a campaign over a thousand instances creates only the
ones it touches.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

import anyio

from mcp_evalserver.runtime.adaptive import (
    AdaptiveStart,
    EndpointLimiter,
    LimitChange,
    LimitObserver,
)
from mcp_evalserver.spec.campaign import AutoLimit, Limits


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, for infrastructure errors only.

    The budget is per cause: `failures` counts one kind of error (a dead supervisor, a refusing
    engine), so a restarting engine does not use up the tries another fault needs, and the
    delays (seconds, doubling, bounded) give the engine time to come back.
    """

    max_attempts: int = 5
    base_delay_s: float = 2.0
    max_delay_s: float = 60.0

    @classmethod
    def of(cls, limits: Limits) -> RetryPolicy:
        return cls(limits.max_attempts, limits.retry_base_delay_s, limits.retry_max_delay_s)

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after the `failures`-th failure (1-based): base·2^(n-1), ±50%."""
        nominal = min(self.max_delay_s, self.base_delay_s * 2.0 ** max(0, failures - 1))
        jitter: float = (rng or random.Random()).random()
        return nominal * (0.5 + jitter)

    def gives_up_after(self, failures: int) -> bool:
        return failures >= self.max_attempts


class Limiters:
    """The capacity limiters of one campaign run."""

    def __init__(
        self,
        limits: Limits,
        *,
        resumed_endpoints: Mapping[str, tuple[int, bool]] | None = None,
        capacity: Limiters | None = None,
    ) -> None:
        """`resumed_endpoints`: the last recorded adaptive limit of each endpoint, and whether
        it ever shrank (then it grows carefully from the start). `capacity`: limiters whose
        trajectory, scoring, provisioning and per-instance capacity these share (the campaigns
        of an evaluation set share the set's); endpoint limits stay each campaign's own."""
        self.limits = limits
        self.resumed_endpoints = dict(resumed_endpoints or {})
        #: Hears every change of an adaptive endpoint limit (the runner records them).
        self.on_endpoint_limit: LimitObserver | None = None
        self.trajectories: anyio.CapacityLimiter
        self.scoring: anyio.CapacityLimiter
        self.provisioning: anyio.CapacityLimiter
        self._instances: dict[str, anyio.CapacityLimiter]
        if capacity is not None:
            self.trajectories, self.scoring = capacity.trajectories, capacity.scoring
            self.provisioning, self._instances = capacity.provisioning, capacity._instances
        else:
            self.trajectories = anyio.CapacityLimiter(limits.concurrency)
            self.scoring = anyio.CapacityLimiter(limits.scoring)
            self.provisioning = anyio.CapacityLimiter(limits.provisioning)
            self._instances = {}
        self._endpoints: dict[str, EndpointLimiter] = {}

    def instance(self, key: str) -> anyio.CapacityLimiter:
        """The limiter of the trajectories that share one instance."""
        limiter = self._instances.get(key)
        if limiter is None:
            limiter = self._instances[key] = anyio.CapacityLimiter(self.limits.per_instance)
        return limiter

    def endpoint(self, key: str) -> EndpointLimiter:
        """The limiter of the calls to one model endpoint (e.g. its base URL)."""
        limiter = self._endpoints.get(key)
        if limiter is None:
            limiter = self._endpoints[key] = self._new_endpoint(key)
        return limiter

    def endpoint_calls(self) -> dict[str, dict[str, int]]:
        """Calls made through each endpoint's limiter so far, by how they went."""
        return {key: dict(e.calls) for key, e in self._endpoints.items() if e.calls}

    def _new_endpoint(self, key: str) -> EndpointLimiter:
        per = self.limits.per_endpoint
        if not isinstance(per, AutoLimit):
            return EndpointLimiter(key, per)
        limit, congested = self.resumed_endpoints.get(key, (per.start or per.min, False))
        start = AdaptiveStart(per.min, per.max, max(per.min, min(per.max, limit)), congested)
        return EndpointLimiter(key, start.limit, adaptive=start, observer=self._limit_changed)

    async def _limit_changed(self, change: LimitChange) -> None:
        if self.on_endpoint_limit is not None:
            await self.on_endpoint_limit(change)
