"""The bearer token: where it comes from, when the server refuses to start, what a request needs."""

from __future__ import annotations

import io
import socket
from collections.abc import MutableMapping
from typing import Any

import pytest

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.server.transport.http import (
    TOKEN_ENV,
    BearerAuth,
    is_loopback,
    listening_socket,
    resolve_token,
)

pytestmark = pytest.mark.anyio


def test_a_token_given_on_the_command_line_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "from-the-environment-1234")
    assert resolve_token("from-the-flag-123456789", "0.0.0.0") == "from-the-flag-123456789"
    assert resolve_token(None, "0.0.0.0") == "from-the-environment-1234"


def test_without_a_token_loopback_gets_one_generated_and_printed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    stderr = io.StringIO()
    token = resolve_token(None, "127.0.0.1", stderr)
    assert len(token) >= 32
    assert stderr.getvalue().count(token) == 1


def test_without_a_token_beyond_loopback_the_server_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    for host in ("0.0.0.0", "::", "10.1.2.3", "evals.example.com"):
        with pytest.raises(InvalidInput, match="refusing to serve"):
            resolve_token(None, host)
    with pytest.raises(InvalidInput, match="at least 16 characters"):
        resolve_token("short", "127.0.0.1")


def test_loopback_means_this_machine_only() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.168.1.2", "example.com"]))


async def _status(app: BearerAuth, path: str, headers: list[tuple[bytes, bytes]]) -> int:
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "path": path, "headers": headers}, receive, send)
    return int(sent[0]["status"])


async def test_requests_need_the_exact_bearer_token_except_the_health_check() -> None:
    async def inner(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    app = BearerAuth(inner, "right-token-0123456789")
    assert await _status(app, "/mcp", []) == 401
    assert await _status(app, "/mcp", [(b"authorization", b"Bearer wrong")]) == 401
    assert await _status(app, "/mcp", [(b"authorization", b"right-token-0123456789")]) == 401
    assert await _status(app, "/mcp", [(b"authorization", b"Bearer right-token-0123456789")]) == 200
    assert await _status(app, "/healthz", []) == 200


def test_the_listening_socket_hands_out_connections_with_nagle_off() -> None:
    # With Nagle on, a response body waits ~40 ms behind its headers (measured: a 2026-07-28
    # tool call took 65 ms instead of 22). asyncio sets TCP_NODELAY only on sockets whose
    # protocol says TCP, so both are checked on an accepted connection.
    with (
        listening_socket("127.0.0.1", 0) as server,
        socket.create_connection(server.getsockname()),
    ):
        accepted, _ = server.accept()
        with accepted:
            assert accepted.proto == socket.IPPROTO_TCP
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    with (
        listening_socket("127.0.0.1", 0) as taken,
        pytest.raises(InvalidInput, match="cannot listen on"),
    ):
        listening_socket("127.0.0.1", taken.getsockname()[1]).close()
