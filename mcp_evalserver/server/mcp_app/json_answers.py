"""Streamable HTTP that answers each request with one JSON response unless it streams
(transport/answers.py decides; the SDK offers the choice per app only)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import LOG_LEVEL_META_KEY

from mcp_evalserver.server.transport.answers import JsonUnlessStreaming, answering_json


class _PerRequestTransport(StreamableHTTPServerTransport):
    """A session's transport that answers JSON or SSE as `answering_json()` says for the request
    it serves (transport/answers.py), not as its session manager was built."""

    @property
    def is_json_response_enabled(self) -> bool:
        return answering_json()

    @is_json_response_enabled.setter
    def is_json_response_enabled(self, value: bool) -> None:
        pass  # the SDK's constructor sets it: chosen per request instead


class PerRequestSessions(StreamableHTTPSessionManager):
    """The SDK's session manager, choosing JSON or SSE per request (2026-07-28 requests
    read `json_response`, handshake-era sessions get `_PerRequestTransport`s)."""

    following_logs: set[str]  # handshake-era sessions whose client set a log level

    @property
    def json_response(self) -> bool:
        return answering_json()

    @json_response.setter
    def json_response(self, value: bool) -> None:
        pass

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        transport = super()._admit_session(requestor)
        if transport is not None:
            transport.__class__ = _PerRequestTransport
        return transport


def answer_json_unless_streaming(server: MCPServer[Any]) -> None:
    """Makes the session manager `server.streamable_http_app()` just built answer each
    request with one JSON response unless it streams (transport/answers.py). The SDK offers the
    choice for a whole app only, and builds its manager itself: its class is swapped for a
    subclass that reads the choice per request, decided by middleware in front of it."""
    sessions = server._lowlevel_server.session_manager
    sessions.__class__ = PerRequestSessions
    assert isinstance(sessions, PerRequestSessions)
    sessions.following_logs = set()
    limit = sessions.asgi_app  # the SDK's body limit, in front of its request handler
    limit.app = JsonUnlessStreaming(limit.app, sessions.following_logs, LOG_LEVEL_META_KEY)
