"""What a trajectory's transcript keeps of each workspace tool call its agent made.

A program run by the `command` agent (`ScopedTrajectory`) and an external client
(`ExternalTrajectories`) act through the same tools; each call becomes one entry
`{"tool", "arguments", "exit_code"?}`, which the exports read as a step of the trajectory
(engine/exports/transcripts.py). Long arguments (a file's content) are clipped; those a
tool marks as not worth keeping (`in_transcript=False`: a timeout, stdin) are left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_evalserver.agents.tool_table import Audience, WorkspaceTool
from mcp_evalserver.server.models import ExecOutput

#: What one transcript entry keeps of a long argument (a file's content, a command).
ARGUMENT_CHARS = 2_000


def call_entry(
    tool: WorkspaceTool, audience: Audience, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """The entry of one call of `tool` with `arguments`, before it runs."""
    kept = _KEPT.get((tool.name, audience))
    if kept is None:  # once per tool and surface: every workspace call makes an entry
        kept = tuple(p.name for p in tool.parameters_for(audience) if p.in_transcript)
        _KEPT[(tool.name, audience)] = kept
    shown = {
        name: None if (value := arguments.get(name)) is None else str(value)[:ARGUMENT_CHARS]
        for name in kept
    }
    return {"tool": tool.name, "arguments": shown}


#: The parameters an entry keeps, by tool name and surface.
_KEPT: dict[tuple[str, Audience], tuple[str, ...]] = {}


def note_result(entry: dict[str, Any], result: object) -> None:
    """Adds to `entry` what its call returned that a reader of the transcript needs."""
    if isinstance(result, ExecOutput):
        entry["exit_code"] = result.exit_code
