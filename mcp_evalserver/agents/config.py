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


AgentConfig = Annotated[
    NoopAgentConfig | OracleAgentConfig | PythonAgentConfig, Field(discriminator="type")
]
