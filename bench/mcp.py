"""Benchmark of the MCP tool layer: `sandbox_exec` of `true`, end to end, over real transports.

Run `python bench/mcp.py` as root (workspaces need namespaces and overlayfs). Each transport
gets a real server process (`mcp-evalserver --stdio`, `mcp-evalserver --http`), a campaign of
external trajectories over a small git repository, and official `mcp` clients that claim them.
Prints the figures and writes bench/results/mcp.json:

- stdio_exec_p50_ms / _p95_ms: one client over stdio, `sandbox_exec` of `true`, one at a time.
- http_exec_p50_ms / _p95_ms: the same over streamable HTTP (bearer token, SSE responses).
- http_calls_per_s_32: `sandbox_exec` calls per second with 32 clients, each on its own claim.
- direct_exec_p50_ms: `true` straight through a workspace (no MCP), the floor the others add to.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python bench/mcp.py`, this directory comes first on sys.path and this file's name
# would shadow the `mcp` package: the repository root takes its place.
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [str(_BENCH.parent), *(p for p in sys.path if Path(p or ".").resolve() != _BENCH)]

import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import anyio  # noqa: E402
from mcp import Client  # noqa: E402

from mcp_evalserver.sandbox.base import InstanceSpec  # noqa: E402
from mcp_evalserver.sandbox.local import LocalBackend  # noqa: E402
from tests.server.helpers import call, git_repo, http_client, http_server, stdio_client  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "mcp.json"
WARMUP, CALLS, CLIENTS, CALLS_PER_CLIENT = 20, 300, 32, 40


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def p95(samples: list[float]) -> float:
    return sorted(samples)[max(0, round(0.95 * len(samples)) - 1)]


def spec(repo: Path, samples: int) -> dict[str, Any]:
    return {
        "name": "bench",
        "tasks": [{"id": "bench", "prompt": "none", "path": str(repo)}],
        "samples": samples,
        "agent": {"type": "external"},
        "limits": {"concurrency": samples, "per_instance": samples},
    }


async def exec_latencies(client: Client, repo: Path) -> list[float]:
    """Milliseconds per `sandbox_exec true`, after a warm-up."""
    started = await call(client, "start_campaign", spec=spec(repo, 1))
    claim = await call(client, "claim_trajectory", campaign_id=started["campaign_id"], wait_s=60)
    samples = []
    for number in range(WARMUP + CALLS):
        begin = time.perf_counter()
        await call(client, "sandbox_exec", claim_id=claim["claim_id"], command="true")
        if number >= WARMUP:
            samples.append((time.perf_counter() - begin) * 1000)
    await call(client, "cancel_campaign", campaign_id=started["campaign_id"])
    return samples


async def http_throughput(url: str, repo: Path) -> float:
    """`sandbox_exec` calls per second from CLIENTS concurrent clients."""
    async with http_client(url) as admin:
        started = await call(admin, "start_campaign", spec=spec(repo, CLIENTS))
    campaign_id = started["campaign_id"]
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
                ready.set()
            await ready.wait()
            for _ in range(CALLS_PER_CLIENT):
                await call(client, "sandbox_exec", claim_id=claim["claim_id"], command="true")

    async with anyio.create_task_group() as group:
        for number in range(CLIENTS):
            group.start_soon(one, number)
    elapsed = time.perf_counter() - clock["start"]
    async with http_client(url) as admin:
        await call(admin, "cancel_campaign", campaign_id=campaign_id)
    return CLIENTS * CALLS_PER_CLIENT / elapsed


async def direct_latencies(repo: Path) -> list[float]:
    async with LocalBackend() as backend:
        instance = await backend.instance(InstanceSpec(path=str(repo)))
        async with await instance.workspace("direct") as workspace:
            samples = []
            for number in range(WARMUP + CALLS):
                begin = time.perf_counter()
                await workspace.exec("true")
                if number >= WARMUP:
                    samples.append((time.perf_counter() - begin) * 1000)
    return samples


async def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="evs-bench-mcp-") as tmp:
        root = Path(tmp)
        repo = git_repo(root / "repo")
        direct = await direct_latencies(repo)
        print(f"direct  p50 {p50(direct):.2f} ms  p95 {p95(direct):.2f} ms", file=sys.stderr)
        async with stdio_client(root / "stdio-state") as client:
            stdio = await exec_latencies(client, repo)
        print(f"stdio   p50 {p50(stdio):.2f} ms  p95 {p95(stdio):.2f} ms", file=sys.stderr)
        async with http_server(root / "http-state") as url:
            async with http_client(url) as client:
                http = await exec_latencies(client, repo)
            print(f"http    p50 {p50(http):.2f} ms  p95 {p95(http):.2f} ms", file=sys.stderr)
            throughput = await http_throughput(url, repo)
        print(f"http    {throughput:.0f} calls/s with {CLIENTS} clients", file=sys.stderr)
    load = os.getloadavg()[0]
    return {
        "stdio_exec_p50_ms": round(p50(stdio), 2),
        "stdio_exec_p95_ms": round(p95(stdio), 2),
        "http_exec_p50_ms": round(p50(http), 2),
        "http_exec_p95_ms": round(p95(http), 2),
        "http_calls_per_s_32": round(throughput, 1),
        "direct_exec_p50_ms": round(p50(direct), 2),
        "calls": CALLS,
        "load_average_1m_at_end": round(load, 2),
        "cpus": os.cpu_count(),
    }


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("bench/mcp.py needs root (workspaces use namespaces and overlayfs)")
    figures = anyio.run(main)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
