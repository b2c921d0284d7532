"""An HTTP server answers `/healthz` from the moment it listens, before its app (the MCP SDK, the
engine, the service) has loaded; an MCP request sent meanwhile waits for the app and is
answered, never refused (server/http_server.py, transport/starting.py).

Each server runs held at the import of its app (`testsupport.import_gate`): whatever it answers
while held, it answered before the app loaded. Every worker of `--workers 2` is held alike.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import pytest

from testsupport.rawmcp import RawSession, initialize_request
from testsupport.servers import REPO, TOKEN, stop_process

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

#: The module the server imports to build its app: held until the test lets it go.
APP_MODULE = "mcp_evalserver.server.http_app"


class Output:
    """What a process printed, as it prints it."""

    def __init__(self) -> None:
        self.text = ""
        self.ended = False
        self._grew = anyio.Event()

    async def drain(self, stream: anyio.abc.ByteReceiveStream) -> None:
        async for chunk in stream:
            self.text += chunk.decode(errors="replace")
            self._grew.set()
            self._grew = anyio.Event()
        self.ended = True
        self._grew.set()

    async def said(self, text: str) -> None:
        """Waits until the process has printed `text`."""
        while text not in self.text:
            assert not self.ended, f"the process ended without saying {text!r}:\n{self.text}"
            await self._grew.wait()


@dataclass
class HeldServer:
    port: int
    process: anyio.abc.Process
    output: Output
    gate: int  # the descriptor of the lock file the test holds

    def release(self) -> None:
        """Lets every held process import its app."""
        fcntl.flock(self.gate, fcntl.LOCK_UN)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def held_server(tmp_path: Path, workers: int, *options: str) -> AsyncIterator[HeldServer]:
    """`mcp-evalserver --http --workers N [options]` on a free port, every process of it held
    at the import of its app; yields once each of them listens (they reached the gate after
    their socket listened)."""
    lock = tmp_path / "gate.lock"
    lock.touch()
    port = _free_port()
    reached_r, reached_w = os.pipe()
    arguments = ["--state-dir", str(tmp_path / "state"), "--http", "--port", str(port),
                 "--workers", str(workers), "--token", TOKEN, *options]  # fmt: skip
    command = [sys.executable, "-m", "testsupport.import_gate", str(lock), APP_MODULE,
               str(reached_w), *arguments]  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    output = Output()
    with open(lock, "rb") as gate:
        fcntl.flock(gate, fcntl.LOCK_EX)
        process = await anyio.open_process(
            command, cwd=REPO, env=environment, stderr=subprocess.STDOUT, pass_fds=[reached_w]
        )
        os.close(reached_w)
        server = HeldServer(port, process, output, gate.fileno())
        async with process, anyio.create_task_group() as group:
            assert process.stdout is not None
            group.start_soon(output.drain, process.stdout)
            try:
                with anyio.fail_after(60):
                    reached = 0
                    while reached < workers:
                        await anyio.wait_readable(reached_r)
                        got = os.read(reached_r, workers)
                        assert got, f"the server ended before loading its app:\n{output.text}"
                        reached += len(got)
                yield server
            finally:
                server.release()  # never leave a process held
                os.close(reached_r)
                await stop_process(process)


async def _post(port: int, message: dict[str, Any], token: str | None) -> anyio.abc.SocketStream:
    """A connection on which a whole MCP request has been sent: it is the server's now."""
    stream = await anyio.connect_tcp("127.0.0.1", port)
    body = json.dumps(message).encode()
    authorization = f"Authorization: Bearer {token}\r\n" if token is not None else ""
    head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{authorization}"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")  # fmt: skip
    await stream.send(head.encode() + body)
    return stream


async def _response(stream: anyio.abc.SocketStream) -> tuple[int, bytes]:
    """The status and body the server answered on `stream` (it closes it after)."""
    data = bytearray()
    async with stream:
        async for chunk in stream:
            data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        chunks = bytearray()
        while body:
            size_line, _, rest = body.partition(b"\r\n")
            size = int(size_line, 16)
            chunks += rest[:size]
            body = rest[size + 2 :] if size else b""
        body = bytes(chunks)
    return int(head.split(b" ", 2)[1]), body


def _message(body: bytes) -> dict[str, Any]:
    """The JSON-RPC message of a JSON or a one-message SSE answer."""
    for line in body.split(b"\n"):
        if line.startswith(b"data:"):
            body = line[5:]
            break
    message: dict[str, Any] = json.loads(body)
    return message


async def _get(port: int, path: str) -> httpx2.Response:
    # A new connection each time: with several workers, the kernel spreads them.
    async with httpx2.AsyncClient(limits=httpx2.Limits(max_keepalive_connections=0)) as http:
        return await http.get(f"http://127.0.0.1:{port}{path}")


@pytest.mark.parametrize("workers", [1, 2], ids=["workers1", "workers2"])
async def test_healthz_answers_before_the_app_loads_and_an_mcp_request_sent_then_is_answered(
    tmp_path: Path, workers: int
) -> None:
    async with held_server(tmp_path, workers) as server:
        with anyio.fail_after(60):
            health = await _get(server.port, "/healthz")
            ready = await _get(server.port, "/readyz")
            early = await _post(server.port, initialize_request("early"), TOKEN)
            anonymous = await _post(
                server.port, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, None
            )
        assert health.status_code == 200, server.output.text
        assert health.json()["status"] == "starting"
        assert (ready.status_code, ready.json()["status"]) == (503, "starting")

        server.release()
        with anyio.fail_after(120):
            status, body = await _response(early)
            refused, _ = await _response(anonymous)
        assert status == 200, body
        answer = _message(body)
        assert answer["id"] == 1
        assert answer["result"]["serverInfo"]["name"] == "mcp-evalserver"
        assert refused == 401, "a request that waited still needs the token"

        with anyio.fail_after(120):
            session = RawSession("127.0.0.1", server.port, TOKEN)
            await session.open()
            try:
                listed = await session.call_tool("list_campaigns", {})
            finally:
                await session.close()
            if workers > 1:  # one answer proves one worker ready; their parent says all are
                await server.output.said("workers on that port")
            answers = [await _get(server.port, "/readyz") for _ in range(8)]
        assert listed["total"] == 0
        assert {(a.status_code, a.json()["status"]) for a in answers} == {(200, "ok")}


@pytest.mark.parametrize("workers", [1, 2], ids=["workers1", "workers2"])
async def test_a_server_whose_app_fails_to_load_answers_503_stops_and_says_why(
    tmp_path: Path, workers: int
) -> None:
    missing = tmp_path / "missing"
    async with held_server(tmp_path, workers, "--allow-paths", str(missing)) as server:
        with anyio.fail_after(60):
            early = await _post(server.port, initialize_request("early"), TOKEN)
        server.release()
        with anyio.fail_after(120):
            status, body = await _response(early)
            code = await server.process.wait()
            await server.output.said(f"--allow-paths {missing}: not a directory")
        assert status == 503, body
        assert b"failed to start" in body
    assert code == 2, server.output.text
    # Said once, as the server's own error: not once per worker, nor as a repr.
    reason = f"mcp-evalserver: --allow-paths {missing}: not a directory\n"
    assert server.output.text.count(reason) == 1, server.output.text
    assert "InvalidInput(" not in server.output.text


@pytest.mark.parametrize("workers", [1, 2], ids=["workers1", "workers2"])
async def test_a_loaded_server_ends_on_sigterm(tmp_path: Path, workers: int) -> None:
    """The loaded app's lifespan is asked to end, not cancelled (a `--workers` parent on main
    817d588 never ended: its workers spun after SIGTERM)."""
    async with held_server(tmp_path, workers) as server:
        server.release()
        with anyio.fail_after(120):
            status, _ = await _response(await _post(server.port, initialize_request("x"), TOKEN))
            if workers > 1:  # every worker loaded
                await server.output.said("workers on that port")
        assert status == 200
        server.process.terminate()
        with anyio.fail_after(30):
            await server.process.wait()
        assert "Traceback" not in server.output.text, server.output.text
