"""A scripted OpenAI-compatible chat completions server on loopback, for the agent tests.

It is a real HTTP server (stdlib, in a thread), so the agent talks to it through the real
`openai` client: requests, status codes, headers and JSON are what a real endpoint would send.
Each request to `/v1/chat/completions` takes the next scripted response; when the script is
used up, `then` answers every further request (or a 500 saying the script ran out).

With `capacity=K` it behaves like a provider with a hidden ceiling: a request that arrives while
K others are open is refused with `over_capacity` (a 429, with whatever Retry-After headers it
carries) and takes nothing from the script; `service_s` is how long it works on each accepted
request (a provider's latency, so that requests overlap as they do against a real one).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from testsupport.threaded_http import serving_in_thread


@dataclass(frozen=True)
class Reply:
    """An assistant message: text and/or tool calls (name, arguments), with its token usage;
    `cost` is reported as OpenRouter does (`usage.cost`, US dollars), `cached_tokens` as
    OpenAI does (`usage.prompt_tokens_details.cached_tokens`)."""

    content: str | None = None
    tool_calls: tuple[tuple[str, dict[str, Any] | str], ...] = ()  # str: raw arguments
    prompt_tokens: int = 100
    completion_tokens: int = 20
    cost: float | None = None
    cached_tokens: int = 0


@dataclass(frozen=True)
class Failure:
    """An HTTP error response, shaped like OpenAI's."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "scripted failure"


Response = Reply | Failure
#: Answers a request from its body (e.g. by how long the conversation is).
Responder = Callable[[dict[str, Any]], Response]


def call(name: str, **arguments: Any) -> Reply:
    """A reply that calls one tool."""
    return Reply(tool_calls=((name, arguments),))


@dataclass
class Seen:
    """One request as the server received it."""

    body: dict[str, Any]
    authorization: str | None
    #: Every header, its name in lower case.
    headers: dict[str, str] = field(default_factory=dict)


class FakeOpenAI:
    """The server's script and what it received; `url` is the `base_url` to configure."""

    def __init__(
        self,
        script: Sequence[Response],
        then: Response | Responder | None = None,
        *,
        overlap: int = 1,
        capacity: int | None = None,
        over_capacity: Failure | None = None,
        service_s: float = 0.0,
    ) -> None:
        self.capacity = capacity
        self.over_capacity = over_capacity or Failure(429, message="rate limited: too many open")
        self.service_s = service_s
        #: Requests refused for capacity, and the most open at once among those accepted.
        self.refused = 0
        self.max_accepted = 0
        self.script = list(script)
        self.then = then
        self.seen: list[Seen] = []
        # With overlap=N, each request waits until N are in flight together: proof that the
        # client side lets N through at once (and a count of how many it ever let through).
        self._together = threading.Barrier(overlap, timeout=20) if overlap > 1 else None
        self.in_flight = 0
        self.max_in_flight = 0
        self.url = ""
        self._lock = threading.Lock()
        self._calls = 0
        #: The sum of the costs its responses reported, and of their tokens.
        self.reported_cost = 0.0
        self.reported_tokens = {"prompt": 0, "cached": 0, "completion": 0}

    def arrived(self) -> bool:
        """Counts a request in; False when it is over capacity (it must be refused)."""
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self.capacity is not None and self.in_flight > self.capacity:
                self.refused += 1
                return False
            self.max_accepted = max(self.max_accepted, self.in_flight)
        if self._together is not None:
            self._together.wait()
        return True

    def left(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def next_response(self, body: dict[str, Any], headers: dict[str, str]) -> Response:
        with self._lock:
            self.seen.append(Seen(body, headers.get("authorization"), headers))
            self._calls += 1
            if self.script:
                return self.script.pop(0)
            if callable(self.then):
                return self.then(body)
            return self.then or Failure(500, message="the fake's script ran out")

    def completion(self, reply: Reply, model: str) -> dict[str, Any]:
        with self._lock:
            number = self._calls
            self.reported_cost += reply.cost or 0.0
            self.reported_tokens["prompt"] += reply.prompt_tokens
            self.reported_tokens["cached"] += reply.cached_tokens
            self.reported_tokens["completion"] += reply.completion_tokens
        usage: dict[str, Any] = {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        }
        if reply.cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
        if reply.cost is not None:
            usage["cost"] = reply.cost
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{number}_{index}",
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": arguments
                        if isinstance(arguments, str)
                        else json.dumps(arguments),
                    },
                }
                for index, (name, arguments) in enumerate(reply.tool_calls)
            ]
        return {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": usage,
        }

    @property
    def requests(self) -> int:
        return len(self.seen)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the openai client's pool expects
    fake: FakeOpenAI

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}}, {})
            return
        accepted = self.fake.arrived()
        try:
            if not accepted:
                response: Response = self.fake.over_capacity
            else:
                if self.fake.service_s:
                    # The provider at work (see the module docstring), in the server's own thread.
                    time.sleep(self.fake.service_s)
                response = self.fake.next_response(
                    body, {name.lower(): value for name, value in self.headers.items()}
                )
        finally:
            # Counted out before its answer is written: once the client has read it, it may
            # send its next request at once, and that one must not find this one still open
            # (under load this thread can run long after the client has moved on).
            self.fake.left()
        if isinstance(response, Failure):
            self._fail(response)
        else:
            self._send(200, self.fake.completion(response, str(body.get("model"))), {})

    def _fail(self, failure: Failure) -> None:
        error = {"message": failure.message, "type": "scripted", "code": failure.status}
        self._send(failure.status, {"error": error}, failure.headers)

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows failures, not access logs."""


class _Server(ThreadingHTTPServer):
    # socketserver's listen backlog is 5: with 64 clients connecting at once on a busy
    # machine, connections beyond it were dropped and the client saw "Connection error."
    # (test_sweep's level 64, about one run in seven). A provider answers every request,
    # with a 429 when it is over capacity; it does not drop connections.
    request_queue_size = 1024


@contextmanager
def serving(fake: FakeOpenAI) -> Iterator[FakeOpenAI]:
    """Serves `fake` on an ephemeral loopback port for the duration of the block."""
    handler = type("Handler", (_Handler,), {"fake": fake})
    with serving_in_thread(_Server(("127.0.0.1", 0), handler)) as address:
        fake.url = f"{address}/v1"
        yield fake
