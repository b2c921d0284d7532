"""The model bridge: a CLI agent's only way out of its workspace, to its model and nowhere else.

One bridge per trajectory attempt: an HTTP server on a unix socket in a directory of its own
under `bridges_dir()` (128 random bits in its name), which every view shows read-only at
`/var/lib/mcp-evalserver/bridges`. Inside the workspace a forwarder (`forwarder.py`, started in the
same exec as the CLI) listens on 127.0.0.1 in the exec's own network namespace and relays to
that socket; the CLI's base URL is that loopback address. The workspace keeps no network.

Through the bridge, and only there:
- the CLI authenticates with a token made for this trajectory (its only credential); the
  operator's key is added here, on the way out, and never enters the workspace;
- only the provider's model paths are relayed (`/v1/messages` for Anthropic, `/v1/responses`
  for OpenAI, `generateContent` for Gemini) to the one upstream endpoint the spec and the
  operator's environment name, with an allowlist of headers; redirects are not followed;
- each call holds a slot of the campaign's per-endpoint limiter while it is in flight;
- each response's usage is read as it streams by (`wire.py`) and metered: a `model_usage`
  record priced by the provider's figure or the price table, checked against the budget;
- each call is a `chat` span of the trajectory's trace (the machinery the `openai` agent uses);
- the tools the model called (names and arguments) are read from the response as it streams
  by: the harness's own record, which the `trajectory` scorer judges, beside the CLI's session
  log (written inside the workspace, where the agent can rewrite it).

Once the meter refuses (the budget is spent, or a cost is unknown under a budget), or `admit`
does before a call is relayed (another trajectory spent the budget), the bridge refuses this
and every further call and sets `failed`: the agent then stops the CLI and raises what was
raised, so the trajectory ends `budget_exhausted` with what it paid for recorded.

Under a budget (`one_at_a_time`) the calls go one at a time, each metered before the next
starts, as the `openai` and mini-swe-agent loops make theirs: a call is priced only once its
response has streamed, so a CLI that sends calls in parallel (Claude Code asks for a title
beside its main call) would otherwise have them all relayed after the budget was spent. A
trajectory then overshoots its campaign's budget by at most the one call that crossed it.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from starlette.types import Receive, Scope, Send

from mcp_evalserver.agents.cli.wire import Provider, UsageReader
from mcp_evalserver.errors import EvalServerError
from mcp_evalserver.runtime.adaptive import EndpointLimiter
from mcp_evalserver.runtime.endpoint_calls import traced_chat
from mcp_evalserver.runtime.pricing import Meter
from mcp_evalserver.sandbox.agent_paths import bridges_dir

#: The paths relayed, per provider (a query string such as Anthropic's `?beta=true` passes).
RELAYED = {
    "anthropic": re.compile(r"/v1/messages"),
    "openai": re.compile(r"/v1/responses"),
    "gemini": re.compile(r"/v1beta/models/[A-Za-z0-9._-]+:(streamGenerateContent|generateContent)"),
}
#: Request headers passed upstream; everything else (the CLI's own identifiers, its token)
#: stays behind.
PASSED_REQUEST = frozenset(
    {"content-type", "accept", "anthropic-version", "anthropic-beta", "openai-beta",
     "content-encoding"}
)  # fmt: skip
#: Response headers passed back to the CLI.
PASSED_RESPONSE = ("content-type", "retry-after", "retry-after-ms", "request-id", "x-request-id")
UPSTREAM_TIMEOUT_S = 600.0


class OutOfTurns(EvalServerError):
    """The CLI asked for more model calls than its `max_turns`: the agent's failure."""


@dataclass
class ModelBridge:
    """One trajectory attempt's bridge: its token, where it relays, what went through it."""

    provider: Provider
    upstream: str
    api_key: str | None
    limiter: EndpointLimiter
    meter: Meter | None
    verify: ssl.SSLContext | bool = True
    token: str = field(default_factory=lambda: "mcpe-" + secrets.token_urlsafe(24))
    #: One entry per call, for the transcript: model, status, usage, cost, latency.
    calls: list[dict[str, Any]] = field(default_factory=list)
    #: What the meter raised; set once, then every call is refused.
    failure: Exception | None = None
    failed: anyio.Event = field(default_factory=anyio.Event)
    #: Model calls relayed at most (a CLI without a turn limit of its own); then the bridge
    #: refuses, and the CLI is stopped as out of turns.
    max_calls: int | None = None
    relayed: int = 0
    #: Relays one call at a time, each metered before the next starts (the campaign has a
    #: budget): parallel calls then cannot together overshoot it by more than one call.
    one_at_a_time: bool = False
    #: Asked before each call is relayed; what it raises refuses the call and ends the run
    #: as the meter's refusal does (`TrajectoryContext.admit`).
    admit: Callable[[], None] | None = None
    #: Where it also listens over TCP, for a node's relay (`serving(..., tcp_host=...)`).
    tcp_address: tuple[str, int] | None = None
    _client: httpx2.AsyncClient | None = None
    _turn: anyio.Lock = field(default_factory=anyio.Lock)

    @property
    def waiting(self) -> int:
        """Calls waiting for the call in flight to be metered (`one_at_a_time`)."""
        return self._turn.statistics().tasks_waiting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not self._authorized(headers):
            await _error(send, 401, "authentication_error", "this bridge takes its own token only")
            return
        if scope["method"] != "POST" or not RELAYED[self.provider].fullmatch(path):
            allowed = RELAYED[self.provider].pattern
            await _error(send, 404, "not_found_error", f"the bridge relays POST {allowed} only")
            return
        body = await _read_body(receive)
        async with self._turn if self.one_at_a_time else contextlib.nullcontext():
            # Checked once it is this call's turn: the call before may have spent the budget.
            if self.failure is not None:
                await _error(send, 400, "invalid_request_error", f"refused: {self.failure}")
                return
            if self.max_calls is not None and self.relayed >= self.max_calls:
                made = f"{self.max_calls} model calls made"
                self._fail(OutOfTurns(f"the CLI ran out of turns: {made}"))
                await _error(send, 400, "invalid_request_error", f"refused: {self.failure}")
                return
            if self.admit is not None:
                try:
                    self.admit()
                except Exception as exc:
                    self._fail(exc)
                    await _error(send, 400, "invalid_request_error", f"refused: {exc}")
                    return
            self.relayed += 1
            await self._relay(scope, path, headers, body, send)

    def _fail(self, exc: Exception) -> None:
        if self.failure is None:
            self.failure = exc
            self.failed.set()

    def _authorized(self, headers: dict[str, str]) -> bool:
        given = (
            headers.get("x-api-key")
            or headers.get("x-goog-api-key")
            or headers.get("authorization", "").removeprefix("Bearer ")
        )
        return hmac.compare_digest(given.encode(), self.token.encode())

    def upstream_url(self, scope: Scope, path: str) -> str:
        # Anthropic's base URL has no /v1 (the client adds it); OpenAI's ends in /v1.
        rest = path.removeprefix("/v1") if self.provider == "openai" else path
        query = scope.get("query_string", b"").decode("latin-1")
        return self.upstream.rstrip("/") + rest + (f"?{query}" if query else "")

    def _outgoing(self, headers: dict[str, str], length: int) -> dict[str, str]:
        out = {k: v for k, v in headers.items() if k in PASSED_REQUEST}
        out["accept-encoding"] = "identity"  # the usage is read from the bytes as they pass
        out["content-length"] = str(length)
        if self.api_key:
            if self.provider == "anthropic":
                out["x-api-key"] = self.api_key
            elif self.provider == "gemini":
                out["x-goog-api-key"] = self.api_key
            else:
                out["authorization"] = f"Bearer {self.api_key}"
        return out

    async def _relay(
        self, scope: Scope, path: str, headers: dict[str, str], body: bytes, send: Send
    ) -> None:
        try:
            request = json.loads(body) if "content-encoding" not in headers else {}
        except ValueError:
            request = {}
        model = str(request.get("model") or "")[:200] if isinstance(request, dict) else ""
        streaming = bool(isinstance(request, dict) and request.get("stream"))
        reader = UsageReader(self.provider, model)
        entry: dict[str, Any] = {"event": "model_call", "model": model, "path": path}
        # A call that came over TCP came through a Ray node's relay (the socket has no peer).
        entry["via"] = "node relay" if scope.get("client") else "socket"
        started = time.monotonic()
        assert self._client is not None
        with traced_chat(self.upstream, model or "unknown", [], self.provider) as span:
            async with self.limiter.call() as slot:
                try:
                    async with self._client.stream(
                        "POST",
                        self.upstream_url(scope, path),
                        content=body,
                        headers=self._outgoing(headers, len(body)),
                    ) as response:
                        status = response.status_code
                        if status == 429 or status >= 500:
                            slot.congested(f"HTTP {status}")
                        else:
                            slot.succeeded()
                        passed = [
                            (k.encode(), v.encode())
                            for k, v in response.headers.items()
                            if k.lower() in PASSED_RESPONSE
                        ]
                        await send(
                            {"type": "http.response.start", "status": status, "headers": passed}
                        )
                        event_stream = "event-stream" in response.headers.get("content-type", "")
                        async for chunk in response.aiter_bytes():
                            reader.feed(chunk, streaming=event_stream)
                            await send(
                                {"type": "http.response.body", "body": chunk, "more_body": True}
                            )
                        await send({"type": "http.response.body", "body": b""})
                except httpx2.HTTPError as exc:
                    slot.congested(type(exc).__name__)
                    entry.update(status=502, error=f"{type(exc).__name__}: {exc}"[:300])
                    self.calls.append(entry)
                    await _error(send, 502, "api_error", f"the model endpoint failed: {exc}")
                    return
            reader.finish()
            if reader.seen_usage:
                span.set_attribute("gen_ai.response.model", reader.model)
                span.set_attribute("gen_ai.usage.input_tokens", reader.input_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", reader.output_tokens)
            if reader.stop_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [reader.stop_reason])
        entry.update(
            status=status, streaming=streaming, latency_s=round(time.monotonic() - started, 6)
        )
        if reader.tool_calls:
            entry["tool_calls"] = reader.tool_calls
        if reader.seen_usage:
            usage = reader.usage()
            entry["usage"] = {"input_tokens": usage.input_tokens,
                              "cached_input_tokens": usage.cached_input_tokens,
                              "output_tokens": usage.output_tokens}  # fmt: skip
        self.calls.append(entry)
        if reader.seen_usage and self.meter is not None:
            # Metered once its span has ended: a budget stopping the agent here is no failed
            # call. A refusal ends the run: every later call is refused, the CLI stopped.
            try:
                priced = await self.meter(reader.usage(), "agent")
                entry["cost_usd"] = priced.cost_usd
            except Exception as exc:
                self._fail(exc)
                entry["refused_after"] = str(exc) or type(exc).__name__


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _error(send: Send, status: int, kind: str, message: str) -> None:
    body = json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@contextlib.contextmanager
def _socket_dir() -> Iterator[Path]:
    # Real paths: the view shows the directory at its real host path.
    root = Path(os.path.realpath(bridges_dir()))
    root.mkdir(parents=True, exist_ok=True)
    own = root / secrets.token_hex(16)
    own.mkdir(mode=0o755)
    try:
        yield own
    finally:
        shutil.rmtree(own, ignore_errors=True)


@contextlib.asynccontextmanager
async def serving(bridge: ModelBridge, *, tcp_host: str | None = None) -> AsyncIterator[Path]:
    """Serves `bridge` for the block; yields its socket's host path. With `tcp_host`, also on
    a TCP port of that address (`bridge.tcp_address`), for a workspace on a Ray node, whose
    node relays to it (`sandbox/socket_relay.py`): it answers the trajectory's token only.

    Raises:
        OSError: a socket cannot be made.
    """
    import uvicorn

    class QuietServer(uvicorn.Server):
        """Leaves signals alone: it lives inside another process's run."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    with _socket_dir() as own:
        path = own / "model.sock"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        os.chmod(path, 0o666)
        sock.listen(64)
        sockets = [sock]
        if tcp_host is not None:
            listener = socket.create_server((tcp_host, 0), backlog=64)
            bridge.tcp_address = (tcp_host, listener.getsockname()[1])
            sockets.append(listener)
        server = QuietServer(
            uvicorn.Config(
                bridge,
                http="httptools",
                log_level="warning",
                log_config=None,
                lifespan="on",
                timeout_graceful_shutdown=2,
            )
        )
        timeout = httpx2.Timeout(UPSTREAM_TIMEOUT_S, connect=30.0)
        async with httpx2.AsyncClient(
            verify=bridge.verify, follow_redirects=False, timeout=timeout, trust_env=False
        ) as client:
            bridge._client = client

            async def serve() -> None:
                with anyio.CancelScope(shield=True):
                    await server.serve(sockets=sockets)

            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(serve)
                    try:
                        yield path
                    finally:
                        server.should_exit = True
            finally:
                for each in sockets:
                    each.close()
                bridge._client = None
