"""Runs the real CLI and stops it at one point of a campaign's creation, to be SIGKILLed there.

Usage: python creation_crash.py POINT FIFO CLI-ARGS...

At POINT the process writes `stopped POINT` to the FIFO and waits to be killed:

    before-file       about to create the ledger's first file: nothing of it on disk yet
    empty-file        that file exists, nothing written to it
    torn-first-line   half of the first record written
    whole-first-line  the whole first record written, not yet fsync'd (nor renamed)

"The ledger's file" is any file whose name holds `ledger.jsonl` (the ledger itself, or a
temporary one that becomes it), so the points hold however creation writes it. The hooks watch
what the process really does (`open` audit events, `os.write`); nothing in the product knows.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

POINTS = ("before-file", "empty-file", "torn-first-line", "whole-first-line")


def _is_ledger(path: str) -> bool:
    return "ledger.jsonl" in os.path.basename(path)


def main() -> int:
    point, fifo, *cli_args = sys.argv[1:]
    if point not in POINTS:
        raise SystemExit(f"unknown point {point!r}; choose one of {', '.join(POINTS)}")

    def stop() -> None:
        with open(fifo, "w") as events:
            events.write(f"stopped {point}\n")
        threading.Event().wait()  # until the SIGKILL

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if event != "open" or point != "before-file":
            return
        path = args[0]
        if isinstance(path, str | bytes | os.PathLike):
            name = os.fsdecode(path)
            if _is_ledger(name) and not os.path.exists(name):
                stop()

    real_write = os.write
    first_write_seen = False

    def write(fd: int, data: Any) -> int:
        nonlocal first_write_seen
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if first_write_seen or not _is_ledger(target) or point == "before-file":
            return real_write(fd, data)
        first_write_seen = True
        whole = bytes(data)
        if point == "torn-first-line":
            real_write(fd, whole[: len(whole) // 2])
        elif point == "whole-first-line":
            view = memoryview(whole)
            while view:
                view = view[real_write(fd, view) :]
        stop()
        raise AssertionError("unreachable: stop() waits for the kill")

    sys.addaudithook(audit)
    os.write = write
    from mcp_evalserver.cli.main import main as cli_main

    return cli_main(cli_args)


if __name__ == "__main__":
    sys.exit(main())
