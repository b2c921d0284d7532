"""Waiting for what a test's subprocess announces on a FIFO, without polling."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.to_thread


async def announced(fifo: Path, expected: str, *, times: int = 1, timeout_s: float = 60) -> None:
    """Returns once a line `expected` has been written to `fifo` `times` times (each writer
    opens it anew; writers that open it at once share one reading, so lines are counted).

    Raises:
        TimeoutError: nobody announced it within `timeout_s`.
    """

    def read() -> None:
        seen = 0
        while True:
            # Opening a FIFO for reading blocks until a writer opens it: no polling.
            with open(fifo) as events:
                seen += sum(line.strip() == expected for line in events)
            if seen >= times:
                return

    with anyio.fail_after(timeout_s):
        await anyio.to_thread.run_sync(read, abandon_on_cancel=True)
