"""Files replaced whole or not at all: what a crash, or a reader at the wrong moment, may see."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """Writes `data` beside `path` (a temporary file of its own, fsync'd), then renames it
    over `path`: a crash leaves the old file or the new one, never half of one, and two
    writers at once each rename their own file. Parent directories are made; the file is
    0644 like any other the project writes.

    Raises:
        OSError: the directory cannot be written (nothing is left behind).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
