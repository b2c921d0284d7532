"""Waiting for what a test's subprocess announces on a FIFO, without polling."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.to_thread


async def announced(fifo: Path, expected: str, *, timeout_s: float = 60) -> None:
    """Returns once a line `expected` is written to `fifo` (each writer opens it anew).

    Raises:
        TimeoutError: nobody announced it within `timeout_s`.
    """

    def read() -> None:
        while True:
            # Opening a FIFO for reading blocks until a writer opens it: no polling.
            with open(fifo) as events:
                if any(line.strip() == expected for line in events):
                    return

    with anyio.fail_after(timeout_s):
        await anyio.to_thread.run_sync(read, abandon_on_cancel=True)
