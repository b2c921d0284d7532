"""A trajectory as the exports read it: its task, what it handed in, and its transcript as turns.

The agents record transcripts in their own shapes: the `openai` agent the chat messages it sent
and received plus events (`completion` with its usage, `retry`, `submitted`, ...); the `command`
agent the tool calls its program made (`{"tool", "arguments"}`) between `started` and `exited`;
the others none. `turns` reads every shape into one list of turns (system, user, agent), each
agent turn with its tool calls and what each returned, so the Inspect and ATIF writers share
one reading and differ only in what they write.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mcp_evalserver.engine.state import CampaignState, TrajectoryState
from mcp_evalserver.errors import EvalServerError
from mcp_evalserver.runtime.artifacts import read_artifact
from mcp_evalserver.spec.campaign import Task

#: What a tool call's result says when the transcript kept none (the `command` agent keeps
#: the calls its program made, not what they returned).
NOT_RECORDED = "(the result was not recorded)"
#: The result of a `submit` call: the trajectory ended with it, so no tool message follows.
SUBMITTED = "(submitted: the trajectory ended here)"


@dataclass
class Call:
    """One tool call and what it returned."""

    id: str
    name: str
    arguments: dict[str, Any]
    result: str | None = None


@dataclass
class Turn:
    """One message of the conversation; an agent turn carries its tool calls."""

    role: Literal["system", "user", "agent"]
    text: str
    calls: list[Call] = field(default_factory=list)
    #: The model call that produced an agent turn: input_tokens, output_tokens, latency_s.
    usage: dict[str, Any] | None = None
    #: What the transcript recorded after this turn that is no message (retries, exits, ...).
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ExportedTrajectory:
    """One trajectory with everything the exports write about it."""

    state: TrajectoryState
    task: Task
    answer: str | None
    patch: str | None
    #: The transcript as recorded, or None when the agent records none.
    transcript: list[Any] | None
    #: Why an artifact could not be read (it is left out, the rest is exported).
    unreadable: list[str] = field(default_factory=list)

    @property
    def turns(self) -> list[Turn]:
        return turns(self.transcript, self.task.prompt, self.answer, self.patch, self.generated)

    @property
    def generated(self) -> bool:
        return self.state.generated_seq is not None


def exported_trajectories(state: CampaignState, directory: Path) -> list[ExportedTrajectory]:
    """Every trajectory of the campaign, in the ledger's order, with its artifacts read."""
    tasks = {task.id: task for task in state.spec.task_list()}
    return [_exported(t, tasks[t.task_id], directory) for t in state.trajectories.values()]


def _exported(trajectory: TrajectoryState, task: Task, directory: Path) -> ExportedTrajectory:
    stored = trajectory.submission or {}
    unreadable: list[str] = []

    def artifact(name: str) -> bytes | None:
        ref = stored.get(name)
        if not isinstance(ref, dict):
            return None
        try:
            return read_artifact(directory, ref)
        except EvalServerError as exc:
            unreadable.append(f"{name}: {exc}")
            return None

    patch = artifact("patch")
    transcript: list[Any] | None = None
    if (raw := artifact("transcript")) is not None:
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            unreadable.append(f"transcript: not JSON ({exc})")
        else:
            transcript = parsed if isinstance(parsed, list) else [parsed]
    answer = stored.get("answer")
    return ExportedTrajectory(
        trajectory,
        task,
        answer if isinstance(answer, str) else None,
        patch.decode(errors="replace") if patch is not None else None,
        transcript,
        unreadable,
    )


def turns(
    transcript: list[Any] | None,
    prompt: str,
    answer: str | None = None,
    patch: str | None = None,
    generated: bool = True,
) -> list[Turn]:
    """The conversation a transcript records, beginning with the task's prompt.

    Without a transcript (oracle, noop, external and python agents), or one with no agent
    turn in it, the prompt and, once generated, one agent turn holding what was handed in
    (the answer, else the patch).
    Every tool call ends with a result: the tool message's text, `SUBMITTED` for `submit`,
    or `NOT_RECORDED`.
    """
    reader = _Reader()
    if not any(isinstance(e, dict) and e.get("role") == "user" for e in transcript or []):
        reader.turns.append(Turn("user", prompt))
    for entry in transcript or []:
        reader.read(entry)
    found = reader.finish()
    if generated and not any(turn.role == "agent" for turn in found):
        # Nothing the agent said was recorded (a `predictions` transcript holds only where
        # the prediction came from): what it handed in speaks for it.
        found.append(Turn("agent", answer if answer is not None else patch or ""))
    return found


class _Reader:
    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self.calls: dict[str, Call] = {}
        self.usage: dict[str, Any] | None = None
        #: Events before the first turn: kept with it.
        self.early: list[dict[str, Any]] = []

    def read(self, entry: Any) -> None:
        if not isinstance(entry, dict):
            self._event({"event": "entry", "value": entry})
            return
        role = entry.get("role")
        if role in ("system", "user"):
            self.turns.append(Turn(role, _text(entry.get("content"))))
        elif role == "assistant":
            calls = [self._call(c) for c in entry.get("tool_calls") or [] if isinstance(c, dict)]
            turn = Turn("agent", _text(entry.get("content")), calls, usage=self.usage)
            self.usage = None
            self.turns.append(turn)
        elif role == "tool":
            call = self.calls.get(str(entry.get("tool_call_id")))
            if call is not None and call.result is None:
                call.result = _text(entry.get("content"))
            else:
                self._event({"event": "unmatched_tool_result", **entry})
        elif role is None and isinstance(entry.get("tool"), str):
            self._command_call(entry)
        elif entry.get("event") == "completion":
            usage = entry.get("usage")
            self.usage = {
                **(usage if isinstance(usage, dict) else {}),
                "latency_s": entry.get("latency_s"),
            }
        elif entry.get("event") == "submitted":
            for call in reversed(self.calls.values()):
                if call.name == "submit" and call.result is None:
                    call.result = SUBMITTED
                    break
            self._event(entry)
        else:
            self._event(entry)

    def _call(self, requested: dict[str, Any]) -> Call:
        function = requested.get("function")
        function = function if isinstance(function, dict) else {}
        call_id = str(requested.get("id") or f"call_{len(self.calls) + 1}")
        call = Call(call_id, str(function.get("name")), _arguments(function.get("arguments")))
        self.calls[call_id] = call
        return call

    def _command_call(self, entry: dict[str, Any]) -> None:
        """A call a `command` agent's program made: its outcome, where kept, is its result."""
        call_id = f"call_{len(self.calls) + 1}"
        arguments = entry.get("arguments")
        call = Call(call_id, entry["tool"], arguments if isinstance(arguments, dict) else {})
        outcome = {k: v for k, v in entry.items() if k not in ("tool", "arguments")}
        if outcome:
            call.result = json.dumps(outcome, ensure_ascii=False)
        if call.name == "submit":
            call.result = SUBMITTED
        self.calls[call_id] = call
        self.turns.append(Turn("agent", "", [call]))

    def _event(self, event: dict[str, Any]) -> None:
        (self.turns[-1].events if self.turns else self.early).append(event)

    def finish(self) -> list[Turn]:
        for call in self.calls.values():
            if call.result is None:
                call.result = NOT_RECORDED
        if self.turns:
            self.turns[0].events[:0] = self.early
        return self.turns


def _text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") if isinstance(p, dict) else p for p in content]
        return "\n".join(p for p in parts if isinstance(p, str))
    return json.dumps(content, ensure_ascii=False)


def _arguments(raw: Any) -> dict[str, Any]:
    """A call's arguments as an object: the model's JSON text parsed; text that is no JSON
    object (models do write such) is kept whole under `raw`."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw or "{}")
        except ValueError:
            return {"raw": raw}
        return parsed if isinstance(parsed, dict) else {"raw": raw}
    return {} if raw is None else {"raw": raw}
