"""Handshake-era MCP sessions pinned to the worker that opened them.

A session of the initialize handshake (`Mcp-Session-Id`) lives in the worker that answered its
`initialize`: its negotiated version, its log level, its event stream. The kernel spreads TCP
connections over the workers (SO_REUSEPORT), and a client may open a second connection (its
GET stream, concurrent requests) that lands elsewhere. So each worker prefixes the session ids
it issues with its index (`w3-…`), and a request naming another worker's session is passed to
that worker over its unix socket, body and (streamed) response relayed unchanged. Sessions of
a worker that died are gone, as after a restart: the client is answered 404 and opens a new
one. 2026-07-28 clients have no sessions: any worker answers any request.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import anyio.abc
import h11
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_evalserver.server.front.worker_config import worker_socket

SESSION_HEADER = b"mcp-session-id"
_HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"upgrade", b"te"}
_NOT_FOUND = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}'


class PinnedSessions:
    """ASGI middleware of worker `index`: see the module's docstring."""

    def __init__(self, app: ASGIApp, index: int, run_dir: Path) -> None:
        self.app = app
        self.index = index
        self.run_dir = run_dir
        self._prefix = f"w{index}-".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = list(scope["headers"])
        for number, (name, value) in enumerate(headers):
            if name != SESSION_HEADER:
                continue
            owner, _, session = value.partition(b"-")
            if value.startswith(self._prefix):
                headers[number] = (name, session)
                break
            if owner[:1] == b"w" and owner[1:].isdigit() and not _passed_on(scope):
                await self._pass_on(int(owner[1:]), scope, receive, send)
                return
            break
        scope = {**scope, "headers": headers}

        async def send_prefixed(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {
                    **message,
                    "headers": [
                        (k, self._prefix + v if k == SESSION_HEADER else v)
                        for k, v in message.get("headers", [])
                    ],
                }
            await send(message)

        await self.app(scope, receive, send_prefixed)

    async def _pass_on(self, owner: int, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            stream = await anyio.connect_unix(worker_socket(self.run_dir, owner))
        except OSError:
            # Its worker is gone, and its sessions with it: as the SDK answers an unknown id.
            await _respond(send, 404, _NOT_FOUND)
            return
        async with stream, anyio.create_task_group() as group:
            await _relay(stream, scope, receive, send, group)
            group.cancel_scope.cancel()


def _passed_on(scope: Scope) -> bool:
    """Whether the request came over a worker's unix socket (passed on already)."""
    server = scope.get("server")
    return server is None or server[1] is None


async def _respond(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _relay(
    stream: anyio.abc.ByteStream,
    scope: Scope,
    receive: Receive,
    send: Send,
    group: anyio.abc.TaskGroup,
) -> None:
    """Sends the request on `stream` (HTTP/1.1) and relays the response as it arrives."""
    connection = h11.Connection(h11.CLIENT)
    target = scope.get("raw_path") or scope["path"].encode()
    if scope.get("query_string"):
        target += b"?" + scope["query_string"]
    headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP]
    if not any(k == b"content-length" for k, _ in headers):
        headers.append((b"transfer-encoding", b"chunked"))
    request = h11.Request(method=scope["method"], target=target, headers=headers)
    await stream.send(connection.send(request) or b"")
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        if message.get("body"):
            await stream.send(connection.send(h11.Data(data=message["body"])) or b"")
        if not message.get("more_body"):
            break
    await stream.send(connection.send(h11.EndOfMessage()) or b"")

    async def client_left() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        group.cancel_scope.cancel()

    group.start_soon(client_left)
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                data = b""
            connection.receive_data(data)
            continue
        if isinstance(event, h11.Response):
            kept = [(k, v) for k, v in event.headers if k.lower() not in _HOP_BY_HOP]
            await send({"type": "http.response.start", "status": event.status_code,
                        "headers": kept})  # fmt: skip
        elif isinstance(event, h11.Data):
            await send({"type": "http.response.body", "body": bytes(event.data),
                        "more_body": True})  # fmt: skip
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b""})
            return
