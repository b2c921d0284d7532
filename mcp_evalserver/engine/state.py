"""A campaign's state: what replaying its ledger (`replay.replay`) gives.

A campaign's spec, spend, budget and adaptive sampling, and per trajectory its phase, attempts,
outcome, score and history of failures; the runner reads them to decide, the reports to count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mcp_evalserver.engine.records import ModelUsageRecorded
from mcp_evalserver.engine.records import Outcome as Outcome  # what a trajectory ended with
from mcp_evalserver.spec.campaign import AdaptiveSamples, CampaignSpec

Phase = Literal["pending", "generating", "generated", "scoring", "done"]
CampaignStatus = Literal["running", "finished", "cancelled"]

#: Outcomes caused by the infrastructure, kept apart from task failures in every figure.
INFRA_OUTCOMES: frozenset[str] = frozenset({"infra_error"})
#: Outcomes that are no attempt at the task (excluded from every pass rate): the
#: infrastructure's failures, and trajectories the budget stopped.
UNGRADED_OUTCOMES: frozenset[str] = INFRA_OUTCOMES | {"budget_exhausted"}


@dataclass
class Spend:
    """Model usage and its cost, summed over `model_usage` records."""

    #: The cost of the calls whose cost is known (US dollars).
    priced_usd: float = 0.0
    #: Records whose cost is unknown (no provider figure, no price for the model).
    unpriced: int = 0
    #: Records summed (none: nothing was recorded, which is no cost of $0).
    records: int = 0
    requests: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    #: Known cost by source: agent, judge, reported.
    by_source: dict[str, float] = field(default_factory=dict)

    @property
    def cost_usd(self) -> float | None:
        """The whole cost, None when any part of it is unknown."""
        return None if self.unpriced else self.priced_usd

    def add(self, record: ModelUsageRecorded) -> None:
        self.records += 1
        self.requests += record.requests
        self.input_tokens += record.input_tokens
        self.cached_input_tokens += record.cached_input_tokens
        self.output_tokens += record.output_tokens
        if record.cost_usd is None:
            self.unpriced += 1
            return
        self.priced_usd += record.cost_usd
        self.by_source[record.source] = self.by_source.get(record.source, 0.0) + record.cost_usd

    def merged(self, other: Spend | None) -> Spend:
        """This and `other`, summed (a new Spend)."""
        total = Spend(by_source=dict(self.by_source))
        for part in (self, other):
            if part is None:
                continue
            for name in _SPEND_COUNTS:
                setattr(total, name, getattr(total, name) + getattr(part, name))
        if other is not None:
            for source, cost in other.by_source.items():
                total.by_source[source] = total.by_source.get(source, 0.0) + cost
        return total

    def as_json(self) -> dict[str, Any]:
        return {
            "cost_usd": self.cost_usd,
            "priced_usd": self.priced_usd,
            "unpriced_records": self.unpriced,
            "records": self.records,
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "output_tokens": self.output_tokens,
            "by_source": dict(sorted(self.by_source.items())),
        }


_SPEND_COUNTS = (
    "priced_usd",
    "unpriced",
    "records",
    "requests",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
)


@dataclass
class TrajectoryState:
    """Where one trajectory stands."""

    id: str
    task_id: str
    sample: int
    phase: Phase = "pending"
    attempts: int = 0
    generation_failures: int = 0
    scoring_failures: int = 0
    outcome: Outcome | None = None
    submission: dict[str, Any] | None = None
    score: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    generation_s: float | None = None
    scoring_s: float | None = None
    generated_seq: int | None = None
    scored_seq: int | None = None
    #: When the record that finished it was written (epoch seconds).
    finished_ts: float | None = None
    #: (step kind, node) for each step that ran on a backend of many nodes (Ray), in order.
    nodes: list[tuple[str, str]] = field(default_factory=list)
    #: Infrastructure failures of the current phase by cause (the error's type): each cause
    #: has its own budget of retries. Cleared when the phase completes or a retry is asked.
    failure_causes: dict[str, int] = field(default_factory=dict)
    #: Every infrastructure failure it went through, oldest first: phase, type, message.
    infra_history: list[dict[str, Any]] = field(default_factory=list)
    #: For a branch: the trajectory it was forked from, at which checkpoint, and when.
    parent: str | None = None
    checkpoint: str | None = None
    branched_ts: float | None = None
    #: For a branch: the artifact of its checkpoint's files (what a restart begins from), or
    #: why none was kept.
    start: dict[str, Any] | None = None
    start_missing: str | None = None
    #: For a branch restarted from a clean copy of the task, not its checkpoint: why.
    started_clean: str | None = None
    #: Its model usage and cost (`model_usage` records), None while it has none.
    spend: Spend | None = None

    @property
    def done(self) -> bool:
        return self.phase == "done"


@dataclass
class EndpointLimit:
    """An adaptive endpoint limit as its records left it, with every change."""

    limit: int
    decreases: int = 0
    #: {"ts", "limit", "previous", "reason", "retry_after_s"} per change, oldest first.
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class SamplingState:
    """Adaptive sampling as its records left it: samples planned per task, every decision."""

    config: AdaptiveSamples
    #: Task id -> samples planned so far (its trajectories are `<task>@0` .. `@<n-1>`).
    planned: dict[str, int]
    #: Each `samples_planned` record's decision (round, added, half_width, reasons...).
    rounds: list[dict[str, Any]] = field(default_factory=list)
    #: The `sampling_stopped` record's figures once sampling is over.
    stopped: dict[str, Any] | None = None

    def may_grow(self, task_id: str) -> bool:
        """Whether the task may still get more samples."""
        return self.stopped is None and self.planned.get(task_id, 0) < self.config.max

    @property
    def total(self) -> int:
        """Trajectories planned so far."""
        return sum(self.planned.values())

    @property
    def most(self) -> int:
        """Trajectories the campaign can reach: every task at `max`."""
        return len(self.planned) * self.config.max


@dataclass
class CampaignState:
    """Everything known about a campaign, rebuilt from its ledger."""

    id: str
    spec: CampaignSpec
    created_ts: float
    trajectories: dict[str, TrajectoryState]
    cancelled: bool = False
    #: Who cancelled it: `request` (a person), `shutdown` (its server stopped), None if not.
    cancelled_by: str | None = None
    runs: int = 0
    repaired_bytes: int = 0
    rescores: int = 0
    #: Trajectories sent back by `retry_requested` records (infrastructure failures retried).
    retried: int = 0
    #: Instances found dead and provisioned again while this campaign ran (health).
    reprovisioned: list[dict[str, Any]] = field(default_factory=list)
    #: Adaptive per-endpoint limits by endpoint (`limits.per_endpoint: "auto"`).
    endpoint_limits: dict[str, EndpointLimit] = field(default_factory=dict)
    #: Calls per model endpoint by how they went ("ok", "HTTP 429", ...), summed over runs.
    endpoint_calls: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Calibrations of the judge against human labels, oldest first.
    calibrations: list[dict[str, Any]] = field(default_factory=list)
    #: Seconds the runs were running (each run: its first record to its last).
    run_s: float = 0.0
    #: The model usage and cost of every trajectory together: the ledger's running total.
    spend: Spend = field(default_factory=Spend)
    #: The budget in force (`limits.budget_usd`, or what a `budget_set` record made it).
    budget_usd: float | None = None
    #: Adaptive sampling (`samples: {"min", "max", "target_half_width"}`), else None.
    sampling: SamplingState | None = None
    last_seq: int = -1
    last_ts: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> CampaignStatus:
        # An adaptive campaign between rounds has nothing running and is not finished: the
        # next decision (more samples or the stop) is still to be recorded. Unless its budget
        # stopped trajectories: it is finished as a fixed campaign is, the plan waiting for a
        # resume with a larger budget (which runs them, then decides).
        sampling = self.sampling
        sampling_over = sampling is None or sampling.stopped is not None or self.budget_stopped
        if sampling_over and all(t.done for t in self.trajectories.values()):
            return "finished"
        return "cancelled" if self.cancelled else "running"

    def root_of(self, trajectory_id: str) -> str:
        """The trajectory a branch descends from (itself when it is no branch)."""
        while (parent := self.trajectories[trajectory_id].parent) is not None:
            trajectory_id = parent
        return trajectory_id

    def branches(self, trajectory_id: str) -> list[str]:
        """Every trajectory forked from this one, directly or not, in the order they were."""
        found = []
        for tid in self.trajectories:
            ancestor = self.trajectories[tid].parent
            while ancestor is not None and ancestor != trajectory_id:
                ancestor = self.trajectories[ancestor].parent
            if ancestor is not None:
                found.append(tid)
        return found

    def count(self, *outcomes: Outcome) -> int:
        return sum(1 for t in self.trajectories.values() if t.outcome in outcomes)

    @property
    def done_count(self) -> int:
        return sum(1 for t in self.trajectories.values() if t.done)

    @property
    def infra_failed(self) -> list[str]:
        """Trajectories whose last outcome is an infrastructure failure: a resume runs them."""
        return [t.id for t in self.trajectories.values() if t.outcome in INFRA_OUTCOMES]

    @property
    def budget_exhausted(self) -> list[str]:
        """Trajectories the budget stopped: a resume with a larger budget runs them."""
        return [t.id for t in self.trajectories.values() if t.outcome == "budget_exhausted"]

    @property
    def budget_stopped(self) -> bool:
        """The budget stopped trajectories (none was let run since with a larger one)."""
        return any(t.outcome == "budget_exhausted" for t in self.trajectories.values())

    @property
    def over_budget(self) -> bool:
        """The ledger's total has reached the budget: no trajectory may start."""
        return self.budget_usd is not None and self.spend.priced_usd >= self.budget_usd

    @property
    def interrupted(self) -> bool:
        """Unfinished, and stopped by its process dying or its server stopping, not by a person.

        (Whether a process is running it right now is not in the ledger: ask its lock.)
        """
        return self.status != "finished" and self.cancelled_by in (None, "shutdown")

    def describe_status(self) -> str:
        """The status as a person reads it: a finish with infrastructure failures says so."""
        failed = len(self.infra_failed)
        if self.status == "finished" and (stopped := len(self.budget_exhausted)):
            return (
                f"stopped at its budget (${self.spend.priced_usd:.2f} of "
                f"${self.budget_usd or 0:.2f}): {stopped} trajector{'y' if stopped == 1 else 'ies'}"
                " not run — resume with a larger budget_usd"
            )
        if self.status == "finished" and failed:
            plural = "s" if failed != 1 else ""
            return f"finished with {failed} infrastructure failure{plural} — resume to retry them"
        return self.status
