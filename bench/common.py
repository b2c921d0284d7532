"""What every benchmark shares: percentiles, the machine's load, and writing results.

Figures on a shared machine move with its load, so every results file records the load average
at the start and at the end of its run (`load_average_start`, `load_average_end`: 1, 5 and 15
minutes) and the CPU count beside its figures; `bench/summary.py` prints them with each target.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

from testsupport.processes import descendants as descendants  # shared with the tests

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def p95(samples: list[float]) -> float:
    return sorted(samples)[max(0, round(0.95 * len(samples)) - 1)]


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded for a results file."""
    return [round(x, 2) for x in os.getloadavg()]


class LoadRecord:
    """Notes the load when made (the start of a bench) and when `finish` adds the end."""

    def __init__(self) -> None:
        self.start = load_average()

    def finish(self, figures: dict[str, Any]) -> dict[str, Any]:
        """`figures` with the load at start and end and the CPU count beside them."""
        return {
            **figures,
            "load_average_start": self.start,
            "load_average_end": load_average(),
            "cpus": os.cpu_count(),
        }


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def write_results(name: str, figures: dict[str, Any]) -> Path:
    """Writes bench/results/NAME.json (never committed); floats rounded to 3 places."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(_rounded(figures), indent=2) + "\n")
    return path


def describe_load(figures: dict[str, Any]) -> str:
    """`load 2.1 -> 3.4 (1 min) on 2 CPUs`, for a printed report."""
    start, end = figures["load_average_start"][0], figures["load_average_end"][0]
    return f"load {start:.1f} -> {end:.1f} (1 min) on {figures['cpus']} CPUs"


def proc_stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (field 3, the state, first).

    Raises:
        OSError: no such process.
    """
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def process_cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU seconds of `pid` (every thread of it), with `reaped` the time of the
    children it reaped too (the kernel adds a reaped child's time to its parent's); 0 once
    gone."""
    try:
        fields = proc_stat(pid)
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11 : 15 if reaped else 13]) / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> float:
    """CPU seconds every CPU of this machine has spent busy since boot (/proc/stat: user,
    nice, system, irq, softirq)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def named_processes_cpu_seconds(names: frozenset[str]) -> float:
    """User + system CPU seconds of the live processes whose command name is in `names`."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() not in names:
                    continue
        except OSError:
            continue
        total += process_cpu_seconds(int(entry))
    return total


def process_tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` and its live descendants, with the time of every
    child they reaped; 0 once gone."""
    own = process_cpu_seconds(pid, reaped=True)
    return own + sum(process_tree_cpu_seconds(child) for child in child_pids(pid))


def child_pids(pid: int) -> list[int]:
    """The live children of `pid`, from every thread of it."""
    children: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as f:
                children += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return children


def child_running(needle: str) -> int:
    """The pid of this process's child whose command line contains `needle`."""
    for pid in child_pids(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if needle in argv or any(needle in arg for arg in argv if arg.endswith(".py")):
            return pid
    raise RuntimeError(f"no child process running {needle!r}")


def pss_bytes(pids: list[int]) -> int:
    """The PSS of these processes (those gone meanwhile count nothing)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            continue
    return total
