"""The `mini-swe-agent` agent type: mini-swe-agent's own loop on a trajectory's workspace.

The loop and its model calls run in a worker thread (mini-swe-agent is synchronous), so a model
call never blocks the event loop; its commands come back to the loop through
`WorkspaceEnvironment`. Its messages are the transcript, what it submits is the patch (its
SWE-bench config prints the diff after the submit line), and its own `step_limit` and
`cost_limit` end the run, after which the workspace's changes are handed in, as the `openai`
agent does when it runs out of steps. Its model calls go through the campaign's per-endpoint
limiter (`model.py`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.agents.minisweagent.environment import (
    Stopped,
    WorkspaceEnvironment,
    WorkspaceEnvironmentConfig,
    import_minisweagent,
)
from mcp_evalserver.agents.minisweagent.model import (
    EndpointGatedModel,
    call_usage,
    with_endpoint,
)
from mcp_evalserver.errors import EvalServerError, InvalidInput
from mcp_evalserver.runtime import tracing
from mcp_evalserver.spec.agents import MiniSweAgentConfig
from mcp_evalserver.spec.submission import Submission, Usage

_T = TypeVar("_T")

#: Worker threads for mini-swe-agent loops. Their own limiter: loops hold a thread for a whole
#: trajectory, and must not starve anyio's default pool, which the sandbox backends use.
_LOOP_THREADS = 256


class MiniSweAgent(Agent):
    """Runs mini-swe-agent's `DefaultAgent` with the configured model on each trajectory."""

    meters_calls = True  # each query, as it returns (`EndpointGatedModel`)

    def __init__(self, config: MiniSweAgentConfig) -> None:
        import_minisweagent()
        self.config = config
        self.settings = merged_settings(config)
        self._threads = anyio.CapacityLimiter(_LOOP_THREADS)
        # At most one model call per loop, so as many threads as loops never run short.
        self._call_threads = anyio.CapacityLimiter(_LOOP_THREADS)

    async def generate(self, context: TrajectoryContext) -> Submission:
        """Runs the loop until it submits, hits a limit, or fails.

        Raises:
            InvalidInput: the task has no workspace, or the config is not one mini-swe-agent
                accepts.
            InfrastructureError: the sandbox went away (the runner retries).
            Exception: what mini-swe-agent's loop raised (a model error): the trajectory's error.
        """
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.models import get_model

        if not context.sandbox.available:
            raise InvalidInput(
                f"task {context.task.id} has no workspace: mini-swe-agent works in one (give the "
                "task a `path` or an `image`)"
            )
        workspace = await context.sandbox.workspace()
        settings = copy.deepcopy(self.settings)
        try:
            env_config = WorkspaceEnvironmentConfig(**settings.get("environment", {}))
            model_config, endpoint = with_endpoint(settings.get("model", {}))
            queried = get_model(config=model_config)
            _trace_queries(queried, str(model_config.get("model_name", "")))
            model = EndpointGatedModel(
                queried,
                context.limiters.endpoint(endpoint),
                _on_loop,
                self._call_threads,
                context.meter,
                context.admit,
            )
            env = WorkspaceEnvironment(workspace, _on_loop, env_config)
            agent = DefaultAgent(model, env, **settings.get("agent", {}))
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            raise InvalidInput(f"mini-swe-agent config: {exc}") from exc

        failure: BaseException | None = None
        try:
            result: dict[str, Any] = await anyio.to_thread.run_sync(
                lambda: agent.run(context.task.prompt),
                abandon_on_cancel=True,
                limiter=self._threads,
            )
        except EvalServerError:
            raise  # our sandbox's errors keep their meaning (SandboxUnavailable is retried)
        except Exception as exc:  # mini-swe-agent recorded it as the last message; report it
            failure = exc
            result = {}
        finally:
            # A cancelled trajectory (its timeout) leaves the thread running until its next
            # command, which then refuses: the loop ends without touching the workspace again.
            env.stopped.set()
        if failure is not None:
            raise failure
        return await self._hand_in(context, agent, result)

    async def _hand_in(
        self, context: TrajectoryContext, agent: Any, result: dict[str, Any]
    ) -> Submission:
        exit_status = str(result.get("exit_status", ""))
        submission = str(result.get("submission") or "")
        transcript = jsonable(agent.messages)
        transcript.append(
            {
                "event": "exit",
                "exit_status": exit_status,
                "api_calls": agent.n_calls,
                "cost": agent.cost,
            }
        )
        diff = (await (await context.sandbox.workspace()).diff()) or None
        if exit_status != "Submitted":
            transcript.append(
                {
                    "event": "handed_in_unsubmitted",
                    "note": f"mini-swe-agent stopped ({exit_status}); the workspace's changes "
                    "were submitted",
                }
            )
        usage = usage_of(agent)
        if context.task.answer is not None:
            # Graded on answers: what it submits is the answer.
            return Submission(
                answer=submission.strip(), patch=diff, transcript=transcript, usage=usage
            )
        # Its SWE-bench config submits a diff of the files it chose; a bare submit line hands
        # in the workspace's changes.
        patch = submission if submission.strip() else diff
        return Submission(patch=patch, transcript=transcript, usage=usage)


def _trace_queries(model: Any, name: str) -> None:
    """Makes each of `model`'s queries a `chat` span of the trajectory (no-op when untraced).

    The loop calls `query` in its worker thread, which runs in the trajectory's context.
    """
    query = model.query
    # litellm's names say the provider first (`openai/gpt-4o`); a bare name is litellm's guess.
    provider = name.split("/", 1)[0] if "/" in name else "litellm"

    def traced(messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        with tracing.chat(name, provider=provider, messages=messages) as span:
            message: dict[str, Any] = query(messages, **kwargs)
            response = (message.get("extra") or {}).get("response")
            if isinstance(response, dict):
                if isinstance(answered := response.get("model"), str):
                    span.set_attribute("gen_ai.response.model", answered)
                counts = response.get("usage")
                if isinstance(counts, dict):
                    for ours, theirs in (("input", "prompt"), ("output", "completion")):
                        if isinstance(tokens := counts.get(f"{theirs}_tokens"), int):
                            span.set_attribute(f"gen_ai.usage.{ours}_tokens", tokens)
            return message

    model.query = traced


def _on_loop(func: Callable[..., Awaitable[_T]], /, *args: Any) -> _T:
    """Runs `func(*args)` on the event loop that started this worker thread."""

    async def call() -> _T:
        return await func(*args)

    return anyio.from_thread.run(call)


def merged_settings(config: MiniSweAgentConfig) -> dict[str, Any]:
    """mini-swe-agent's settings: its builtin `base_config`, then `config`, then `model`.

    Raises:
        InvalidInput: the base config does not exist, or `config` names an environment class
            (the trajectory's workspace is the environment).
    """
    from minisweagent.config import get_config_from_spec
    from minisweagent.utils.serialize import recursive_merge

    base: dict[str, Any] = {}
    if config.base_config is not None:
        try:
            base = get_config_from_spec(config.base_config)
        except FileNotFoundError as exc:
            raise InvalidInput(
                f"mini-swe-agent has no builtin config {config.base_config!r}: use e.g. 'mini', "
                "'default' or 'swebench', or null for none"
            ) from exc
    environment = config.config.get("environment", {})
    if "environment_class" in environment:
        raise InvalidInput(
            "the mini-swe-agent agent runs in the trajectory's workspace: drop "
            "`config.environment.environment_class`"
        )
    settings: dict[str, Any] = recursive_merge(base, config.config, {"model": config.model})
    # Only what WorkspaceEnvironment understands of the base's environment section survives.
    known = set(WorkspaceEnvironmentConfig.model_fields)
    settings["environment"] = {
        k: v for k, v in settings.get("environment", {}).items() if k in known
    }
    return settings


def usage_of(agent: Any) -> Usage:
    """Calls, tokens (where responses report them) and cost, as mini-swe-agent counted them
    (litellm's prices); without a cost, the runner prices the tokens by the model's name."""
    model = getattr(getattr(agent.model, "config", None), "model_name", None)
    usage = Usage(
        requests=agent.n_calls,
        cost_usd=agent.cost or None,
        model=model if isinstance(model, str) else None,
    )
    for message in agent.messages:
        if "extra" in message:
            call = call_usage(None, message)
            usage.input_tokens += call.input_tokens
            usage.output_tokens += call.output_tokens
    return usage


def jsonable(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as plain JSON (a provider's response may hold objects)."""
    result: list[dict[str, Any]] = json.loads(json.dumps(messages, default=str))
    return result


__all__ = ["MiniSweAgent", "Stopped"]
