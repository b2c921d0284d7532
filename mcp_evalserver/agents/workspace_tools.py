"""The tools a model-driven agent gets: exec, read_file, edit_file, write_file, search and
list_files in its workspace, and submit (and checkpoint/restore of the workspace when its
configuration enables them).

Schemas are OpenAI function-tool JSON (what every OpenAI-compatible endpoint accepts), made from
the one declaration of the workspace tools (`tool_table`) that the MCP servers use too. A tool's
result is text for the model: a command that fails, a missing file or bad arguments are told to
the model so it can recover; only a sandbox that is gone (`InfrastructureError`) escapes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mcp_evalserver.agents import file_text
from mcp_evalserver.agents.search_text import glob_text, search_text
from mcp_evalserver.agents.tool_table import (
    LISTED_FILES,
    SEARCH_HITS,
    WORKSPACE_TOOLS,
    Capability,
    ModelTool,
    WorkspaceTool,
)
from mcp_evalserver.errors import EvalServerError, InfrastructureError
from mcp_evalserver.sandbox.base import ExecResult, Workspace

SUBMIT = "submit"

_JSON_TYPES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def tool_schemas(with_workspace: bool, checkpoints: bool = False) -> list[dict[str, Any]]:
    """The tools offered to the model, from `WORKSPACE_TOOLS`: answer-only tasks get `submit`
    alone, checkpoint and restore come with `checkpoints`."""
    capabilities: set[Capability] = set()
    if with_workspace:
        capabilities.add("workspace")
    if checkpoints:
        capabilities.add("checkpoints")
    schemas = []
    for tool in WORKSPACE_TOOLS:
        model = tool.for_model(frozenset(capabilities))
        if model is not None:
            schemas.append(_schema(tool, model))
    return schemas


def _schema(tool: WorkspaceTool, model: ModelTool) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for argument in model.arguments:
        properties[argument.name] = {"type": _JSON_TYPES[tool.parameter(argument.name).type]}
        if argument.description is not None:
            properties[argument.name]["description"] = argument.description
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    required = [argument.name for argument in model.arguments if argument.required]
    if required:
        parameters["required"] = required
    function = {"name": model.name, "description": model.description, "parameters": parameters}
    return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolOutcome:
    """What one tool call gave: text for the model, and the answer if it was `submit`."""

    text: str
    submitted: bool = False
    answer: str | None = None
    #: What the command did, for `exec`.
    command: ExecResult | None = None


class WorkspaceTools:
    """Runs the model's tool calls against one workspace (None for answer-only tasks)."""

    def __init__(
        self,
        workspace: Workspace | None,
        *,
        command_timeout_s: float,
        output_bytes: int,
        checkpoints: bool = False,
    ) -> None:
        self.workspace = workspace
        self.command_timeout_s = command_timeout_s
        self.output_bytes = output_bytes
        self.checkpoints = checkpoints

    async def call(self, name: str, raw_arguments: str) -> ToolOutcome:
        """Runs one tool call; mistakes come back as text the model can act on.

        Raises:
            InfrastructureError: the sandbox is gone; the runner retries the trajectory.
        """
        try:
            arguments = json.loads(raw_arguments or "{}")
        except ValueError as exc:
            return ToolOutcome(f"error: arguments are not valid JSON ({exc}); try again")
        if not isinstance(arguments, dict):
            return ToolOutcome("error: arguments must be a JSON object")
        if name == SUBMIT:
            answer = arguments.get("answer")
            if answer is not None and not isinstance(answer, str):
                answer = json.dumps(answer)
            return ToolOutcome("submitted", submitted=True, answer=answer)
        workspace = self.workspace
        offered = [t["function"]["name"] for t in tool_schemas(workspace is not None,
                                                                self.checkpoints)]  # fmt: skip
        if workspace is None or name == SUBMIT or name not in offered:
            listed = ", ".join(offered)
            return ToolOutcome(f"error: no tool named {name!r}; the tools are: {listed}")
        try:
            if name == "checkpoint":
                return ToolOutcome(f"checkpoint id: {await workspace.checkpoint()}")
            if name == "restore":
                checkpoint_id = _text_argument(arguments, "checkpoint_id")
                await workspace.restore(checkpoint_id)
                return ToolOutcome(f"restored checkpoint {checkpoint_id}")
            if name == "exec":
                command = _text_argument(arguments, "command")
                result = await workspace.exec(
                    command, timeout=self.command_timeout_s, output_cap=self.output_bytes
                )
                return ToolOutcome(_format_exec(result, self.command_timeout_s), command=result)
            if name == "search":
                found = await workspace.search(
                    _text_argument(arguments, "pattern"),
                    path=_optional_text(arguments, "path") or ".",
                    glob=_optional_text(arguments, "glob"),
                    max_hits=SEARCH_HITS,
                )
                return ToolOutcome(self._clip_lines(search_text(found)))
            if name == "list_files":
                files = await workspace.glob(
                    _optional_text(arguments, "glob") or "**/*",
                    path=_optional_text(arguments, "path") or ".",
                    max_entries=LISTED_FILES,
                )
                return ToolOutcome(self._clip_lines(glob_text(files)))
            path = _text_argument(arguments, "path")
            if name == "read_file":
                offset = _int_argument(arguments, "offset", 1)
                limit = _int_argument(arguments, "limit", file_text.DEFAULT_LINES)
                data = await file_text.load(workspace, path)
                # As many numbered lines as one tool result may show; the text says where to
                # go on.
                lines = file_text.read_lines(
                    data, path, offset, limit, self.output_bytes, per_line=file_text.NUMBER_CHARS
                )
                return ToolOutcome(lines.shown(path))
            if name == "edit_file":
                old, new = (
                    _text_argument(arguments, "old_text"),
                    _text_argument(arguments, "new_text"),
                )
                replace_all = arguments.get("replace_all") is True
                done = await file_text.edit(workspace, path, old, new, replace_all)
                return ToolOutcome(done.shown(path))
            content = _text_argument(arguments, "content")
            previous = await workspace.write_file(path, content)
            replaced = "" if previous is None else f" (it replaced {previous} bytes)"
            return ToolOutcome(f"wrote {len(content.encode())} bytes to {path}{replaced}")
        except InfrastructureError:
            raise
        except (EvalServerError, ValueError) as exc:
            # NotFound, InvalidInput, LimitExceeded...: the model's mistake, not ours.
            return ToolOutcome(f"error: {exc}")

    def _clip_lines(self, text: str) -> str:
        """Whole lines of a search or listing within the agent's output cap, then how many
        more there were."""
        if len(text.encode()) <= self.output_bytes:
            return text
        lines, kept, size = text.split("\n"), 0, 0
        for line in lines:
            size += len(line.encode()) + 1
            if size > self.output_bytes:
                break
            kept += 1
        return "\n".join(lines[:kept]) + (
            f"\n[{len(lines) - kept} more lines not shown (the output cap is "
            f"{self.output_bytes} bytes); narrow with path or glob]"
        )


def _text_argument(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str):
        raise ValueError(f"argument {key!r} must be a string")
    return value


def _int_argument(arguments: dict[str, Any], key: str, default: int) -> int:
    value = arguments.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"argument {key!r} must be a whole number from 1")
    return value


def _optional_text(arguments: dict[str, Any], key: str) -> str | None:
    """An optional string argument; empty means not given (models send "" for none)."""
    value = arguments.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"argument {key!r} must be a string")
    return value or None


def _format_exec(result: ExecResult, timeout_s: float) -> str:
    lines = [f"exit code: {result.exit_code}"]
    if result.timed_out:
        lines.append(f"(killed: the command ran longer than {timeout_s:g}s)")
    for label, text, truncated in (
        ("stdout", result.stdout, result.stdout_truncated),
        ("stderr", result.stderr, result.stderr_truncated),
    ):
        if text:
            note = " (truncated: head and tail kept)" if truncated else ""
            lines.append(f"--- {label}{note} ---\n{text}")
    return "\n".join(lines)
