"""Trajectories in Harbor's Agent Trajectory Interchange Format (ATIF), one document each.

The format is Harbor's RFC 0001 (`0001-trajectory-format.md` in its repository, models in
`harbor.models.trajectories`). Each trajectory becomes a root object with `schema_version`,
`session_id`, `agent` {name, version, model_name} and `steps` numbered from 1: the system
prompt and the task's prompt, then one agent step per model turn (or per call a `command`
agent's program made) with its `tool_calls` and, in the same step, `observation.results`
whose `source_call_id` names each call. A step's `metrics` are its model call's tokens;
`final_metrics` the trajectory's usage. What ATIF has no field for (the outcome and score,
events such as retries, the patch) goes in `extra`, which the format keeps for that.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcp_evalserver import __version__
from mcp_evalserver.engine.exports.transcripts import ExportedTrajectory, Turn
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.runtime.atomic_files import write_atomically

#: The version written: every field used here is in v1.0, and Harbor's models read v1.0-v1.7.
SCHEMA_VERSION = "ATIF-v1.4"
FILE_NAME = "trajectory.json"


def atif_trajectory(state: CampaignState, item: ExportedTrajectory) -> dict[str, Any]:
    """One trajectory as an ATIF root object (JSON-ready)."""
    trajectory = item.state
    steps = [_step(number, turn, _model(state)) for number, turn in enumerate(item.turns, 1)]
    agent: dict[str, Any] = {"name": state.spec.agent.type, "version": __version__}
    if (model := _model(state)) is not None:
        agent["model_name"] = model
    agent["extra"] = {"config": state.spec.agent.model_dump(mode="json")}
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "session_id": f"{state.id}/{trajectory.id}",
        "agent": agent,
        "steps": steps,
        "final_metrics": _final_metrics(item, len(steps)),
        "extra": {
            "campaign": state.id,
            "trajectory": trajectory.id,
            "task": trajectory.task_id,
            "sample": trajectory.sample,
            "parent": trajectory.parent,
            "outcome": trajectory.outcome,
            "score": trajectory.score,
            "error": trajectory.error,
            "answer": item.answer,
            "patch": item.patch,
            "unreadable": item.unreadable or None,
        },
    }
    document["extra"] = {k: v for k, v in document["extra"].items() if v is not None}
    return document


def write_atif(state: CampaignState, items: list[ExportedTrajectory], out: Path) -> list[Path]:
    """Writes `<out>/<trajectory id>/trajectory.json` for each trajectory; returns the paths.

    Raises:
        OSError: `out` or a file in it cannot be written.
    """
    written = []
    for item in items:
        path = out / item.state.id / FILE_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(atif_trajectory(state, item), indent=2, ensure_ascii=False)
        write_atomically(path, (text + "\n").encode())
        written.append(path)
    return written


def _model(state: CampaignState) -> str | None:
    model = getattr(state.spec.agent, "model", None)
    return model if isinstance(model, str) else None


def _step(number: int, turn: Turn, model: str | None) -> dict[str, Any]:
    step: dict[str, Any] = {"step_id": number, "source": turn.role, "message": turn.text}
    if turn.role == "agent":
        if model is not None and turn.usage is not None:
            step["model_name"] = model
        if turn.calls:
            step["tool_calls"] = [
                {"tool_call_id": c.id, "function_name": c.name, "arguments": c.arguments}
                for c in turn.calls
            ]
            step["observation"] = {
                "results": [{"source_call_id": c.id, "content": c.result} for c in turn.calls]
            }
        if turn.usage is not None:
            step["metrics"] = _metrics(turn.usage)
    if turn.events:
        step["extra"] = {"events": turn.events}
    return step


def _metrics(usage: dict[str, Any]) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    if isinstance(tokens := usage.get("input_tokens"), int):
        metrics["prompt_tokens"] = tokens
    if isinstance(tokens := usage.get("output_tokens"), int):
        metrics["completion_tokens"] = tokens
    if isinstance(latency := usage.get("latency_s"), int | float):
        metrics["extra"] = {"latency_s": latency}
    return metrics


def _final_metrics(item: ExportedTrajectory, steps: int) -> dict[str, Any]:
    usage = item.state.usage or {}
    final: dict[str, Any] = {"total_steps": steps}
    if usage:
        final["total_prompt_tokens"] = int(usage.get("input_tokens") or 0)
        final["total_completion_tokens"] = int(usage.get("output_tokens") or 0)
        if usage.get("cost_usd") is not None:
            final["total_cost_usd"] = float(usage["cost_usd"])
    timing = {
        "requests": usage.get("requests"),
        "generation_s": item.state.generation_s,
        "scoring_s": item.state.scoring_s,
    }
    if extra := {k: v for k, v in timing.items() if v is not None}:
        final["extra"] = extra
    return final
