"""The Agent Trajectory Interchange Format, field by field, to validate our exports against.

Written from Harbor's RFC 0001 (`0001-trajectory-format.md`, v1.4, the version we
write) and the validators of its reference models (`harbor.models.trajectories`): every object
refuses fields it does not define; `schema_version`, `session_id`, `agent` {name, version} and
at least one step are required; step ids run 1, 2, 3, ...; `source` is system, user or agent;
`message` is required (it may be empty); model_name, reasoning_*, tool_calls and metrics only
on agent steps; a timestamp is ISO 8601; each observation result's `source_call_id` names a
tool call of the same step. Harbor's own package needs Python 3.12 (this machine has 3.11),
so these models stand in for it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Agent(_Strict):
    name: str
    version: str
    model_name: str | None = None
    extra: dict[str, Any] | None = None


class ToolCall(_Strict):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]


class SubagentTrajectoryRef(_Strict):
    session_id: str
    trajectory_path: str | None = None
    extra: dict[str, Any] | None = None


class ObservationResult(_Strict):
    source_call_id: str | None = None
    content: str | None = None
    subagent_trajectory_ref: list[SubagentTrajectoryRef] | None = None


class Observation(_Strict):
    results: list[ObservationResult]


class Metrics(_Strict):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class FinalMetrics(_Strict):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = None
    extra: dict[str, Any] | None = None


class Step(_Strict):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    extra: dict[str, Any] | None = None

    @field_validator("timestamp")
    @classmethod
    def _iso_8601(cls, value: str | None) -> str | None:
        if value is not None:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        return value

    @model_validator(mode="after")
    def _agent_only_fields(self) -> Step:
        if self.source != "agent":
            for name in ("model_name", "reasoning_effort", "reasoning_content", "tool_calls"):
                assert getattr(self, name) is None, f"{name} on a {self.source} step"
            assert self.metrics is None, f"metrics on a {self.source} step"
        return self


class Trajectory(_Strict):
    schema_version: Literal["ATIF-v1.0", "ATIF-v1.1", "ATIF-v1.2", "ATIF-v1.3", "ATIF-v1.4"]
    session_id: str
    agent: Agent
    steps: list[Step] = Field(min_length=1)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _steps_numbered_from_one(self) -> Trajectory:
        assert [s.step_id for s in self.steps] == list(range(1, len(self.steps) + 1))
        return self

    @model_validator(mode="after")
    def _results_name_calls_of_their_step(self) -> Trajectory:
        for step in self.steps:
            calls = {c.tool_call_id for c in step.tool_calls or []}
            for result in step.observation.results if step.observation else []:
                if result.source_call_id is not None:
                    assert result.source_call_id in calls, (step.step_id, result.source_call_id)
        return self
