"""OpenTelemetry traces of campaign runs, in the GenAI semantic conventions; off unless configured.

Tracing is on when `$OTEL_EXPORTER_OTLP_ENDPOINT` (or `$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is
set and the `otel` extra is installed; spans go out over OTLP/HTTP (protobuf), and the standard
variables (`$OTEL_EXPORTER_OTLP_HEADERS`, `$OTEL_SERVICE_NAME`, `$OTEL_RESOURCE_ATTRIBUTES`,
`$OTEL_SDK_DISABLED`, ...) mean what they mean everywhere. Message contents, tool arguments and
tool results are recorded only when `$OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is
`true`: prompts and outputs can hold what a trace store should not.

What one run sends:

    campaign <id>                   a trace of its own per run
    trajectory <id>                 a trace per trajectory, linked to its run's span
      invoke_agent <agent>          each generation attempt
        chat <model>                each model call (the `openai` agent)
        execute_tool <tool>         each tool call or sandbox command of the agent
      score <scorer>                each scoring attempt
        chat <model>                (`llm_judge`)

Every span of a trajectory carries `gen_ai.conversation.id` = the trajectory's id. Each run has
its own tracer provider, flushed and shut down when the run ends, so a finished run's spans
have left when `CampaignRunner.run` returns. When tracing is off, every function here is a
context variable read: nothing from `opentelemetry` is imported.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio
import anyio.to_thread

from mcp_evalserver.errors import InvalidInput

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

logger = logging.getLogger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
CAPTURE_CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
SERVICE_NAME = "mcp-evalserver"
#: How long the end of a run waits for its last spans to leave (a collector that is down must
#: not hold the run, nor the process's exit: what is left is dropped).
FLUSH_TIMEOUT_S = 10.0

Kind = Literal["internal", "client"]


class SpanLike(Protocol):
    """What callers may do with a span (an OpenTelemetry span, or nothing when off)."""

    def set_attribute(self, key: str, value: Any) -> None: ...

    def add_event(self, name: str, attributes: Any = None) -> None: ...


class _NoSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def add_event(self, name: str, attributes: Any = None) -> None:
        pass


NO_SPAN = _NoSpan()
_OFF: nullcontext[SpanLike] = nullcontext(NO_SPAN)


def enabled() -> bool:
    """Whether runs started now send traces: an OTLP endpoint is set and the SDK not disabled."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(os.environ.get(name) for name in ENDPOINT_VARIABLES)


def capture_content() -> bool:
    """Whether message contents, tool arguments and results go into spans (opt-in)."""
    return os.environ.get(CAPTURE_CONTENT_VARIABLE, "").strip().lower() == "true"


@dataclass(frozen=True)
class _Run:
    provider: TracerProvider
    tracer: Tracer
    campaign: Span
    capture: bool


@dataclass(frozen=True)
class _Trajectory:
    run: _Run
    campaign_id: str
    id: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.campaign_id, self.id)


_RUN: ContextVar[_Run | None] = ContextVar("mcp_evalserver_trace_run", default=None)
_TRAJECTORY: ContextVar[_Trajectory | None] = ContextVar(
    "mcp_evalserver_trace_trajectory", default=None
)
#: Where the spans of a trajectory's tool calls go when they arrive from outside its task (an
#: MCP client acting as its agent): its innermost open span, by (campaign, trajectory).
_LIVE: dict[tuple[str, str], tuple[_Trajectory, Context]] = {}


def _start_provider() -> TracerProvider:
    """A tracer provider exporting over OTLP/HTTP as the standard variables say.

    Raises:
        InvalidInput: the `otel` extra is not installed.
    """
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise InvalidInput(
            f"{' or '.join('$' + v for v in ENDPOINT_VARIABLES)} is set, but OpenTelemetry is "
            "not installed: `pip install 'mcp-evalserver[otel]'`, or unset the variable"
        ) from exc
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    # Shut down by the run that made it, within FLUSH_TIMEOUT_S; not again at exit.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


@asynccontextmanager
async def campaign_run(campaign_id: str, attributes: Mapping[str, Any]) -> AsyncIterator[SpanLike]:
    """The span of one run of a campaign; inside it, trajectories can be traced.

    Its provider is flushed and shut down when the block ends, shielded from cancellation.

    Raises:
        InvalidInput: tracing is asked for, but the `otel` extra is not installed.
    """
    if not enabled():
        yield NO_SPAN
        return
    from opentelemetry import trace

    provider = _start_provider()
    tracer = provider.get_tracer("mcp_evalserver")
    span = tracer.start_span(
        f"campaign {campaign_id}",
        context=trace.set_span_in_context(trace.INVALID_SPAN),  # a trace of its own
        attributes={"mcp_evalserver.campaign.id": campaign_id, **attributes},
    )
    token = _RUN.set(_Run(provider, tracer, span, capture_content()))
    try:
        yield span
    except BaseException as exc:
        span.set_attribute("error.type", type(exc).__qualname__)
        raise
    finally:
        _RUN.reset(token)
        span.end()
        with anyio.CancelScope(shield=True):
            await _close(provider)


async def _close(provider: TracerProvider) -> None:
    """Sends what is left and stops the exporter, waiting FLUSH_TIMEOUT_S at most.

    The SDK's shutdown retries an unreachable collector for longer than that, so it runs in a
    daemon thread of its own, left behind when the time is up.
    """
    closing = threading.Thread(target=provider.shutdown, name="trace-shutdown", daemon=True)
    closing.start()
    await anyio.to_thread.run_sync(closing.join, FLUSH_TIMEOUT_S)
    if closing.is_alive():
        logger.warning(
            "the trace collector did not take this run's last spans within %gs; they are dropped",
            FLUSH_TIMEOUT_S,
        )


@contextmanager
def trajectory(
    campaign_id: str, trajectory_id: str, attributes: Mapping[str, Any]
) -> Iterator[SpanLike]:
    """The root span of one trajectory's trace in this run, linked to the run's span."""
    run = _RUN.get()
    if run is None:
        yield NO_SPAN
        return
    from opentelemetry import trace

    link = trace.Link(run.campaign.get_span_context())
    with run.tracer.start_as_current_span(
        f"trajectory {trajectory_id}",
        context=trace.set_span_in_context(trace.INVALID_SPAN),
        attributes={
            "gen_ai.conversation.id": trajectory_id,
            "mcp_evalserver.campaign.id": campaign_id,
            "mcp_evalserver.trajectory.id": trajectory_id,
            **attributes,
        },
        links=[link],
    ) as span:
        traced = _Trajectory(run, campaign_id, trajectory_id)
        token = _TRAJECTORY.set(traced)
        try:
            with _live(traced):
                yield span
        finally:
            _TRAJECTORY.reset(token)


@contextmanager
def _live(traced: _Trajectory) -> Iterator[None]:
    """Makes the current span where tool calls from outside the trajectory's task go."""
    from opentelemetry import context

    key = traced.key
    before = _LIVE.get(key)
    _LIVE[key] = (traced, context.get_current())
    try:
        yield
    finally:
        if before is None:
            _LIVE.pop(key, None)
        else:
            _LIVE[key] = before


def _span(
    name: str,
    kind: Kind,
    attributes: Mapping[str, Any],
    *,
    parent: tuple[_Trajectory, Context] | None = None,
) -> AbstractContextManager[SpanLike]:
    """A span in the current trajectory (or `parent`), or nothing outside one."""
    if parent is None:
        traced = _TRAJECTORY.get()
        if traced is None:
            return _OFF
        where: Context | None = None
    else:
        traced, where = parent
    return _open(traced, name, kind, attributes, where)


@contextmanager
def _open(
    traced: _Trajectory,
    name: str,
    kind: Kind,
    attributes: Mapping[str, Any],
    where: Context | None,
) -> Iterator[SpanLike]:
    from opentelemetry import trace

    with traced.run.tracer.start_as_current_span(
        name,
        context=where,
        kind=trace.SpanKind.CLIENT if kind == "client" else trace.SpanKind.INTERNAL,
        attributes={"gen_ai.conversation.id": traced.id, **attributes},
    ) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            raise


@contextmanager
def invoke_agent(agent_name: str, attributes: Mapping[str, Any]) -> Iterator[SpanLike]:
    """One generation attempt of the current trajectory (`invoke_agent`, in process)."""
    traced = _TRAJECTORY.get()
    if traced is None:
        yield NO_SPAN
        return
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent_name,
        **attributes,
    }
    with _span(f"invoke_agent {agent_name}", "internal", attributes) as span, _live(traced):
        yield span


def scoring(scorer_name: str, attributes: Mapping[str, Any]) -> AbstractContextManager[SpanLike]:
    """One scoring attempt of the current trajectory."""
    return _span(
        f"score {scorer_name}", "internal", {"mcp_evalserver.scorer": scorer_name, **attributes}
    )


def chat(
    model: str,
    *,
    provider: str = "openai",
    server: tuple[str, int] | None = None,
    messages: list[dict[str, Any]] | None = None,
) -> AbstractContextManager[SpanLike]:
    """One call to an OpenAI-compatible chat completions endpoint (`chat`, a client span).

    `messages` are recorded (as `gen_ai.input.messages`) only when contents are captured;
    `provider` is the API spoken (`gen_ai.provider.name`); `server` is the endpoint's host and
    port.
    """
    traced = _TRAJECTORY.get()
    if traced is None:
        return _OFF
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
    }
    if server is not None:
        attributes["server.address"], attributes["server.port"] = server
    if messages is not None and traced.run.capture:
        attributes["gen_ai.input.messages"] = json.dumps(input_messages(messages))
    return _span(f"chat {model}", "client", attributes)


def tool(
    name: str,
    *,
    call_id: str | None = None,
    arguments: str | Mapping[str, Any] | None = None,
    trajectory_of: tuple[str, str] | None = None,
) -> AbstractContextManager[SpanLike]:
    """One tool call or sandbox command of the agent (`execute_tool`).

    Inside the trajectory's own task the span joins its current span; a call that comes from
    elsewhere (an MCP client acting as the agent) names its (campaign id, trajectory id) in
    `trajectory_of` and joins that trajectory's innermost open span. `arguments` (JSON text,
    or a mapping made JSON here) are recorded only when contents are captured.
    """
    parent = None
    traced = _TRAJECTORY.get()
    if trajectory_of is not None and (traced is None or traced.key != trajectory_of):
        parent = _LIVE.get(trajectory_of)
        traced = parent[0] if parent is not None else None
    if traced is None:
        return _OFF
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
    }
    if call_id is not None:
        attributes["gen_ai.tool.call.id"] = call_id
    if arguments is not None and traced.run.capture:
        shown = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
        attributes["gen_ai.tool.call.arguments"] = shown
    return _span(f"execute_tool {name}", "internal", attributes, parent=parent)


def command_result(
    span: SpanLike, exit_code: int, duration_s: float, *, timed_out: bool = False
) -> None:
    """What a sandbox command did, on its `execute_tool` span."""
    span.set_attribute("process.exit.code", exit_code)
    span.set_attribute("mcp_evalserver.exec.duration_s", duration_s)
    if timed_out:
        span.set_attribute("mcp_evalserver.exec.timed_out", True)


def tool_result(span: SpanLike, result: str) -> None:
    """What a tool call gave the agent, on its span when contents are captured."""
    if span is not NO_SPAN and capture_content():
        span.set_attribute("gen_ai.tool.call.result", result)


def captures_content() -> bool:
    """Whether the current trajectory's spans record contents (False outside a traced one)."""
    traced = _TRAJECTORY.get()
    return traced is not None and traced.run.capture


def input_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat completions messages in the semantic conventions' shape (role and parts)."""
    shaped = []
    for message in messages:
        parts: list[dict[str, Any]] = []
        role = str(message.get("role", "user"))
        if role == "tool":
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": message.get("tool_call_id"),
                    "response": message.get("content"),
                }
            )
        elif message.get("content"):
            parts.append({"type": "text", "content": message["content"]})
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                }
            )
        shaped.append({"role": role, "parts": parts})
    return shaped


def traceparent() -> str | None:
    """The W3C `traceparent` of the current span of a traced trajectory (for a program the
    trajectory starts, so that its own spans join the trajectory's trace); None otherwise."""
    if _TRAJECTORY.get() is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
