"""An evaluation set: several agents on one task set, one campaign per agent (issue 42).

A set spec is a campaign spec whose `agent` is replaced by `agents` (a name per agent config),
or by a `matrix` of models crossed with agent configs. Each agent's campaign gets the set's
tasks, samples, scorer, limits, sandbox and prices: what makes their figures comparable.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.spec.campaign import CampaignSpec, describe_validation_error

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,47}")


class AgentMatrix(BaseModel):
    """Every model crossed with every agent config: agent `NAME-MODEL` is config `NAME` with
    its `model` set (configs of agents that take a model: `openai`, `mini-swe-agent`, ...)."""

    model_config = ConfigDict(extra="forbid")

    models: list[str] = Field(min_length=1, description="Model names.")
    agents: dict[str, dict[str, Any]] = Field(
        min_length=1, description="Agent configs by name, without `model`."
    )


class EvalSetSpec(BaseModel):
    """Several agents on one task set: `agents` (or `matrix`) instead of a campaign's `agent`;
    every other field is the campaign spec's, shared by all of them."""

    model_config = ConfigDict(extra="allow")

    name: str = Field("set", description="A label; the set id starts with it.")
    agents: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Agent configs by name (letters, digits, '-', '_')."
    )
    matrix: AgentMatrix | None = Field(None, description="Models x agent configs.")

    @field_validator("agents")
    @classmethod
    def _names_are_safe(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name in value:
            if not _NAME.fullmatch(name):
                raise ValueError(f"agent name {name!r}: use 1-48 letters, digits, '-' or '_'")
        return value

    def agent_configs(self) -> dict[str, dict[str, Any]]:
        """Every agent of the set by name, the matrix expanded.

        Raises:
            InvalidInput: no agent at all, or a matrix name that collides with an agent's.
        """
        configs = dict(self.agents)
        if self.matrix is not None:
            for name, config in self.matrix.agents.items():
                for model in self.matrix.models:
                    crossed = f"{name}-{re.sub(r'[^A-Za-z0-9_-]+', '-', model)}"
                    if crossed in configs:
                        raise InvalidInput(f"set: agent name {crossed!r} appears twice")
                    configs[crossed] = {**config, "model": model}
        if not configs:
            raise InvalidInput(
                'set: no agents; give `"agents": {"name": {"type": ...}, ...}` or a `matrix`'
            )
        return configs


def is_eval_set(data: Any) -> bool:
    """Whether parsed spec data describes a set (it names `agents` or a `matrix`)."""
    return isinstance(data, dict) and ("agents" in data or "matrix" in data)


def read_spec_data(path: Path) -> Any:
    """A spec file's JSON, with a key given twice in one object refused (JSON keeps the last
    silently: two agents of one name would become one).

    Raises:
        InvalidInput: unreadable, not JSON, or a key given twice.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read spec file {path}: {exc.strerror}") from exc

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise InvalidInput(f"{path}: {key!r} is given twice in one object; name it once")
            seen[key] = value
        return seen

    try:
        return json.loads(text, object_pairs_hook=unique)
    except ValueError as exc:
        raise InvalidInput(f"spec file {path} is not JSON: {exc}") from exc


def parse_eval_set(data: Any) -> tuple[EvalSetSpec, dict[str, dict[str, Any]]]:
    """The set and each of its agents' campaign spec data (not yet validated as campaigns).

    Raises:
        InvalidInput: naming the field and the reason.
    """
    try:
        spec = EvalSetSpec.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(f"invalid set spec: {describe_validation_error(exc)}") from exc
    if "agent" in data:
        raise InvalidInput("set: give `agents` (by name) or a `matrix`, not `agent`")
    shared = {k: v for k, v in data.items() if k not in ("name", "agents", "matrix")}
    return spec, {
        name: {**shared, "name": f"{spec.name}-{name}"[:64], "agent": config}
        for name, config in spec.agent_configs().items()
    }


def comparable(first: CampaignSpec, other: CampaignSpec, agent: str) -> None:
    """Refuses an agent whose campaign would not be compared fairly with the set's first.

    Raises:
        InvalidInput: other tasks, samples or scorer; the field is named.
    """
    for field, mine, theirs in (
        ("tasks", [t.id for t in first.task_list()], [t.id for t in other.task_list()]),
        ("samples", first.samples, other.samples),
        ("scorer", first.scorer.model_dump(), other.scorer.model_dump()),
    ):
        if mine != theirs:
            raise InvalidInput(
                f"set: agent {agent!r} would have other {field} than the set's; an evaluation "
                f"set grades every agent with the same {field}"
            )
