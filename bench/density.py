"""Benchmark of density: how many idle live workspaces one machine bears, and what each costs.

Run `python bench/density.py [--target N]` as root. One instance on the local backend (a small
git repository); workspaces are created in rounds until TARGET (10,000) are live, or until the
machine's `MemAvailable` would fall below a floor kept for everyone else on it (the larger of
6 GiB and 30% of its memory), or until a workspace cannot be made. Then every workspace still
has to answer a command (`true`, 64 in flight): one that does not fails the bench.

Memory per workspace = (PSS of every process the sandbox keeps: the supervisor and each
workspace's holder, summed from /proc/PID/smaps_rollup) + (what `MemAvailable` lost beyond the
growth of that PSS: page tables, mount and namespace structures, sockets and other kernel
memory), divided by the count. `MemAvailable` moves with everything else this shared machine
runs, so the kernel share is noisy; each round's figures and the load average are recorded,
with the growth of the kernel's own counters (unreclaimable slab, kernel stacks, page tables,
per-CPU memory) per workspace and the supervisor's PSS apart. Measured once more after every
workspace answered (idle again, as between an agent's commands); the larger figure counts.
Prints a table and writes bench/results/density.json (idle_workspaces, idle_workspace_mb).
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.density` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench.common import (
    LoadRecord,
    descendants,
    describe_load,
    load_average,
    pss_bytes,
    write_results,
)
from mcp_evalserver.errors import EvalServerError
from mcp_evalserver.sandbox.base import InstanceSpec, Workspace
from mcp_evalserver.sandbox.local import LocalBackend
from testsupport.repos import make_git_repo

TARGET = 10_000
TARGET_MB = 1.0
ROUNDS = (100, 500, 1000, 2000, 4000, 6000, 8000, 10_000)
IN_FLIGHT = 64
MIB = 1 << 20


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


# Kernel memory /proc/meminfo names (machine-wide: the same noise as MemAvailable).
KERNEL_PARTS = ("SUnreclaim", "KernelStack", "PageTables", "Percpu")


def meminfo(names: tuple[str, ...]) -> dict[str, int]:
    found = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            if name in names:
                found[name] = int(value.split()[0]) * 1024
    return found


def mem_total() -> int:
    with open("/proc/meminfo") as f:
        return int(f.readline().split()[1]) * 1024


def memory_cgroups() -> int:
    """Memory cgroups on the machine (each costs kernel memory: see bench/README.md)."""
    with open("/proc/cgroups") as f:
        for line in f:
            if line.startswith("memory\t"):
                return int(line.split()[2])
    return 0


async def answer_all(workspaces: list[Workspace]) -> int:
    """Runs `true` in every workspace, IN_FLIGHT at once; how many answered exit 0."""
    answered = 0
    limiter = anyio.CapacityLimiter(IN_FLIGHT)

    async def one(ws: Workspace) -> None:
        nonlocal answered
        async with limiter:
            if (await ws.exec("true", timeout=120)).exit_code == 0:
                answered += 1

    async with anyio.create_task_group() as group:
        for ws in workspaces:
            group.start_soon(one, ws)
    return answered


def report(figures: dict[str, Any], when: str = "") -> None:
    parts = ", ".join(f"{k} {v:.0f}" for k, v in figures["kernel_parts_kib_each"].items())
    print(
        f"{figures['workspaces']:>6} workspaces{' ' + when if when else ''}: "
        f"PSS {figures['pss_mb']:8.1f} MiB (supervisor {figures['supervisor_pss_mb']:.1f}), "
        f"MemAvailable -{figures['mem_available_lost_mb']:8.1f} MiB, "
        f"{figures['per_workspace_mb']:.3f} MiB each; KiB each: {parts} "
        f"(load {figures['load_average'][0]:.1f})",
        flush=True,
    )


async def main(target: int) -> dict[str, Any]:
    floor = max(6 << 30, int(0.3 * mem_total()))
    rounds: list[dict[str, Any]] = []
    stopped = f"reached the target of {target}"
    with tempfile.TemporaryDirectory(prefix="bench-density-") as tmp:
        repo = make_git_repo(Path(tmp) / "repo", {"README": "density\n"})
        async with LocalBackend() as backend:
            instance = await backend.instance(InstanceSpec(path=str(repo)))
            supervisor = int(instance.info["pid"])
            warm = await instance.workspace("warm")  # spares and caches made before the base
            await warm.exec("true")
            await warm.destroy()
            base_available = mem_available()
            base_pss = pss_bytes(descendants(supervisor))
            base_kernel = meminfo(KERNEL_PARTS)
            base_memcgs = memory_cgroups()

            def measure(count: int) -> dict[str, Any]:
                pids = descendants(supervisor)
                pss = pss_bytes(pids)
                lost = base_available - mem_available()
                kernel = max(0, lost - (pss - base_pss))
                parts = meminfo(KERNEL_PARTS)
                return {
                    "workspaces": count,
                    "pss_mb": pss / MIB,
                    "supervisor_pss_mb": pss_bytes([supervisor]) / MIB,
                    "processes": len(pids),
                    "mem_available_lost_mb": lost / MIB,
                    "kernel_mb": kernel / MIB,
                    # What the kernel's own counters grew by, per workspace (KiB).
                    "kernel_parts_kib_each": {
                        name: (parts[name] - base_kernel[name]) / max(count, 1) / 1024
                        for name in KERNEL_PARTS
                    },
                    "memory_cgroups_made": memory_cgroups() - base_memcgs,
                    "per_workspace_mb": (pss + kernel) / max(count, 1) / MIB,
                    "load_average": load_average(),
                }

            workspaces: list[Workspace] = []
            started = time.perf_counter()
            for goal in [r for r in ROUNDS if r < target] + [target]:
                try:
                    while len(workspaces) < goal:
                        if len(workspaces) % 100 == 0 and mem_available() < floor:
                            stopped = f"MemAvailable fell to the floor of {floor / MIB:.0f} MiB"
                            break
                        workspaces.append(await instance.workspace(f"d{len(workspaces)}"))
                except EvalServerError as exc:
                    stopped = f"workspace {len(workspaces)} could not be made: {exc}"
                count = len(workspaces)
                rounds.append(measure(count))
                rounds[-1]["create_s"] = time.perf_counter() - started
                report(rounds[-1])
                if count < goal:
                    break
            answering = time.perf_counter()
            answered = await answer_all(workspaces)
            answer_s = time.perf_counter() - answering
            print(f"{answered} of {len(workspaces)} answered `true`", flush=True)
            if answered != len(workspaces):
                raise RuntimeError(f"only {answered} of {len(workspaces)} workspaces answered")
            # Idle again, each having run a command: what a campaign's workspaces look like
            # between an agent's commands. The figure is the larger of the two.
            after = measure(len(workspaces))
            report(after, "after answering")
            last = max(rounds[-1], after, key=lambda r: r["per_workspace_mb"])
            teardown = time.perf_counter()
            for ws in workspaces:
                await ws.destroy()
            destroy_s = time.perf_counter() - teardown
    return {
        "idle_workspaces": last["workspaces"],
        "idle_workspace_mb": last["per_workspace_mb"],
        "idle_workspace_pss_mb": last["pss_mb"] / last["workspaces"],
        "idle_workspace_kernel_mb": last["kernel_mb"] / last["workspaces"],
        "idle_workspace_supervisor_pss_mb": last["supervisor_pss_mb"] / last["workspaces"],
        "idle_workspace_kernel_parts_kib": last["kernel_parts_kib_each"],
        "before_answering_mb": rounds[-1]["per_workspace_mb"],
        "after_answering_mb": after["per_workspace_mb"],
        "answer_all_s": answer_s,
        "stopped": stopped,
        "mem_available_floor_mb": floor / MIB,
        "destroy_all_s": destroy_s,
        "rounds": rounds,
    }


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("bench/density.py needs root (workspaces use namespaces and overlayfs)")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=int, default=TARGET, help="workspaces to aim for")
    args = parser.parse_args()
    load = LoadRecord()
    results = load.finish(anyio.run(main, args.target))
    written = write_results("density", results)
    met = results["idle_workspaces"] >= TARGET and results["idle_workspace_mb"] <= TARGET_MB
    print(
        f"idle_workspaces {results['idle_workspaces']} at {results['idle_workspace_mb']:.3f} MiB "
        f"each ({results['stopped']}); target {TARGET} at <= {TARGET_MB:g} MiB: "
        f"{'met' if met else 'MISSED'}"
    )
    print(describe_load(results))
    print(f"wrote {written}")
