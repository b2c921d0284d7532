"""Shared by the server tests: specs, git repositories as task instances, checked tool calls."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.streams.buffered
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

#: Both protocol eras a client can speak: the initialize handshake and 2026-07-28.
MODES = ["legacy", "2026-07-28"]

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"


def require_root() -> None:
    """Sandboxes need namespaces and overlayfs: fail under CI, skip elsewhere."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("needs root for mount namespaces and overlayfs")
        pytest.skip("needs root for mount namespaces and overlayfs")


def answer_spec(count: int, agent: str = "oracle", **fields: Any) -> dict[str, Any]:
    """Answer-only tasks t1..tN (gold answer N squared), graded by exact match."""
    tasks = [
        {"id": f"t{n}", "prompt": f"{n} squared?", "answer": str(n * n)}
        for n in range(1, count + 1)
    ]
    spec: dict[str, Any] = {"name": "answers", "tasks": tasks, "agent": {"type": agent}}
    spec["limits"] = {"retry_base_delay_s": 0.0}
    spec.update(fields)
    return spec


def git_repo(path: Path, content: str = BUGGY) -> Path:
    """A committed repository with calc.py: the instance of a local-backend task."""
    path.mkdir(parents=True)
    (path / "calc.py").write_text(content)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    for command in (
        ["git", "init", "-q", "."],
        [*git, "add", "-A"],
        [*git, "commit", "-qm", "base"],
    ):
        subprocess.run(command, cwd=path, check=True)
    return path


def repo_spec(root: Path, count: int, lease_s: float = 300.0, **limits: Any) -> dict[str, Any]:
    """External trajectories over `count` repository tasks (one instance each)."""
    tasks = [
        {"id": f"calc{n}", "prompt": "make add() add", "path": str(git_repo(root / f"repo{n}"))}
        for n in range(count)
    ]
    limits.setdefault("concurrency", max(count, 1))
    limits.setdefault("per_instance", 4)
    return {
        "name": "external",
        "tasks": tasks,
        "agent": {"type": "external", "lease_s": lease_s},
        "scorer": {"type": "python", "factory": "tests.server.helpers:diff_scorer"},
        "limits": limits,
    }


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Calls a tool that must succeed; returns its structured result."""
    result = await client.call_tool(tool, arguments)
    text = " ".join(getattr(block, "text", "") for block in result.content)
    assert not result.is_error, f"{tool} failed: {text}"
    structured: dict[str, Any] | None = result.structured_content
    assert structured is not None
    return structured


async def call_error(client: Client, tool: str, **arguments: Any) -> str:
    """Calls a tool that must fail; returns the error text the model would read."""
    result = await client.call_tool(tool, arguments)
    text = " ".join(getattr(block, "text", "") for block in result.content)
    assert result.is_error, f"{tool} succeeded: {result.structured_content}"
    return text


def diff_scorer(options: dict[str, Any]) -> Any:
    """A scorer that resolves a trajectory when its patch turns `a - b` into `a + b`."""
    from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext

    class DiffScorer(Scorer):
        async def score(self, context: ScoringContext) -> ScoreResult:
            patch = context.submission.patch or ""
            fixed = "+    return a + b" in patch
            return ScoreResult(
                resolved=fixed, score=float(fixed), status="resolved" if fixed else "failed"
            )

    return DiffScorer()


REPO = Path(__file__).resolve().parents[2]
TOKEN = "test-token-0123456789abcdef"


def server_command(state_dir: Path, *transport: str) -> list[str]:
    """The command line of a real server process (the installed CLI's module)."""
    return [sys.executable, "-m", "mcp_evalserver.cli", "--state-dir", str(state_dir), *transport]


def stdio_client(state_dir: Path, mode: str = "auto", **options: Any) -> Client:
    """A client that starts `mcp-evalserver --stdio` as its subprocess (`options`: the
    `Client`'s, e.g. a `logging_callback`)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=server_command(state_dir, "--stdio")[1:],
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
async def http_server(state_dir: Path, *options: str, token: str = TOKEN) -> AsyncIterator[str]:
    """Runs `mcp-evalserver --http --port 0 [options]` as a subprocess; yields its MCP URL."""
    command = server_command(state_dir, "--http", "--port", "0", "--token", token, *options)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = await anyio.open_process(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL)
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
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.terminate()
                with anyio.move_on_after(15):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            group.cancel_scope.cancel()
