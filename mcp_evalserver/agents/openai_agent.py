"""The `openai` agent: a tool-calling loop against any OpenAI-compatible chat completions endpoint.

Each trajectory gets its own client (closed when the trajectory ends) whose calls go through the
campaign's per-endpoint limiter. The client's own retries are off: 429, 5xx and connection
failures are retried by `endpoint_calls.py`, with exponential backoff and jitter (or the
server's Retry-After), so the behaviour is ours, bounded and visible in the transcript. When the
bound is reached the agent raises `InfrastructureError` and the runner's retry policy takes
over; any other 4xx is the trajectory's `error`.
"""

from __future__ import annotations

import os
import re
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import anyio
import anyio.to_thread
import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.agents.workspace_tools import WorkspaceTools, tool_schemas
from mcp_evalserver.errors import InfrastructureError, InvalidInput
from mcp_evalserver.runtime import tracing
from mcp_evalserver.runtime.adaptive import EndpointLimiter
from mcp_evalserver.runtime.endpoint_calls import (
    call_usage,
    call_with_retries,
    describe_completion,
    model_client,
    shorten,
    traced_chat,
)
from mcp_evalserver.runtime.endpoints import BASE_URL_ENV, ModelEndpoint, model_endpoint
from mcp_evalserver.runtime.limits import RetryPolicy
from mcp_evalserver.runtime.pricing import Meter
from mcp_evalserver.spec.agents import OpenAIAgentConfig
from mcp_evalserver.spec.submission import Submission, Usage

_T = TypeVar("_T")

#: Sent with every request: the trajectory's idempotency key (the same in every attempt) and
#: the attempt's number.
IDEMPOTENCY_HEADER = "X-MCP-Evalserver-Idempotency-Key"
ATTEMPT_HEADER = "X-MCP-Evalserver-Attempt"

_SYSTEM_REPO = (
    "You are working on a software task in a git repository (your shell starts in it). Use the "
    "tools to inspect the code, make changes and run commands. When you are done, call "
    "`submit`: every change in the repository is handed in as a patch."
)
_SYSTEM_ANSWER = "Answer the task. Call `submit` with your final answer; nothing else is graded."
_SYSTEM_REPLY = "Answer the task. Your reply is graded as your final answer."
_NUDGE = "Use the tools to continue; call `submit` when you are done."


# How OpenAI ("context_length_exceeded"), vLLM ("maximum context length") and llama.cpp
# ("exceeds the available context size") say that the conversation no longer fits.
_CONTEXT_FULL = re.compile(r"context[ _](length|size|window)", re.IGNORECASE)


class ContextExhausted(InvalidInput):
    """The conversation no longer fits the model's context window."""


class OpenAIAgent(Agent):
    """Drives a model through tool calls until it submits or runs out of steps."""

    meters_calls = True

    def __init__(self, config: OpenAIAgentConfig) -> None:
        self.config = config
        self.policy = RetryPolicy(
            max_attempts=config.retry_attempts,
            base_delay_s=config.retry_base_delay_s,
            max_delay_s=config.retry_max_delay_s,
        )
        self._tls: ssl.SSLContext | None = None
        self._tls_lock = anyio.Lock()

    async def _tls_context(self) -> ssl.SSLContext:
        # Loading the CA store takes ~0.1 s of CPU; a fresh client per trajectory would pay it
        # each time, blocking the event loop. One context serves every trajectory's client.
        async with self._tls_lock:
            if self._tls is None:
                self._tls = await anyio.to_thread.run_sync(ssl.create_default_context)
            return self._tls

    def _api_key(self, endpoint: ModelEndpoint) -> str | None:
        # Local OpenAI-compatible servers (vLLM, llama.cpp, Ollama) need no key.
        name = self.config.api_key_env
        key = os.environ.get(name) if name is not None else None
        if key or endpoint.chosen_by != "default":
            return key or None
        raise InvalidInput(
            f"no API key: set ${name}, or give the agent a `base_url` (or set "
            f"${BASE_URL_ENV}) of a local OpenAI-compatible server that needs none"
            if name is not None
            else "no API key: OpenAI's endpoint needs one; name its variable in `api_key_env`, "
            f"or give the agent a `base_url` (or set ${BASE_URL_ENV}) of a server that needs none"
        )

    async def generate(self, context: TrajectoryContext) -> Submission:
        """Runs the tool loop for one trajectory.

        Raises:
            InvalidInput: no API key, or the endpoint rejected a request (4xx other than 429).
            InfrastructureError: the endpoint kept failing (429, 5xx, unreachable) past the
                retry bound, or the sandbox is gone.
        """
        config = self.config
        endpoint = model_endpoint(config.base_url)
        api_key = self._api_key(endpoint)
        base_url = endpoint.url
        workspace = await context.sandbox.workspace() if context.sandbox.available else None
        tools = WorkspaceTools(
            workspace,
            command_timeout_s=config.command_timeout_s,
            output_bytes=config.tool_output_bytes,
            checkpoints=config.checkpoints,
        )
        # Without a workspace there is nothing to do but answer: by default the first reply is
        # the answer, and no tools are offered (a model without tool calling works too).
        reply_is_answer = workspace is None and config.answer_from == "reply"
        default_system = _SYSTEM_REPO if workspace is not None else _SYSTEM_ANSWER
        if reply_is_answer:
            default_system = _SYSTEM_REPLY
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": config.system_prompt or default_system},
            {"role": "user", "content": context.task.prompt},
        ]
        # The transcript is the conversation plus what happened around it (retries, steps,
        # usage per call); `messages` is only what the endpoint is sent.
        transcript: list[dict[str, Any]] = [dict(m) for m in messages]
        usage = Usage()
        schemas = [] if reply_is_answer else tool_schemas(workspace is not None, config.checkpoints)
        session = _Session(
            config, self.policy, schemas, transcript, usage, context.meter, context.admit
        )
        limiter = context.limiters.endpoint(base_url)
        # A client per trajectory, closed with it: no connection outlives the campaign run.
        async with model_client(
            base_url,
            api_key,
            timeout=config.request_timeout_s,
            # Generation is at-least-once: these let a proxy or provider recognise a request
            # that a crash made the agent send again.
            headers={
                IDEMPOTENCY_HEADER: context.idempotency_key,
                ATTEMPT_HEADER: str(context.attempt),
            },
            verify=await self._tls_context(),
        ) as client:
            for step in range(1, config.max_steps + 1):
                try:
                    completion = await session.complete(client, limiter, messages, step)
                except ContextExhausted as exc:
                    if step == 1:
                        raise  # the task's own prompt does not fit: nothing to hand in
                    # Like running out of steps: the work so far is still graded.
                    stop = {"event": "context_exhausted", "step": step, "error": str(exc)}
                    transcript.append(stop)
                    break
                if not completion.choices:
                    raise InfrastructureError("the endpoint returned a completion with no choices")
                assistant, calls = _assistant_message(completion.choices[0].message)
                messages.append(assistant)
                transcript.append({**assistant, "step": step})
                if not calls and reply_is_answer:
                    transcript.append({"event": "answered", "step": step})
                    answer = assistant["content"] or ""
                    return Submission(answer=answer, transcript=transcript, usage=usage)
                if not calls:
                    messages.append({"role": "user", "content": _NUDGE})
                    transcript.append({"role": "user", "content": _NUDGE, "step": step})
                    continue
                for call in calls:
                    name, arguments = call.function.name, call.function.arguments
                    with tracing.tool(name, call_id=call.id, arguments=arguments) as span:
                        outcome = await tools.call(name, arguments)
                        if (ran := outcome.command) is not None:
                            tracing.command_result(
                                span, ran.exit_code, ran.duration_s, timed_out=ran.timed_out
                            )
                        tracing.tool_result(span, outcome.text)
                    if outcome.submitted:
                        transcript.append({"event": "submitted", "step": step})
                        patch = await workspace.diff() if workspace is not None else None
                        return Submission(
                            answer=outcome.answer,
                            patch=patch or None,
                            transcript=transcript,
                            usage=usage,
                        )
                    result = {"role": "tool", "tool_call_id": call.id, "content": outcome.text}
                    messages.append(result)
                    transcript.append({**result, "name": call.function.name, "step": step})
            else:
                transcript.append({"event": "max_steps_reached", "max_steps": config.max_steps})
        # Out of steps or of context: hand in what the workspace holds, so partial work is
        # still graded.
        transcript.append(
            {
                "event": "handed_in_unsubmitted",
                "note": "the model did not call submit; the workspace's changes were submitted",
            }
        )
        patch = await workspace.diff() if workspace is not None else None
        return Submission(patch=patch or None, transcript=transcript, usage=usage)


class _Session:
    """One trajectory's calls to the endpoint: retries, usage and transcript bookkeeping."""

    def __init__(
        self,
        config: OpenAIAgentConfig,
        policy: RetryPolicy,
        tools: list[dict[str, Any]],
        transcript: list[dict[str, Any]],
        usage: Usage,
        meter: Meter | None = None,
        admit: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.policy = policy
        self.tools = cast("list[ChatCompletionToolUnionParam]", tools)
        self.transcript = transcript
        self.usage = usage
        self.meter = meter
        self.admit = admit

    async def complete(
        self,
        client: openai.AsyncOpenAI,
        limiter: EndpointLimiter,
        messages: list[dict[str, Any]],
        step: int,
    ) -> ChatCompletion:
        """One completion, retried on 429, 5xx and connection failures up to the bound.

        Raises:
            InvalidInput: a 4xx other than 429 (bad model name, key, or request).
            InfrastructureError: still failing after `retry_attempts` requests.
            Exception: what `admit` raised (the campaign's budget is spent).
        """
        config = self.config
        if self.admit is not None:
            self.admit()  # no call starts once the campaign's budget is spent
        started = time.monotonic()

        async def request() -> ChatCompletion:
            nonlocal started
            started = time.monotonic()
            return await client.chat.completions.create(
                model=config.model,
                messages=cast("list[ChatCompletionMessageParam]", messages),
                tools=self.tools or openai.omit,
                temperature=_or_omit(config.temperature),
                seed=_or_omit(config.seed),
                max_completion_tokens=_or_omit(config.max_output_tokens),
            )

        with traced_chat(limiter.endpoint, config.model, messages) as span:

            def retrying(reason: str, delay: float) -> None:
                retry = {"reason": reason, "delay_s": round(delay, 3)}
                self.transcript.append({"event": "retry", "step": step, **retry})
                span.add_event("retry", retry)

            completion = await self._call(limiter, request, retrying)
            describe_completion(span, completion)
        # Metered once its span has ended: a budget stopping the agent here is no failed call.
        await self._count(completion, step, time.monotonic() - started)
        return completion

    async def _call(
        self,
        limiter: EndpointLimiter,
        request: Callable[[], Awaitable[ChatCompletion]],
        retrying: Callable[[str, float], None],
    ) -> ChatCompletion:
        """`request` through the limiter, retried; the endpoint's refusals as our errors.

        Raises:
            ContextExhausted: the conversation no longer fits the model's context.
            InvalidInput: a 4xx other than 429.
            InfrastructureError: still failing after `retry_attempts` requests.
        """
        try:
            return await call_with_retries(limiter, request, policy=self.policy, on_retry=retrying)
        except openai.APIStatusError as exc:
            status = exc.status_code
            if _CONTEXT_FULL.search(f"{exc.code} {exc.message}"):
                raise ContextExhausted(
                    f"the conversation exceeds the model's context (HTTP {status}): "
                    f"{shorten(exc.message, 500)}"
                ) from exc
            raise InvalidInput(
                f"the model endpoint rejected the request (HTTP {status}): "
                f"{shorten(exc.message, 500)}; check `model`, `base_url` and the API key"
            ) from exc

    async def _count(self, completion: ChatCompletion, step: int, latency_s: float) -> None:
        self.usage.requests += 1
        entry: dict[str, Any] = {"event": "completion", "step": step}
        call = call_usage(self.config.model, completion)
        if completion.usage is not None:
            self.usage.input_tokens += completion.usage.prompt_tokens
            self.usage.output_tokens += completion.usage.completion_tokens
            entry["usage"] = {
                "input_tokens": completion.usage.prompt_tokens,
                "output_tokens": completion.usage.completion_tokens,
            }
        entry["latency_s"] = round(latency_s, 6)
        self.transcript.append(entry)
        if self.meter is not None:
            priced = await self.meter(call, "agent")
            entry["cost_usd"] = priced.cost_usd


def _assistant_message(
    reply: ChatCompletionMessage,
) -> tuple[dict[str, Any], list[ChatCompletionMessageFunctionToolCall]]:
    """The reply as a message to send back, and its function tool calls (others are dropped:
    only function tools are offered)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    calls = [c for c in reply.tool_calls or [] if c.type == "function"]
    if calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in calls
        ]
    return message, calls


def _or_omit(value: _T | None) -> _T | openai.Omit:
    """An unset option is left out of the request (the endpoint's default applies)."""
    return openai.omit if value is None else value
