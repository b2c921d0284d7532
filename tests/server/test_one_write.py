"""An HTTP answer's headers and body leave in one write (server/transport/one_write.py): on a
real socket transport of the event loop, and through uvicorn serving a small app with the
protocol (an answer with a body, a HEAD request's, an event stream's headers before its
first event)."""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from mcp_evalserver.server.transport.http import listening_socket
from mcp_evalserver.server.transport.one_write import (
    JOINED_MAX_BYTES,
    OneWriteHttpToolsProtocol,
    OneWriteTransport,
)

pytestmark = pytest.mark.anyio

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n"


@asynccontextmanager
async def connected() -> AsyncIterator[tuple[OneWriteTransport, socket.socket]]:
    """A `OneWriteTransport` over the loop's transport of one end of a socket pair, and the
    other end (non-blocking) to read what was sent."""
    loop = asyncio.get_running_loop()
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
    assert isinstance(transport, asyncio.Transport)
    try:
        yield OneWriteTransport(transport), peer
    finally:
        transport.close()
        peer.close()


def sent_so_far(peer: socket.socket) -> bytes:
    try:
        return peer.recv(1 << 20)
    except BlockingIOError:
        return b""


async def received(peer: socket.socket, ending: bytes) -> bytes:
    """What `peer` reads until it has read `ending`."""
    loop = asyncio.get_running_loop()
    data = b""
    with anyio.fail_after(10):
        while not data.endswith(ending):
            chunk = await loop.sock_recv(peer, 1 << 20)
            assert chunk, f"the connection ended after {data!r}"
            data += chunk
    return data


async def test_headers_with_a_content_length_wait_for_the_body_and_leave_with_it() -> None:
    async with connected() as (transport, peer):
        transport.write(HEAD)
        assert sent_so_far(peer) == b"", "the headers went out alone"
        transport.write(b"body")
        assert sent_so_far(peer) == HEAD + b"body"


async def test_each_answers_headers_are_held_once_the_one_before_is_answered() -> None:
    async with connected() as (transport, peer):
        transport.write(HEAD)
        transport.write(b"body")
        transport.answered()
        transport.write(HEAD)  # a HEAD request's: no body follows
        assert sent_so_far(peer) == HEAD + b"body"
        transport.answered()
        assert await received(peer, HEAD) == HEAD
        transport.write(HEAD)
        assert sent_so_far(peer) == b"", "the third answer's headers went out alone"


async def test_a_close_sends_the_held_headers_first() -> None:
    async with connected() as (transport, peer):
        transport.write(HEAD)  # an app that failed after starting its answer
        transport.close()
        assert await received(peer, HEAD) == HEAD
        with anyio.fail_after(10):
            assert await asyncio.get_running_loop().sock_recv(peer, 1) == b""


async def test_a_large_body_follows_the_headers_whole() -> None:
    body = b"x" * (JOINED_MAX_BYTES + 1)
    async with connected() as (transport, peer):
        transport.write(HEAD)
        transport.write(body)
        assert await received(peer, body) == HEAD + body


@asynccontextmanager
async def serving(app: object) -> AsyncIterator[socket.socket]:
    """uvicorn with the one-write protocol serving `app`; yields a client connected to it."""
    config = uvicorn.Config(app, http=OneWriteHttpToolsProtocol, lifespan="off", log_level="error")  # type: ignore[arg-type]
    server = uvicorn.Server(config)
    sock = listening_socket("127.0.0.1", 0)
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(server.serve, sockets=[sock]))
        client = socket.create_connection(sock.getsockname(), timeout=10)
        client.setblocking(False)
        try:
            yield client
        finally:
            client.close()
            server.should_exit = True


async def test_uvicorn_answers_a_body_a_head_request_and_an_event_stream_through_it() -> None:
    first_event = anyio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/events":
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await first_event.wait()
            await send({"type": "http.response.body", "body": b"data: 1\n\n"})
            return
        headers = [(b"content-length", b"4")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"body"})

    async with serving(app) as client:
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(client, b"HEAD / HTTP/1.1\r\nhost: x\r\n\r\n")
        head = await received(client, b"\r\n\r\n")  # held until the answer completed
        assert b"content-length: 4\r\n" in head
        await loop.sock_sendall(client, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        assert (await received(client, b"body")).startswith(b"HTTP/1.1 200 OK\r\n")
        await loop.sock_sendall(client, b"GET /events HTTP/1.1\r\nhost: x\r\n\r\n")
        stream = await received(client, b"\r\n\r\n")  # before its first event
        assert b"transfer-encoding: chunked" in stream
        first_event.set()
        assert (await received(client, b"\r\n")).startswith(b"9\r\ndata: 1\n\n")
