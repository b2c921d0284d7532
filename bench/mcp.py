"""Benchmark of the MCP tool layer: `sandbox_exec` of `true`, end to end, over real transports.

Run `python bench/mcp.py` as root (workspaces need namespaces and overlayfs). Each transport
gets a real server process (`mcp-evalserver --stdio`, `mcp-evalserver --http`), a campaign of
external trajectories over a small git repository, and official `mcp` clients that claim them.
Prints the figures and writes bench/results/mcp.json:

- stdio_exec_p50_ms / _p95_ms: one client over stdio, `sandbox_exec` of `true`, one at a time.
- http_exec_p50_ms / _p95_ms: the same over streamable HTTP (bearer token, SSE responses).
- http_calls_per_s_32: `sandbox_exec` calls per second with 32 clients, each on its own claim.
- direct_exec_p50_ms: `true` straight through a workspace (no MCP), the floor the others add to.
- stdio_client_cpu_ms, http_client_cpu_ms, direct_client_cpu_ms: CPU time per call of this
  process in those same calls (the official SDK's client, or the direct workspace's supervisor
  client): the share of each latency that is the caller's own work, not the server's.
- stdio_server_cpu_ms, http_server_cpu_ms: CPU time per call of the server process and all it
  runs (its supervisor, holders, execs); direct_sandbox_cpu_ms: the same for the direct
  workspace's supervisor. Their difference is what the tool layer costs the server in CPU,
  a figure that moves much less with the machine's load than the latencies do. The client's
  side is not in them (all clients share this process).
- http_server_cpu_ms_32, http_clients_cpu_ms_32: during the 32-client run, CPU time per call
  of the server (with its sandbox) and of this process (the 32 official SDK clients): on a
  2-CPU machine their sum bounds the calls per second.

The three latencies are taken in turn (direct, stdio, HTTP, direct, ...) so that they share
whatever load the machine is under; the load average at start and end says how much that was.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.mcp` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from bench.common import (
    LoadRecord,
    child_running,
    describe_load,
    p50,
    p95,
    process_tree_cpu_seconds,
    write_results,
)
from mcp_evalserver.sandbox.base import InstanceSpec, Workspace
from mcp_evalserver.sandbox.client import SUPERVISOR_SOURCE
from mcp_evalserver.sandbox.local import LocalBackend
from testsupport.repos import git_repo
from testsupport.servers import call, http_client, http_server, stdio_client

WARMUP, CALLS, CLIENTS, CALLS_PER_CLIENT = 20, 300, 32, 40


def spec(repo: Path, samples: int) -> dict[str, Any]:
    return {
        "name": "bench",
        "tasks": [{"id": "bench", "prompt": "none", "path": str(repo)}],
        "samples": samples,
        "agent": {"type": "external"},
        "limits": {"concurrency": samples, "per_instance": samples},
    }


async def claimed(client: Client, repo: Path) -> tuple[str, str]:
    """Starts a one-trajectory external campaign and claims it: (campaign id, claim id)."""
    started = await call(client, "start_campaign", spec=spec(repo, 1))
    claim = await call(client, "claim_trajectory", campaign_id=started["campaign_id"], wait_s=60)
    return started["campaign_id"], claim["claim_id"]


async def timed(action: Callable[[], Awaitable[object]]) -> float:
    begin = time.perf_counter()
    await action()
    return (time.perf_counter() - begin) * 1000


async def interleaved_latencies(
    workspace: Workspace, stdio: Client, http: Client, repo: Path
) -> tuple[dict[str, list[float]], dict[str, float], dict[str, float]]:
    """Milliseconds per `true`: direct, over stdio and over HTTP, taken in turn; and the CPU
    milliseconds per call of the process that serves each (see spenders) and of this one.

    Taking the three in turn puts them under the same machine load, which on a shared machine
    moves more than the differences being measured.
    """
    stdio_claim = (await claimed(stdio, repo))[1]
    http_claim = (await claimed(http, repo))[1]
    actions: dict[str, Callable[[], Awaitable[object]]] = {
        "direct": lambda: workspace.exec("true"),
        "stdio": lambda: call(stdio, "sandbox_exec", claim_id=stdio_claim, command="true"),
        "http": lambda: call(http, "sandbox_exec", claim_id=http_claim, command="true"),
    }
    # Whose CPU time each kind of call costs: the server process (with its sandbox) or, for
    # the direct calls, the supervisor this process runs.
    spenders = {
        "direct": child_running(str(SUPERVISOR_SOURCE)),
        "stdio": child_running("--stdio"),
        "http": child_running("--http"),
    }
    samples: dict[str, list[float]] = {name: [] for name in actions}
    cpu: dict[str, float] = {}
    client_cpu = dict.fromkeys(actions, 0.0)
    for number in range(WARMUP + CALLS):
        if number == WARMUP:
            cpu = {name: process_tree_cpu_seconds(pid) for name, pid in spenders.items()}
        for name, action in actions.items():
            began = time.process_time()
            elapsed = await timed(action)
            if number >= WARMUP:
                samples[name].append(elapsed)
                client_cpu[name] += (time.process_time() - began) * 1000 / CALLS
    for name, pid in spenders.items():
        cpu[name] = (process_tree_cpu_seconds(pid) - cpu[name]) * 1000 / CALLS
    return samples, cpu, client_cpu


async def http_throughput(url: str, repo: Path, server_arg: str = "--http") -> dict[str, float]:
    """`sandbox_exec` calls per second from CLIENTS concurrent clients, and the CPU time per
    call of the server (with its sandbox; the child with `server_arg` on its command line) and
    of the clients (this process)."""
    async with http_client(url) as admin:
        started = await call(admin, "start_campaign", spec=spec(repo, CLIENTS))
    campaign_id = started["campaign_id"]
    server = child_running(server_arg)
    ready = anyio.Event()
    arrived = 0
    clock: dict[str, float] = {}

    async def one(number: int) -> None:
        nonlocal arrived
        async with http_client(url) as client:
            claim = await call(client, "claim_trajectory", campaign_id=campaign_id, wait_s=60)
            await call(client, "sandbox_exec", claim_id=claim["claim_id"], command="true")
            arrived += 1
            if arrived == CLIENTS:
                clock["start"] = time.perf_counter()
                clock["server"] = process_tree_cpu_seconds(server)
                clock["clients"] = time.process_time()
                ready.set()
            await ready.wait()
            for _ in range(CALLS_PER_CLIENT):
                await call(client, "sandbox_exec", claim_id=claim["claim_id"], command="true")

    async with anyio.create_task_group() as group:
        for number in range(CLIENTS):
            group.start_soon(one, number)
    elapsed = time.perf_counter() - clock["start"]
    calls = CLIENTS * CALLS_PER_CLIENT
    figures = {
        "http_calls_per_s_32": calls / elapsed,
        "http_server_cpu_ms_32": (process_tree_cpu_seconds(server) - clock["server"])
        * 1000
        / calls,
        "http_clients_cpu_ms_32": (time.process_time() - clock["clients"]) * 1000 / calls,
    }
    async with http_client(url) as admin:
        await call(admin, "cancel_campaign", campaign_id=campaign_id)
    return figures


async def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="evs-bench-mcp-") as tmp:
        root = Path(tmp)
        repo = git_repo(root / "repo")
        async with (
            LocalBackend() as backend,
            await (await backend.instance(InstanceSpec(path=str(repo)))).workspace(
                "direct"
            ) as workspace,
            stdio_client(root / "stdio-state") as stdio_session,
            # HTTP clients may name host paths only under directories the operator allows.
            http_server(root / "http-state", "--allow-paths", str(root)) as url,
            http_client(url) as http_session,
        ):
            samples, cpu, client_cpu = await interleaved_latencies(
                workspace, stdio_session, http_session, repo
            )
            throughput = await http_throughput(url, repo)
    direct, stdio, http = samples["direct"], samples["stdio"], samples["http"]
    for name, values in samples.items():
        print(
            f"{name:7} p50 {p50(values):.2f} ms  p95 {p95(values):.2f} ms  "
            f"CPU {cpu[name]:.2f} ms per call (caller {client_cpu[name]:.2f} ms)",
            file=sys.stderr,
        )
    print(
        f"http    {throughput['http_calls_per_s_32']:.0f} calls/s with {CLIENTS} clients; CPU "
        f"per call: server {throughput['http_server_cpu_ms_32']:.2f} ms, "
        f"clients {throughput['http_clients_cpu_ms_32']:.2f} ms",
        file=sys.stderr,
    )
    return {
        **{key: round(value, 2) for key, value in throughput.items()},
        "stdio_server_cpu_ms": round(cpu["stdio"], 2),
        "http_server_cpu_ms": round(cpu["http"], 2),
        "direct_sandbox_cpu_ms": round(cpu["direct"], 2),
        **{f"{name}_client_cpu_ms": round(value, 2) for name, value in client_cpu.items()},
        "stdio_exec_p50_ms": round(p50(stdio), 2),
        "stdio_exec_p95_ms": round(p95(stdio), 2),
        "http_exec_p50_ms": round(p50(http), 2),
        "http_exec_p95_ms": round(p95(http), 2),
        "direct_exec_p50_ms": round(p50(direct), 2),
        "calls": CALLS,
    }


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("bench/mcp.py needs root (workspaces use namespaces and overlayfs)")
    load = LoadRecord()
    figures = load.finish(anyio.run(main))
    write_results("mcp", figures)
    print(json.dumps(figures, indent=2))
    print(describe_load(figures))
