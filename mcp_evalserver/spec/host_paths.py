"""Host paths a task's local instance may show besides its own directory."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class HostPath(BaseModel):
    """A host path a local instance's view shows besides the instance directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="Absolute host path without symlinks: a directory or a file.")
    writable: bool = Field(
        default=False,
        description="Copy-on-write per workspace: writes count in its disk cap and never reach "
        "the host. Read-only otherwise.",
    )
