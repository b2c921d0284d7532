"""What the campaign server loads after its first answer, when a request first needs it.

Importing the engine and building every tool's schemas costs about as much again as the MCP
SDK's own import; a client gives a server a few seconds to answer `initialize` (Claude Code
about 3 s, then a second handshake), so that answer waits for neither. The first other message
(`notifications/initialized` after a handshake, else the first request) registers the tools and
starts the `EvalService`; every handler sees that service as its lifespan context, as if the
lifespan had started it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Self

import anyio
import anyio.abc
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer

from mcp_evalserver.errors import ExcInfo

if TYPE_CHECKING:
    from mcp_evalserver.server.service import EvalService

#: Answered before anything is loaded: they need neither the tools nor the service (the
#: capabilities `initialize` and 2026-07-28's `server/discover` declare come from handlers
#: registered with the server).
ANSWERED_FIRST = frozenset({"initialize", "server/discover", "ping"})


class ServiceSlot:
    """The lifespan context of the campaign server: its `EvalService`, started on first need
    (or with the lifespan: `create_server(service_at_start=True)`) in a task of its own, and
    ended when the slot is left."""

    def __init__(self, start: Callable[[], AbstractAsyncContextManager[EvalService]]) -> None:
        self._start = start
        self._service: EvalService | None = None
        self._lock = anyio.Lock()
        self._stop = anyio.Event()
        self._group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Self:
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        return self

    async def __aexit__(self, *exc_info: *ExcInfo) -> None:
        # The service ends in the task that started it, not cancelled: campaigns record their
        # shutdown as when the lifespan ended it itself.
        self._stop.set()
        group, self._group = self._group, None
        if group is not None:
            await group.__aexit__(None, None, None)

    @property
    def started(self) -> EvalService | None:
        """The service once started; None before."""
        return self._service

    async def service(self) -> EvalService:
        """The started service (starting it if nobody did yet).

        Raises:
            Exception: what the service's start raised (a later call tries again).
        """
        async with self._lock:
            if self._service is None:
                if self._group is None:
                    raise RuntimeError("the server's lifespan has ended: its service is gone")
                self._service = await self._group.start(self._hold)
        return self._service

    async def _hold(self, *, task_status: anyio.abc.TaskStatus[EvalService]) -> None:
        async with self._start() as service:
            task_status.started(service)
            await self._stop.wait()


class LoadOnFirstUse:
    """An MCP server middleware: before any message but those in `ANSWERED_FIRST`, registers
    the tools (`register`, once) and starts the service of the `ServiceSlot` the lifespan made,
    and hands it to the handlers as their lifespan context."""

    def __init__(self, app: MCPServer[Any], register: Callable[[MCPServer[Any]], None]) -> None:
        self._app = app
        self._register: Callable[[MCPServer[Any]], None] | None = register
        # The SDK validates a tool call's `Mcp-Param-*` headers (2026-07-28 over HTTP) against
        # the tool's input schema before any middleware runs: the tools must be there too.
        lowlevel = app._lowlevel_server
        self._find_input_schema = lowlevel.get_tool_input_schema
        lowlevel.get_tool_input_schema = self._input_schema

    def load_tools(self) -> None:
        if self._register is not None:
            self._register(self._app)
            self._register = None  # after it succeeded: a failure shows again on every call

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        self.load_tools()
        return None if self._find_input_schema is None else self._find_input_schema(name)

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method in ANSWERED_FIRST:
            return await call_next(ctx)
        self.load_tools()
        slot = ctx.lifespan_context
        if not isinstance(slot, ServiceSlot):  # already the service (a rewritten context)
            return await call_next(ctx)
        # Once started, the service is taken without the slot's lock: taking it costs every
        # call a pass through the event loop.
        service = slot.started or await slot.service()
        return await call_next(dataclasses.replace(ctx, lifespan_context=service))
