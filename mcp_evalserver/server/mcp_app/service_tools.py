"""Tools declared as plain functions over the service (`server.set_tools.ServiceTool`),
registered as MCP tools: the service comes from the request's context, every other parameter
is the tool's."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_evalserver.server.mcp_app.calls import service_of
from mcp_evalserver.server.mcp_app.failures import tool_errors
from mcp_evalserver.server.mcp_app.hints import MUTATES, SETS
from mcp_evalserver.server.service import EvalService
from mcp_evalserver.server.set_tools import ServiceTool

_KEYWORD = inspect.Parameter.KEYWORD_ONLY


def service_tools(app: MCPServer[Any], tools: Sequence[ServiceTool]) -> None:
    """Registers each of `tools`, its description the first paragraph of its docstring."""
    for declared in tools:
        run = declared.run
        # Resolved here: the SDK evaluates string annotations in this module, not in theirs.
        signature = inspect.signature(run, eval_str=True)
        ctx = inspect.Parameter("ctx", _KEYWORD, annotation=Context[EvalService, Any])
        rest = list(signature.parameters.values())[1:]
        parameters = [ctx, *(p.replace(kind=_KEYWORD) for p in rest)]

        call = _on_service(run)
        call.__name__ = run.__name__
        call.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in parameters} | {
            "return": signature.return_annotation
        }
        description = inspect.cleandoc(run.__doc__ or "").split("\n\n")[0]
        annotations = SETS if declared.idempotent else MUTATES
        app.add_tool(tool_errors(call), description=description, annotations=annotations)


def _on_service(run: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """`run` (a function over the service) on the service of the server that serves `ctx`."""

    async def on_service(ctx: Context[EvalService, Any], **arguments: Any) -> Any:
        return await run(service_of(ctx), **arguments)

    return on_service
