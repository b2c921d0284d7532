"""A campaign as an Inspect AI evaluation log (`.eval`, or Inspect's `.json`).

Written with Inspect's own models and writer, so `inspect_ai.log.read_eval_log` and
`inspect view` read it as one of theirs; Inspect is the optional extra `inspect` and is imported
only here, when an export asks for it. The mapping: the campaign is the eval (its spec's name
the task, the agent the solver and the model, its samples the epochs); each trajectory is a
sample (the task id its id, sample n its epoch n + 1; a forked branch has its trajectory id as
its id) whose messages are its transcript, whose score is the scorer's (value in [0, 1],
with status, outcome and details as metadata), and whose usage is the agent's.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_evalserver import __version__
from mcp_evalserver.engine.exports.transcripts import ExportedTrajectory, Turn
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.errors import InvalidInput

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog
    from inspect_ai.model import ChatMessage, ModelUsage

INSTALL_HINT = "install the extra with `pip install 'mcp-evalserver[inspect]'`"
#: File names Inspect reads as logs, by the format each is written in.
SUFFIXES = {".eval": "eval", ".json": "json"}
#: The outcomes of trajectories that ended without a verdict: an error of the sample.
_ERRORS = frozenset({"error", "timeout", "infra_error", "budget_exhausted"})


def require_inspect() -> None:
    """Raises:
    InvalidInput: Inspect AI is not installed (the message says how to install it).
    """
    try:
        import inspect_ai.log  # noqa: F401
    except ImportError as exc:
        raise InvalidInput(
            f"the Inspect export writes with Inspect AI, which is not installed: {INSTALL_HINT}"
        ) from exc


def write_inspect_log(
    state: CampaignState,
    items: list[ExportedTrajectory],
    out: Path,
    eval_set_id: str | None = None,
) -> None:
    """Writes the campaign's log to `out` (`.eval`: Inspect's zip; `.json`: its JSON), whole
    or not at all; `eval_set_id`: the evaluation set it belongs to.

    Raises:
        InvalidInput: `out` has another suffix, or Inspect AI is not installed.
        OSError: `out`'s directory cannot be written.
    """
    if out.suffix not in SUFFIXES:
        raise InvalidInput(
            f"cannot tell the log format from {out.name!r}: name it FILE.eval (Inspect's zip "
            "log, what `inspect eval` writes) or FILE.json (Inspect's JSON log)"
        )
    require_inspect()
    from inspect_ai.log import write_eval_log

    log = inspect_log(state, items, eval_set_id)
    # Inspect writes in place; a temporary name beside `out` makes the log appear whole.
    fd, temporary = tempfile.mkstemp(prefix=f".{out.stem}.", suffix=out.suffix, dir=out.parent)
    os.close(fd)
    try:
        off_the_callers_loop(
            lambda: write_eval_log(log, temporary, format=SUFFIXES[out.suffix])  # type: ignore[arg-type]
        )
        os.chmod(temporary, 0o644)
        os.replace(temporary, out)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def off_the_callers_loop(write: Callable[[], None]) -> None:
    """Runs `write` (a call of Inspect's sync API) where no event loop runs: called on a
    thread whose loop is running, Inspect re-enters that loop with nest_asyncio, which patches
    asyncio for the whole process (pure-Python tasks, and an event loop made and never closed
    by each thread that later asks for one: litellm's sync calls do)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        write()
        return
    with ThreadPoolExecutor(1, thread_name_prefix="inspect-log") as writer:
        writer.submit(write).result()


def inspect_log_json(state: CampaignState, items: list[ExportedTrajectory]) -> str:
    """The campaign's log as Inspect's JSON log text (what `write_inspect_log` writes to a
    `.json` file).

    Raises:
        InvalidInput: Inspect AI is not installed.
    """
    with tempfile.TemporaryDirectory(prefix="inspect-log-") as directory:
        path = Path(directory) / "log.json"
        write_inspect_log(state, items, path)
        return path.read_text(encoding="utf-8")


def inspect_log(
    state: CampaignState, items: list[ExportedTrajectory], eval_set_id: str | None = None
) -> EvalLog:
    """The campaign as an `EvalLog` (Inspect must be installed: see `require_inspect`)."""
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalPlan,
        EvalPlanStep,
        EvalResults,
        EvalSampleReductions,
        EvalSampleScore,
        EvalScore,
        EvalSpec,
        EvalStats,
    )

    spec, scorer = state.spec, state.spec.scorer.type
    model = model_name(state)
    agent_config = spec.agent.model_dump(mode="json")
    samples = [_sample(state, item, model) for item in items]
    values = [s.scores[scorer].value for s in samples if s.scores]
    accuracy = sum(float(v) for v in values) / len(values) if values else 0.0
    by_task: dict[str | int, list[float]] = {}
    for sample in samples:
        if sample.scores:
            by_task.setdefault(sample.id, []).append(float(sample.scores[scorer].value))
    finished = state.status == "finished"
    usage = _total_usage(items)
    log = EvalLog(
        version=2,
        status="success" if finished else "cancelled" if state.cancelled else "started",
        eval=EvalSpec(
            eval_set_id=eval_set_id,
            eval_id=state.id,
            run_id=state.id,
            created=iso_time(state.created_ts),
            task=spec.name,
            task_id=state.id,
            dataset=EvalDataset(
                name=spec.name,
                samples=len(spec.task_list()),
                sample_ids=[t.id for t in spec.task_list()],
            ),
            solver=spec.agent.type,
            solver_args=agent_config,
            model=model,
            model_base_url=getattr(spec.agent, "base_url", None),
            config=EvalConfig(epochs=spec.initial_samples),  # (every task has those)
            packages={"mcp-evalserver": __version__},
            metadata={"campaign": state.id, "exported_by": f"mcp-evalserver {__version__}"},
        ),
        plan=EvalPlan(steps=[EvalPlanStep(solver=spec.agent.type, params=agent_config)]),
        results=EvalResults(
            total_samples=len(samples),
            completed_samples=sum(1 for item in items if item.state.done),
            scores=[
                EvalScore(
                    name=scorer,
                    scorer=scorer,
                    scored_samples=len(values),
                    unscored_samples=len(samples) - len(values),
                    metrics={"accuracy": EvalMetric(name="accuracy", value=accuracy)},
                )
            ],
        ),
        stats=EvalStats(
            started_at=iso_time(state.created_ts),
            completed_at=iso_time(state.last_ts) if finished else "",
            model_usage={model: usage} if usage is not None else {},
        ),
        samples=samples,
    )
    # Set after construction: EvalLog's validator copies `reductions` into `results` only
    # when `results` is a dict, and fails on a model.
    log.reductions = [
        EvalSampleReductions(
            scorer=scorer,
            reducer="mean",
            samples=[
                EvalSampleScore(value=sum(scores) / len(scores), sample_id=task)
                for task, scores in by_task.items()
            ],
        )
    ]
    return log


def _sample(state: CampaignState, item: ExportedTrajectory, model: str) -> Any:
    from inspect_ai._util.error import EvalError
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ChatMessageAssistant, ModelOutput
    from inspect_ai.scorer import Score

    trajectory, scorer = item.state, state.spec.scorer.type
    messages = _messages(item.turns, model)
    replies = [m for m in messages if isinstance(m, ChatMessageAssistant)]
    output = ModelOutput.from_message(replies[-1]) if replies else ModelOutput(model=model)
    output.model = model
    score = trajectory.score
    scores = None
    if score is not None:
        meta = {k: score.get(k) for k in ("resolved", "status", "outcome", "details")}
        scores = {
            scorer: Score(
                value=float(score.get("score", 1.0 if score.get("resolved") else 0.0)),
                answer=item.answer,
                explanation=str(score.get("explanation") or score.get("status") or ""),
                metadata=meta,
            )
        }
    error = None
    if trajectory.outcome in _ERRORS and score is None:
        detail = trajectory.error or {}
        message = f"{trajectory.outcome}: {detail.get('type', '')}: {detail.get('message', '')}"
        error = EvalError(message=message, traceback=message, traceback_ansi=message)
    usage = _usage(item.state.usage)
    times = [t for t in (trajectory.generation_s, trajectory.scoring_s) if t is not None]
    metadata = {
        "trajectory": trajectory.id,
        "outcome": trajectory.outcome,
        "attempts": trajectory.attempts,
        "parent": trajectory.parent,
        "checkpoint": trajectory.checkpoint,
        "patch": item.patch,
        "unreadable": item.unreadable or None,
        "events": [e for turn in item.turns for e in turn.events] or None,
    }
    return EvalSample(
        id=trajectory.task_id if trajectory.parent is None else trajectory.id,
        epoch=trajectory.sample + 1,
        input=item.task.prompt,
        target=item.task.answer or "",
        messages=messages,
        output=output,
        scores=scores,
        metadata={k: v for k, v in metadata.items() if v is not None},
        model_usage={model: usage} if usage is not None else {},
        total_time=sum(times) if times else None,
        working_time=trajectory.generation_s,
        completed_at=iso_time(trajectory.finished_ts) if trajectory.finished_ts else None,
        uuid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"mcp-evalserver:{state.id}/{trajectory.id}")),
        error=error,
    )


def _messages(turns: list[Turn], model: str) -> list[ChatMessage]:
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageTool,
        ChatMessageUser,
    )
    from inspect_ai.tool import ToolCall

    messages: list[ChatMessage] = []
    for turn in turns:
        if turn.role == "system":
            messages.append(ChatMessageSystem(content=turn.text))
        elif turn.role == "user":
            messages.append(ChatMessageUser(content=turn.text))
        else:
            calls = [ToolCall(id=c.id, function=c.name, arguments=c.arguments) for c in turn.calls]
            messages.append(
                ChatMessageAssistant(
                    content=turn.text, tool_calls=calls or None, model=model, source="generate"
                )
            )
            messages.extend(
                ChatMessageTool(content=c.result or "", tool_call_id=c.id, function=c.name)
                for c in turn.calls
            )
    return messages


def model_name(state: CampaignState) -> str:
    """Inspect names models `provider/model`: the `openai` agent's model, else the agent."""
    model = getattr(state.spec.agent, "model", None)
    if isinstance(model, str):
        return model if "/" in model else f"openai/{model}"
    return f"mcp-evalserver/{state.spec.agent.type}"


def _usage(usage: dict[str, Any] | None) -> ModelUsage | None:
    from inspect_ai.model import ModelUsage

    if not usage:
        return None
    tokens_in, tokens_out = (
        int(usage.get("input_tokens") or 0),
        int(usage.get("output_tokens") or 0),
    )
    cost = usage.get("cost_usd")
    return ModelUsage(
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        total_tokens=tokens_in + tokens_out,
        total_cost=float(cost) if cost is not None else None,
    )


def _total_usage(items: list[ExportedTrajectory]) -> ModelUsage | None:
    found = [u for item in items if (u := _usage(item.state.usage)) is not None]
    if not found:
        return None
    total = found[0]
    for usage in found[1:]:
        total = total + usage
    return total


def iso_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()
