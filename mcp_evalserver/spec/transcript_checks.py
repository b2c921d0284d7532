"""Assertions over a trajectory's recorded tool calls, and how calls are read from a transcript.

Only what the harness recorded counts as a call: the `tool_calls` of the `openai` agent's
assistant messages (up to and including `submit`: calls after it in the same message never ran),
the `tool` entries the `command` agent's endpoint logged, and for a CLI agent (its transcript
starts with an event marked `calls_from: model_bridge`) the calls its model bridge saw stream by
(`model_call` events), never the messages converted from the CLI's own session log: that log is
written inside the workspace, where the agent can rewrite it. Text a model or a program printed
(message content, tool results, stdout) is never parsed, so it cannot fake a call.

This module imports nothing of the engine: scorer configs (and so campaign specs) use its models.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mcp_evalserver.spec.matchers import json_difference

SUBMIT = "submit"
#: A transcript whose calls are the model bridge's record (`calls_from` of an event).
MODEL_BRIDGE = "model_bridge"


@dataclass(frozen=True)
class ToolCall:
    """One call as recorded: its position among the calls, its tool and its arguments."""

    index: int
    name: str
    #: The arguments as an object; None when the model sent something that is not one.
    arguments: dict[str, Any] | None
    raw_arguments: str


def recorded_calls(transcript: Sequence[Any]) -> list[ToolCall]:
    """The tool calls a transcript records, in order (see the module docstring)."""
    if any(isinstance(e, dict) and e.get("calls_from") == MODEL_BRIDGE for e in transcript):
        return _bridged_calls(transcript)
    calls: list[ToolCall] = []
    for entry in transcript:
        if not isinstance(entry, dict):
            continue
        if entry.get("role") == "assistant":
            for requested in entry.get("tool_calls") or []:
                function = requested.get("function") if isinstance(requested, dict) else None
                if not isinstance(function, dict):
                    continue
                raw = function.get("arguments")
                raw = raw if isinstance(raw, str) else json.dumps(raw)
                calls.append(_call(len(calls), str(function.get("name")), raw))
                if calls[-1].name == SUBMIT:
                    return calls
        elif "role" not in entry and isinstance(entry.get("tool"), str):
            arguments = entry.get("arguments")
            raw = json.dumps(arguments if isinstance(arguments, dict) else {})
            calls.append(_call(len(calls), entry["tool"], raw))
    return calls


def _bridged_calls(transcript: Sequence[Any]) -> list[ToolCall]:
    """The calls in the model's responses, as the bridge read them from the provider."""
    calls: list[ToolCall] = []
    for entry in transcript:
        if not isinstance(entry, dict) or entry.get("event") != "model_call":
            continue
        for seen in entry.get("tool_calls") or []:
            if isinstance(seen, dict):
                raw = seen.get("arguments")
                raw = raw if isinstance(raw, str) else json.dumps(raw)
                calls.append(_call(len(calls), str(seen.get("name")), raw))
    return calls


def _call(index: int, name: str, raw: str) -> ToolCall:
    try:
        parsed = json.loads(raw or "{}")
    except ValueError:
        parsed = None
    return ToolCall(index, name, parsed if isinstance(parsed, dict) else None, raw)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _CallPattern(_Strict):
    """Which calls an assertion is about: a tool, optionally with matching arguments."""

    tool: str = Field(description="Tool name as recorded, e.g. `exec` (openai), `sandbox_exec`.")
    arguments: dict[str, Any] | None = Field(
        None, description="A JSON subset the call's arguments must contain (extra keys allowed)."
    )
    argument_patterns: dict[str, str] = Field(
        default_factory=dict,
        description="Argument name -> regex searched in its value (non-strings as JSON text).",
    )

    @field_validator("argument_patterns")
    @classmethod
    def _patterns_compile(cls, value: dict[str, str]) -> dict[str, str]:
        for name, pattern in value.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"argument_patterns.{name}: invalid regex: {exc}") from exc
        return value

    def matches(self, call: ToolCall) -> bool:
        if call.name != self.tool:
            return False
        if self.arguments is None and not self.argument_patterns:
            return True
        if call.arguments is None:
            return False
        subset = self.arguments
        if subset is not None and json_difference(subset, call.arguments, subset=True):
            return False
        for name, pattern in self.argument_patterns.items():
            if name not in call.arguments:
                return False
            value = call.arguments[name]
            text = value if isinstance(value, str) else json.dumps(value)
            if re.search(pattern, text) is None:
                return False
        return True

    def describe(self) -> str:
        parts = [f"`{self.tool}`"]
        if self.arguments is not None:
            parts.append(f"with arguments containing {json.dumps(self.arguments)}")
        for name, pattern in self.argument_patterns.items():
            parts.append(f"with {name} matching /{pattern}/")
        return " ".join(parts)


@dataclass(frozen=True)
class Check:
    """One assertion's verdict and the reason, in a sentence."""

    passed: bool
    explanation: str


class Called(_CallPattern):
    """The tool was called (at least `times` times) with matching arguments."""

    type: Literal["called"] = "called"
    times: int = Field(1, ge=1, description="At least this many matching calls.")

    def check(self, calls: Sequence[ToolCall]) -> Check:
        found = [c.index for c in calls if self.matches(c)]
        if len(found) >= self.times:
            return Check(True, f"{self.describe()} called {len(found)} time(s)")
        return Check(False, f"{self.describe()} called {len(found)} time(s), need {self.times}")


class NeverCalled(_CallPattern):
    """No call matches (e.g. `exec` with a command matching `rm -rf`)."""

    type: Literal["never_called"] = "never_called"

    def check(self, calls: Sequence[ToolCall]) -> Check:
        found = [c.index for c in calls if self.matches(c)]
        if not found:
            return Check(True, f"{self.describe()} never called")
        return Check(False, f"{self.describe()} called at call #{found[0] + 1}")


class CalledBefore(_CallPattern):
    """A matching call happened before the first call to `before`; both must happen."""

    type: Literal["called_before"] = "called_before"
    before: str = Field(description="The tool whose first call must come later.")

    def check(self, calls: Sequence[ToolCall]) -> Check:
        later = next((c.index for c in calls if c.name == self.before), None)
        if later is None:
            return Check(False, f"`{self.before}` was never called")
        first = next((c.index for c in calls if self.matches(c)), None)
        if first is None:
            return Check(False, f"{self.describe()} was never called")
        if first < later:
            where = f"call #{first + 1}, before `{self.before}` at call #{later + 1}"
            return Check(True, f"{self.describe()} at {where}")
        where = f"call #{first + 1}, after `{self.before}` at call #{later + 1}"
        return Check(False, f"{self.describe()} first at {where}")


class AtMost(_Strict):
    """At most `calls` calls (to `tool`, or to any tool when it is not given)."""

    type: Literal["at_most"] = "at_most"
    calls: int = Field(ge=0)
    tool: str | None = None

    def check(self, calls: Sequence[ToolCall]) -> Check:
        what = f"calls to `{self.tool}`" if self.tool else "tool calls"
        count = sum(1 for c in calls if self.tool is None or c.name == self.tool)
        if count <= self.calls:
            return Check(True, f"{count} {what}, at most {self.calls} allowed")
        return Check(False, f"{count} {what}, more than the {self.calls} allowed")


class EndsWithSubmit(_Strict):
    """The last call is `submit`: the agent handed its work in, rather than running out."""

    type: Literal["ends_with_submit"] = "ends_with_submit"

    def check(self, calls: Sequence[ToolCall]) -> Check:
        if calls and calls[-1].name == SUBMIT:
            return Check(True, f"the last of {len(calls)} calls is `{SUBMIT}`")
        last = f"`{calls[-1].name}`" if calls else "nothing (no calls)"
        return Check(False, f"the last call is {last}, not `{SUBMIT}`")


TrajectoryAssertion = Annotated[
    Called | NeverCalled | CalledBefore | AtMost | EndsWithSubmit,
    Field(discriminator="type"),
]
