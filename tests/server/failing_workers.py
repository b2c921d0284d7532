"""Workers that fail as a test asks, under the real parent of `--workers N` (`serve_workers`).

Run as `python -m tests.server.failing_workers HOW DIRECTORY` with 2 workers on a free port:
- `bug`: every worker raises a RuntimeError before it is ready (a bug, not one of our errors).
The parent's InvalidInput is printed as the command line prints it (exit 2).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.server.front.worker_config import WorkerConfig
from mcp_evalserver.server.front.workers import serve_workers


def main(how: str, directory: Path) -> int:
    def run_worker(config: WorkerConfig, port: int, ready: Callable[[], None]) -> None:
        if how == "bug":
            raise RuntimeError("boom")
        ready()
        signal.pause()  # serving, as far as the parent can tell, until SIGTERM

    try:
        return serve_workers("127.0.0.1", 0, 2, run_worker)
    except InvalidInput as exc:
        print(f"mcp-evalserver: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
