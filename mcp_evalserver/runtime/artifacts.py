"""A campaign's artifacts: patches, transcripts and logs stored under their content hash.

Written (atomic rename, fsync'd) before any ledger record names them, so a record never points
at a missing artifact; safe beside the ledger's writer, so a scorer can store a test log too.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from mcp_evalserver.errors import LedgerCorrupt, NotFound

ARTIFACTS_DIR = "artifacts"


@dataclass(frozen=True)
class ArtifactRef:
    """Names an artifact by content: `path` is relative to the campaign directory."""

    path: str
    sha256: str
    size: int

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "size": self.size}


async def store_artifact(directory: Path, data: bytes, suffix: str = "") -> ArtifactRef:
    """Stores bytes in a campaign's artifacts under their content hash and names them.

    Safe beside the ledger's writer (content-addressed, atomic rename, fsync'd), so a scorer
    can keep a test log: store it first, then return its ref in the result that names it.

    Raises:
        OSError: the disk refused the write.
    """
    return await anyio.to_thread.run_sync(_store_artifact_sync, directory, data, suffix)


def _store_artifact_sync(directory: Path, data: bytes, suffix: str) -> ArtifactRef:
    digest = hashlib.sha256(data).hexdigest()
    relative = f"{ARTIFACTS_DIR}/{digest}{suffix}"
    final = directory / relative
    if not final.exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        # A temporary name of its own per call: two trajectories may store the same bytes
        # at the same moment, and each rename must find its own file.
        fd, temporary = tempfile.mkstemp(prefix=f".{digest}.", dir=final.parent)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, final)
        fsync_dir(final.parent)
    return ArtifactRef(relative, digest, len(data))


def read_artifact(directory: Path, ref: dict[str, Any]) -> bytes:
    """Reads an artifact named by a record and checks its hash.

    Raises:
        NotFound: the artifact is missing.
        LedgerCorrupt: its content does not match its hash.
    """
    path = directory / str(ref["path"])
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise NotFound(f"artifact {ref['path']} is missing from {directory}") from exc
    if hashlib.sha256(data).hexdigest() != ref["sha256"]:
        raise LedgerCorrupt(f"artifact {path} does not match its recorded sha256")
    return data


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.close(fd)
