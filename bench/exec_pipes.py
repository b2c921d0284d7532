"""Bench of an exec's pipes (issue 39): this checkout against another, in the same run.

Run `python bench/exec_pipes.py --base DIR` as root, DIR a checkout of older code (e.g.
`git worktree add /tmp/base b578ff5`). Each round runs each checkout once, in a process of its
own with that checkout's package (the order alternates between rounds), on the local backend
with the compiled holder: one workspace, then

- true_cpu_ms, true_p50_ms: `true` commands one after another: the CPU per command of the
  supervisor's whole process tree (supervisor, holder, runner, command), and the wall p50;
- true_supervisor_ms, true_holder_ms, true_runner_ms: the CPU per command of each process
  alive through the whole batch (the runner serves command after command), from schedstat,
  exact where /proc's ticks are 10 ms; the commands themselves are not in them;
- output_*: commands that print OUTPUT_BYTES to stdout (`head -c`), the default 1 MiB cap
  keeping head and tail: the same figures;
- supervisor_syscalls_per_exec: `strace -c` attached to the supervisor process alone (not its
  holders) over STRACE_EXECS `true` commands, the last part of each run (strace slows it).

Prints the medians over the rounds per checkout, the ratios this / base, and the load average,
and writes bench/results/exec_pipes.json.
"""

from __future__ import annotations

import sys

if "--worker" in sys.argv:  # run by the parent as a file, the checkout to measure first on path
    sys.path.insert(0, sys.argv[sys.argv.index("--worker") + 1])
elif not __package__:  # run as a file: becomes `python -m bench.exec_pipes` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

TRUE_EXECS = 300
OUTPUT_EXECS = 10
OUTPUT_BYTES = 10_000_000
STRACE_EXECS = 300
WARMUP_EXECS = 50


def supervisor_pid() -> int:
    """The local backend's supervisor: this process's child running the supervisor module."""
    from bench.common import child_pids

    for pid in child_pids(os.getpid()):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"supervisor" in f.read():
                return pid
    raise RuntimeError("no supervisor among this process's children")


def tree_run_ns(pid: int, depth: int = 0) -> dict[int, tuple[int, int]]:
    """Nanoseconds on a CPU (schedstat: exact, unlike /proc's ticks) of `pid` and each live
    descendant, threads summed, with its depth below `pid`; the commands they reaped are not
    in it."""
    from bench.common import child_pids

    found: dict[int, tuple[int, int]] = {}
    try:
        threads = os.listdir(f"/proc/{pid}/task")
        found[pid] = (
            depth,
            sum(
                int(Path(f"/proc/{pid}/task/{t}/schedstat").read_text().split()[0]) for t in threads
            ),
        )
    except (OSError, ValueError):
        return found
    for child in child_pids(pid):
        found.update(tree_run_ns(child, depth + 1))
    return found


# The processes serving a workspace's commands, by depth below the supervisor.
ROLES = ("supervisor", "holder", "runner")


def strace_calls(summary: str) -> tuple[int, dict[str, int]]:
    """`strace -c`'s table: the total calls and the calls per system call."""
    calls: dict[str, int] = {}
    total = 0
    for line in summary.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[-1] == "total":
            total = int(fields[3])
        elif len(fields) >= 5 and fields[3].isdigit() and fields[0][0].isdigit():
            calls[fields[-1]] = int(fields[3])
    return total, calls


async def measure_checkout() -> dict[str, Any]:
    """The figures above for the package on sys.path[0] (a worker's)."""
    from bench.common import process_tree_cpu_seconds
    from mcp_evalserver.sandbox.base import InstanceSpec
    from mcp_evalserver.sandbox.local import LocalBackend

    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="evs-bench-pipes-") as task:
        async with LocalBackend() as backend:
            instance = await backend.instance(InstanceSpec(path=task, key="pipes"))
            try:
                async with await instance.workspace("pipes") as ws:
                    assert instance.info.get("holder") != "python", instance.info
                    sup = supervisor_pid()
                    for _ in range(WARMUP_EXECS):
                        await ws.exec(["true"])
                    for name, argv, count in [
                        ("true", ["true"], TRUE_EXECS),
                        ("output", ["head", "-c", str(OUTPUT_BYTES), "/dev/zero"], OUTPUT_EXECS),
                    ]:
                        walls = []
                        cpu, before = process_tree_cpu_seconds(sup), tree_run_ns(sup)
                        for _ in range(count):
                            started = time.perf_counter()
                            result = await ws.exec(argv)
                            walls.append(time.perf_counter() - started)
                            assert result.exit_code == 0, result
                        cpu, after = process_tree_cpu_seconds(sup) - cpu, tree_run_ns(sup)
                        figures[f"{name}_cpu_ms"] = cpu * 1000 / count
                        # Without the commands: the processes alive through the whole batch
                        # (supervisor, holder, a runner serving command after command).
                        for depth, role in enumerate(ROLES):
                            spent = sum(
                                after[p][1] - before[p][1]
                                for p in after.keys() & before.keys()
                                if after[p][0] == depth
                            )
                            figures[f"{name}_{role}_ms"] = spent / 1e6 / count
                        figures[f"{name}_p50_ms"] = statistics.median(walls) * 1000
                    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
                        tracer = await asyncio.create_subprocess_exec(
                            *["strace", "-c", "-o", out.name, "-p", str(sup)],
                            stderr=asyncio.subprocess.PIPE,
                        )
                        assert tracer.stderr is not None
                        await tracer.stderr.readline()  # "Process N attached"
                        for _ in range(STRACE_EXECS):
                            await ws.exec(["true"])
                        tracer.send_signal(signal.SIGINT)
                        await asyncio.wait_for(tracer.wait(), 30)
                        total, calls = strace_calls(out.read())
                    figures["supervisor_syscalls_per_exec"] = total / STRACE_EXECS
                    figures["supervisor_syscalls_by_name"] = {
                        name: round(n / STRACE_EXECS, 2)
                        for name, n in sorted(calls.items(), key=lambda item: -item[1])
                        if n >= STRACE_EXECS // 10
                    }
            finally:
                await instance.aclose()
    return figures


def run_worker(checkout: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-P", str(Path(__file__).resolve()), "--worker", str(checkout)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the worker for {checkout} failed: {done.stderr[-3000:]}")
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def main() -> None:
    from bench.common import LoadRecord, write_results

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkout of older code")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    arguments = parser.parse_args()
    this = Path(__file__).resolve().parents[1]
    load = LoadRecord()
    rounds: dict[str, list[dict[str, Any]]] = {"this": [], "base": []}
    for index in range(arguments.rounds):
        order = [("this", this), ("base", arguments.base)]
        for name, checkout in order if index % 2 == 0 else order[::-1]:
            rounds[name].append(run_worker(checkout))
    numbers = [key for key, value in rounds["this"][0].items() if isinstance(value, float)]
    figures: dict[str, Any] = {
        name: {key: statistics.median(r[key] for r in measured) for key in numbers}
        for name, measured in rounds.items()
    }
    for name in rounds:
        figures[name]["supervisor_syscalls_by_name"] = rounds[name][-1][
            "supervisor_syscalls_by_name"
        ]
    figures["this_vs_base"] = {key: figures["this"][key] / figures["base"][key] for key in numbers}
    figures["base_checkout"] = str(arguments.base)
    figures["rounds"] = arguments.rounds
    figures = load.finish(figures)
    write_results("exec_pipes", figures)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    if "--worker" in sys.argv:
        print(json.dumps(asyncio.run(measure_checkout())))
    else:
        if os.geteuid() != 0:
            sys.exit("bench/exec_pipes.py needs root (workspaces use namespaces and overlayfs)")
        main()
