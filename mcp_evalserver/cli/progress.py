"""A live one-line progress display for a campaign run (stderr)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

import anyio

from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.state import CampaignState

_BAR_WIDTH = 24


def progress_line(state: CampaignState, *, done_at_start: int, elapsed_s: float) -> str:
    """`[####....] 12/40  pass 9 (75.0%)  err 1  3.2/s  ETA 0:00:09` for a state."""
    total = len(state.trajectories)
    done = state.done_count
    resolved = state.count("resolved")
    graded = state.count("resolved", "failed")
    errors = state.count("error", "timeout", "infra_error")
    filled = int(_BAR_WIDTH * done / total) if total else _BAR_WIDTH
    bar = "#" * filled + "." * (_BAR_WIDTH - filled)
    rate = (done - done_at_start) / elapsed_s if elapsed_s > 0 else 0.0
    percent = f"{100 * resolved / graded:.1f}%" if graded else "-"
    remaining = total - done
    eta = _clock(remaining / rate) if rate > 0 else ("0:00:00" if remaining == 0 else "?")
    if (sampling := state.sampling) is not None and sampling.stopped is None:
        # Adaptive sampling: the total so far, and the most it can grow to.
        eta = f"{eta}+"
        total_text = f"{total} (<={sampling.most})"
    else:
        total_text = str(total)
    return (
        f"[{bar}] {done}/{total_text}  pass {resolved} ({percent})  err {errors}  "
        f"{rate:.1f}/s  ETA {eta}"
    )


def _clock(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


async def show_progress(
    runner: CampaignRunner, stream: TextIO | None = None, *, interval_s: float = 0.2
) -> None:
    """Redraws the line while the runner runs (every 5 s as a new line when not a terminal),
    on `stream` (default: `sys.stderr` as it is when called, not when this module loaded)."""
    stream = stream or sys.stderr
    live = stream.isatty()
    period = interval_s if live else 5.0
    last = ""
    while True:
        await anyio.sleep(period)
        state, progress = runner.state, runner.progress
        if state is None or progress is None:
            continue
        line = progress_line(
            state,
            done_at_start=progress.done_at_start,
            elapsed_s=time.monotonic() - progress.started_monotonic,
        )
        if line != last:
            stream.write(f"\r{line}\x1b[K" if live else f"{line}\n")
            stream.flush()
            last = line
