"""How a tool reaches the server's `EvalService`, and the arguments many tools share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar, overload

from mcp.server.mcpserver import Context
from pydantic import Field

from mcp_evalserver.server.service import EvalService

_R = TypeVar("_R")

CampaignId = Annotated[str, Field(description="A campaign id, as list_campaigns shows them.")]
ClaimId = Annotated[str, Field(description="From claim_trajectory.")]
# At most 300 s: HTTP clients (the SDK's default) stop reading a silent response after that.
WaitSeconds = Annotated[float, Field(ge=0, le=300, description="Seconds to wait at most.")]


def service_of(ctx: Context[EvalService, Any]) -> EvalService:
    return ctx.request_context.lifespan_context


@overload
async def call_service(
    ctx: Context[EvalService, Any], operation: Callable[..., Awaitable[_R]], **arguments: Any
) -> _R: ...
@overload
async def call_service(
    ctx: Context[EvalService, Any], operation: Callable[..., _R], **arguments: Any
) -> _R: ...
async def call_service(
    ctx: Context[EvalService, Any], operation: Callable[..., Any], **arguments: Any
) -> Any:
    """`operation` (an `EvalService` method) run where campaigns are driven: here, or by the
    worker that drives them (`EvalService.call`)."""
    return await service_of(ctx).call(operation, **arguments)
