"""Scripted model providers on loopback that speak the real wire formats, for the CLI agents.

`FakeAnthropic` answers `POST /v1/messages` as Anthropic's Messages API does: a JSON message, or
with `"stream": true` the server-sent events (`message_start`, `content_block_start` /
`_delta` / `_stop` with `text_delta` and `input_json_delta`, `message_delta` with the usage,
`message_stop`). `FakeOpenAIResponses` answers `POST /v1/responses` as OpenAI's Responses API
streams (`response.created`, `response.output_item.added` / `.done` for messages and
`function_call` items, `response.completed` with the usage). `FakeGemini` answers the Gemini API's
`:streamGenerateContent?alt=sse` (one chunk: parts with `text` and `functionCall`, and
`usageMetadata`). All are real HTTP servers (stdlib,
in a thread), so the real CLI binaries talk to them through their own clients.

Each request of the agent's main loop (one that offers tools) takes the next turn of a
`Responder` (a function of the request's body, so a script can read the conversation); any
other request (a title, a quota probe) is answered with a short text. Every response's usage
is added to `usage`, so a test can compare what the campaign recorded with what was served.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from testsupport.threaded_http import serving_in_thread


@dataclass(frozen=True)
class Turn:
    """One assistant turn: text, and tool calls as (name, input)."""

    text: str = ""
    tools: tuple[tuple[str, dict[str, Any]], ...] = ()
    input_tokens: int = 1000
    output_tokens: int = 100


#: The next turn, given the request's JSON body.
Responder = Callable[[dict[str, Any]], Turn]


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class _Fake:
    responder: Responder
    seen: list[Seen] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    #: Per model asked for: [input tokens, output tokens, responses] (a CLI may ask a smaller
    #: model for a session's title).
    by_model: dict[str, list[int]] = field(default_factory=dict)

    def turn_for(self, body: dict[str, Any], model: str | None = None) -> Turn:
        turn = self.responder(body) if body.get("tools") else Turn(text="ok", input_tokens=10)
        with self.lock:
            self.input_tokens += turn.input_tokens
            self.output_tokens += turn.output_tokens
            served = self.by_model.setdefault(model or str(body.get("model")), [0, 0, 0])
            served[0] += turn.input_tokens
            served[1] += turn.output_tokens
            served[2] += 1
        return turn


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


class FakeAnthropic(_Fake):
    """Anthropic's Messages API, scripted."""

    def events(self, body: dict[str, Any], turn: Turn, number: int) -> list[bytes]:
        model = body.get("model", "claude")
        usage = {"input_tokens": turn.input_tokens, "output_tokens": 1}
        start = {
            "id": f"msg_{number}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        out = [_sse("message_start", {"type": "message_start", "message": start})]
        index = 0
        if turn.text:
            block: dict[str, Any] = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": turn.text}
            out += [
                _sse("content_block_start", {"type": "content_block_start", "index": index,
                                             "content_block": block}),
                _sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                             "delta": delta}),
                _sse("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]  # fmt: skip
            index += 1
        for k, (name, arguments) in enumerate(turn.tools):
            block = {
                "type": "tool_use", "id": f"toolu_{number}_{k}", "name": name, "input": {}
            }  # fmt: skip
            delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
            out += [
                _sse("content_block_start", {"type": "content_block_start", "index": index,
                                             "content_block": block}),
                _sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                             "delta": delta}),
                _sse("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]  # fmt: skip
            index += 1
        stop = "tool_use" if turn.tools else "end_turn"
        out += [
            _sse("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": stop, "stop_sequence": None},
                                   "usage": {"output_tokens": turn.output_tokens}}),
            _sse("message_stop", {"type": "message_stop"}),
        ]  # fmt: skip
        return out

    def message(self, body: dict[str, Any], turn: Turn, number: int) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
        for k, (name, arguments) in enumerate(turn.tools):
            content.append(
                {"type": "tool_use", "id": f"toolu_{number}_{k}", "name": name, "input": arguments}
            )
        return {
            "id": f"msg_{number}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude"),
            "content": content,
            "stop_reason": "tool_use" if turn.tools else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens},
        }


class FakeOpenAIResponses(_Fake):
    """OpenAI's Responses API (streaming), scripted."""

    def events(self, body: dict[str, Any], turn: Turn, number: int) -> list[bytes]:
        rid = f"resp_{number}"
        base = {"id": rid, "object": "response", "model": body.get("model", "gpt"),
                "status": "in_progress", "output": []}  # fmt: skip
        out = [_sse("response.created", {"type": "response.created", "response": base})]
        items: list[dict[str, Any]] = []
        if turn.text:
            items.append({"type": "message", "id": f"msg_{number}", "role": "assistant",
                          "status": "completed",
                          "content": [{"type": "output_text", "text": turn.text,
                                       "annotations": []}]})  # fmt: skip
        for k, (name, arguments) in enumerate(turn.tools):
            items.append({"type": "function_call", "id": f"fc_{number}_{k}",
                          "call_id": f"call_{number}_{k}", "name": name,
                          "arguments": json.dumps(arguments), "status": "completed"})  # fmt: skip
        for index, item in enumerate(items):
            out.append(
                _sse(
                    "response.output_item.added",
                    {"type": "response.output_item.added", "output_index": index, "item": item},
                )
            )
            out.append(
                _sse(
                    "response.output_item.done",
                    {"type": "response.output_item.done", "output_index": index, "item": item},
                )
            )
        usage = {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens,
                 "total_tokens": turn.input_tokens + turn.output_tokens,
                 "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip
        done = {**base, "status": "completed", "output": items, "usage": usage}
        out.append(_sse("response.completed", {"type": "response.completed", "response": done}))
        return out


class FakeGemini(_Fake):
    """The Gemini API's `streamGenerateContent?alt=sse` (and `generateContent`), scripted."""

    def chunk(self, body: dict[str, Any], turn: Turn) -> dict[str, Any]:
        parts: list[dict[str, Any]] = [{"text": turn.text}] if turn.text else []
        parts += [{"functionCall": {"name": name, "args": args}} for name, args in turn.tools]
        usage = {"promptTokenCount": turn.input_tokens,
                 "candidatesTokenCount": turn.output_tokens,
                 "totalTokenCount": turn.input_tokens + turn.output_tokens}  # fmt: skip
        candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP",
                     "index": 0}  # fmt: skip
        return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": self.model}

    model: str = "gemini-2.5-pro"


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        with fake.lock:
            fake.seen.append(Seen(self.path, dict(self.headers), body))
            number = len(fake.seen)
        path = self.path.split("?")[0]
        if isinstance(fake, FakeAnthropic) and path.endswith("/messages/count_tokens"):
            return self._json({"input_tokens": 100})
        if isinstance(fake, FakeGemini):
            return self._gemini(fake, path, body)
        wanted = "/messages" if isinstance(fake, FakeAnthropic) else "/responses"
        if not path.endswith(wanted):
            return self._json({"error": {"message": f"no route {path}"}}, 404)
        turn = fake.turn_for(body)
        if isinstance(fake, FakeAnthropic) and not body.get("stream"):
            return self._json(fake.message(body, turn, number))
        assert isinstance(fake, FakeAnthropic | FakeOpenAIResponses)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for chunk in fake.events(body, turn, number):
            self.wfile.write(chunk)
            self.wfile.flush()
        self.close_connection = True

    def _gemini(self, fake: FakeGemini, path: str, body: dict[str, Any]) -> None:
        model = path.rpartition("/models/")[2].partition(":")[0]  # the API names it in the path
        if path.endswith(":generateContent"):
            return self._json(fake.chunk(body, fake.turn_for(body, model)))
        if not path.endswith(":streamGenerateContent"):
            return self._json({"error": {"message": f"no route {path}"}}, 404)
        turn = fake.turn_for(body, model)
        data = f"data: {json.dumps(fake.chunk(body, turn))}\r\n\r\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True
        return None

    def do_GET(self) -> None:
        with self.server.fake.lock:
            self.server.fake.seen.append(Seen(self.path, dict(self.headers), {}))
        self._json({"error": {"message": f"no route {self.path}"}}, 404)

    def _json(self, payload: dict[str, Any], status: int = 200) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    fake: _Fake


@contextmanager
def serving(fake: _Fake) -> Iterator[_Fake]:
    """Serves `fake` on 127.0.0.1 (a free port) for the block; `fake.url` is its address."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.fake = fake
    with serving_in_thread(server) as url:
        fake.url = url
        yield fake
