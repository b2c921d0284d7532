"""What a model pays for the MCP surface, and what keeps it small.

A model is shown every tool's name, description and input schema on every turn, so the server
counts their characters like a budget (`listed_chars`), offers a smaller surface to an agent
that only claims trajectories (`tool_profiles.ToolProfile`), publishes the campaign spec's
schema as a resource instead of inlining it, and drops the title pydantic gives each argument
(`untitled`: "Claim Id" for `claim_id` says nothing the name does not); an argument error
names the field and the choices (`readable_argument_errors`). No `mcp` import here.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Annotated, Any, Final, Protocol

from pydantic import Field, ValidationError

from mcp_evalserver.spec.prose import one_paragraph
from mcp_evalserver.spec.validation_errors import describe_validation_error

#: The most characters `listed_chars` may count for each profile (tests/server/test_surface_size).
BUDGETS: Final[dict[str, int]] = {"all": 20_000, "agent": 8_000}

#: Where the campaign spec's JSON schema is (~39k characters): read once by a client that
#: needs it, instead of being inlined into every tool that takes a spec.
SPEC_SCHEMA_URI: Final = "mcp-evalserver://schema/campaign"
#: The `spec` argument of the tools that take one: an object, its schema where it is said.
SpecArgument = Annotated[
    dict[str, Any],
    Field(
        description='The campaign spec, an object: {"tasks": [{"id", "prompt", ...}] or a task '
        'file path, "agent": {"type": ...}, "scorer": {"type": ...}, "samples": 1, "limits": '
        f"{{...}}}}. Its JSON schema is the resource {SPEC_SCHEMA_URI} (also `mcp-evalserver "
        "schema`); the server validates it and names each wrong field with its choices."
    ),
]

#: Keywords whose value is one schema, or a list of schemas, or a map of name to schema.
_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_NAMED = ("properties", "$defs", "patternProperties")


def listed_chars(tools: Iterable[tuple[str, str | None, Mapping[str, Any]]]) -> int:
    """Characters a model reads in `tools/list`: each tool's name, description and the JSON
    of its input schema, given as (name, description, input schema)."""
    return sum(
        len(name) + len(description or "") + len(json.dumps(schema))
        for name, description, schema in tools
    )


def untitled(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` without its `title`s (values such as defaults and enums are left whole)."""
    kept: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _ONE and isinstance(value, Mapping):
            kept[key] = untitled(value)
        elif key in _MANY and isinstance(value, list):
            kept[key] = [untitled(v) if isinstance(v, Mapping) else v for v in value]
        elif key in _NAMED and isinstance(value, Mapping):
            kept[key] = {n: untitled(v) if isinstance(v, Mapping) else v for n, v in value.items()}
        else:
            kept[key] = value
    return kept


def optional_unnulled(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's input schema whose optional arguments (not `required`, default null) say only
    their type: `{"anyOf": [{"type": "string"}, {"type": "null"}], "default": null}` is
    `{"type": "string"}`. Leaving an argument out means the same as null, so the ~50
    characters tell a model nothing; the arguments are still validated as declared."""
    required = set(schema.get("required", ()))
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return dict(schema)
    compact: dict[str, Any] = {}
    for name, prop in properties.items():
        variants = prop.get("anyOf") if isinstance(prop, Mapping) else None
        if (
            name not in required
            and isinstance(variants, list)
            and prop.get("default", 0) is None
            and {"type": "null"} in variants
            and len(variants) == 2
        ):
            kept = next(v for v in variants if v != {"type": "null"})
            rest = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
            compact[name] = {**kept, **rest}
        else:
            compact[name] = prop
    return {**schema, "properties": compact}


#: A tool as the SDK keeps it: `name`, `parameters` (its input schema) and `fn_metadata`.
FindTool = Callable[[str], Any]


class Middleware(Protocol):
    """The SDK's `ServerMiddleware`, without importing the SDK."""

    def __call__(
        self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]
    ) -> Coroutine[Any, Any, Any]: ...


def readable_argument_errors(find_tool: FindTool) -> Middleware:
    """An MCP server middleware: a tool call whose arguments do not fit the tool's input schema
    answers `field: what was wrong (the choices)`, not pydantic's text with its links.

    The SDK validates arguments before the tool runs and answers with the error's text; here
    the arguments of a failed call are validated again, for the error itself (its text is
    never parsed). A call whose arguments fit failed in the tool: its answer stays.
    """

    async def middleware(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        result = await call_next(ctx)
        if ctx.method != "tools/call" or not isinstance(result, dict) or not result.get("isError"):
            return result
        params = ctx.params if isinstance(ctx.params, dict) else {}
        tool = find_tool(str(params.get("name")))
        arguments = params.get("arguments") or {}
        if tool is None or not isinstance(arguments, dict):
            return result
        try:
            tool.fn_metadata.validate_arguments(arguments)
        except ValidationError as exc:
            described = describe_validation_error(exc, tool.parameters)
            text = f"Error executing tool {tool.name}: InvalidInput: {described}"
            return {**result, "content": [{"type": "text", "text": text}]}
        return result

    return middleware


def as_models_read_it(app: Any) -> None:
    """Gives an MCP server (`MCPServer`) input schemas without titles, descriptions as one
    paragraph (a docstring's line breaks and indentation are characters a model pays for and
    reads nothing in), and argument errors that name the field and the choices; call it once
    every tool is registered (or, for tools registered later, `tidy_for_models` then)."""
    tidy_for_models(app)
    app.middleware.append(readable_argument_errors(app._tool_manager.get_tool))


def tidy_for_models(app: Any) -> None:
    """The input schemas and descriptions of the tools `app` has now, as `as_models_read_it`
    says; again, it changes nothing."""
    for tool in app._tool_manager.list_tools():  # the SDK offers no public way to them
        tool.parameters = optional_unnulled(untitled(tool.parameters))
        if tool.description:
            tool.description = one_paragraph(tool.description)
