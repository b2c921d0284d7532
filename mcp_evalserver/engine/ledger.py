"""The append-only JSONL ledger of one campaign: its only source of truth.

Layout of a campaign directory::

    ledger.jsonl         one JSON record per line: v, seq, ts, kind, campaign, trajectory, payload
    ledger.lock          flock'd by the one process allowed to write
    artifacts/<sha256>   patches, transcripts, logs; written (atomic rename) before any record
                         names them, so a record never points at a missing artifact

An `append` returns only once its line is flushed and fsync'd. Appends that arrive while a flush
is in progress are written together by the next flush (group commit), which is what makes
thousands of durable records per second possible on one disk.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import anyio

from mcp_evalserver.engine.records import (
    CampaignCreated,
    LedgerRecord,
    LedgerRecordBase,
    LedgerRepaired,
    collector_paused,
    encode,
    parse_json_lines,
    parse_record,
    stamp,
)
from mcp_evalserver.errors import Conflict, LedgerCorrupt, NotFound
from mcp_evalserver.runtime.artifacts import ARTIFACTS_DIR, ArtifactRef, fsync_dir, store_artifact

LEDGER_FILE = "ledger.jsonl"
LOCK_FILE = "ledger.lock"
_Record = TypeVar("_Record", bound=LedgerRecordBase)


@dataclass
class LedgerContents:
    """What a ledger file holds, as read: its records and what was wrong with its tail."""

    records: list[LedgerRecord]
    good_bytes: int
    torn_tail_bytes: int = 0

    @property
    def torn_tail(self) -> bool:
        return self.torn_tail_bytes > 0


def read_ledger(path: Path) -> LedgerContents:
    """Reads every record of a ledger file.

    A final line that is incomplete or unparsable is what a crash in the middle of a write
    leaves: it is dropped and reported (`torn_tail_bytes`). Anything unreadable before the end
    is corruption.

    Raises:
        NotFound: the file does not exist.
        LedgerCorrupt: a line before the last cannot be parsed (the message names it), or a
            record lacks or garbles a field of its kind (the message names its seq).
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise NotFound(f"no ledger at {path}") from exc
    good_end = data.rfind(b"\n") + 1
    records = decode_lines(data[:good_end])
    if records is not None:
        return LedgerContents(records, good_end, len(data) - good_end)
    return _read_line_by_line(path, data)


def decode_lines(lines: bytes) -> list[LedgerRecord] | None:
    """The record of each of `lines` (complete lines: the last ends with a line break), from
    one parse and validation of them joined into a JSON array, several times faster than a
    parse per line.

    None when there are none, when that parse is refused, or when a line is not one record
    (`{...},{...}` on one line parses as two here, but is corrupt): the caller then reads line
    by line, which names the bad line or record.
    """
    if not lines:
        return None
    with collector_paused():
        records = parse_json_lines(b"[" + lines[:-1].replace(b"\n", b",") + b"]")
    if records is None or len(records) != lines.count(b"\n"):
        return None
    return records


def _read_line_by_line(path: Path, data: bytes) -> LedgerContents:
    records: list[LedgerRecord] = []
    offset = 0
    line_number = 0
    end = len(data)
    while offset < end:
        newline = data.find(b"\n", offset)
        line_number += 1
        if newline == -1:
            # No newline: the last write never completed.
            return LedgerContents(records, offset, end - offset)
        line = data[offset:newline]
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            if newline + 1 >= end:
                return LedgerContents(records, offset, end - offset)
            raise LedgerCorrupt(
                f"{path} line {line_number} is unreadable ({exc}); the lines after it are "
                "intact. Move the file aside and inspect it: a ledger is never rewritten."
            ) from exc
        records.append(parse_record(record))
        offset = newline + 1
    return LedgerContents(records, offset, 0)


@dataclass
class _Batch:
    lines: list[bytes] = field(default_factory=list)
    # Made by the first durable append that waits on the batch (an anyio Event needs a loop).
    written: anyio.Event | None = None
    error: Exception | None = None


class LedgerWriter:
    """The single writer of one campaign's ledger (exclusive across processes by flock).

    Use `async with await LedgerWriter.open(dir, campaign_id) as ledger:`.
    """

    def __init__(
        self, directory: Path, campaign_id: str, lock_fd: int, file_fd: int, next_seq: int
    ) -> None:
        self.directory = directory
        self.campaign_id = campaign_id
        self._lock_fd = lock_fd
        self._fd = file_fd
        self._next_seq = next_seq
        self._batch = _Batch()
        self._flushing = False
        self._broken: Exception | None = None
        self._closed = False
        #: The records found when the ledger was opened (the runner replays them once).
        self.recovered: list[LedgerRecord] = []

    @classmethod
    async def open(cls, directory: Path, campaign_id: str) -> LedgerWriter:
        """Opens (creating if needed) the ledger for appending.

        A torn final line is cut off (it was never acknowledged) and a `ledger_repaired`
        record says how many bytes went.

        Raises:
            Conflict: another process is writing this campaign.
            LedgerCorrupt: the ledger is corrupt before its end.
        """
        return await anyio.to_thread.run_sync(cls._open_sync, directory, campaign_id)

    @classmethod
    def _open_sync(cls, directory: Path, campaign_id: str) -> LedgerWriter:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / ARTIFACTS_DIR).mkdir(exist_ok=True)
        lock_fd = _lock_campaign(directory, campaign_id)
        path = directory / LEDGER_FILE
        repaired = 0
        try:
            contents = read_ledger(path) if path.exists() else LedgerContents([], 0)
            if contents.torn_tail:
                with open(path, "r+b") as handle:
                    handle.truncate(contents.good_bytes)
                    os.fsync(handle.fileno())
                repaired = contents.torn_tail_bytes
            next_seq = contents.records[-1].seq + 1 if contents.records else 0
            file_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            fsync_dir(directory)
        except BaseException:
            os.close(lock_fd)
            raise
        writer = cls(directory, campaign_id, lock_fd, file_fd, next_seq)
        writer.recovered = contents.records
        # A torn first line leaves no record to follow: a `ledger_repaired` record there would
        # become the first record and turn a never-created ledger into a corrupt one.
        if repaired and contents.records:
            record = writer._stamp(LedgerRepaired(dropped_bytes=repaired))
            writer._write_sync([encode(record)])
            contents.records.append(record)
        return writer

    async def __aenter__(self) -> LedgerWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Writes the records still queued (non-durable ones) and releases the lock."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            if self._batch.lines and self._broken is None:
                await self._wait_written(self._batch)
            os.close(self._fd)
            os.close(self._lock_fd)

    def _stamp(self, record: _Record) -> _Record:
        stamped = stamp(record, self._next_seq, _now(), self.campaign_id)
        self._next_seq += 1
        return stamped

    def _write_sync(self, lines: list[bytes]) -> None:
        _write_all(self._fd, b"".join(lines))
        os.fsync(self._fd)

    async def append(self, record: _Record, *, durable: bool = True) -> _Record:
        """Appends one record and returns it, stamped with its envelope (`seq`, `ts`,
        `campaign`), once it is durable (fsync'd).

        With `durable=False` the record is queued and returns at once: it reaches the disk,
        in order, with the next durable append (or at close). Use it for records that
        acknowledge nothing, such as the start of an attempt; losing one in a crash is the same
        as crashing just before it.

        Raises:
            Conflict: the writer is closed.
            OSError: the disk refused the write (nothing after it is acknowledged).
        """
        if self._closed:
            raise Conflict(f"the ledger of campaign {self.campaign_id} is closed")
        if self._broken is not None:
            raise self._broken
        batch = self._batch
        stamped = self._stamp(record)
        batch.lines.append(encode(stamped))
        if durable:
            await self._wait_written(batch)
        return stamped

    async def _wait_written(self, batch: _Batch) -> None:
        """Returns once `batch` is on disk (fsync'd); raises the write's error if it failed.

        Group commit: one task at a time is the flusher and writes batch after batch (each
        holding every line queued while the previous one was written) until none is left; the
        others wait on their batch's event, all woken at once by one `set()`.
        """
        if batch.written is None:
            batch.written = anyio.Event()
        if self._flushing:
            await batch.written.wait()
        else:
            self._flushing = True
            try:
                while self._batch.lines:
                    await self._write_batch()
            finally:
                self._flushing = False
        if batch.error is not None:
            raise batch.error

    async def _write_batch(self) -> None:
        batch, self._batch = self._batch, _Batch()
        try:
            # Shielded: a cancelled campaign never leaves half a line behind, and the batch's
            # other waiters must not see a cancellation as a failed write.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._write_sync, batch.lines)
        except Exception as exc:
            # What reached the file is unknown: refuse every later append rather than write
            # after a possibly partial line (the next open cuts a torn tail).
            batch.error = self._broken = exc
            self._batch.error = exc
            if self._batch.written is not None:
                self._batch.written.set()
            raise
        finally:
            if batch.written is not None:
                batch.written.set()

    async def put_artifact(self, data: bytes, suffix: str = "") -> ArtifactRef:
        """Stores bytes under their content hash (atomic rename, fsync'd) and names them."""
        return await store_artifact(self.directory, data, suffix)


async def create_ledger(
    directory: Path, campaign_id: str, record: CampaignCreated
) -> CampaignCreated | None:
    """Starts a ledger whose first record is `record`; atomic, so a crash leaves all or nothing.

    The record is written to a temporary file, fsync'd and renamed to `ledger.jsonl` under the
    campaign's lock: a ledger either holds its first record or does not exist. A ledger that
    holds no complete record (an empty file or a torn first line: what a crash during creation
    left before creation was atomic) counts as never created and is replaced.

    Returns the record (stamped), or None when the ledger already holds records (nothing is
    written).

    Raises:
        Conflict: another process holds the campaign's lock.
        LedgerCorrupt: the existing ledger is corrupt before its end.
        OSError: the disk refused the write.
    """
    return await anyio.to_thread.run_sync(_create_sync, directory, campaign_id, record)


def _create_sync(
    directory: Path, campaign_id: str, record: CampaignCreated
) -> CampaignCreated | None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / ARTIFACTS_DIR).mkdir(exist_ok=True)
    lock_fd = _lock_campaign(directory, campaign_id)
    try:
        path = directory / LEDGER_FILE
        if path.exists() and read_ledger(path).records:
            return None
        # Leftovers of creations killed before their rename.
        for stale in directory.glob(f".{LEDGER_FILE}.*"):
            stale.unlink(missing_ok=True)
        stamped = stamp(record, 0, _now(), campaign_id)
        fd, temporary = tempfile.mkstemp(prefix=f".{LEDGER_FILE}.", dir=directory)
        try:
            _write_all(fd, encode(stamped))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
        fsync_dir(directory)
        return stamped
    finally:
        os.close(lock_fd)


def _now() -> float:
    return round(time.time(), 6)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def live_writer_pid(directory: Path) -> int | None:
    """The pid of another live process that last took the campaign's lock, if any.

    A hint, not a lock: the pid is left in the lock file when its process dies (then None, or
    in rare cases a reused pid).
    """
    try:
        pid = int((directory / LOCK_FILE).read_text().strip() or 0)
    except (OSError, ValueError):
        return None
    if pid <= 0 or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    return pid


def _lock_campaign(directory: Path, campaign_id: str) -> int:
    """Takes the campaign's writer lock (flock, not blocking) and records our pid in it.

    Raises:
        Conflict: another process holds it.
    """
    lock_fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(lock_fd, 64, 0).decode(errors="replace").strip() or "unknown"
        os.close(lock_fd)
        raise Conflict(
            f"campaign {campaign_id} is being run by another process (pid {holder}); "
            "wait for it or stop it, then resume"
        ) from None
    os.ftruncate(lock_fd, 0)
    os.pwrite(lock_fd, str(os.getpid()).encode(), 0)
    return lock_fd
