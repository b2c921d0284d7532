"""An HTTP answer's headers and body leave in one write (server/transport/one_write.py), over a
real socket transport of the event loop; a write nobody follows still goes out, and a close
sends what is held first."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from mcp_evalserver.server.transport.one_write import JOINED_MAX_BYTES, OneWriteTransport

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
        yield OneWriteTransport(transport, loop), peer
    finally:
        transport.close()
        peer.close()


def sent_so_far(peer: socket.socket) -> bytes:
    try:
        return peer.recv(1 << 20)
    except BlockingIOError:
        return b""


async def received(peer: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    with anyio.fail_after(10):
        while len(data) < size:
            chunk = await loop.sock_recv(peer, size - len(data))
            assert chunk, f"the connection ended after {data!r}"
            data += chunk
    return data


async def test_the_headers_wait_for_the_body_and_leave_with_it() -> None:
    async with connected() as (transport, peer):
        transport.write(HEAD)
        assert sent_so_far(peer) == b"", "the headers went out alone"
        transport.write(b"body")
        assert sent_so_far(peer) == HEAD + b"body"


async def test_headers_nobody_follows_leave_at_the_loops_next_step() -> None:
    async with connected() as (transport, peer):
        transport.write(HEAD)  # an event stream's: its first event may come minutes later
        assert await received(peer, len(HEAD)) == HEAD
        transport.write(b"data: 1\n\n")
        assert await received(peer, 9) == b"data: 1\n\n"


async def test_a_close_sends_what_is_held_first() -> None:
    async with connected() as (transport, peer):
        transport.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        transport.close()
        assert await received(peer, 28) == b"HTTP/1.1 400 Bad Request\r\n\r\n"
        with anyio.fail_after(10):
            assert await asyncio.get_running_loop().sock_recv(peer, 1) == b""


async def test_a_large_body_follows_the_headers_uncopied_and_whole() -> None:
    body = b"x" * (JOINED_MAX_BYTES + 1)
    async with connected() as (transport, peer):
        transport.write(HEAD)
        transport.write(body)
        assert await received(peer, len(HEAD) + len(body)) == HEAD + body
