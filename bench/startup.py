"""Benchmark of the servers' start (stdio and HTTP) and the stdio server's end, as an MCP
client meets them.

Run `python bench/startup.py` (`--rounds N`, default 9). Writes bench/results/startup.json:

- first_answer_p50_ms: from spawning `python -m mcp_evalserver.cli --stdio` (an empty state
  directory) to its answer to `initialize`, the first request a client sends; Claude Code
  gives a server about 3 s before it falls back to a second handshake, and the target is 1 s.
- python_pass_p50_ms: `python -c pass` spawned and ended (the interpreter's floor), and
  sdk_import_p50_ms: spawning a `python` that imports `mcp.server.mcpserver` (the MCP SDK,
  which any server on it imports) to its first printed line; first_answer_vs_python and
  first_answer_vs_sdk, the ratios.
- the same three as CPU time (user + system, 10 ms ticks), which a loaded machine stretches
  far less than wall time: first_answer_cpu_p50_ms (the server's CPU until its answer),
  python_pass_cpu_p50_ms, sdk_import_cpu_p50_ms, and first_answer_cpu_vs_sdk.
- stdin_end_exit_p50_ms and sigint_exit_p50_ms: from the end of stdin (the client closed its
  pipe), or from SIGINT (what Claude Code sends at exit), to the server's exit.
- http_healthz_p50_ms: from spawning `python -m mcp_evalserver.cli --http --workers 1` (an
  empty state directory, a free port) to its first 200 on `/healthz` (the port polled every
  2 ms), target 1 s; http_first_mcp_p50_ms: to its answer to an `initialize` sent over HTTP
  the moment `/healthz` answered (it waits for the app and its service to load); the ratios
  http_healthz_vs_python, http_healthz_vs_sdk, http_first_mcp_vs_sdk; the same two figures
  for `--workers 2` (http_workers2_healthz_p50_ms, http_workers2_first_mcp_p50_ms).

The kinds of process take turns in each round, so a change of load touches all alike.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.startup` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, LoadRecord, describe_load, p50, process_cpu_seconds, write_results
from testsupport.rawmcp import initialize_request

INITIALIZE = initialize_request("bench-startup")
EXIT_BOUND_S = 30.0
SDK_IMPORT = "import mcp.server.mcpserver; print(flush=True)"
TOKEN = "bench-startup-token-0123456789"
#: How often a client polls a port that does not listen yet.
POLL_S = 0.002
#: How long an HTTP server may take to end on SIGTERM before it is killed.
HTTP_END_S = 5.0


def _environment() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *([path] if path else [])])}


def _ms_to_exit(command: list[str]) -> tuple[float, float]:
    """Milliseconds from spawning `command` to its exit, and the CPU milliseconds it spent."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=_environment())
    _, status, usage = os.wait4(process.pid, 0)
    ended = time.perf_counter()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{command} exited {process.returncode}")
    return 1000 * (ended - started), 1000 * (usage.ru_utime + usage.ru_stime)


def _ms_to_first_line(command: list[str]) -> tuple[float, float]:
    """Milliseconds from spawning `command` to the first line it prints (its teardown apart),
    and the CPU milliseconds it had spent then."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, env=_environment())
    assert process.stdout is not None
    process.stdout.readline()
    printed = time.perf_counter()
    cpu = process_cpu_seconds(process.pid)  # exiting, not yet reaped: its figures stay
    process.wait(timeout=EXIT_BOUND_S)
    return 1000 * (printed - started), 1000 * cpu


def _server_round(state_dir: Path, end: str) -> tuple[float, float, float]:
    """Milliseconds to the answer to `initialize`, the CPU milliseconds the server had spent
    then, and the milliseconds from `end` (closing stdin, or SIGINT) to the server's exit."""
    command = [sys.executable, "-m", "mcp_evalserver.cli", "--stdio", "--state-dir", str(state_dir)]
    started = time.perf_counter()
    server = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_environment()
    )
    assert server.stdin is not None
    assert server.stdout is not None
    try:
        server.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        server.stdin.flush()
        answer = json.loads(server.stdout.readline())
        answered = time.perf_counter()
        cpu = process_cpu_seconds(server.pid)
        if "result" not in answer:
            raise RuntimeError(f"the server refused initialize: {answer}")
        ending = time.perf_counter()
        if end == "stdin":
            server.stdin.close()
        else:
            server.send_signal(signal.SIGINT)
        server.wait(timeout=EXIT_BOUND_S)
        ended = time.perf_counter()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return 1000 * (answered - started), 1000 * cpu, 1000 * (ended - ending)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _http(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One request on a new connection: the status and the body.

    Raises:
        ConnectionRefusedError: nothing listens on `port` yet.
    """
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}  # fmt: skip
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=EXIT_BOUND_S)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _http_round(state_dir: Path, workers: int) -> tuple[float, float]:
    """Milliseconds from spawning `--http --workers N` to its first 200 on `/healthz`, and to
    its answer to an `initialize` sent then."""
    port = _free_port()
    command = [sys.executable, "-m", "mcp_evalserver.cli", "--http", "--port", str(port),
               "--workers", str(workers), "--token", TOKEN,
               "--state-dir", str(state_dir)]  # fmt: skip
    started = time.perf_counter()
    server = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_environment()
    )
    try:
        while True:
            try:
                status, _ = _http(port, "GET", "/healthz")
                break
            except ConnectionRefusedError:
                if server.poll() is not None or time.perf_counter() - started > EXIT_BOUND_S:
                    raise RuntimeError(f"{command} never listened") from None
                time.sleep(POLL_S)
        healthy = time.perf_counter()
        if status != 200:
            raise RuntimeError(f"/healthz answered {status}")
        status, body = _http(port, "POST", "/mcp", json.dumps(INITIALIZE).encode())
        answered = time.perf_counter()
        if status != 200 or b'"result"' not in body:
            raise RuntimeError(f"initialize answered {status}: {body[:200]!r}")
    finally:
        # Its end is not measured: one still there 5 s after SIGTERM is killed (main's
        # `--workers` parent at 817d588 never ended, its workers spinning), SIGKILL taking the
        # workers with it.
        server.terminate()
        try:
            server.wait(timeout=HTTP_END_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return 1000 * (healthy - started), 1000 * (answered - started)


def measure(rounds: int) -> dict[str, Any]:
    load = LoadRecord()
    floor: list[float] = []
    sdk: list[float] = []
    first: list[float] = []
    cpu: dict[str, list[float]] = {"floor": [], "sdk": [], "first": []}
    exits: dict[str, list[float]] = {"stdin": [], "sigint": []}
    health: dict[int, list[float]] = {1: [], 2: []}
    first_mcp: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        for number in range(rounds):
            for kind, (wall_ms, cpu_ms) in (
                ("floor", _ms_to_exit([sys.executable, "-c", "pass"])),
                ("sdk", _ms_to_first_line([sys.executable, "-c", SDK_IMPORT])),
            ):
                (floor if kind == "floor" else sdk).append(wall_ms)
                cpu[kind].append(cpu_ms)
            end = "stdin" if number % 2 == 0 else "sigint"
            answered, answer_cpu, exited = _server_round(Path(tmp) / f"state{number}", end)
            first.append(answered)
            cpu["first"].append(answer_cpu)
            exits[end].append(exited)
            for workers in (1, 2):
                healthy, answered = _http_round(Path(tmp) / f"http{number}-{workers}", workers)
                health[workers].append(healthy)
                first_mcp[workers].append(answered)
    figures = {
        "rounds": rounds,
        "first_answer_p50_ms": p50(first),
        "first_answer_max_ms": max(first),
        "python_pass_p50_ms": p50(floor),
        "sdk_import_p50_ms": p50(sdk),
        "first_answer_vs_python": p50(first) / p50(floor),
        "first_answer_vs_sdk": p50(first) / p50(sdk),
        "first_answer_cpu_p50_ms": p50(cpu["first"]),
        "python_pass_cpu_p50_ms": p50(cpu["floor"]),
        "sdk_import_cpu_p50_ms": p50(cpu["sdk"]),
        "first_answer_cpu_vs_sdk": p50(cpu["first"]) / p50(cpu["sdk"]),
        "stdin_end_exit_p50_ms": p50(exits["stdin"]),
        "sigint_exit_p50_ms": p50(exits["sigint"]) if exits["sigint"] else None,
        "http_healthz_p50_ms": p50(health[1]),
        "http_healthz_max_ms": max(health[1]),
        "http_first_mcp_p50_ms": p50(first_mcp[1]),
        "http_healthz_vs_python": p50(health[1]) / p50(floor),
        "http_healthz_vs_sdk": p50(health[1]) / p50(sdk),
        "http_first_mcp_vs_sdk": p50(first_mcp[1]) / p50(sdk),
        "http_workers2_healthz_p50_ms": p50(health[2]),
        "http_workers2_first_mcp_p50_ms": p50(first_mcp[2]),
    }
    return load.finish(figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    figures = measure(max(args.rounds, 2))
    path = write_results("startup", figures)
    print(
        f"first answer {figures['first_answer_p50_ms']:.0f} ms p50 "
        f"(max {figures['first_answer_max_ms']:.0f}), "
        f"{figures['first_answer_vs_python']:.1f}x `python -c pass` "
        f"({figures['python_pass_p50_ms']:.0f} ms), "
        f"{figures['first_answer_vs_sdk']:.2f}x the SDK's import "
        f"({figures['sdk_import_p50_ms']:.0f} ms); CPU to the answer "
        f"{figures['first_answer_cpu_p50_ms']:.0f} ms, {figures['first_answer_cpu_vs_sdk']:.2f}x "
        f"the SDK's import ({figures['sdk_import_cpu_p50_ms']:.0f} ms); exit after stdin's end "
        f"{figures['stdin_end_exit_p50_ms']:.0f} ms, after SIGINT "
        f"{figures['sigint_exit_p50_ms']:.0f} ms; HTTP /healthz "
        f"{figures['http_healthz_p50_ms']:.0f} ms p50 (max {figures['http_healthz_max_ms']:.0f}, "
        f"{figures['http_healthz_vs_python']:.1f}x `python -c pass`, "
        f"{figures['http_healthz_vs_sdk']:.2f}x the SDK's import), first MCP answer "
        f"{figures['http_first_mcp_p50_ms']:.0f} ms; 2 workers: /healthz "
        f"{figures['http_workers2_healthz_p50_ms']:.0f} ms, first MCP answer "
        f"{figures['http_workers2_first_mcp_p50_ms']:.0f} ms; {describe_load(figures)} -> {path}"
    )


if __name__ == "__main__":
    main()
