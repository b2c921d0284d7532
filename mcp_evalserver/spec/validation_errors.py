"""Validation errors as people (and models) read them: `field.path: what was wrong (choices)`.

Pydantic's own text names union members (`agent.openai.model`, `tasks.list[Task].0`,
`tasks.str`), repeats one mistake once per member of a union, and links to its website. Here a
path names fields only, a union reports the member the input was meant for, and a wrong tag,
an unknown field or a value out of range says what the choices are, from the JSON schema of
the model that was validated:

    agent.type: unknown 'opeanai' (known: command, external, ...)
    sampels: unknown field; did you mean 'samples'? (known: name, tasks, samples, ...)
    samples: must be >= 1 (got 0)
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

#: What the reader is told for an input of the wrong type.
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "none_required": "null",
}
_BOUNDS = {
    "greater_than_equal": ">=",
    "less_than_equal": "<=",
    "greater_than": ">",
    "less_than": "<",
}
#: Shown at most; the rest are counted.
_MOST = 6

Schema = Mapping[str, Any]


@dataclass(frozen=True)
class _Where:
    """Where an error sits, as the schema sees its location."""

    #: The fields and indexes a person names (union members left out).
    path: tuple[str | int, ...]
    #: The schema of the location (None: the schema does not say).
    node: Schema | None
    #: The schema of its parent (for an unknown field: the fields it has).
    parent: Schema | None
    #: Set when the location passed through a union member that is no field: the path up to
    #: that union, and how many steps the error went past the member (0: the member's type
    #: itself did not fit).
    union: tuple[str | int, ...] | None = None
    depth: int = 0


def describe_validation_error(exc: ValidationError, schema: Schema | None = None) -> str:
    """One part per problem, `; `-separated: `field.path: what was wrong (the choices)`.

    `schema`, the JSON schema of what was validated, supplies the choices (the known tags of a
    discriminated union, the fields an object has); without it the parts still name the
    path and the mistake.
    """
    found = [(error, _locate(schema, error["loc"])) for error in exc.errors(include_url=False)]
    parts = list(dict.fromkeys(_parts(found, schema)))
    if len(parts) > _MOST:
        parts = [*parts[:_MOST], f"and {len(parts) - _MOST} more"]
    return "; ".join(parts)


def _parts(found: list[tuple[ErrorDetails, _Where]], schema: Schema | None) -> list[str]:
    """Each error's text; a union's members whose type did not fit are left out when another
    member got further, and said together ("expected a list or a string") when none did."""
    deepest: dict[tuple[str | int, ...], int] = {}
    for error, where in found:
        if where.union is not None:
            # A member whose type fit (its value was out of range, say) got further too.
            depth = where.depth or int(error["type"] not in _EXPECTED)
            deepest[where.union] = max(deepest.get(where.union, 0), depth)
    shallow: dict[tuple[str | int, ...], list[ErrorDetails]] = {}
    parts: list[str] = []
    for error, where in found:
        if where.union is not None and where.depth == 0 and error["type"] in _EXPECTED:
            if deepest[where.union] > 0:
                continue  # the input was meant for a member that got further
            shallow.setdefault(where.path, []).append(error)
            continue
        parts.append(_describe(error, where, schema))
    for path, errors in shallow.items():
        expected = " or ".join(dict.fromkeys(_EXPECTED[e["type"]] for e in errors))
        parts.append(f"{_dotted(path)}: expected {expected}, got {_shown(errors[0]['input'])}")
    return parts


def _describe(error: ErrorDetails, where: _Where, schema: Schema | None) -> str:
    kind, context, value = error["type"], error.get("ctx") or {}, error.get("input")
    path = where.path
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        tag = str(context.get("discriminator", "type")).strip("'\"")
        known = ", ".join(_tags(schema, where.node))
        what = f"unknown {context.get('tag')!r}" if kind == "union_tag_invalid" else "required"
        return f"{_dotted((*path, tag))}: {what}" + (f" (known: {known})" if known else "")
    if kind == "extra_forbidden":
        fields = list(_properties(schema, where.parent))
        name = str(path[-1]) if path else ""
        close = difflib.get_close_matches(name, fields, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        known = f" (known: {', '.join(fields)})" if fields else ""
        return f"{_dotted(path)}: unknown field{hint}{known}"
    if kind == "missing":
        return f"{_dotted(path)}: required"
    if kind in _BOUNDS:
        bound = next(iter(context.values()), "?")
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)  # a float field's bound: 300, not 300.0
        return f"{_dotted(path)}: must be {_BOUNDS[kind]} {bound} (got {_shown(value)})"
    if kind in _EXPECTED:
        return f"{_dotted(path)}: expected {_EXPECTED[kind]}, got {_shown(value)}"
    if kind == "literal_error":
        return f"{_dotted(path)}: must be {context.get('expected')} (got {_shown(value)})"
    message = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return f"{_dotted(path)}: {message}"


def _locate(schema: Schema | None, loc: Sequence[str | int]) -> _Where:
    """Walks `schema` along pydantic's `loc`, leaving out the union members it names."""
    path: list[str | int] = []
    node: Schema | None = schema
    parent: Schema | None = None
    union: tuple[str | int, ...] | None = None
    depth = 0
    tagged = False  # the previous part named a member of the union `node` is
    for part in loc:
        node = _resolved(schema, node)
        members = _members(schema, node)
        mapping = (node or {}).get("discriminator", {}).get("mapping", {})
        if members and isinstance(part, str) and part in mapping:
            node = _resolved(schema, {"$ref": mapping[part]})  # a tag: no field of its own
            continue
        if members:
            member = next((m for m in members if _child(schema, m, part) is not None), None)
            if member is None and not tagged:
                # A member named by its type (`str`, `list[Task]`, a callable's tag).
                union, depth, tagged = tuple(path), 0, True
                continue
            if member is None:  # a field the member does not have: the object member's
                shape = "properties" if isinstance(part, str) else "items"
                member = next((m for m in members if shape in m), None)
            node = member
        tagged = False
        parent, node = node, _child(schema, node, part)
        path.append(part)
        depth += 1
    if union is None and schema is None:
        path = [p for p in path if not _looks_like_member(p)]
    return _Where(tuple(path), node, parent, union, depth)


def _looks_like_member(part: str | int) -> bool:
    # Without a schema, a member's name is recognised by how pydantic spells types.
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool"))


def _resolved(schema: Schema | None, node: Schema | None) -> Schema | None:
    while node is not None and schema is not None and "$ref" in node:
        name = str(node["$ref"]).rsplit("/", 1)[-1]
        node = schema.get("$defs", {}).get(name)
    return node


def _members(schema: Schema | None, node: Schema | None) -> list[Schema]:
    if node is None:
        return []
    listed = node.get("oneOf") or node.get("anyOf") or []
    return [m for m in (_resolved(schema, m) for m in listed) if m is not None]


def _child(schema: Schema | None, node: Schema | None, part: str | int) -> Schema | None:
    """The schema of field or index `part` of `node`, or None when `node` has no such part."""
    node = _resolved(schema, node)
    if node is None:
        return None
    if isinstance(part, int):
        items = node.get("items")
        return items if isinstance(items, Mapping) else None
    properties = node.get("properties", {})
    if part in properties:
        return properties[part]  # type: ignore[no-any-return]
    extra = node.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


def _tags(schema: Schema | None, node: Schema | None) -> list[str]:
    node = _resolved(schema, node)
    for candidate in (node, *_members(schema, node)):
        mapping = (candidate or {}).get("discriminator", {}).get("mapping")
        if mapping:
            return sorted(mapping)
    return []


def _properties(schema: Schema | None, node: Schema | None) -> list[str]:
    node = _resolved(schema, node)
    return list((node or {}).get("properties", {}))


def _dotted(path: Sequence[str | int]) -> str:
    return ".".join(str(p) for p in path) or "(the whole value)"


def _shown(value: Any) -> str:
    """A value as JSON, clipped: what the reader sent, recognisable."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
