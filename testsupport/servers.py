"""Real `mcp-evalserver` processes (stdio, HTTP) and the official SDK clients that talk to them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.streams.buffered
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from testsupport.answers import with_text_parts
from testsupport.rawmcp import RawSession

#: The repository root: servers run from it, with it on PYTHONPATH.
REPO = Path(__file__).resolve().parents[1]
TOKEN = "test-token-0123456789abcdef"


def server_command(state_dir: Path, *transport: str) -> list[str]:
    """The command line of a real server process (the installed CLI's module)."""
    return [sys.executable, "-m", "mcp_evalserver.cli", "--state-dir", str(state_dir), *transport]


def stdio_client(
    state_dir: Path, mode: str = "auto", *, server_args: Sequence[str] = (), **options: Any
) -> Client:
    """A client that starts `mcp-evalserver --stdio [server_args]` as its subprocess
    (`options`: the `Client`'s, e.g. a `logging_callback`)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=server_command(state_dir, "--stdio", *server_args)[1:],
        cwd=str(REPO),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return Client(params, mode=mode, **options)


@asynccontextmanager
async def http_client(
    url: str, token: str | None = TOKEN, mode: str = "auto", **options: Any
) -> AsyncIterator[Client]:
    """A connected streamable-HTTP client sending `token` as its bearer token (`options`: the
    `Client`'s)."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, **options) as client:
            yield client


@asynccontextmanager
async def http_server(
    state_dir: Path, *options: str, token: str = TOKEN, workers: int = 1, repo: Path = REPO
) -> AsyncIterator[str]:
    """Runs `mcp-evalserver --http --port 0 --workers N [options]` as a subprocess, from the
    checkout `repo` (another one: the code a bench compares against); yields its MCP URL."""
    transport = ("--http", "--port", "0", "--workers", str(workers), "--token", token)
    command = server_command(state_dir, *transport, *options)
    env = {**os.environ, "PYTHONPATH": str(repo)}
    process = await anyio.open_process(command, cwd=repo, env=env, stdout=subprocess.DEVNULL)
    found = anyio.Event()
    url: list[str] = []

    async def drain(stream: anyio.abc.ByteReceiveStream) -> None:
        # Read all the server's stderr (a full pipe would stall it), noting the URL line.
        buffered = anyio.streams.buffered.BufferedByteReceiveStream(stream)
        with contextlib.suppress(anyio.EndOfStream, anyio.IncompleteRead):
            while True:
                line = (await buffered.receive_until(b"\n", 1 << 20)).decode(errors="replace")
                if "serving MCP at " in line and not found.is_set():
                    url.append(line.rsplit(" ", 1)[1].strip())
                    found.set()

    async with process, anyio.create_task_group() as group:
        assert process.stderr is not None
        group.start_soon(drain, process.stderr)
        try:
            with anyio.fail_after(30):
                await found.wait()
            yield url[0]
        finally:
            await stop_process(process)
            group.cancel_scope.cancel()


async def stop_process(process: anyio.abc.Process) -> None:
    """SIGTERM, and SIGKILL if it still runs 15 s later; waits for its end (shielded: it runs
    in a `finally` whatever cancelled the test)."""
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            process.terminate()
        with anyio.move_on_after(15):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def sigkill(pid: int) -> None:
    """SIGKILLs a process and waits until it has exited, as a restart by a supervisor would:
    until then the kernel still queues new connections on its listening sockets (SO_REUSEPORT
    spreads them over every listener), and resets them when it closes them."""
    fd = os.pidfd_open(pid)
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        await anyio.wait_readable(fd)
    finally:
        os.close(fd)


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Calls a tool that must succeed; returns its structured result, with the parts of its
    text that it locates (`with_text_parts`)."""
    result = await client.call_tool(tool, arguments)
    text = "".join(getattr(block, "text", "") for block in result.content)
    assert not result.is_error, f"{tool} failed: {text}"
    structured: dict[str, Any] | None = result.structured_content
    assert structured is not None
    return with_text_parts(text, structured)


async def call_error(client: Client, tool: str, **arguments: Any) -> str:
    """Calls a tool that must fail; returns the error text the model would read."""
    result = await client.call_tool(tool, arguments)
    text = " ".join(getattr(block, "text", "") for block in result.content)
    assert result.is_error, f"{tool} succeeded: {result.structured_content}"
    return text


async def sessions_on_each_worker(url: str, workers: int, token: str = TOKEN) -> list[RawSession]:
    """Raw sessions opened until each of a `--workers N` server's workers holds one (the kernel
    spreads connections over them; a session id names its worker). The caller closes them."""
    address = httpx2.URL(url)
    sessions: dict[str, RawSession] = {}
    for _ in range(64):
        session = RawSession(str(address.host), int(address.port or 0), token)
        await session.open()
        worker = str(session.session_id).split("-", 1)[0]
        if worker in sessions:
            await session.close()
        else:
            sessions[worker] = session
        if len(sessions) == workers:
            return list(sessions.values())
    for session in sessions.values():
        await session.close()
    raise AssertionError(f"64 connections all reached {list(sessions)}")
