"""Shipping a `path` instance to a Ray node that does not have it: once, checked by content hash.

The driver packs the directory into a tar archive and puts it into Ray's object store once per
backend; a node fetches it only if the directory is not already there. A node that shares the
driver's disk (the same boot and the same inode) uses the directory in place. A node that gets
the archive checks its sha256 before unpacking it at the same absolute path (venvs and scripts
hold absolute paths), and remembers the digest so later instances there skip the fetch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from mcp_evalserver import errors

SHIPPED_DIR_ENV = "MCP_EVALSERVER_SHIPPED_DIR"
DEFAULT_SHIPPED_DIR = "/var/lib/mcp-evalserver/shipped"


@dataclass(frozen=True)
class Shipment:
    """Where a directory came from and how to get its bytes (`archive` is an object reference)."""

    path: str
    digest: str  # sha256 of the archive
    size: int
    source: tuple[str, int, int]  # (boot id, st_dev, st_ino) on the driver
    archive: Any  # ray.ObjectRef[bytes]; awaited only on a node that lacks the directory


def identity(path: str) -> tuple[str, int, int] | None:
    """(boot id, device, inode) of a directory: equal only for the same directory on one boot."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        st = os.stat(path)
    except OSError:
        return None
    return (boot, st.st_dev, st.st_ino)


def setup_ran(path: str, key: str) -> bool:
    """Whether an instance of `key` ran its setup on this node's directory `path` already.

    A directory keeps what its setup did, so the next actor there (after a release or a dead
    supervisor) must not run it again.
    """
    record = registry() / "setup" / key
    try:
        return record.read_text() == json.dumps(identity(path))
    except OSError:
        return False


def record_setup(path: str, key: str) -> None:
    """Remembers on this node that `key`'s setup ran on `path` (as it is now: same inode)."""
    folder = registry() / "setup"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / key).write_text(json.dumps(identity(path)))


def registry() -> Path:
    """Where this node records shipped directories and setups that ran."""
    return Path(os.environ.get(SHIPPED_DIR_ENV) or DEFAULT_SHIPPED_DIR)


def pack(path: str) -> tuple[bytes, str]:
    """A tar archive of the directory (entries in sorted order, links kept) and its sha256.

    Raises:
        InvalidInput: the path is not a readable directory.
    """
    if not os.path.isdir(path):
        raise errors.InvalidInput(f"instance path {path!r} is not a directory")
    buffer = io.BytesIO()
    try:
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.add(path, arcname=".")
    except OSError as exc:
        raise errors.InvalidInput(f"cannot pack instance path {path!r}: {exc}") from exc
    data = buffer.getvalue()
    return data, hashlib.sha256(data).hexdigest()


async def materialize(path: str, shipment: Shipment) -> None:
    """Makes `path` on this node hold the shipped directory, fetching the archive if needed.

    Raises:
        InvalidInput: the node has a different directory at `path`.
        InfrastructureError: the archive arrived corrupt.
    """
    if identity(path) == shipment.source:
        return  # the driver's own directory: this node shares its disk
    records = registry()
    if await anyio.to_thread.run_sync(_installed, path, shipment.digest, records):
        return
    data: bytes = await shipment.archive
    if hashlib.sha256(data).hexdigest() != shipment.digest:
        raise errors.InfrastructureError(f"the archive of {path!r} arrived corrupt")
    await anyio.to_thread.run_sync(_install, data, path, shipment.digest, records)


def _installed(path: str, digest: str, registry: Path) -> bool:
    """Whether `path` holds the shipment already (False: absent).

    Raises:
        InvalidInput: a different directory is there.
    """
    if not os.path.isdir(path):
        return False
    record = registry / digest
    if record.is_file() and record.read_text() == path:
        return True
    raise errors.InvalidInput(
        f"this node has a different directory at {path!r} than the driver's (archive sha256 "
        f"{digest[:12]}); remove it from the node or make it the same"
    )


def _install(data: bytes, path: str, digest: str, registry: Path) -> None:
    registry.mkdir(parents=True, exist_ok=True)
    with open(registry / ".lock", "w") as lock_file:
        # One unpacking per node at a time: actors of the same directory may start together.
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        if _installed(path, digest, registry):
            return
        parent = os.path.dirname(path.rstrip("/")) or "/"
        os.makedirs(parent, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix=".shipping-", dir=parent)
        try:
            with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                archive.extractall(scratch, filter="tar")
            os.chmod(scratch, archive_mode(data))
            os.rename(scratch, path)  # complete or absent, never half there
        except BaseException:
            with contextlib.suppress(OSError):
                shutil.rmtree(scratch)
            raise
        (registry / digest).write_text(path)


def archive_mode(data: bytes) -> int:
    """The mode of the archive's top directory (mkdtemp made the scratch 0700)."""
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        top = archive.getmember(".")
    return top.mode & 0o7777
