"""What a relayed model call used, read from the provider's own response as it streams by.

Anthropic's Messages API gives the input counts in `message_start` and the output count in
`message_delta` (cumulative); without streaming, one `usage` object. Its `input_tokens` leaves
out the cached ones (`cache_read_input_tokens`, `cache_creation_input_tokens`), which count as
input here, the read ones as cached. OpenAI's Responses API gives the usage in the final
`response.completed` (or `.incomplete` / `.failed`) event. The Gemini API gives cumulative
`usageMetadata` in its chunks (the last wins). A provider's own cost (OpenRouter's
`usage.cost`) is kept and wins over the price table.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from mcp_evalserver.spec.submission import ModelUsage

Provider = Literal["anthropic", "openai", "gemini"]
#: The Responses API's last event of a response, with its usage.
_OPENAI_CALLS = ("function_call", "custom_tool_call")
_OPENAI_FINAL = ("response.completed", "response.incomplete", "response.failed")


class UsageReader:
    """Fed the response body's bytes as they pass (SSE or JSON); `usage` once it ended."""

    def __init__(self, provider: Provider, requested_model: str) -> None:
        self.provider = provider
        self.model = requested_model
        self.input_tokens = self.cached_tokens = self.output_tokens = 0
        self.cost: float | None = None
        self.seen_usage = False
        self.stop_reason: str | None = None
        self._pending = b""
        self._whole = bytearray()
        self._streaming: bool | None = None
        #: The tools the model called in this response, in order: `id`, `name` and
        #: `arguments` (JSON text, as the provider sent it).
        self.tool_calls: list[dict[str, str]] = []
        #: Anthropic's streamed tool_use blocks by index: their arguments arrive in pieces.
        self._open_blocks: dict[int, dict[str, str]] = {}
        self._start_inputs: dict[int, str] = {}

    def feed(self, chunk: bytes, *, streaming: bool) -> None:
        self._streaming = streaming
        if not streaming:
            self._whole += chunk
            return
        self._pending += chunk
        while b"\n" in self._pending:
            line, self._pending = self._pending.split(b"\n", 1)
            line = line.strip()
            if line.startswith(b"data:"):
                self._event(line[5:].strip())

    def _event(self, data: bytes) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            return  # `[DONE]` and keep-alives
        if not isinstance(event, dict):
            return
        if self.provider == "gemini":
            self._gemini(event)
            return
        kind = event.get("type")
        self._tool_call(kind, event)
        if self.provider == "anthropic":
            if kind == "message_start" and isinstance(event.get("message"), dict):
                self._anthropic(event["message"])
            elif kind == "message_delta":
                self._anthropic_delta(event)
        elif kind in _OPENAI_FINAL and isinstance(event.get("response"), dict):
            self._openai(event["response"])

    def _tool_call(self, kind: Any, event: dict[str, Any]) -> None:
        """The tools the model called, as the provider streamed them: the harness's own record
        (a session log is written inside the workspace, where the agent can rewrite it)."""
        if kind == "content_block_start":
            block = event.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                call = _call(block.get("id"), block.get("name"), "")
                self.tool_calls.append(call)
                # Its input arrives in `input_json_delta` pieces; one without any keeps this.
                self._open_blocks[_index(event)] = call
                self._start_inputs[_index(event)] = json.dumps(block.get("input") or {})
        elif kind == "content_block_delta":
            opened = self._open_blocks.get(_index(event))
            delta = event.get("delta")
            if opened is not None and isinstance(delta, dict):
                opened["arguments"] += str(delta.get("partial_json") or "")
        elif kind == "content_block_stop":
            closed = self._open_blocks.pop(_index(event), None)
            started = self._start_inputs.pop(_index(event), "{}")
            if closed is not None and not closed["arguments"]:
                closed["arguments"] = started
        elif kind == "response.output_item.done":
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") in _OPENAI_CALLS:
                self.tool_calls.append(_openai_call(item))

    def finish(self) -> None:
        """The body ended: a JSON body is read now."""
        if self._streaming or not self._whole:
            return
        try:
            body = json.loads(bytes(self._whole))
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        if self.provider == "anthropic":
            self._anthropic(body)
        elif self.provider == "gemini":
            self._gemini(body)
        else:
            self._openai(body)

    def _anthropic(self, message: dict[str, Any]) -> None:
        self.model = str(message.get("model") or self.model)
        for block in message.get("content") or []:  # a JSON (not streamed) message
            if isinstance(block, dict) and block.get("type") == "tool_use":
                arguments = json.dumps(block.get("input", {}))
                self.tool_calls.append(_call(block.get("id"), block.get("name"), arguments))
        usage = message.get("usage")
        if isinstance(usage, dict):
            self.seen_usage = True
            read = _count(usage, "cache_read_input_tokens")
            written = _count(usage, "cache_creation_input_tokens")
            self.input_tokens = _count(usage, "input_tokens") + read + written
            self.cached_tokens = read
            self.output_tokens = max(self.output_tokens, _count(usage, "output_tokens"))
            self._cost(usage)
        if message.get("stop_reason"):
            self.stop_reason = str(message["stop_reason"])

    def _anthropic_delta(self, event: dict[str, Any]) -> None:
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.seen_usage = True
            self.output_tokens = _count(usage, "output_tokens")
            self._cost(usage)
        delta = event.get("delta")
        if isinstance(delta, dict) and delta.get("stop_reason"):
            self.stop_reason = str(delta["stop_reason"])

    def _openai(self, response: dict[str, Any]) -> None:
        self.model = str(response.get("model") or self.model)
        if not self._streaming:  # streamed, its items were counted as they were done
            for item in response.get("output") or []:
                if isinstance(item, dict) and item.get("type") in _OPENAI_CALLS:
                    self.tool_calls.append(_openai_call(item))
        usage = response.get("usage")
        if isinstance(usage, dict):
            self.seen_usage = True
            self.input_tokens = _count(usage, "input_tokens")
            details = usage.get("input_tokens_details")
            cached = _count(details, "cached_tokens") if isinstance(details, dict) else 0
            self.cached_tokens = min(cached, self.input_tokens)
            self.output_tokens = _count(usage, "output_tokens")
            self._cost(usage)
        self.stop_reason = str(response.get("status") or "") or self.stop_reason

    def _gemini(self, chunk: dict[str, Any]) -> None:
        """One chunk (streamed) or the whole response: usage is cumulative, the last wins;
        `promptTokenCount` includes the cached ones, thoughts count as output."""
        self.model = str(chunk.get("modelVersion") or self.model)
        for candidate in chunk.get("candidates") or []:
            content = candidate.get("content") if isinstance(candidate, dict) else None
            for part in (content or {}).get("parts") or [] if isinstance(content, dict) else []:
                call = part.get("functionCall") if isinstance(part, dict) else None
                if isinstance(call, dict):
                    arguments = json.dumps(call.get("args", {}))
                    self.tool_calls.append(_call(call.get("id"), call.get("name"), arguments))
            if isinstance(candidate, dict) and candidate.get("finishReason"):
                self.stop_reason = str(candidate["finishReason"])
        usage = chunk.get("usageMetadata")
        if isinstance(usage, dict):
            self.seen_usage = True
            self.input_tokens = _count(usage, "promptTokenCount")
            self.cached_tokens = min(_count(usage, "cachedContentTokenCount"), self.input_tokens)
            self.output_tokens = _count(usage, "candidatesTokenCount") + _count(
                usage, "thoughtsTokenCount"
            )
            self._cost(usage)

    def _cost(self, usage: dict[str, Any]) -> None:
        cost = usage.get("cost")
        if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0:
            self.cost = float(cost)

    def usage(self) -> ModelUsage:
        """The call's usage (one request), as the meter takes it."""
        return ModelUsage(
            model=self.model,
            input_tokens=self.input_tokens,
            cached_input_tokens=min(self.cached_tokens, self.input_tokens),
            output_tokens=self.output_tokens,
            requests=1,
            cost_usd=self.cost,
        )


def _call(call_id: Any, name: Any, arguments: str) -> dict[str, str]:
    return {"id": str(call_id or ""), "name": str(name)[:200], "arguments": arguments}


def _openai_call(item: dict[str, Any]) -> dict[str, str]:
    arguments = item.get("arguments", item.get("input", ""))
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return _call(item.get("call_id"), item.get("name"), text)


def _index(event: dict[str, Any]) -> int:
    index = event.get("index")
    return index if isinstance(index, int) else -1


def _count(usage: dict[str, Any], name: str) -> int:
    value = usage.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
