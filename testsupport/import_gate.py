"""A real server process held at one import until a test lets it go.

`python -m testsupport.import_gate LOCK MODULE FD ARGS...` runs `mcp-evalserver ARGS...` with
a finder first on `sys.meta_path`: the first import of MODULE, by any thread of the process or
of a worker it forks, writes one byte to the inherited file descriptor FD (a pipe the test
reads: "a process reached the gate"), then waits for a shared lock on the file LOCK. A test
that holds the exclusive lock holds every such process at that import, and lets them all go by
unlocking: the order of what a server does before and after the import is shown without a
sleep and without a hook in the server.
"""

from __future__ import annotations

import fcntl
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType


class ImportGate(importlib.abc.MetaPathFinder):
    """Says so on `reached`, then waits for a shared lock on `lock`, before `module` is first
    found; finds nothing itself."""

    def __init__(self, module: str, lock: str, reached: int) -> None:
        self.module = module
        self.lock = lock
        self.reached = reached

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == self.module:
            os.write(self.reached, b"g")
            with open(self.lock, "rb") as gate:
                fcntl.flock(gate, fcntl.LOCK_SH)
        return None


def main() -> int:
    lock, module, reached, *argv = sys.argv[1:]
    sys.meta_path.insert(0, ImportGate(module, lock, int(reached)))
    from mcp_evalserver.cli.main import main as serve

    return serve(argv)


if __name__ == "__main__":
    sys.exit(main())
