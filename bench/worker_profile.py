"""cProfile of one `--http --workers 1` server serving workspace calls, per call.

Run `python bench/worker_profile.py` as root (workspaces need namespaces and overlayfs). It
starts two servers of this checkout (one with no campaign, for the trivial call
`list_campaigns`; one with an external campaign of a small repository), each in a process that
turns cProfile on at SIGUSR1 and off at SIGUSR2, and drives them with bench/front.py's cheap
clients (32 sessions, each on its own claim): a warm-up, then `--calls` calls of each tool
profiled. It prints, per tool, the server's Python function calls per call (coroutine
resumptions count: each is a call to cProfile) and its CPU ms per call while profiled (cProfile
inflates it: compare tools of one run, never with bench/front.py's figures), then the functions
whose calls per call differ most from the trivial call's. `--tools` picks tools,
`--top` how many functions are listed, `--keep DIR` keeps the profiles (pstats files).

Function calls per call are what this measures best: unlike CPU time, they do not move with the
load of a shared machine. Writes bench/results/worker_profile.json (calls per call, CPU per
call, the load).
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.worker_profile`
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import re
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import LoadRecord, describe_load, process_cpu_seconds, write_results
from bench.front_ratios import CLIENTS, TOOLS, bench_repo, port_of, repo_spec
from testsupport.rawmcp import RawSession
from testsupport.servers import REPO, TOKEN

WARMUP_CALLS = 10  # per session, before profiling: first-use loading, caches, claims
TRIVIAL = "list_campaigns"
#: The line a profiled server prints once it has written its profile.
PROFILE_WRITTEN = "worker_profile: profile written"

#: pstats' key of a function: (file, line, name).
Function = tuple[str, int, str]


def serve(profile_path: str, argv: list[str]) -> int:
    """Runs the CLI with `argv`, cProfile on from SIGUSR1 to SIGUSR2 (written to
    `profile_path` then). The signals run their handlers on the main thread: the event loop's."""
    from mcp_evalserver.cli.main import main

    profiler = cProfile.Profile()

    def start(signum: int, frame: object) -> None:
        profiler.enable()

    def stop(signum: int, frame: object) -> None:
        profiler.disable()
        profiler.dump_stats(profile_path)
        profiler.clear()
        print(PROFILE_WRITTEN, file=sys.stderr, flush=True)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    return main(argv)


class Server:
    """A profiled server process serving `state_dir` over HTTP; its profiles go to
    `profile_path`."""

    def __init__(self, state_dir: Path, allowed: Path, profile_path: Path) -> None:
        self.state_dir, self.allowed, self.profile_path = state_dir, allowed, profile_path
        self.process: asyncio.subprocess.Process | None = None
        self.url = ""
        self.said: list[str] = []  # its stderr, shown if it ends early
        self.written = asyncio.Event()  # it printed PROFILE_WRITTEN
        self._drain: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Server:
        argv = ["--state-dir", str(self.state_dir), "--http", "--port", "0", "--workers", "1",
                "--token", TOKEN, "--allow-paths", str(self.allowed)]  # fmt: skip
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.worker_profile", "--serve", str(self.profile_path),
            "--", *argv, cwd=REPO, stderr=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
        assert self.process.stderr is not None
        async with asyncio.timeout(60):
            while "serving MCP at " not in (
                line := (await self.process.stderr.readline()).decode()
            ):
                if not line:
                    raise RuntimeError("the profiled server ended before serving")
        self.url = line.rsplit(" ", 1)[1].strip()
        self._drain = asyncio.create_task(self._read_stderr(self.process.stderr))
        return self

    async def _read_stderr(self, stderr: asyncio.StreamReader) -> None:
        while line := (await stderr.readline()).decode(errors="replace"):
            self.said.append(line)
            if line.strip() == PROFILE_WRITTEN:
                self.written.set()

    async def __aexit__(self, *exc: object) -> None:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.terminate()
        try:
            async with asyncio.timeout(15):
                await self.process.wait()
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        if exc[0] is not None:
            print("".join(self.said[-40:]), file=sys.stderr)

    async def profiled(self, calls: list[Any], kept_as: Path) -> tuple[pstats.Stats, float]:
        """Runs the coroutines `calls` (all at once) with the profiler on: the profile (kept
        at `kept_as`), and the server's CPU seconds meanwhile."""
        assert self.process is not None
        pid = self.process.pid
        self.written.clear()
        os.kill(pid, signal.SIGUSR1)
        began = process_cpu_seconds(pid)
        await asyncio.gather(*calls)
        cpu = process_cpu_seconds(pid) - began
        os.kill(pid, signal.SIGUSR2)
        async with asyncio.timeout(60):
            await self.written.wait()
        self.profile_path.rename(kept_as)
        return pstats.Stats(str(kept_as)), cpu


async def sessions_of(url: str, count: int) -> list[RawSession]:
    sessions = [RawSession("127.0.0.1", port_of(url), TOKEN) for _ in range(count)]
    for session in sessions:
        await session.open()
    return sessions


async def calling(session: RawSession, tool: str, arguments: dict[str, Any], n: int) -> None:
    for _ in range(n):
        await session.call_tool(tool, arguments)


def per_call(stats: pstats.Stats, calls: int) -> dict[Function, tuple[float, float]]:
    """Each function's calls (primitive and recursive) and own time (ms) per tool call."""
    table: dict[Function, tuple[float, float]] = {}
    for (path, line, name), (_, ncalls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        # A builtin is named with its address ("... of type object at 0x7f..."), which
        # differs between the two servers: without it, the same function in both.
        function = (path, line, _ADDRESS.sub("", name))
        before = table.get(function, (0.0, 0.0))
        table[function] = (before[0] + ncalls / calls, before[1] + tottime * 1000 / calls)
    return table


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def label(function: Function) -> str:
    path, line, name = function
    for marker in ("site-packages/", "mcp_evalserver/", "lib/python3"):
        if marker in path:
            path = path[path.index(marker) + (0 if marker == "mcp_evalserver/" else len(marker)) :]
            break
    return f"{path}:{line}({name})" if line else name


def differences(
    tool: dict[Function, tuple[float, float]],
    trivial: dict[Function, tuple[float, float]],
    top: int,
) -> list[str]:
    """The `top` functions whose calls per call differ most from the trivial call's."""
    rows = []
    for function in tool.keys() | trivial.keys():
        calls, own = tool.get(function, (0.0, 0.0))
        base_calls, base_own = trivial.get(function, (0.0, 0.0))
        rows.append((own - base_own, calls - base_calls, function))
    rows.sort(key=lambda row: abs(row[1]), reverse=True)
    return [f"  {own:+7.4f} ms {calls:+7.1f} calls  {label(f)}" for own, calls, f in rows[:top]]


async def run(
    tools: list[str], calls_per_session: int, top: int, keep: Path | None
) -> dict[str, Any]:
    results: dict[str, Any] = {"calls_per_call": {}, "cpu_ms_per_call_profiled": {}}
    with tempfile.TemporaryDirectory(prefix="evs-bench-profile-") as tmp:
        root = Path(tmp)
        out = keep or root
        out.mkdir(parents=True, exist_ok=True)
        repo = bench_repo(root / "repo")
        tables: dict[str, dict[Function, tuple[float, float]]] = {}
        calls = CLIENTS * calls_per_session

        def record(tool: str, stats: pstats.Stats, cpu: float) -> None:
            total = stats.total_calls  # type: ignore[attr-defined]
            results["calls_per_call"][tool] = total / calls
            results["cpu_ms_per_call_profiled"][tool] = cpu * 1000 / calls
            tables[tool] = per_call(stats, calls)
            cpu_ms = cpu * 1000 / calls
            print(f"{tool}: {total / calls:,.0f} function calls per call, {cpu_ms:.3f} ms CPU "
                  f"per call profiled; load {os.getloadavg()[0]:.2f}", file=sys.stderr)  # fmt: skip

        async with Server(root / "state-trivial", root, root / "dump.prof") as server:
            sessions = await sessions_of(server.url, CLIENTS)
            await asyncio.gather(*(calling(s, TRIVIAL, {}, WARMUP_CALLS) for s in sessions))
            stats, cpu = await server.profiled(
                [calling(s, TRIVIAL, {}, calls_per_session) for s in sessions], out / "trivial.prof"
            )
            record("trivial", stats, cpu)
        async with Server(root / "state", root, root / "dump.prof") as server:
            sessions = await sessions_of(server.url, CLIENTS)
            admin = sessions[0]
            started = await admin.call_tool("start_campaign", {"spec": repo_spec(repo, CLIENTS)})
            claims = []
            for session in sessions:
                claim = await session.call_tool(
                    "claim_trajectory", {"campaign_id": started["campaign_id"], "wait_s": 60}
                )
                claims.append(claim["claim_id"])
            for tool in tools:
                arguments = TOOLS[tool][0]
                await asyncio.gather(*(
                    calling(s, tool, {"claim_id": c, **arguments}, WARMUP_CALLS)
                    for s, c in zip(sessions, claims, strict=True)))  # fmt: skip
                profiled = [
                    calling(s, tool, {"claim_id": c, **arguments}, calls_per_session)
                    for s, c in zip(sessions, claims, strict=True)
                ]
                stats, cpu = await server.profiled(profiled, out / f"{tool}.prof")
                record(tool, stats, cpu)
    for tool in tools:
        print(f"\n{tool} against the trivial call, per call (own time, calls):", file=sys.stderr)
        print("\n".join(differences(tables[tool], tables["trivial"], top)), file=sys.stderr)
    results["calls_per_session"] = calls_per_session
    results["sessions"] = CLIENTS
    return results


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        sys.exit(serve(sys.argv[2], sys.argv[4:]))
    if os.geteuid() != 0:
        sys.exit("bench/worker_profile.py needs root (workspaces use namespaces and overlayfs)")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--calls", type=int, default=100, help="calls per session profiled (32 sessions)"
    )
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"of {', '.join(TOOLS)}")
    parser.add_argument("--top", type=int, default=30, help="functions listed per tool")
    parser.add_argument("--keep", type=Path, help="a folder to keep the pstats files in")
    arguments = parser.parse_args()
    load = LoadRecord()
    figures = asyncio.run(
        run(arguments.tools.split(","), arguments.calls, arguments.top, arguments.keep)
    )
    figures = load.finish(figures)
    write_results("worker_profile", figures)
    print(json.dumps(figures, indent=2))
    print(describe_load(figures))
