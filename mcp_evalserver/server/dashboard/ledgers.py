"""Campaign ledgers as the dashboard reads them: followed incrementally, never rewritten.

Each campaign's ledger is read once from the start and then only from where the last read
stopped: the new complete lines go through `state.apply_record` (the same function replay and
the live runner use), so a page polled every second while a campaign runs costs what was
appended, not the whole ledger. The ledger file is the only source: campaigns run by this
server, by another server or by `mcp-evalserver run` look the same.

What is kept per campaign is its `CampaignState` and the byte ranges of each trajectory's
records (the trajectory page reads them back from the file); not every record, which for a
10,000-trajectory campaign would be tens of megabytes.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_evalserver.campaigns import CampaignStore
from mcp_evalserver.errors import LedgerCorrupt, NotFound
from mcp_evalserver.ledger import LEDGER_FILE
from mcp_evalserver.state import CampaignState, apply_record, replay

#: What `CampaignStore.create` accepts, minus names made of dots only (`..`).
_CAMPAIGN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


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
    #: Figures derived from the state: name -> (last_seq, value, computed at, seconds taken).
    derived: dict[str, tuple[int, Any, float, float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self) -> CampaignState:
        """Applies what was appended since the last call; returns the current state.

        Raises:
            NotFound: the ledger is gone.
            LedgerCorrupt: a complete line cannot be parsed or breaks the phase order.
        """
        with self.lock:
            try:
                stat = self.path.stat()
            except FileNotFoundError as exc:
                raise NotFound(f"the ledger of campaign {self.id} is gone ({self.path})") from exc
            # Reopening a ledger cuts a torn tail: a shorter or replaced file is read anew.
            if stat.st_ino != self.inode or stat.st_size < self.offset:
                self._reset(stat.st_ino)
            if stat.st_size > self.offset or self.state is None:
                self._read_from_offset()
            if self.state is None:
                raise LedgerCorrupt(f"the ledger of campaign {self.id} holds no complete record")
            return self.state

    def cached(self, name: str, compute: Any, *, stale_factor: float = 0.0) -> Any:
        """`compute(state)`, reused until the campaign records something new.

        With `stale_factor`, a value that took t seconds to compute is reused for up to
        `stale_factor * t` seconds after the campaign moved on: while a large campaign runs,
        a page polled every second must not recompute a bootstrap on every record.
        """
        state = self.refresh()
        with self.lock:
            hit = self.derived.get(name)
        if hit is not None:
            seq, value, computed_at, cost = hit
            if seq == state.last_seq or time.monotonic() - computed_at < stale_factor * cost:
                return value
        started = time.monotonic()
        value = compute(state)
        finished = time.monotonic()
        with self.lock:
            self.derived[name] = (state.last_seq, value, finished, finished - started)
        return value

    def records_of(self, trajectory_id: str) -> list[dict[str, Any]]:
        """Every record that names the trajectory, read back from the ledger file."""
        self.refresh()
        with self.lock:
            spans = list(self.spans.get(trajectory_id, ()))
        found = []
        with self.path.open("rb") as handle:
            for start, end in spans:
                handle.seek(start)
                found.append(json.loads(handle.read(end - start)))
        return found

    def _reset(self, inode: int) -> None:
        self.state = None
        self.offset = 0
        self.inode = inode
        self.spans.clear()
        self.derived.clear()

    def _read_from_offset(self) -> None:
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1
        position = 0
        while position < end:
            newline = data.index(b"\n", position)
            start = self.offset + position
            try:
                record = json.loads(data[position:newline])
            except ValueError as exc:
                raise LedgerCorrupt(
                    f"{self.path} at byte {start} is unreadable ({exc}); the dashboard shows "
                    "nothing of this campaign until the ledger is repaired"
                ) from exc
            self._apply(record, start, self.offset + newline + 1)
            position = newline + 1
        self.offset += end

    def _apply(self, record: dict[str, Any], start: int, end: int) -> None:
        if self.state is None:
            self.state = replay([record])
        else:
            apply_record(self.state, record)
        trajectory = record.get("trajectory")
        if isinstance(trajectory, str):
            self.spans.setdefault(trajectory, []).append((start, end))


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
        """The campaign's ledger, refreshed.

        Raises:
            NotFound: no campaign of that id (ids are checked against the directory, so a
                crafted id never names a path outside it).
            LedgerCorrupt: its ledger is corrupt.
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
        ledger.refresh()
        return ledger
