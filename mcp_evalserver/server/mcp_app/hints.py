"""The behaviour hints every tool declares (MCP `ToolAnnotations`)."""

from __future__ import annotations

from mcp_types import ToolAnnotations

from mcp_evalserver.agents.tool_table import Effect

# Every tool says all three hints (a client must not guess the spec's defaults): whether it
# changes anything, whether what it changes is lost (destructive), whether calling it again
# with the same arguments changes nothing more (idempotent).
READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
#: Adds something (a campaign, a claim, a checkpoint, a submission); loses nothing.
MUTATES = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
#: Brings something to a state (running, stopped); again changes nothing more.
SETS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
#: Replaces workspace files with given ones: what they held is lost; again, nothing more.
OVERWRITES = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)
#: Runs a command in a workspace (or edits a file there): it may delete anything there, and
#: twice is not once.
RUNS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)
#: The hints of each workspace tool's declared effect (`agents.tool_table.Effect`).
EFFECTS: dict[Effect, ToolAnnotations] = {
    "reads": READ_ONLY, "adds": MUTATES, "overwrites": OVERWRITES, "edits": RUNS,
    "runs": RUNS,
}  # fmt: skip
