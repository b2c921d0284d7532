"""Issue 39's figures for bench/front.py, measured in interleaved rounds.

On a shared machine the load moves by the minute: a floor measured minutes before its tool
moved the issue's ratios by up to a third between runs. So every target is prepared once (its
server up, its sessions open, its claims held) and then measured in short rounds, one target
after the other, the order reversed every other round so that a load rising or falling weighs
on both ends of a ratio alike. Each figure is the median over the rounds, each ratio a ratio of
medians, and every round's figures stay in the results (`issue_rounds`).

The targets: the MCP SDK's bare server (bench/bare_sdk.py) in its JSON and SSE modes, our
trivial call (`list_campaigns` on a server that never had a campaign), `sandbox_exec` of
`true`, `read_file` of a 4 KB file and `write_file` of a small one (one 1-worker server, one
claim per session), the kernel's exec floor (bench/sandbox.py's FLOOR_SCRIPT in a local workspace's
namespaces) and, with a base checkout, that code's server's `sandbox_exec` (calls/s beside
ours). This module also holds the load pieces bench/front.py's other figures use (TOOLS,
repo_spec, the CPU split of a server's tree, the bare SDK's process).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bench.common import child_pids, child_running, process_cpu_seconds
from bench.common import process_tree_cpu_seconds as process_tree_cpu_seconds
from bench.sandbox import FLOOR_SCRIPT
from mcp_evalserver.sandbox.base import InstanceSpec, Workspace
from mcp_evalserver.sandbox.local import LocalBackend
from testsupport.rawmcp import RawSession
from testsupport.repos import BUGGY, make_git_repo
from testsupport.servers import TOKEN, call, http_client, http_server

CLIENTS, WARMUP = 32, 5
#: Warm-up calls per session before each round is measured (the target sat idle meanwhile).
ROUND_WARMUP = 2
#: The file `read_file` reads: issue 39's 4 KB of text, 64 lines of 64 bytes (source code's
#: shape: the answer numbers each line).
READ_FILE = "notes.txt"
READ_TEXT = "".join(f"{n:04d} {'x' * 58}\n" for n in range(64))
#: The workspace tools the cheap client calls, with their arguments and the prefix of their
#: keys: `sandbox_exec` of `true` (the supervisor's holder starts a process with `vfork`: the
#: tool cheapest for the sandbox), `read_file` of the task's 4 KB file and `write_file` of a
#: small one.
TOOLS: dict[str, tuple[dict[str, Any], str]] = {
    "sandbox_exec": ({"command": "true"}, ""),
    "read_file": ({"path": READ_FILE}, "read_file_"),
    "write_file": ({"path": "scratch.txt", "content": "x = 1\n" * 40}, "write_file_"),
}
#: The issue's targets: ratios at most these, except `_vs_base`, at least.
TARGETS = {
    "trivial_vs_bare_sdk_json": 1.25,
    "sandbox_exec_vs_exec_floor": 2.5,
    "read_file_vs_trivial": 1.5,
    "calls_per_s_1_worker_vs_base": 1.5,
}


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def bench_repo(path: Path) -> Path:
    """The benches' task: the demo's calc.py and the 4 KB file `read_file` reads."""
    return make_git_repo(path, {"calc.py": BUGGY, READ_FILE: READ_TEXT})


def repo_spec(repo: Path, samples: int, name: str = "front") -> dict[str, Any]:
    return {
        "name": name,
        "tasks": [{"id": name, "prompt": "none", "path": str(repo)}],
        "samples": samples,
        "agent": {"type": "external"},
        "limits": {"concurrency": samples, "per_instance": samples},
    }


def front_pids(parent: int) -> list[int]:
    """The server `parent` and its workers: the front door's processes, without its sandbox."""
    workers = []
    for pid in child_pids(parent):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"--http" in f.read():
                    workers.append(pid)
        except OSError:
            continue
    return [parent, *workers]


def server_cpu_seconds(server: int) -> tuple[float, float]:
    """CPU seconds of the server's tree, and of its parent and workers alone (the rest of the
    tree is its sandbox: the instance's supervisor and the commands it ran and reaped)."""
    front = sum(process_cpu_seconds(pid) for pid in front_pids(server))
    return process_tree_cpu_seconds(server), front


@contextlib.asynccontextmanager
async def bare_sdk(json_response: bool) -> AsyncIterator[tuple[int, int]]:
    """The SDK's bare server (bench/bare_sdk.py) as a subprocess: yields (port, pid)."""
    command = [sys.executable, "-m", "bench.bare_sdk", *(["--json"] if json_response else [])]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, cwd=Path(__file__).resolve().parents[1]
    )
    try:
        assert process.stdout is not None
        port = int(await asyncio.wait_for(process.stdout.readline(), 60))
        yield port, process.pid
    finally:
        process.kill()
        await process.wait()


@dataclass
class Calls:
    """One tool called by CLIENTS open sessions (each with its own arguments: its claim), and
    the server's process tree whose CPU they cost."""

    sessions: list[RawSession]
    tool: str
    arguments: list[dict[str, Any]]
    server: int

    async def measure(self, calls_per_client: int) -> dict[str, float]:
        """Calls/s and CPU ms per call of the server (`cpu_ms`), split into its parent and
        workers (`workers_cpu_ms`) and the rest of its tree (`sandbox_cpu_ms`), and of the
        clients (this process)."""
        await self._run(ROUND_WARMUP)
        began, (tree, front), client = (
            time.perf_counter(), server_cpu_seconds(self.server), time.process_time())  # fmt: skip
        await self._run(calls_per_client)
        elapsed = time.perf_counter() - began
        client_end, (tree_end, front_end) = time.process_time(), server_cpu_seconds(self.server)
        calls = len(self.sessions) * calls_per_client
        return {
            "calls_per_s": calls / elapsed,
            "cpu_ms": (tree_end - tree) * 1000 / calls,
            "workers_cpu_ms": (front_end - front) * 1000 / calls,
            "sandbox_cpu_ms": (tree_end - tree - (front_end - front)) * 1000 / calls,
            "client_cpu_ms": (client_end - client) * 1000 / calls,
        }

    async def _run(self, count: int) -> None:
        async def one(session: RawSession, arguments: dict[str, Any]) -> None:
            for _ in range(count):
                await session.call_tool(self.tool, arguments)

        await asyncio.gather(
            *(one(s, a) for s, a in zip(self.sessions, self.arguments, strict=True))
        )


@dataclass
class ExecFloor:
    """Bare posix_spawns of `true` by a process that joined the namespaces of `marker`'s
    sleep, a command running in a local workspace (FLOOR_SCRIPT, as bench/sandbox.py)."""

    marker: str
    spawns: int

    async def measure(self, calls_per_client: int) -> dict[str, float]:
        """CPU ms per spawn (`cpu_ms`); `calls_per_client` is the Calls targets' measure."""
        for _ in range(200):  # until the marked sleep runs (the first round waits for it)
            done = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-S", "-c", FLOOR_SCRIPT, self.marker, str(self.spawns),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)  # fmt: skip
            out, err = await done.communicate()
            if done.returncode == 0 or b"ValueError" not in err:
                break
            await asyncio.sleep(0.05)
        if done.returncode != 0:
            raise RuntimeError(f"the floor's script failed: {err.decode(errors='replace')}")
        measured: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
        return {"cpu_ms": float(measured["cpu_ms"])}


class Target(Protocol):
    """What a round measures: a server's tool calls (Calls) or the kernel's floor."""

    async def measure(self, calls_per_client: int) -> dict[str, float]: ...


async def open_sessions(port: int) -> list[RawSession]:
    sessions = [RawSession("127.0.0.1", port, TOKEN) for _ in range(CLIENTS)]
    for session in sessions:
        await session.open()
    return sessions


async def claimed_sessions(
    stack: contextlib.AsyncExitStack, url: str, repo: Path
) -> tuple[list[RawSession], list[str]]:
    """CLIENTS sessions on the server at `url`, each having claimed a trajectory of a new
    campaign on `repo` (cancelled, and the sessions closed, when `stack` closes)."""
    async with http_client(url) as admin:
        started = await call(admin, "start_campaign", spec=repo_spec(repo, CLIENTS))

    async def cancel() -> None:
        async with http_client(url) as admin:
            await call(admin, "cancel_campaign", campaign_id=started["campaign_id"])

    stack.push_async_callback(cancel)
    sessions = await open_sessions(port_of(url))
    for session in sessions:
        stack.push_async_callback(session.close)
    claims = []
    for session in sessions:
        claim = await session.call_tool(
            "claim_trajectory", {"campaign_id": started["campaign_id"], "wait_s": 60}
        )
        claims.append(claim["claim_id"])
    return sessions, claims


async def plain_calls(stack: contextlib.AsyncExitStack, port: int, server: int, tool: str) -> Calls:
    """`tool` with no arguments from CLIENTS sessions (closed when `stack` closes)."""
    sessions = await open_sessions(port)
    for session in sessions:
        stack.push_async_callback(session.close)
    return Calls(sessions, tool, [{}] * len(sessions), server)


async def exec_floor(stack: contextlib.AsyncExitStack, repo: Path, spawns: int) -> ExecFloor:
    """A local workspace on `repo` running a marked sleep for the floor's script to join, held
    until `stack` closes."""
    marker = f"{random.randrange(10**9, 2 * 10**9)}.5"  # a sleep no one else runs
    backend = await stack.enter_async_context(LocalBackend())
    instance = await backend.instance(InstanceSpec(path=str(repo), key="floor"))
    stack.push_async_callback(instance.aclose)
    ws: Workspace = await stack.enter_async_context(await instance.workspace("floor"))
    sleeper = asyncio.ensure_future(ws.exec(f"exec sleep {marker}", timeout=24 * 3600))

    async def stop() -> None:
        sleeper.cancel()
        await asyncio.gather(sleeper, return_exceptions=True)

    stack.push_async_callback(stop)
    return ExecFloor(marker, spawns)


async def prepare(
    stack: contextlib.AsyncExitStack,
    root: Path,
    repo: Path,
    url: str,
    base: Path | None,
    floor_spawns: int,
) -> dict[str, Target]:
    """Every target, up and ready, in the order a round measures them: each floor next to what
    is measured against it (the base's `sandbox_exec` next to ours)."""
    targets: dict[str, Target] = {}
    for mode in ("sse", "json"):
        port, pid = await stack.enter_async_context(bare_sdk(mode == "json"))
        targets[f"bare_sdk_{mode}"] = await plain_calls(stack, port, pid, "trivial")
    state = root / "state-trivial"  # no campaign ever: list_campaigns touches nothing
    trivial_url = await stack.enter_async_context(http_server(state, workers=1))
    targets["trivial"] = await plain_calls(
        stack, port_of(trivial_url), child_running(str(state)), "list_campaigns"
    )
    sessions, claims = await claimed_sessions(stack, url, repo)
    server = child_running(str(root / "state-1"))
    for tool in ("read_file", "write_file", "sandbox_exec"):
        arguments = [{"claim_id": claim, **TOOLS[tool][0]} for claim in claims]
        targets[tool] = Calls(sessions, tool, arguments, server)
        if tool == "write_file":
            targets["exec_floor"] = await exec_floor(stack, repo, floor_spawns)
    if base is not None:
        base_url = await stack.enter_async_context(
            http_server(root / "state-base", "--allow-paths", str(root), workers=1, repo=base)
        )
        sessions, claims = await claimed_sessions(stack, base_url, repo)
        arguments = [{"claim_id": claim, "command": "true"} for claim in claims]
        targets["base_sandbox_exec"] = Calls(
            sessions, "sandbox_exec", arguments, child_running(str(root / "state-base"))
        )
    return targets


async def measure_rounds(
    targets: dict[str, Target], rounds: int, calls_per_client: int
) -> list[dict[str, Any]]:
    """Each target once per round, the order reversed every other round; each round's figures
    with the load (1 minute) when it began."""
    measured: list[dict[str, Any]] = []
    for number in range(rounds):
        names = list(targets) if number % 2 == 0 else list(reversed(targets))
        one: dict[str, Any] = {"load_average": os.getloadavg()[0]}
        for name in names:
            one[name] = await targets[name].measure(calls_per_client)
        measured.append(one)
        print(f"round {number + 1}/{rounds} (load {one['load_average']:.2f}): "
              + ", ".join(f"{n} {one[n]['cpu_ms']:.3f} ms" for n in targets),
              file=sys.stderr)  # fmt: skip
    return measured


def cpu_bound_calls_per_s(figures: dict[str, float], workers: int = 1) -> float:
    """The calls/s a server's CPU per call allows on this machine's CPUs, whatever the load
    leaves it: each worker runs on one CPU at most (`workers` x 1000 / the workers' ms), and
    everything (server, sandbox, clients) shares the CPUs."""
    cpus = len(os.sched_getaffinity(0))
    everything = figures["cpu_ms"] + figures["client_cpu_ms"]
    return min(workers * 1000 / figures["workers_cpu_ms"], cpus * 1000 / everything)


def total_ms(round_: dict[str, Any], name: str) -> float:
    """A target's whole CPU per call in one round (server or floor, the clients apart)."""
    return float(round_[name]["cpu_ms"])


#: The issue's ratios, each measured per round: a target's CPU over its floor's, and our
#: calls/s over the base's (measured, and as the CPU per call bounds them).
RATIOS: dict[str, Callable[[dict[str, Any]], float]] = {
    "trivial_vs_bare_sdk_json": lambda r: total_ms(r, "trivial") / total_ms(r, "bare_sdk_json"),
    "sandbox_exec_vs_exec_floor": lambda r: total_ms(r, "sandbox_exec") / total_ms(r, "exec_floor"),
    "read_file_vs_trivial": lambda r: total_ms(r, "read_file") / total_ms(r, "trivial"),
    "write_file_vs_trivial": lambda r: total_ms(r, "write_file") / total_ms(r, "trivial"),
    "calls_per_s_1_worker_vs_base": lambda r: (
        r["sandbox_exec"]["calls_per_s"] / r["base_sandbox_exec"]["calls_per_s"]
    ),
    # The same from the CPU per call: what a shared machine leaves each server moves its
    # calls/s by the second, far less what each call costs.
    "calls_per_s_bound_1_worker_vs_base": lambda r: (
        cpu_bound_calls_per_s(r["sandbox_exec"]) / cpu_bound_calls_per_s(r["base_sandbox_exec"])
    ),
}


def summarize(measured: list[dict[str, Any]], base: Path | None) -> dict[str, Any]:
    """The results file's issue figures: medians over the rounds, ratios of medians (and each
    round's ratio beside them, for their spread), targets and whether each is met."""

    def median(name: str, figure: str = "cpu_ms") -> float:
        return statistics.median(float(r[name][figure]) for r in measured)

    # A round made of every figure's median: the ratios of medians, by RATIOS's formulas.
    middle = {
        name: {figure: median(name, figure) for figure in values}
        for name, values in measured[0].items()
        if name != "load_average"
    }
    keys = [key for key in RATIOS if base is not None or not key.endswith("_vs_base")]
    ratios = {key: RATIOS[key](middle) for key in keys}
    figures: dict[str, Any] = {
        "bare_sdk_cpu_ms": {mode: middle[f"bare_sdk_{mode}"]["cpu_ms"] for mode in ("sse", "json")},
        "bare_sdk_calls_per_s": {
            mode: middle[f"bare_sdk_{mode}"]["calls_per_s"] for mode in ("sse", "json")
        },
        "trivial_cpu_ms": middle["trivial"]["cpu_ms"],
        "trivial_calls_per_s": middle["trivial"]["calls_per_s"],
        "exec_floor_cpu_ms": middle["exec_floor"]["cpu_ms"],
        "cpu_ms_per_call": {
            tool: {
                "workers": middle[tool]["workers_cpu_ms"],
                "sandbox": middle[tool]["sandbox_cpu_ms"],
                "total": middle[tool]["cpu_ms"],
            }
            for tool in ("trivial", *TOOLS)
        },
    }
    if base is not None:
        figures["base_calls_per_s_1_worker"] = {
            "base": [r["base_sandbox_exec"]["calls_per_s"] for r in measured],
            "new": [r["sandbox_exec"]["calls_per_s"] for r in measured],
            "base_tree": str(base),
            "ratio": ratios["calls_per_s_1_worker_vs_base"],
        }
    targets = {key: target for key, target in TARGETS.items() if key in ratios}
    met = {
        key: ratios[key] >= target if key.endswith("_vs_base") else ratios[key] <= target
        for key, target in targets.items()
    }
    by_round = {key: [RATIOS[key](r) for r in measured] for key in keys}
    spread = {key: (max(values) - min(values)) / ratios[key] for key, values in by_round.items()}
    return figures | {
        "ratios": ratios,
        "targets": targets,
        "met": met,
        "ratios_by_round": by_round,
        "ratios_spread": spread,
        "issue_rounds": measured,
        "issue_rounds_count": len(measured),
    }


async def issue_figures(
    root: Path,
    repo: Path,
    url: str,
    base: Path | None,
    rounds: int,
    calls_per_client: int,
    floor_spawns: int,
) -> dict[str, Any]:
    """Issue 39's figures: our 1-worker server at `url` (state dir `root`/state-1, allowed
    the paths under `root`, where `repo` is), the floors and, with `base`, that checkout's
    server; `rounds` interleaved rounds of `calls_per_client` calls per session each."""
    async with contextlib.AsyncExitStack() as stack:
        targets = await prepare(stack, root, repo, url, base, floor_spawns)
        measured = await measure_rounds(targets, rounds, calls_per_client)
    figures = summarize(measured, base)
    figures["issue_calls_per_round"] = CLIENTS * calls_per_client
    figures["exec_floor_spawns_per_round"] = floor_spawns
    return figures
