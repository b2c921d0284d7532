"""Benchmark of the front door: `mcp-evalserver --http --workers N`, and 10,000 idle sessions.

Run `python bench/front.py` as root (workspaces need namespaces and overlayfs); `--sessions N`
holds N idle sessions instead of 10,000, `--quick` runs a smaller version (CI, a smoke test),
`--skip-sessions` measures calls/s and CPU per call only (no idle sessions: minutes shorter,
and the session figures are absent from the results, which say `sessions_skipped`);
`--sessions-only` measures the idle sessions alone (the figures below from sessions_held on)
and writes them to bench/results/front_sessions.json, leaving front.json's other figures be.
`--ratios-only` measures issue 39's figures alone (the last part below: no figures by
workers, no SDK clients, no idle sessions; a few minutes; the results name what they lack in
`not_measured`); `--rounds N` sets how many interleaved rounds those take (default 15).
Writes bench/results/front.json:

- calls_per_s_by_workers: `sandbox_exec` of `true` per second from 32 sessions of the cheap
  client (testsupport/rawmcp.py), each on its own claim, against `--workers` 1, 2, 4 ... up to
  the CPUs; beside each, server_cpu_ms_by_workers (the server's processes with their sandbox,
  per call), split into workers_cpu_ms_by_workers (the parent and its workers) and
  sandbox_cpu_ms_by_workers (the rest of the server's tree: the instance's supervisor, its
  holders and the commands they ran), and client_cpu_ms_by_workers (this process: the 32
  sessions).
- read_file_*: the same figures for `read_file` of the task's 4 KB file (the supervisor forks
  itself per file operation to read as the trajectory: dearer for the sandbox than `true`).
- scaling_efficiency_max: calls/s at the most workers over (workers x calls/s at 1);
  cpus_used_by_workers: the CPUs each run had (calls/s x CPU per call of server and clients):
  on a shared machine, what the other processes left it.
- capacity_cpu_bound_calls_per_s_by_workers: the calls/s the CPUs allow at the CPU per call
  measured with capacity_tool (`sandbox_exec`, the tool cheapest for the sandbox): the least of
  workers x 1000 / workers' ms per call (a worker runs on one CPU at most) and CPUs x 1000 /
  (server + client ms per call); capacity_speedup_bound_2_workers, its ratio at 2 workers over
  1, and capacity_workers_cpu_ratio_2_workers, the workers' CPU per call at 2 over 1.
- sdk_calls_per_s_by_workers, sdk_client_cpu_ms_by_workers, sdk_server_cpu_ms_by_workers:
  the same with 32 official SDK clients (bench/mcp.py's run), at 1 worker and at the most.
- sessions_held: handshake-era sessions held open at once against one server (default
  workers), each having claimed its own trajectory of an external campaign (answer-only tasks:
  10,000 workspaces would be 18 GB of overlays here, and they are not the sessions' cost), and
  each calling `campaign_status` of a small campaign every two minutes, at a random moment.
- server_kb_per_session: the server's memory (PSS of its parent and workers; its sandbox is
  not in it) with every session held, less the same with 10 held, per added session (its
  connection, its MCP session, its claim); server_kb_per_trajectory_waiting beside it: what
  each of the campaign's trajectories cost while it waited for a client, before any session.
- p99_ratio_sessions: p99 of a probe's `sandbox_exec` (one session, 20 calls/s) with every
  session held and calling, over its p99 with 10 held; p99_probe_ms_10 and _held beside it,
  p99_idle_call_ms the held sessions' own calls.
- errors: every failed request of the run (HTTP, JSON-RPC or tool errors, broken connections).

Issue 39's figures (bench/front_ratios.py), in interleaved rounds: every target is made ready
once (its server, its 32 sessions, their claims), then each round measures each target in
turn (40 calls per session; the exec floor 1,000 spawns), the order reversed every other
round, so a floor and what is measured against it share the load of the same minute; each
figure is the median of its rounds, each ratio a ratio of medians:
- bare_sdk_cpu_ms: {"sse", "json"}: the CPU per call of the MCP SDK's own bare server
  (bench/bare_sdk.py: one tool that returns at once) with its default SSE answers and with
  `json_response=True`, from the same cheap clients: the floor of a trivial call.
- cpu_ms_per_call: {tool: {"workers", "sandbox", "total"}} at 1 worker: `trivial`
  (`list_campaigns` on a server with no campaign: a read-only tool touching nothing),
  `sandbox_exec` of `true`, `read_file` of the task's 4 KB file (64 lines), `write_file` of a
  small one ("total": the median of the rounds' whole server CPU, which the ratios use);
  exec_floor_cpu_ms, the kernel's floor (a bare posix_spawn of `true` inside a workspace's
  namespaces, as bench/sandbox.py measures it).
- base_calls_per_s_1_worker: with `--base DIR` (a checkout of older code, e.g. `git worktree
  add DIR 786929f`), `sandbox_exec` calls/s at 1 worker of that code's server ("base") and of
  this one ("new"), one of each per round, next to each other, and the ratio of their medians.
- ratios (the issue's, as ratios of medians), targets, met. Beside the measured calls/s over
  the base's (calls_per_s_1_worker_vs_base: what the load left each server),
  calls_per_s_bound_1_worker_vs_base: the calls/s each server's CPU per call allows, reckoned
  as capacity_* is, which the load moves far less (no target).
- ratios_by_round (each round's own ratio) and ratios_spread ((largest - smallest) over the
  ratio): how far one round alone would have moved it; issue_rounds: every round's figures of
  every target (calls/s, server CPU split into workers and sandbox, client CPU) with the load
  (1 minute) when the round began.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.front` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    LoadRecord,
    child_running,
    describe_load,
    process_tree_cpu_seconds,
    write_results,
)
from bench.front_ratios import (
    CLIENTS,
    TOOLS,
    WARMUP,
    bench_repo,
    cpu_bound_calls_per_s,
    front_pids,
    issue_figures,
    port_of,
    repo_spec,
    server_cpu_seconds,
)
from bench.mcp import http_throughput
from testsupport.rawmcp import CallFailed, RawSession
from testsupport.servers import TOKEN, call, http_client, http_server

CALLS_PER_CLIENT = 100
PROBE_HZ, PROBE_S = 20, 30.0
IDLE_PERIOD_S = 120.0
OPENING = 64  # sessions being opened at once
ROUNDS = 2
#: Issue 39's figures: interleaved rounds (their medians count), each target's calls per
#: session in a round, and the exec floor's spawns in a round.
ISSUE_ROUNDS, ISSUE_CALLS_PER_CLIENT, FLOOR_SPAWNS = 15, 40, 1000
NOT_MEASURED_RATIOS_ONLY = [
    "the figures by workers (*_by_workers, *_scaling_efficiency_max, *_speedup_2_workers, "
    "capacity_*)",
    "the SDK clients' (sdk_*_by_workers)",
    "the idle sessions (sessions_held, server_kb_per_session, p99_*, errors)",
]
#: The tool of the capacity figures: the one whose sandbox costs least per call.
CAPACITY_TOOL = "sandbox_exec"


def cpus() -> int:
    return len(os.sched_getaffinity(0))


def worker_counts() -> list[int]:
    counts, n = [], 1
    while n <= min(cpus(), 8):
        counts.append(n)
        n *= 2
    if counts[-1] != min(cpus(), 8):
        counts.append(min(cpus(), 8))
    return counts


def answer_spec(trajectories: int, name: str) -> dict[str, Any]:
    """External trajectories of answer-only tasks: at most 1,000 samples of each task."""
    tasks = -(-trajectories // 1000)
    return {
        "name": name,
        "tasks": [{"id": f"{name}{n}", "prompt": "2 + 2?", "answer": "4"} for n in range(tasks)],
        "samples": -(-trajectories // tasks),
        "agent": {"type": "external", "lease_s": 3600},
        "limits": {"concurrency": min(trajectories, 10_000)},
    }


def server_pids() -> list[int]:
    """The server's parent and its workers (its sandbox's processes are not among them)."""
    return front_pids(child_running("--http"))


def pss_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    return total


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, round(0.99 * len(ordered)) - 1)]


async def raw_throughput(
    url: str, repo: Path, state_dir: Path, tool: str = "sandbox_exec"
) -> dict[str, float]:
    """Calls per second of `tool` from CLIENTS cheap sessions, and CPU per call of the server
    (all of it, its workers alone, its sandbox alone) and of the clients."""
    arguments = TOOLS[tool][0]
    async with http_client(url) as admin:
        started = await call(admin, "start_campaign", spec=repo_spec(repo, CLIENTS))
    campaign_id = started["campaign_id"]
    sessions = [RawSession("127.0.0.1", port_of(url), TOKEN) for _ in range(CLIENTS)]
    claims = []
    for session in sessions:
        await session.open()
        claim = await session.call_tool(
            "claim_trajectory", {"campaign_id": campaign_id, "wait_s": 60}
        )
        claims.append(claim["claim_id"])

    async def run(session: RawSession, claim_id: str, count: int) -> None:
        for _ in range(count):
            await session.call_tool(tool, {"claim_id": claim_id, **arguments})

    await asyncio.gather(*(run(s, c, WARMUP) for s, c in zip(sessions, claims, strict=True)))
    server = child_running(str(state_dir))
    began, (server_cpu, front_cpu), client_cpu = (
        time.perf_counter(),
        server_cpu_seconds(server),
        time.process_time(),
    )
    await asyncio.gather(
        *(run(s, c, CALLS_PER_CLIENT) for s, c in zip(sessions, claims, strict=True))
    )
    elapsed = time.perf_counter() - began
    client_end, (server_end, front_end) = time.process_time(), server_cpu_seconds(server)
    calls = CLIENTS * CALLS_PER_CLIENT
    figures = {
        "calls_per_s": calls / elapsed,
        "server_cpu_ms": (server_end - server_cpu) * 1000 / calls,
        "workers_cpu_ms": (front_end - front_cpu) * 1000 / calls,
        "sandbox_cpu_ms": (server_end - server_cpu - (front_end - front_cpu)) * 1000 / calls,
        "client_cpu_ms": (client_end - client_cpu) * 1000 / calls,
    }
    for session in sessions:
        await session.close()
    async with http_client(url) as admin:
        await call(admin, "cancel_campaign", campaign_id=campaign_id)
    return figures


class Idle:
    """Sessions held open, each calling `campaign_status` of a small campaign now and then."""

    def __init__(self, url: str, status_of: str) -> None:
        self.url, self.status_of = url, status_of
        self.sessions: list[RawSession] = []
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def open(self, count: int, campaign_id: str) -> None:
        gate = asyncio.Semaphore(OPENING)

        async def one() -> None:
            async with gate:
                session = RawSession("127.0.0.1", port_of(self.url), TOKEN)
                try:
                    await session.open()
                    await session.call_tool(
                        "claim_trajectory", {"campaign_id": campaign_id, "wait_s": 60}
                    )
                except (CallFailed, OSError, asyncio.IncompleteReadError) as exc:
                    self.errors.append(f"open: {exc!r}")
                    return
                self.sessions.append(session)

        await asyncio.gather(*(one() for _ in range(count)))

    def start_calling(self) -> None:
        """Each session not calling yet calls now and then from now on."""
        for session in self.sessions[len(self.tasks) :]:
            self.tasks.append(asyncio.create_task(self._now_and_then(session)))

    async def _now_and_then(self, session: RawSession) -> None:
        await asyncio.sleep(random.uniform(0, IDLE_PERIOD_S))
        while True:
            began = time.perf_counter()
            try:
                await session.call_tool("campaign_status", {"campaign_id": self.status_of})
            except (CallFailed, OSError, asyncio.IncompleteReadError) as exc:
                self.errors.append(f"idle call: {exc!r}")
                return
            self.latencies.append((time.perf_counter() - began) * 1000)
            await asyncio.sleep(IDLE_PERIOD_S)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in self.sessions))


async def probe(
    session: RawSession, claim_id: str, seconds: float, errors: list[str]
) -> list[float]:
    """Latencies (ms) of `sandbox_exec true`, PROBE_HZ a second for `seconds`."""
    latencies: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        began = time.perf_counter()
        try:
            await session.call_tool("sandbox_exec", {"claim_id": claim_id, "command": "true"})
        except (CallFailed, OSError, asyncio.IncompleteReadError) as exc:
            errors.append(f"probe: {exc!r}")
        latencies.append((time.perf_counter() - began) * 1000)
        await asyncio.sleep(max(0.0, 1 / PROBE_HZ - (time.perf_counter() - began)))
    return latencies


async def idle_sessions(url: str, repo: Path, held: int, probe_s: float) -> dict[str, Any]:
    async with http_client(url) as admin:
        small = await call(admin, "start_campaign", spec=answer_spec(1, "small"))
        probed = await call(admin, "start_campaign", spec=repo_spec(repo, 1, "probe"))
        errors: list[str] = []
        prober = RawSession("127.0.0.1", port_of(url), TOKEN)
        await prober.open()
        claim = await prober.call_tool(
            "claim_trajectory", {"campaign_id": probed["campaign_id"], "wait_s": 60}
        )
        pids = server_pids()
        memory_before = pss_kb(pids)
        idle = await call(admin, "start_campaign", spec=answer_spec(held, "idle"))
        # Every trajectory waiting for a client before the sessions come: what they cost is
        # the campaign's, measured apart (server_kb_per_trajectory_waiting).
        for _ in range(600):  # a status a second, ten minutes at most
            status = await call(admin, "campaign_status", campaign_id=idle["campaign_id"])
            if status["awaiting_client"] >= held:
                break
            await asyncio.sleep(1)
    memory_waiting = pss_kb(pids)
    sessions = Idle(url, small["campaign_id"])
    await sessions.open(10, idle["campaign_id"])
    sessions.start_calling()
    few = await probe(prober, claim["claim_id"], probe_s, errors)
    memory_few = pss_kb(pids)
    began = time.perf_counter()
    # Opened first, all of them, and weighed at rest; then they call, now and then.
    await sessions.open(held - 10, idle["campaign_id"])
    opened_s = time.perf_counter() - began
    await asyncio.sleep(5)
    memory_held = pss_kb(pids)
    sessions.start_calling()
    server = child_running("--http")
    server_cpu, client_cpu = process_tree_cpu_seconds(server), time.process_time()
    sessions.latencies.clear()
    many = await probe(prober, claim["claim_id"], max(probe_s, IDLE_PERIOD_S), errors)
    idle_calls = len(sessions.latencies)
    calls = idle_calls + len(many)
    figures = {
        "sessions_held": len(sessions.sessions),
        "sessions_opened_per_s": (len(sessions.sessions) - 10) / opened_s,
        "server_kb_per_session": (memory_held - memory_few) / max(1, len(sessions.sessions) - 10),
        "server_kb_per_trajectory_waiting": (memory_waiting - memory_before) / held,
        "server_pss_mb_10": memory_few / 1024,
        "server_pss_mb_held": memory_held / 1024,
        "server_processes": len(pids),
        "p99_probe_ms_10": p99(few),
        "p99_probe_ms_held": p99(many),
        "p99_ratio_sessions": p99(many) / p99(few),
        "p99_idle_call_ms": p99(sessions.latencies) if sessions.latencies else None,
        "idle_calls_per_s": idle_calls / max(probe_s, IDLE_PERIOD_S),
        "server_cpu_ms_held": (process_tree_cpu_seconds(server) - server_cpu) * 1000 / calls,
        "client_cpu_ms_held": (time.process_time() - client_cpu) * 1000 / calls,
    }
    await sessions.close()
    await prober.close()
    return figures | {
        "errors": len(errors) + len(sessions.errors),
        "error_samples": (errors + sessions.errors)[:5],
    }


def capacity(figures: dict[str, Any], tool: str) -> dict[str, Any]:
    """What the machine's CPUs allow at the CPU per call measured with `tool`: each worker
    runs on one CPU at most (`workers x 1000 / its ms per call`), and the workers, the sandbox
    and the clients all together on `cpus()` CPUs (`cpus x 1000 / their ms per call`)."""
    prefix = TOOLS[tool][1]
    server = figures[f"{prefix}server_cpu_ms_by_workers"]
    client = figures[f"{prefix}client_cpu_ms_by_workers"]
    workers = figures[f"{prefix}workers_cpu_ms_by_workers"]
    bound = {
        key: cpu_bound_calls_per_s(
            {"workers_cpu_ms": workers[key], "cpu_ms": server[key], "client_cpu_ms": client[key]},
            int(key),
        )
        for key in server
    }
    return {
        "capacity_tool": tool,
        "capacity_cpu_bound_calls_per_s_by_workers": bound,
        "capacity_speedup_bound_2_workers": bound["2"] / bound["1"] if "2" in bound else None,
        "capacity_workers_cpu_ratio_2_workers": workers["2"] / workers["1"]
        if "2" in workers
        else None,
    }


async def grid(
    stack: contextlib.AsyncExitStack, root: Path, repo: Path, counts: list[int]
) -> tuple[dict[str, Any], dict[int, str]]:
    """The figures by workers (servers of each count, all left running on `stack`), with the
    SDK clients' at 1 and at the most workers; and each server's URL."""
    figures: dict[str, Any] = {
        "calls_per_s_by_workers": {},
        "server_cpu_ms_by_workers": {},
        "client_cpu_ms_by_workers": {},
        "sdk_calls_per_s_by_workers": {},
        "sdk_server_cpu_ms_by_workers": {},
        "sdk_client_cpu_ms_by_workers": {},
    }
    # Every server up at once and the rounds interleaved (1, 2, ... workers, then again):
    # they share whatever load the machine is under; each count's best round counts.
    urls = {
        workers: await stack.enter_async_context(
            http_server(root / f"state-{workers}", "--allow-paths", str(root), workers=workers)
        )
        for workers in counts
    }
    rounds: dict[str, dict[int, list[dict[str, float]]]] = {
        tool: {workers: [] for workers in counts} for tool in TOOLS
    }
    for _ in range(ROUNDS):
        for workers, url in urls.items():
            for tool in TOOLS:
                raw = await raw_throughput(url, repo, root / f"state-{workers}", tool)
                rounds[tool][workers].append(raw)
                print(
                    f"{tool}, workers {workers}: {raw['calls_per_s']:.0f} calls/s; CPU "
                    f"per call: server {raw['server_cpu_ms']:.2f} ms (workers "
                    f"{raw['workers_cpu_ms']:.2f}, sandbox {raw['sandbox_cpu_ms']:.2f})"
                    f", client {raw['client_cpu_ms']:.2f} ms; "
                    f"load {os.getloadavg()[0]:.2f}",
                    file=sys.stderr,
                )
    for workers, url in urls.items():
        key = str(workers)
        for tool, (_, prefix) in TOOLS.items():
            best = max(rounds[tool][workers], key=lambda r: r["calls_per_s"])
            for name in ("calls_per_s", "server_cpu_ms", "client_cpu_ms",
                         "workers_cpu_ms", "sandbox_cpu_ms"):  # fmt: skip
                figures.setdefault(f"{prefix}{name}_by_workers", {})[key] = best[name]
            figures.setdefault(f"{prefix}rounds_calls_per_s_by_workers", {})[key] = [
                r["calls_per_s"] for r in rounds[tool][workers]
            ]
        if workers in (1, counts[-1]):
            sdk = await http_throughput(url, repo, str(root / f"state-{workers}"))
            figures["sdk_calls_per_s_by_workers"][key] = sdk["http_calls_per_s_32"]
            figures["sdk_server_cpu_ms_by_workers"][key] = sdk["http_server_cpu_ms_32"]
            figures["sdk_client_cpu_ms_by_workers"][key] = sdk["http_clients_cpu_ms_32"]
    most = counts[-1]
    for _, prefix in TOOLS.values():
        # The CPUs the run had (server and clients together): on a shared machine, what
        # the other processes left; calls/s cannot grow past it whatever the workers.
        server = figures[f"{prefix}server_cpu_ms_by_workers"]
        client = figures[f"{prefix}client_cpu_ms_by_workers"]
        by = figures[f"{prefix}calls_per_s_by_workers"]
        figures[f"{prefix}cpus_used_by_workers"] = {
            key: rate * (server[key] + client[key]) / 1000 for key, rate in by.items()
        }
        figures[f"{prefix}scaling_efficiency_max"] = by[str(most)] / (most * by["1"])
        figures[f"{prefix}speedup_2_workers"] = by["2"] / by["1"] if "2" in by else None
    return figures | capacity(figures, CAPACITY_TOOL), urls


async def main(
    held: int,
    quick: bool,
    skip_sessions: bool = False,
    base: Path | None = None,
    ratios_only: bool = False,
    rounds: int = ISSUE_ROUNDS,
    sessions_only: bool = False,
) -> dict[str, Any]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    figures: dict[str, Any] = {}
    counts = worker_counts()
    issue = {
        "rounds": rounds,
        "calls_per_client": 5 if quick else ISSUE_CALLS_PER_CLIENT,
        "floor_spawns": 200 if quick else FLOOR_SPAWNS,
    }
    with tempfile.TemporaryDirectory(prefix="evs-bench-front-") as tmp:
        root = Path(tmp)
        repo = bench_repo(root / "repo")
        if not sessions_only:
            async with contextlib.AsyncExitStack() as stack:
                if ratios_only:
                    one = await stack.enter_async_context(
                        http_server(root / "state-1", "--allow-paths", str(root), workers=1)
                    )
                else:
                    figures, urls = await grid(stack, root, repo, counts)
                    one = urls[1]
                # The floors, and the older code's server beside ours, while ours still run.
                figures |= await issue_figures(root, repo, one, base, **issue)
        if ratios_only:
            figures["not_measured"] = NOT_MEASURED_RATIOS_ONLY
        elif skip_sessions:
            figures["sessions_skipped"] = True
        else:
            most = counts[-1]
            state = root / "state-idle"
            async with http_server(state, "--allow-paths", str(root), workers=most) as url:
                figures["idle_workers"] = most
                figures |= await idle_sessions(url, repo, held, 5.0 if quick else PROBE_S)
    figures["cpus"] = cpus()
    figures["calls_per_client"] = CALLS_PER_CLIENT
    return figures


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("bench/front.py needs root (workspaces use namespaces and overlayfs)")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000, help="idle sessions to hold")
    parser.add_argument("--quick", action="store_true", help="a smaller run (smoke test)")
    parser.add_argument(
        "--skip-sessions",
        action="store_true",
        help="measure calls/s and CPU per call only, not the idle sessions (minutes shorter; "
        "the session figures are left out of the results)",
    )
    parser.add_argument(
        "--ratios-only",
        action="store_true",
        help="measure issue 39's figures only (floors, tools at 1 worker, --base): no grid "
        "by workers, no SDK clients, no idle sessions; the results say what was not measured",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=ISSUE_ROUNDS,
        help=f"interleaved rounds of issue 39's figures (default {ISSUE_ROUNDS}; medians count)",
    )
    parser.add_argument(
        "--base",
        type=Path,
        help="a checkout of older code (e.g. `git worktree add DIR 786929f`) whose server's "
        "`sandbox_exec` calls/s at 1 worker are measured beside this one's in every round",
    )
    parser.add_argument(
        "--sessions-only",
        action="store_true",
        help="measure the idle sessions alone, into bench/results/front_sessions.json",
    )
    arguments = parser.parse_args()
    if arguments.quick:
        CALLS_PER_CLIENT, IDLE_PERIOD_S = 20, 10.0
    load = LoadRecord()
    result = asyncio.run(
        main(
            arguments.sessions,
            arguments.quick,
            arguments.skip_sessions,
            arguments.base,
            arguments.ratios_only,
            arguments.rounds,
            arguments.sessions_only,
        )
    )
    figures = load.finish(result)
    write_results("front_sessions" if arguments.sessions_only else "front", figures)
    print(json.dumps(figures, indent=2))
    print(describe_load(figures))
