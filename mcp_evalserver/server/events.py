"""Campaign events: what a campaign's ledger records mean to a person following it.

`EvalService` turns each record a running campaign writes into a `CampaignEvent` (a level on
the syslog scale MCP logging uses, a one-line message, a few fields) and hands it to whoever
listens. The MCP app sends them as log notifications; nothing here knows about MCP. A slow
listener loses events (it is told how many), never slows a campaign.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from mcp_evalserver.engine.records import (
    CampaignCancelled,
    EndpointLimitChanged,
    InstanceReprovisioned,
    LedgerRecord,
    RunStarted,
    SamplesPlanned,
    SamplingStopped,
)
from mcp_evalserver.engine.state import UNGRADED_OUTCOMES, CampaignState

logger = logging.getLogger(__name__)

#: The levels used, lowest first: a subset of MCP's (RFC 5424) `LoggingLevel`.
Level = Literal["debug", "info", "notice", "warning", "error"]

#: Events a listener may fall behind by before it loses some.
_BUFFER = 1024


@dataclass(frozen=True)
class CampaignEvent:
    """One thing that happened to a campaign, for a log line."""

    level: Level
    campaign_id: str
    message: str
    #: `campaign`, `kind` (the ledger record's, or `stopped`), and for a trajectory's record
    #: `trajectory`, `task`, `phase` and `outcome`.
    data: dict[str, Any] = field(default_factory=dict)


def record_event(state: CampaignState, record: LedgerRecord) -> CampaignEvent:
    """The event a ledger record makes, read against the state it was applied to."""
    kind = record.kind
    campaign_id = state.id
    data: dict[str, Any] = {"campaign": campaign_id, "kind": kind}
    tid = record.trajectory
    trajectory = state.trajectories.get(tid) if tid is not None else None
    level: Level = "debug"
    message = f"{campaign_id}: {kind.replace('_', ' ')}"
    if trajectory is not None:
        data |= {
            "trajectory": trajectory.id,
            "task": trajectory.task_id,
            "phase": trajectory.phase,
            "outcome": trajectory.outcome,
        }
        message = f"{campaign_id}: {trajectory.id} {kind.replace('_', ' ')}"
        if trajectory.done:
            level = "warning" if trajectory.outcome in UNGRADED_OUTCOMES else "info"
            message = f"{campaign_id}: {trajectory.id} {trajectory.outcome}"
    elif isinstance(record, RunStarted):
        level = "info"
        done = sum(t.done for t in state.trajectories.values())
        message = f"{campaign_id}: running, {done}/{len(state.trajectories)} trajectories done"
    elif isinstance(record, CampaignCancelled):
        level = "notice"
        message = f"{campaign_id}: cancelled ({record.by or 'request'})"
    elif isinstance(record, InstanceReprovisioned | EndpointLimitChanged):
        level = "warning" if isinstance(record, InstanceReprovisioned) else "notice"
        reason = record.reason
        message = f"{message}" + (f": {reason}" if reason else "")
    elif isinstance(record, SamplesPlanned):
        level = "info"
        message = (
            f"{campaign_id}: sampling round {record.round}: {sum(record.added.values())} more"
            f" samples for {len(record.added)} task(s) (half-width {record.half_width:.3f},"
            f" target {record.target_half_width:g})"
        )
    elif isinstance(record, SamplingStopped):
        level = "notice"
        width = "-" if record.half_width is None else f"{record.half_width:.3f}"
        message = (
            f"{campaign_id}: sampling stopped, {record.reason.replace('_', ' ')} (half-width"
            f" {width}, target {record.target_half_width:g}; {record.planned} trajectories)"
        )
    return CampaignEvent(level, campaign_id, message, data | {"message": message})


def stopped_event(
    state: CampaignState | None, campaign_id: str, error: str | None
) -> CampaignEvent:
    """The event of a run that ended: finished, cancelled, or stopped by an error."""
    data: dict[str, Any] = {"campaign": campaign_id, "kind": "stopped"}
    if error is not None:
        message = f"{campaign_id}: stopped by an error: {error}"
        return CampaignEvent("error", campaign_id, message, data | {"message": message})
    message = f"{campaign_id}: stopped"
    if state is not None:
        trajectories = state.trajectories.values()
        resolved = sum(t.outcome == "resolved" for t in trajectories)
        message = (
            f"{campaign_id}: {state.describe_status()}, {resolved} of {len(trajectories)} "
            "trajectories resolved"
        )
    return CampaignEvent("notice", campaign_id, message, data | {"message": message})


class EventHub:
    """Fans events out to every listener, without waiting for any."""

    def __init__(self) -> None:
        self._listeners: dict[MemoryObjectSendStream[CampaignEvent], int] = {}

    @contextmanager
    def listen(self) -> Iterator[MemoryObjectReceiveStream[CampaignEvent]]:
        """Every event published while the block runs, in order (a slow reader loses some)."""
        send, receive = anyio.create_memory_object_stream[CampaignEvent](_BUFFER)
        self._listeners[send] = 0
        try:
            with receive:
                yield receive
        finally:
            dropped = self._listeners.pop(send, 0)
            send.close()
            if dropped:
                logger.info("a campaign event listener fell behind and lost %d events", dropped)

    def publish(self, event: CampaignEvent) -> None:
        for send in list(self._listeners):
            try:
                send.send_nowait(event)
            except anyio.WouldBlock:
                self._listeners[send] += 1
            except anyio.BrokenResourceError:
                self._listeners.pop(send, None)


def drain(events: MemoryObjectReceiveStream[CampaignEvent]) -> list[CampaignEvent]:
    """The events waiting in `events` now, without waiting for more."""
    waiting: list[CampaignEvent] = []
    while True:
        try:
            waiting.append(events.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream):
            return waiting
