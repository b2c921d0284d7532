"""Workers that fail as a test asks, under the real parent of `--workers N` (`serve_workers`).

Run as `python -m tests.server.failing_workers HOW DIRECTORY` with 2 workers on a free port:
- `bug`: every worker raises a RuntimeError before it is ready (a bug, not one of our errors).
- `killed`: every worker is SIGKILLed before it is ready (it cannot say why).
- `later`: both become ready; worker 0 then reads a line from stdin (the test's signal) and
  fails with an InvalidInput, once: its replacement serves (pauses) until SIGTERM.
The parent's InvalidInput is printed as the command line prints it (exit 2).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.server.front.worker_config import WorkerConfig
from mcp_evalserver.server.front.workers import serve_workers

#: What worker 0 fails with in `later`.
LATER_REASON = "the state directory is gone: start the server again"


def main(how: str, directory: Path) -> int:
    def run_worker(config: WorkerConfig, port: int, ready: Callable[[], None]) -> None:
        if how == "bug":
            raise RuntimeError("boom")
        if how == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        ready()
        failed_once = directory / "failed-once"
        if config.index == 0 and not failed_once.exists():
            sys.stdin.readline()
            failed_once.touch()
            raise InvalidInput(LATER_REASON)
        signal.pause()  # serving, as far as the parent can tell, until SIGTERM

    try:
        return serve_workers("127.0.0.1", 0, 2, run_worker)
    except InvalidInput as exc:
        print(f"mcp-evalserver: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
