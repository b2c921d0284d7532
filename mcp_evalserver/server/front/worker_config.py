"""Which worker of `--workers N` a process is: apart from the service, because the parent
that forks the workers needs it before anything heavy is imported (a worker listens first)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WorkerConfig:
    """Which worker this process is, of which server: `run_dir` holds the workers' sockets."""

    index: int
    workers: int
    run_dir: Path
    server: str


def worker_socket(run_dir: Path, index: int) -> Path:
    """Where worker `index` answers the requests other workers pass it."""
    return run_dir / f"worker-{index}.sock"
