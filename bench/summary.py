"""One table of every benchmark target: the figure, the load it was measured under, met or not.

Run `python bench/summary.py` (what `make bench` ends with). It reads bench/results/*.json as
the benches left them; a bench that has not run shows as `not run`. Figures on this shared
machine move with its load, which is printed beside each (1-minute average, start -> end).
"""

from __future__ import annotations

import json
import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Target:
    bench: str
    name: str
    figure: Callable[[dict[str, Any]], float]
    compare: Callable[[float, float], bool]
    bound: float
    unit: str

    @property
    def wanted(self) -> str:
        sign = "<=" if self.compare is operator.le else ">="
        return f"{sign} {self.bound:g} {self.unit}".rstrip()


def key(name: str) -> Callable[[dict[str, Any]], float]:
    return lambda figures: float(figures[name])


def difference(minuend: str, subtrahend: str) -> Callable[[dict[str, Any]], float]:
    return lambda figures: float(figures[minuend]) - float(figures[subtrahend])


def within(part: str, name: str, per: str | None = None) -> Callable[[dict[str, Any]], float]:
    """A figure of one part of a results file (over another of that part, with `per`)."""
    return lambda figures: float(figures[part][name]) / (float(figures[part][per]) if per else 1)


LE, GE = operator.le, operator.ge
TARGETS = [
    Target("sandbox", "exec `true` / kernel floor", key("exec_vs_floor"), LE, 2, "x"),
    Target("sandbox", "exec `true`, 64 in flight", key("throughput_64_per_s"), GE, 2000, "/s"),
    Target("sandbox", "workspace create + first command (every 20 ms)",
           key("workspace_create_p50_ms"), LE, 2, "ms"),
    Target("sandbox", "the same, back to back (faster than made ahead)",
           key("workspace_create_back_to_back_p50_ms"), LE, 2, "ms"),
    Target("sandbox", "the same, 16 asked at once (past the spares)",
           key("workspace_create_burst_p50_ms"), LE, 2, "ms"),
    Target("sandbox", "exec vs docker exec", lambda f: f["docker_exec_p50_ms"]
           / f["exec_overhead_p50_ms"], GE, 5, "x"),
    Target("mcp", "stdio tool layer over direct exec",
           difference("stdio_exec_p50_ms", "direct_exec_p50_ms"), LE, 1.5, "ms"),
    Target("mcp", "HTTP tool layer over direct exec",
           difference("http_exec_p50_ms", "direct_exec_p50_ms"), LE, 1.5, "ms"),
    Target("mcp", "HTTP calls, 32 clients", key("http_calls_per_s_32"), GE, 1000, "/s"),
    Target("surface", "tools/list, whole server", key("tools_list_chars"), LE, 20_000, "chars"),
    Target("surface", "tools/list, agent profile", key("agent_profile_chars"), LE, 8_000,
           "chars"),
    Target("surface", "a demo bug fixed: requests + answers", key("bytes_per_fix"), LE, 3_000,
           "bytes"),
    Target("surface", "a demo bug fixed: tool calls", key("calls_per_fix"), LE, 6, ""),
    Target("startup", "stdio server's first answer", key("first_answer_p50_ms"), LE, 1000, "ms"),
    Target("startup", "HTTP server's first /healthz", key("http_healthz_p50_ms"), LE, 1000, "ms"),
    Target("startup", "stdio server's exit after SIGINT", key("sigint_exit_p50_ms"), LE, 300,
           "ms"),
    Target("front", "2 workers over 1 (raw client, 32 sessions)", key("speedup_2_workers"), GE,
           1.6, "x"),
    Target("front", "scaling efficiency at the most workers", key("scaling_efficiency_max"), GE,
           0.6, ""),
    Target("front", "server CPU per call, most workers over 1", lambda f: f[
        "server_cpu_ms_by_workers"][str(max(map(int, f["server_cpu_ms_by_workers"])))]
        / f["server_cpu_ms_by_workers"]["1"], LE, 1.1, "x"),
    Target("front", "workers' CPU per call (sandbox apart), 2 workers over 1",
           key("capacity_workers_cpu_ratio_2_workers"), LE, 1.1, "x"),
    Target("front", "2 workers over 1 that the CPUs allow (capacity bound)",
           key("capacity_speedup_bound_2_workers"), GE, 1.6, "x"),
    Target("front", "trivial call / the bare SDK's (JSON answers), CPU",
           within("ratios", "trivial_vs_bare_sdk_json"), LE, 1.25, "x"),
    Target("front", "sandbox_exec `true` / the kernel's exec floor, CPU",
           within("ratios", "sandbox_exec_vs_exec_floor"), LE, 2.5, "x"),
    Target("front", "read_file / the trivial call, CPU",
           within("ratios", "read_file_vs_trivial"), LE, 1.5, "x"),
    Target("front", "calls/s at 1 worker / main 786929f's (--base)",
           within("ratios", "calls_per_s_1_worker_vs_base"), GE, 1.5, "x"),
    Target("front", "sessions held at once", key("sessions_held"), GE, 10_000, ""),
    Target("front", "server memory per held session", key("server_kb_per_session"), LE, 50,
           "KB"),
    Target("front", "p99 with all held / with 10", key("p99_ratio_sessions"), LE, 2, "x"),
    Target("front", "errors while holding them", key("errors"), LE, 0, ""),
    Target("search", "search / grep -rn in the same workspace", key("search_vs_grep"), LE, 3,
           "x"),
    Target("search", "list_files / find in the same workspace", key("glob_vs_find"), LE, 3, "x"),
    Target("density", "idle live workspaces", key("idle_workspaces"), GE, 10_000, ""),
    Target("density", "memory per idle workspace", key("idle_workspace_mb"), LE, 1, "MiB"),
    Target("campaign", "campaign vs container per trajectory",
           key("campaign_speedup_vs_container"), GE, 5, "x"),
    Target("eval_set", "3-agent set / the 3 campaigns one after another", key("wall_ratio"),
           LE, 0.6, "x"),
    Target("eval_set", "containers for the set / the task count", lambda f: f[
        "instances_provisioned_set"] / f["tasks"], LE, 1, "x"),
    Target("scheduler", "scheduler speedup at 50", key("speedup_50"), GE, 45, "x"),
    Target("scheduler", "ledger records", key("ledger_records_per_s"), GE, 5000, "/s"),
    Target("scheduler", "replay of 100k records", key("replay_100k_s"), LE, 2, "s"),
    Target("scale", "ray exec overhead", key("remote_exec_overhead_p50_ms"), LE, 2, "ms"),
    Target("scale", "ray scale efficiency at 4 nodes", key("scale_efficiency_4"), GE, 0.9, ""),
    Target("swebench_scale", "memory per instance on Ray", key("instance_mb_ray"), LE, 16, "MB"),
    *(Target("swebench_scale", f"{where}: trajectories finished", within(where, "trajectories"),
             GE, 2000, "") for where in ("local", "ray")),
    *(Target("swebench_scale", f"{where}: peak instances alive / budget",
             within(where, "peak_instances_alive", per="instance_budget"), LE, 1, "")
      for where in ("local", "ray")),
    Target("dashboard", "slowest warm page", lambda f: max(
        page["warm_p50_ms"] for pages in f["pages"].values() for page in pages.values()),
        LE, 200, "ms"),
    Target("dashboard", "campaign page cold", lambda f: f["pages"]["summary"]["campaign page"][
        "cold_ms"], LE, 200, "ms"),
    Target("dashboard", "trajectory page cold", lambda f: f["pages"]["summary"][
        "trajectory page"]["cold_ms"], LE, 200, "ms"),
    Target("dashboard", "campaign page cold, never shown before", lambda f: f["pages"][
        "ledger"]["campaign page"]["cold_ms"], LE, 200, "ms"),
]  # fmt: skip


def load_of(figures: dict[str, Any]) -> str:
    start, end = figures.get("load_average_start"), figures.get("load_average_end")
    if not start or not end:
        return "?"
    return f"{start[0]:.1f} -> {end[0]:.1f}"


def rows() -> list[tuple[str, str, str, str, str]]:
    table = []
    cache: dict[str, dict[str, Any] | None] = {}
    for target in TARGETS:
        if target.bench not in cache:
            path = RESULTS_DIR / f"{target.bench}.json"
            cache[target.bench] = json.loads(path.read_text()) if path.is_file() else None
        figures = cache[target.bench]
        label = f"{target.bench}: {target.name}"
        if figures is None:
            table.append((label, target.wanted, "-", "-", "not run"))
            continue
        try:
            value = target.figure(figures)
        except (KeyError, TypeError, ValueError):
            table.append((label, target.wanted, "-", load_of(figures), "not measured"))
            continue
        verdict = "met" if target.compare(value, target.bound) else "MISSED"
        table.append((label, target.wanted, f"{value:,.2f}", load_of(figures), verdict))
    return table


def main() -> int:
    header = ("target", "wanted", "figure", "load", "")
    table = [header, *rows()]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    print("\nload: 1-minute load average at the bench's start -> end (2 cores shared: noisy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
