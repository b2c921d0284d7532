"""The `search` and `glob` operations: finder.py's walk, run as the trajectory itself.

A pattern comes from the agent under evaluation, and a regular expression may backtrack for
longer than anyone waits: it never runs in the supervisor's own process. Each operation is a
forked child that enters the workspace's view and drops privileges (`files.files_job`), with a
wall-clock timeout that kills it and a memory cap of its own (the child is in no workspace's
cgroup, so the cap stands in for the workspace's), so neither a pattern nor a huge file, a
FIFO or a symlink loop can hang the supervisor or reach past the view.
"""

from __future__ import annotations

import os
import resource
from typing import TYPE_CHECKING, Any

from . import finder
from .files import files_job
from .protocol import (
    GlobArgs,
    GlobResult,
    SearchArgs,
    SearchResult,
    SupervisorError,
    error_type,
)
from .state import Supervisor

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .jobs import Job

# What the child may allocate beyond what it inherits from the supervisor.
MEMORY_BYTES = 512 << 20


def search(sup: Supervisor, req_id: int, args: SearchArgs) -> None:
    pattern, path = str(args["pattern"]), str(args.get("path") or ".")
    glob = args.get("glob")
    max_hits = int(args.get("max_hits", 200))

    def work() -> SearchResult:
        return finder.search(path, pattern, None if glob is None else str(glob), max_hits)

    _find(sup, req_id, args, work, "search")


def glob(sup: Supervisor, req_id: int, args: GlobArgs) -> None:
    pattern, path = str(args.get("pattern") or "**/*"), str(args.get("path") or ".")
    max_entries = int(args.get("max_entries", 1000))

    def work() -> GlobResult:
        return finder.glob(path, pattern, max_entries)

    _find(sup, req_id, args, work, "glob")


def _find(
    sup: Supervisor,
    req_id: int,
    args: Mapping[str, Any],
    work: Callable[[], Mapping[str, Any]],
    what: str,
) -> None:
    timeout = float(args.get("timeout") or finder.TIMEOUT_S)
    memory = _address_space() + MEMORY_BYTES

    def confined() -> Mapping[str, Any]:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        try:
            return work()
        except finder.FindError as e:
            raise SupervisorError(error_type(e.kind), str(e)) from None
        except (MemoryError, RecursionError):
            raise SupervisorError(
                "LimitExceeded",
                f"{what} ran out of memory ({MEMORY_BYTES >> 20} MiB): simplify the pattern "
                "or narrow the path",
            ) from None

    files_job(sup, req_id, {**args, "timeout": timeout}, confined)  # type: ignore[arg-type]
    job = sup.jobs.by_req[req_id]
    answer = job.finish

    def finish(job: Job) -> Mapping[str, Any]:
        if job.timed_out:  # files_job's own message blames a FIFO: here it is the work
            raise SupervisorError(
                "Timeout",
                f"{what} did not finish within {timeout:g} s: a pattern that backtracks "
                "(nested quantifiers such as (a+)+) or a very large tree; simplify the "
                "pattern or narrow the path or glob",
            )
        return answer(job)

    job.finish = finish


def _address_space() -> int:
    """The supervisor's virtual size, which a forked child starts with."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
