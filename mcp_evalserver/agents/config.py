"""Agent configurations: one discriminated union, the `agent` field of a campaign spec.

Adding an agent kind = its config class here, added to `AgentConfig`, and its builder in
`agents/factory.py`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoopAgentConfig(_Strict):
    """Submits nothing: the floor every other agent must beat."""

    type: Literal["noop"] = "noop"


class OracleAgentConfig(_Strict):
    """Submits the task's gold answer or patch: proves the tasks and the scorer agree."""

    type: Literal["oracle"] = "oracle"


class PythonAgentConfig(_Strict):
    """An agent written in Python, loaded from `module:factory`; `factory(options)` returns it."""

    type: Literal["python"] = "python"
    factory: str = Field(description="Import path `package.module:callable`.")
    options: dict[str, Any] = Field(default_factory=dict)


class ExternalAgentConfig(_Strict):
    """An agent outside the server (an IDE, a script, a model) that drives each trajectory
    through the MCP tools: `claim_trajectory`, the sandbox tools, then `submit`."""

    type: Literal["external"] = "external"
    lease_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="Seconds a claim lasts without a tool call on it; then another client may "
        "claim the trajectory, its workspace as it was.",
    )


AgentConfig = Annotated[
    NoopAgentConfig | OracleAgentConfig | PythonAgentConfig | ExternalAgentConfig,
    Field(discriminator="type"),
]
