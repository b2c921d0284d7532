"""A cheap MCP client for load: handshake-era sessions spoken by hand over HTTP/1.1.

The official SDK client costs about 1.1 ms of CPU per tool call on these machines: 32 of them
on the 2 CPUs a server also runs on cap any server near 700 calls/s. This one replays what a
session sends (`initialize`, `notifications/initialized`, `tools/call`) over one keep-alive
connection on plain asyncio streams and reads the answers (JSON, or the SSE stream of one
message the server sends by default) with no validation beyond the JSON-RPC envelope: about a
tenth of the SDK's CPU per call (bench/front.py measures it beside the server's).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
from typing import Any

from testsupport.answers import with_text_parts

LEGACY_VERSION = "2025-11-25"


def initialize_request(client: str, request_id: int = 1) -> dict[str, Any]:
    """A handshake-era `initialize` request from a client named `client`."""
    params = {
        "protocolVersion": LEGACY_VERSION,
        "capabilities": {},
        "clientInfo": {"name": client, "version": "0"},
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


class CallFailed(Exception):
    """A request answered with an HTTP error, a JSON-RPC error or a tool error."""


class RawSession:
    """One MCP session over one HTTP/1.1 connection. Use `await open()`, then `call_tool`."""

    def __init__(self, host: str, port: int, token: str, path: str = "/mcp") -> None:
        self.host, self.port, self.path = host, port, path
        self._head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        )
        self._ids = itertools.count(1)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.session_id: str | None = None

    async def open(self) -> None:
        """Connects and runs the initialize handshake.

        Raises:
            CallFailed: the server refused it.
            OSError: no connection.
        """
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        sock = self._writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await self._request("initialize", initialize_request("rawmcp")["params"])
        self._head += (
            f"mcp-session-id: {self.session_id}\r\nmcp-protocol-version: {LEGACY_VERSION}\r\n"
        )
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tool's structured result, with the parts of its text it locates.

        Raises:
            CallFailed: an HTTP, JSON-RPC or tool error.
        """
        result = await self._request("tools/call", {"name": name, "arguments": arguments})
        if result.get("isError"):
            text = " ".join(block.get("text", "") for block in result.get("content", []))
            raise CallFailed(f"{name}: {text}")
        structured: dict[str, Any] = result.get("structuredContent") or {}
        text = "".join(block.get("text", "") for block in result.get("content", []))
        return with_text_parts(text, structured)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()

    async def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self._ids)
        body = await self._post({"jsonrpc": "2.0", "id": request_id, "method": method,
                                 "params": params})  # fmt: skip
        for line in body.split(b"\n"):
            if line.startswith(b"data:"):
                body = line[5:]
                break
        message = json.loads(body)
        if "error" in message:
            raise CallFailed(f"{method}: {message['error']}")
        result: dict[str, Any] = message["result"]
        return result

    async def _post(self, message: dict[str, Any]) -> bytes:
        assert self._reader is not None
        assert self._writer is not None
        body = json.dumps(message, separators=(",", ":")).encode()
        self._writer.write(f"{self._head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        headers = {}
        for line in lines:
            if line:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
        if "content-length" in headers:
            data = await self._reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            chunks = []
            while True:
                size = int((await self._reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await self._reader.readexactly(size + 2)
                if size == 0:
                    break
                chunks.append(chunk[:-2])
            data = b"".join(chunks)
        else:
            data = b""
        if status >= 400:
            raise CallFailed(f"HTTP {status}: {data[:200]!r}")
        if "mcp-session-id" in headers:
            self.session_id = headers["mcp-session-id"]
        return data
