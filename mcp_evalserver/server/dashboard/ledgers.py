"""Campaign ledgers as the dashboard reads them: followed incrementally, never rewritten.

Each campaign's ledger is read once from the start and then only from where the last read
stopped: the new complete lines go through `replay.apply_record` (the same function replay and
the live runner use), so a page polled every second while a campaign runs costs what was
appended, not the whole ledger. The ledger file is the only source: campaigns run by this
server, by another server or by `mcp-evalserver run` look the same.

What is kept per campaign is its `CampaignState` and the byte ranges of each trajectory's
records (the trajectory page reads them back from the file); not every record, which for a
10,000-trajectory campaign would be tens of megabytes.

A fresh server does not read a whole ledger for its first page when a summary beside it
(`summaries`) was made from exactly the bytes the ledger holds: the campaign page comes from
it, a trajectory page from a replay of that trajectory's records alone. Once the ledger grows
past the summary, it is read from its start as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_evalserver.engine.ledger import LEDGER_FILE, decode_lines
from mcp_evalserver.engine.records import LedgerRecord, TrajectoryBranched, parse_record
from mcp_evalserver.engine.replay import apply_record, concerning, replay
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import LedgerCorrupt, NotFound
from mcp_evalserver.server.dashboard import summaries
from mcp_evalserver.server.dashboard.summaries import LedgerKey, Summary

#: What `CampaignStore.create` accepts, minus names made of dots only (`..`).
_CAMPAIGN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
#: While a campaign runs its summary is stale at its next record: written at most this often.
SUMMARY_INTERVAL_S = 60.0


@dataclass
class CampaignLedger:
    """One campaign's ledger, followed up to `offset` (always the end of a complete line)."""

    id: str
    path: Path
    state: CampaignState | None = None
    offset: int = 0
    inode: int = 0
    #: Byte ranges (start, end) of each trajectory's records, in ledger order.
    spans: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    #: Byte ranges of the records that name no trajectory or create one (`Summary`).
    campaign_spans: list[tuple[int, int]] = field(default_factory=list)
    #: sha256 of the ledger's first `offset` bytes (what a summary is keyed on).
    digest: Any = field(default_factory=hashlib.sha256)
    #: Figures derived from the state: name -> (last_seq, value, computed at, seconds taken).
    derived: dict[str, tuple[int, Any, float, float]] = field(default_factory=dict)
    #: Reentrant: `cached` computes under it, and a computation may ask for the state.
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: The summary read from beside the ledger, and the file (inode, size, mtime) it matched.
    _summary: Summary | None = None
    _summary_file: tuple[int, int, int] | None = None
    #: The first record (the spec) of the file the summary matched, decoded once (~20 ms).
    _first: LedgerRecord | None = None
    _summary_stored_at: float | None = None

    def refresh(self) -> CampaignState:
        """Applies what was appended since the last call; returns the current state.

        Raises:
            NotFound: the ledger is gone.
            LedgerCorrupt: a complete line cannot be parsed or breaks the phase order.
        """
        with self.lock:
            stat = self._stat()
            # Reopening a ledger cuts a torn tail: a shorter or replaced file is read anew.
            if stat.st_ino != self.inode or stat.st_size < self.offset:
                self._reset(stat.st_ino)
            if stat.st_size > self.offset or self.state is None:
                try:
                    self._read_from_offset()
                except BaseException:
                    # Records before the bad one are applied but the offset did not move:
                    # the next refresh must not apply them again (nor hash them again).
                    self._reset(stat.st_ino)
                    raise
            if self.state is None:
                raise LedgerCorrupt(f"the ledger of campaign {self.id} holds no complete record")
            return self.state

    def _stat(self) -> os.stat_result:
        try:
            return self.path.stat()
        except FileNotFoundError as exc:
            raise NotFound(f"the ledger of campaign {self.id} is gone ({self.path})") from exc

    def cached(
        self, name: str, compute: Any, *, stale_factor: float = 0.0, then: Any = None
    ) -> Any:
        """`compute(state)`, reused until the campaign records something new.

        With `stale_factor`, a value that took t seconds to compute is reused for up to
        `stale_factor * t` seconds after the campaign moved on: while a large campaign runs,
        a page polled every second must not recompute a bootstrap on every record.
        `then(state, value)` runs after each new computation (to store a summary).

        It computes under the lock: a record applied meanwhile (another request's refresh)
        would otherwise change the state halfway through and label a torn value with the
        newer `last_seq`.
        """
        with self.lock:
            state = self.refresh()
            hit = self.derived.get(name)
            if hit is not None:
                seq, value, computed_at, cost = hit
                if seq == state.last_seq or time.monotonic() - computed_at < stale_factor * cost:
                    return value
            started = time.monotonic()
            value = compute(state)
            finished = time.monotonic()
            self.derived[name] = (state.last_seq, value, finished, finished - started)
            if then is not None:
                then(state, value)
            return value

    def persisted(self) -> Summary | None:
        """The summary kept beside the ledger, if the ledger holds exactly the bytes it was
        made from and this server has not read the ledger itself (then the state is fresher).

        Raises:
            NotFound: the ledger is gone.
        """
        with self.lock:
            stat = self._stat()
            if self.state is not None:
                return None
            seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if seen != self._summary_file:
                # Read once per version of the file: a stale summary is not hashed again.
                self._summary_file = seen
                self._summary = summaries.load(self.path, self.path.read_bytes())
                self._first = None
            return self._summary

    def store_summary(self, state: CampaignState, **figures: Any) -> None:
        """Writes the summary of `state` (which must be the state at `offset`) beside the
        ledger: when the campaign is not running, or at most every `SUMMARY_INTERVAL_S`."""
        with self.lock:
            now, last = time.monotonic(), self._summary_stored_at
            if state.status == "running" and last is not None and now - last < SUMMARY_INTERVAL_S:
                return
            self._summary_stored_at = now
            summary = Summary(
                key=LedgerKey(self.offset, self.digest.hexdigest()),
                code=summaries.code_fingerprint(),
                last_seq=state.last_seq,
                spans=summaries.encode_spans(self.spans),
                campaign_spans=self.campaign_spans,
                **figures,
            )
            summaries.store(self.path, summary)

    def trajectory_state(self, trajectory_id: str) -> CampaignState:
        """A state in which this trajectory is exactly as the whole ledger leaves it.

        From the summary (while it matches the ledger): a replay of the records that concern
        the trajectory (`replay.concerning`), found by the summary's byte ranges. Otherwise
        the whole state.

        Raises:
            NotFound: the ledger is gone.
            LedgerCorrupt: it is corrupt.
        """
        with self.lock:
            summary = self.persisted()
            if summary is None:
                return self.refresh()
            if not any(row[0] == trajectory_id for row in summary.trajectories):
                raise NotFound(f"campaign {self.id} has no trajectory {trajectory_id!r}")
            spans = sorted({*summary.campaign_spans, *summary.spans_of(trajectory_id)})
            first = self._first
        with self.path.open("rb") as handle:
            if first is None:
                # It holds the spec (every task): ~0.7 MB for 2,000 tasks. Read once per
                # summary (the ledger's bytes up to it do not change while it matches).
                first = self._first = parse_record(json.loads(handle.readline()))
            records = [first]
            for start, end in spans:
                handle.seek(start)
                records.append(parse_record(json.loads(handle.read(end - start))))
        return replay(concerning(records, trajectory_id))

    def records_of(self, trajectory_id: str) -> list[LedgerRecord]:
        """Every record that names the trajectory, read back from the ledger file."""
        with self.lock:
            summary = self.persisted()
            if summary is None:
                self.refresh()
                spans = list(self.spans.get(trajectory_id, ()))
            else:
                spans = summary.spans_of(trajectory_id)
        found = []
        with self.path.open("rb") as handle:
            for start, end in spans:
                handle.seek(start)
                found.append(parse_record(json.loads(handle.read(end - start))))
        return found

    def forget(self) -> None:
        """Drops what was read of the ledger (the state, the figures): its pages come from the
        summary again, or from a new read. What a server keeps for a campaign nobody views."""
        with self.lock:
            self._reset(self.inode)

    def _reset(self, inode: int) -> None:
        self.state = None
        self.offset = 0
        self.inode = inode
        self.spans.clear()
        self.campaign_spans.clear()
        self.digest = hashlib.sha256()
        self.derived.clear()

    def _read_from_offset(self) -> None:
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1
        self.digest.update(memoryview(data)[:end])
        position = 0
        records = decode_lines(data[:end])
        if records is not None:
            for record in records:
                newline = data.index(b"\n", position)
                self._apply(record, self.offset + position, self.offset + newline + 1)
                position = newline + 1
        while position < end:
            newline = data.index(b"\n", position)
            start = self.offset + position
            try:
                record = json.loads(data[position:newline])
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                raise LedgerCorrupt(
                    f"{self.path} at byte {start} is unreadable ({exc}); the dashboard shows "
                    "nothing of this campaign until the ledger is repaired"
                ) from exc
            self._apply(parse_record(record), start, self.offset + newline + 1)
            position = newline + 1
        self.offset += end

    def _apply(self, record: LedgerRecord, start: int, end: int) -> None:
        if self.state is None:
            self.state = replay([record])
        else:
            apply_record(self.state, record)
        trajectory = record.trajectory
        if trajectory is not None:
            self.spans.setdefault(trajectory, []).append((start, end))
        # The first record is not kept: a trajectory's replay reads it on its own.
        if start and (trajectory is None or isinstance(record, TrajectoryBranched)):
            self.campaign_spans.append((start, end))


class LedgerCache:
    """Every campaign of a state directory, each followed by one `CampaignLedger`."""

    def __init__(self, store: CampaignStore) -> None:
        self.store = store
        self._ledgers: dict[str, CampaignLedger] = {}
        self._lock = threading.Lock()

    def ids(self) -> list[str]:
        """Campaign ids, newest first."""
        return list(reversed(self.store.list_ids()))

    def get(self, campaign_id: str) -> CampaignLedger:
        """The campaign's ledger (read when a page asks for what it holds).

        Raises:
            NotFound: no campaign of that id (ids are checked against the directory, so a
                crafted id never names a path outside it).
        """
        with self._lock:
            ledger = self._ledgers.get(campaign_id)
        if ledger is None:
            path = self.store.directory(campaign_id) / LEDGER_FILE
            if not _CAMPAIGN_ID.fullmatch(campaign_id) or not path.is_file():
                known = ", ".join(self.ids()[:10]) or "none yet"
                raise NotFound(
                    f"no campaign {campaign_id!r} in {self.store.state_dir}; known (newest "
                    f"first): {known}"
                )
            with self._lock:
                ledger = self._ledgers.setdefault(campaign_id, CampaignLedger(campaign_id, path))
        return ledger
