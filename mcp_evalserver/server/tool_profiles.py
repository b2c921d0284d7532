"""Which tools a server offers (`--tools`): apart from `surface`, which imports pydantic, because
the command line reads the choices before an HTTP server listens."""

from __future__ import annotations

from typing import Final, Literal, get_args

#: What a server offers: every tool, or (`--tools agent`) what an agent that claims
#: trajectories needs: claim_trajectory and the workspace tools.
ToolProfile = Literal["all", "agent"]
TOOL_PROFILES: Final[tuple[str, ...]] = get_args(ToolProfile)
