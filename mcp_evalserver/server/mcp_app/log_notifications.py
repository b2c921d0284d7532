"""Campaign events as MCP log notifications (`logging/setLevel`, or per request), and
`completion/complete` over campaign, trajectory and task ids."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, get_args

from mcp.server.connection import Connection, allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    CompleteRequestParams,
    CompleteResult,
    Completion,
    EmptyResult,
    LoggingLevel,
    LoggingMessageNotification,
    LoggingMessageNotificationParams,
    SetLevelRequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_evalserver.server.mcp_app.json_answers import PerRequestSessions

if TYPE_CHECKING:
    from mcp_evalserver.server.events import CampaignEvent
    from mcp_evalserver.server.service import EvalService

#: MCP's log levels, lowest first.
_LEVELS: tuple[LoggingLevel, ...] = get_args(LoggingLevel)

#: Where a connection keeps the level its client set with `logging/setLevel`.
_LOG_LEVEL = "mcp_evalserver.log_level"
#: The `logger` of every log notification.
LOGGER = "mcp-evalserver"


def _log_params(event: CampaignEvent) -> dict[str, Any]:
    return {"level": event.level, "logger": LOGGER, "data": event.data}


def logging_and_completions(app: MCPServer[Any]) -> None:
    """Serves `logging/setLevel` (campaign events as log notifications) and
    `completion/complete` (campaign, trajectory and task ids).

    Both are low-level handlers: the SDK's `completion` decorator hands its function no
    context (so no service), and `MCPServer` has no logging handler of its own.
    """
    lowlevel = app._lowlevel_server

    async def set_level(
        ctx: ServerRequestContext[EvalService, Any], params: SetLevelRequestParams
    ) -> EmptyResult:
        # Handshake-era clients (2026-07-28 has no `logging/setLevel`: it answers "method not
        # found", and clients opt in per request instead; see `request_log`).
        connection = session_connection(ctx.session)
        following = _LOG_LEVEL in connection.state
        connection.state[_LOG_LEVEL] = params.level
        if not following:
            sessions = getattr(lowlevel, "_session_manager", None)  # None: not over HTTP
            if isinstance(sessions, PerRequestSessions) and connection.session_id is not None:
                sessions.following_logs.add(connection.session_id)  # answered in SSE now
                connection.exit_stack.callback(sessions.following_logs.discard,
                                               connection.session_id)  # fmt: skip

            async def deliver(event: CampaignEvent) -> None:
                threshold = connection.state[_LOG_LEVEL]
                if _LEVELS.index(event.level) >= _LEVELS.index(threshold):
                    await connection.notify("notifications/message", _log_params(event))

            connection.exit_stack.callback(ctx.lifespan_context.forward_events(deliver))
        return EmptyResult()

    async def complete(
        ctx: ServerRequestContext[EvalService, Any], params: CompleteRequestParams
    ) -> CompleteResult:
        known = params.context.arguments if params.context is not None else None
        values, total = ctx.lifespan_context.complete(
            params.argument.name, params.argument.value, (known or {}).get("campaign_id")
        )
        completion = Completion(values=values, total=total, has_more=total > len(values))
        return CompleteResult(completion=completion)

    lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)
    lowlevel.add_request_handler("completion/complete", CompleteRequestParams, complete)


def session_connection(session: object) -> Connection:
    """The connection of a request's session, whose state outlives the request.

    The SDK gives a handler no public way to it: this reads its private
    `ServerSession._connection` (mcp 2.3; pyproject pins the SDK below 2.4).

    Raises:
        RuntimeError: the SDK moved it: say so, rather than fail somewhere else.
    """
    connection = getattr(session, "_connection", None)
    if not isinstance(connection, Connection):
        raise RuntimeError(
            f"mcp {importlib.metadata.version('mcp')} keeps no `ServerSession._connection`: "
            "logging/setLevel cannot reach its connection; install the mcp version "
            "pyproject.toml names, or adapt `session_connection` to the SDK's public hook"
        )
    return connection


def request_log(ctx: Context[EvalService, Any]) -> Callable[[CampaignEvent], Awaitable[None]]:
    """Sends campaign events as log notifications on this request's own stream, to a
    2026-07-28 client that asked for them (`io.modelcontextprotocol/logLevel` in the request's
    `_meta`) at or above the level it asked for. Handshake-era clients get every event on
    their connection once they call `logging/setLevel` instead, never twice."""
    request = ctx.request_context
    modern = request.protocol_version in MODERN_PROTOCOL_VERSIONS
    wanted = allowed_log_levels(request.protocol_version, request.meta) if modern else set()

    async def log(event: CampaignEvent) -> None:
        if event.level in wanted:
            notification = LoggingMessageNotification(
                params=LoggingMessageNotificationParams.model_validate(_log_params(event))
            )
            await request.session.send_notification(notification, request.request_id)

    return log
