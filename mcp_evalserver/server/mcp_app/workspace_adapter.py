"""The workspace tools, made from their one declaration (`agents.tool_table`): registered
over `ExternalTrajectories` with a claim id (and `claim_trajectory`), or for one trajectory
(`trajectory_server`). Each answers in text a model reads, its JSON as structured content."""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, cast

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from mcp_evalserver.agents.tool_table import WORKSPACE_TOOLS, Audience, WorkspaceTool
from mcp_evalserver.server.mcp_app.calls import ClaimId, WaitSeconds, service_of
from mcp_evalserver.server.mcp_app.failures import tool_errors
from mcp_evalserver.server.mcp_app.hints import EFFECTS, MUTATES
from mcp_evalserver.server.models import Claim, Published, ReadByModels, published_model
from mcp_evalserver.server.service import EvalService
from mcp_evalserver.server.trajectories import ExternalTrajectories

_KEYWORD = inspect.Parameter.KEYWORD_ONLY
# Subscripted with a type made at run time: a value to the type checker, not a type expression.
_ANNOTATED: Any = Annotated


def trajectory_tools(app: MCPServer[Any]) -> None:
    @app.tool(annotations=MUTATES)
    @tool_errors
    async def claim_trajectory(
        ctx: Context[EvalService, Any],
        campaign_id: Annotated[
            str | None, Field(description="Only from this campaign; default any.")
        ] = None,
        wait_s: WaitSeconds = 0.0,
    ) -> Annotated[CallToolResult, Claim]:
        """Claim a trajectory of a campaign whose agent is external, to act as its agent: the
        task prompt and a claim_id for the workspace tools and submit. Each call renews the
        claim and a running call holds it; after lease_s with no call another client may take
        it over, workspace as it was. Waits up to wait_s for one; the campaign's
        trajectory_timeout_s bounds the whole trajectory."""
        service = service_of(ctx)
        if campaign_id is not None:
            service.require_campaign(campaign_id)
        return answer(await service.trajectories().claim(campaign_id, wait_s))

    as_declared(app, "claim_trajectory")
    for tool in WORKSPACE_TOOLS:
        method = getattr(ExternalTrajectories, tool.name)
        add_workspace_tool(app, tool, "claimed", _on_claim(tool.name), returns_of(method))


def _on_claim(name: str) -> Callable[..., Awaitable[Any]]:
    """The `ExternalTrajectories` method `name`, on the claims of the server that serves `ctx`."""

    # Not a coroutine function: it hands the tool the method's own coroutine to await, one
    # frame less to resume each time a workspace call waits.
    def on_claim(ctx: Context[EvalService, Any], claim_id: str, **arguments: Any) -> Awaitable[Any]:
        method: Callable[..., Awaitable[Any]] = getattr(service_of(ctx).trajectories(), name)
        return method(claim_id, **arguments)

    return on_claim


def returns_of(method: Callable[..., Any]) -> Any:
    """What `method` returns: the output schema of the tool it serves."""
    return typing.get_type_hints(method)["return"]


def add_workspace_tool(
    app: MCPServer[Any],
    tool: WorkspaceTool,
    audience: Audience,
    run: Callable[..., Awaitable[Any]],
    returns: Any,
) -> None:
    """Registers `tool` as `WORKSPACE_TOOLS` declares it for `audience`.

    `run` does the work, called with the tool's arguments by name (for `claimed`, also `ctx`
    and `claim_id`); `returns`, what it returns, is the tool's output schema.
    """
    leading = (
        {"claim_id": ClaimId, "ctx": Context[EvalService, Any]} if audience == "claimed" else {}
    )
    parameters = [inspect.Parameter(n, _KEYWORD, annotation=a) for n, a in leading.items()]
    for p in tool.parameters_for(audience):
        nullable: Any = p.type | None if p.default is None else p.type
        field = Field(description=p.description, ge=p.ge, gt=p.gt, le=p.le)
        annotation = _ANNOTATED[nullable, field]
        default = inspect.Parameter.empty if p.required else p.default
        parameters.append(
            inspect.Parameter(p.name, _KEYWORD, annotation=annotation, default=default)
        )

    async def call(**arguments: Any) -> CallToolResult:
        return answer(await run(**arguments))

    # The SDK reads a tool's parameters and output from its signature (the context parameter
    # from its annotations), and names the schema of its arguments after it. Annotated with
    # the result model, a `CallToolResult` is the answer as built (its structured content
    # validated against the model, whose schema is the tool's output schema).
    answers = _ANNOTATED[CallToolResult, published_model(returns)]
    call.__name__ = tool.name
    call.__signature__ = inspect.Signature(parameters, return_annotation=answers)  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": answers}
    annotations = EFFECTS[tool.effect]
    app.add_tool(tool_errors(call), description=tool.description(audience), annotations=annotations)
    as_declared(app, tool.name)


class _ArgumentsAsGiven(FuncMetadata):
    """The SDK's handling of a tool's arguments and answers, less what `as_declared` says."""

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        return self.arg_model.model_validate(arguments_to_validate).model_dump_one_level()


def as_declared(app: MCPServer[Any], name: str) -> None:
    """Tool `name` (whose parameters are all scalars, as every workspace tool's) takes its
    arguments as the client sent them, and its answers are not validated again; its schemas
    stay as published.

    Arguments: the SDK first parses as JSON every string sent for a parameter not typed `str`
    (for clients that send a list as JSON text), so an `answer` or a `stdin` that is a JSON
    object or array (`{"a": 1}`) became an object, refused as not a string. A scalar has
    nothing to parse, and the parsing cost every call a loop over the tool's parameters.

    Answers: the SDK validates the structured content of every answer against the tool's
    output model (`FuncMetadata.convert_result`); `answer()` dumped it from an instance of
    that very model, validated when it was made. Without the model the SDK publishes the
    schema and checks nothing (its way for a schema without a model); clients still may (the
    SDK's does).
    """
    tool = app._tool_manager.get_tool(name)  # the SDK offers no public way to it
    if tool is None:
        raise KeyError(f"no tool {name!r} registered")
    declared = tool.fn_metadata
    listed = _listed_parameters(declared.arg_model.model_json_schema())
    if listed:  # the SDK's JSON parsing is how clients' list-as-text arguments get through
        raise TypeError(
            f"tool {name!r}: {', '.join(listed)} take lists or objects: keep the SDK's parsing"
        )
    tool.fn_metadata = _ArgumentsAsGiven(
        arg_model=declared.arg_model,
        output_schema=declared.output_schema,
        wrap_output=declared.wrap_output,
    )


def _listed_parameters(schema: dict[str, Any]) -> list[str]:
    """The parameters of an arguments' JSON schema that may take a list or an object (a
    `$ref` is a model's)."""
    listed = []
    for name, property_schema in schema.get("properties", {}).items():
        text = json.dumps(property_schema)
        if '"array"' in text or '"object"' in text or "$ref" in text:
            listed.append(name)
    return listed


def _shape(result: BaseModel) -> tuple[bool, bool]:
    """Whether `result` is `ReadByModels`, and `Published`: both read from its class (their
    members are class attributes), once per class, since an `isinstance` of a runtime
    protocol looks up each member each time (in cProfile, two thirds of `answer`'s time)."""
    kind = type(result)
    shape = _SHAPES.get(kind)
    if shape is None:
        shape = _SHAPES[kind] = (isinstance(result, ReadByModels), isinstance(result, Published))
    return shape


_SHAPES: dict[type[BaseModel], tuple[bool, bool]] = {}


def answer(result: BaseModel) -> CallToolResult:
    """A workspace tool's (or a claim's) answer: what a model reads (`model_text()`: stdout as
    printed, numbered lines) as its text, the result's JSON as its structured content (its
    `published` model where its text already carries a long field)."""
    reads, publishes = _shape(result)
    if reads:
        text = cast(ReadByModels, result).model_text()
        shown = cast(Published, result).published(text) if publishes else result
        structured = shown.model_dump(mode="json", by_alias=True)
    else:  # a result model without a text of its own: its JSON, compact
        structured = result.model_dump(mode="json", by_alias=True)
        text = json.dumps(structured, separators=(", ", ": "))
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )
