"""Calls to a model endpoint, retried on the failures that say "later", not "never".

Both users of a model endpoint (the `openai` agent and the `llm_judge` scorer) turn the client's
own retries off and come here: a 429, a 5xx or a connection failure is retried with exponential
backoff and jitter, or after the server's own hint (`retry-after-ms`, `Retry-After`), and each
attempt holds the endpoint limiter's slot for the request only, never across a backoff, so a
waiting call does not keep another trajectory from the endpoint. When the bound is reached the
caller gets `InfrastructureError`: the endpoint's weather is the harness's fault to retry, never a
verdict on the trajectory (a judge that was rate-limited must not mark a requirement unmet).
Any other status is the caller's to interpret (`openai.APIStatusError` passes through).

Both also build their client here (`model_client`), so that a request carries what the caller
gives it and nothing the `openai` library would add from the server's environment on its own.
"""

from __future__ import annotations

import email.utils
import json
import os
import re
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx2
import openai
from openai.types.chat import ChatCompletion
from pydantic import ValidationError

from mcp_evalserver.errors import InfrastructureError
from mcp_evalserver.runtime import tracing
from mcp_evalserver.runtime.adaptive import EndpointLimiter
from mcp_evalserver.runtime.limits import RetryPolicy
from mcp_evalserver.spec.agents import ANTHROPIC_BASE_URL, DEFAULT_BASE_URL, GEMINI_BASE_URL
from mcp_evalserver.spec.submission import ModelUsage

_T = TypeVar("_T")

#: Hears each retry: why the attempt failed and how long the call now waits.
RetryObserver = Callable[[str, float], None]


#: Sent as the key to an endpoint that needs none: the client insists on one.
PLACEHOLDER_KEY = "not-needed"


def operators_endpoints(provider: str = "openai") -> list[str]:
    """Where the operator's own settings go: OpenAI's endpoint and $OPENAI_BASE_URL, or for
    `anthropic` Anthropic's and $ANTHROPIC_BASE_URL."""
    if provider == "anthropic":
        return [ANTHROPIC_BASE_URL, *filter(None, [os.environ.get("ANTHROPIC_BASE_URL")])]
    if provider == "gemini":
        return [GEMINI_BASE_URL, *filter(None, [os.environ.get("GOOGLE_GEMINI_BASE_URL")])]
    return [DEFAULT_BASE_URL, *filter(None, [os.environ.get("OPENAI_BASE_URL")])]


def model_client(
    base_url: str,
    api_key: str | None,
    *,
    timeout: float,
    headers: Mapping[str, str] | None = None,
    verify: ssl.SSLContext | bool = True,
) -> openai.AsyncOpenAI:
    """A client of `base_url` that sends `api_key` (or `PLACEHOLDER_KEY`) and `headers`.

    The `openai` library adds, on its own, what the server's environment holds:
    $OPENAI_ORG_ID, $OPENAI_PROJECT_ID, $OPENAI_CUSTOM_HEADERS, the platform it runs on. Those
    are the operator's, for the operator's own endpoints (`operators_endpoints`): there they
    go as the library sends them. Every other endpoint gets exactly the headers a request
    needs, the key and `headers`, and nothing else. Redirects are not followed anywhere: an
    endpoint must not lead the server to a host nobody allowed.
    """
    key = api_key or PLACEHOLDER_KEY
    hooks = []
    if not any(url_below(base_url, own) for own in operators_endpoints()):
        hooks.append(_only_plain_headers(key, dict(headers or {})))
    http = openai.DefaultAsyncHttpxClient(
        verify=verify, follow_redirects=False, event_hooks={"request": hooks}
    )
    return openai.AsyncOpenAI(
        api_key=key,
        base_url=base_url,
        max_retries=0,
        timeout=timeout,
        default_headers=headers,
        http_client=http,
    )


def _only_plain_headers(
    key: str, extra: dict[str, str]
) -> Callable[[httpx2.Request], Awaitable[None]]:
    """A request hook that replaces a request's headers with an allowlist: what the library
    set from the environment (or any header not listed here) never leaves."""

    async def rewrite(request: httpx2.Request) -> None:
        body = await request.aread()
        plain = {
            "Host": request.url.netloc.decode("ascii"),
            "Accept": "application/json",
            "Accept-Encoding": "gzip, deflate",
            "User-Agent": "mcp-evalserver",
            "Authorization": f"Bearer {key}",
        }
        if body:
            plain["Content-Type"] = "application/json"
            plain["Content-Length"] = str(len(body))
        request.headers = httpx2.Headers({**plain, **extra})

    return rewrite


def url_below(url: str, prefix: str) -> bool:
    """Whether `url` is `prefix` or below it: the same scheme, host and port (no user part),
    and the prefix's path segments first. Text prefixes are not enough: an allowed
    `https://api.example.com` would also admit `https://api.example.com.attacker.net`, and a
    host is compared as written (`127.1` is not `127.0.0.1`)."""
    given, allowed = urlsplit(url), urlsplit(prefix)
    return (
        plain_url(url)
        and given.scheme.lower() == allowed.scheme.lower()
        and given.netloc.lower() == allowed.netloc.lower()
        and f"{given.path.rstrip('/')}/".startswith(f"{allowed.path.rstrip('/')}/")
    )


def plain_url(url: str) -> bool:
    """No spaces, controls, backslashes or non-ASCII: nothing that URL parsers read apart."""
    return re.fullmatch(r"[!-~]+", url) is not None and "\\" not in url


def is_transient(exc: openai.APIStatusError) -> bool:
    """A refusal for load (429) or the server's own fault (5xx): worth asking again."""
    return exc.status_code == 429 or exc.status_code >= 500


async def call_with_retries(
    limiter: EndpointLimiter,
    request: Callable[[], Awaitable[_T]],
    *,
    policy: RetryPolicy,
    on_retry: RetryObserver | None = None,
) -> _T:
    """`request()` through `limiter`, retried up to `policy.max_attempts` requests in all.

    Raises:
        openai.APIStatusError: a status other than 429 and 5xx (bad model, key or request).
        InfrastructureError: still failing for load after `policy.max_attempts` requests.
    """
    failures = 0
    while True:
        try:
            async with limiter.call() as slot:
                try:
                    result = await request()
                except openai.APIStatusError as exc:
                    if is_transient(exc):
                        slot.congested(
                            f"HTTP {exc.status_code}", retry_after_seconds(exc.response.headers)
                        )
                    raise
                except openai.APIConnectionError as exc:
                    slot.congested(type(exc).__name__)
                    raise
                slot.succeeded()
                return result
        except openai.APIStatusError as exc:
            if not is_transient(exc):
                raise
            reason = f"HTTP {exc.status_code}"
            hinted = retry_after_seconds(exc.response.headers)
        except openai.APIConnectionError as exc:
            reason, hinted = f"{type(exc).__name__}: {shorten(str(exc), 300)}", None
        failures += 1
        if policy.gives_up_after(failures):
            raise InfrastructureError(
                f"the model endpoint failed {failures} times in a row (last: {reason})"
            )
        if hinted is not None:
            delay = min(max(hinted, 0.0), policy.max_delay_s)
        else:
            delay = policy.delay(failures)
        if on_retry is not None:
            on_retry(reason, delay)
        await anyio.sleep(delay)


def traced_chat(
    base_url: str, model: str, messages: list[dict[str, Any]], provider: str = "openai"
) -> AbstractContextManager[tracing.SpanLike]:
    """The `chat` span of one call (its retries included) to the endpoint at `base_url`, which
    speaks `provider`'s API."""
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    server = (parts.hostname, port) if parts.hostname else None
    return tracing.chat(model, provider=provider, server=server, messages=messages)


def describe_completion(span: tracing.SpanLike, completion: ChatCompletion) -> None:
    """What the endpoint answered, on the call's `chat` span: model, usage, finish reasons,
    and the output messages when contents are captured."""
    if span is tracing.NO_SPAN:
        return
    span.set_attribute("gen_ai.response.id", completion.id)
    span.set_attribute("gen_ai.response.model", completion.model)
    reasons = [choice.finish_reason for choice in completion.choices]
    span.set_attribute("gen_ai.response.finish_reasons", reasons)
    if completion.usage is not None:
        span.set_attribute("gen_ai.usage.input_tokens", completion.usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", completion.usage.completion_tokens)
    if tracing.captures_content():
        output = []
        for choice in completion.choices:
            message = choice.message.model_dump(exclude_none=True)
            (shaped,) = tracing.input_messages([message])
            output.append({**shaped, "finish_reason": choice.finish_reason})
        span.set_attribute("gen_ai.output.messages", json.dumps(output))


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The server's wait hint: `retry-after-ms`, or `Retry-After` in seconds or as an HTTP date.

    Returns None when there is no usable hint.
    """
    lowered = {key.lower(): value for key, value in headers.items()}
    if (millis := lowered.get("retry-after-ms")) is not None:
        try:
            return float(millis) / 1000.0
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, the cut marked (an endpoint's message can be a page)."""
    return text if len(text) <= limit else text[:limit] + "…"


def call_usage(model: str, completion: ChatCompletion) -> ModelUsage:
    """What one completion used: tokens (cached ones apart) and the provider's own cost where
    it reports one (OpenRouter's `usage.cost`); priced by the table under `model` otherwise."""
    counts = completion.usage
    if counts is None:
        return ModelUsage(model=model)
    details = counts.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    cost = (counts.model_extra or {}).get("cost")
    fields: dict[str, Any] = {
        "model": model,
        "input_tokens": counts.prompt_tokens,
        "cached_input_tokens": min(cached, counts.prompt_tokens),
        "output_tokens": counts.completion_tokens,
    }
    try:
        return ModelUsage(**fields, cost_usd=cost if isinstance(cost, int | float) else None)
    except ValidationError:
        # A figure no price could be (negative, absurd): the tokens are priced instead.
        return ModelUsage(**fields)
