"""Calls to a model endpoint, retried on the failures that say "later", not "never".

Both users of a model endpoint (the `openai` agent and the `llm_judge` scorer) turn the client's
own retries off and come here: a 429, a 5xx or a connection failure is retried with exponential
backoff and jitter, or after the server's own hint (`retry-after-ms`, `Retry-After`), and each
attempt holds the endpoint limiter's slot for the request only, never across a backoff, so a
waiting call does not keep another trajectory from the endpoint. When the bound is reached the
caller gets `InfrastructureError`: the endpoint's weather is the harness's fault to retry, never a
verdict on the trajectory (a judge that was rate-limited must not mark a requirement unmet).
Any other status is the caller's to interpret (`openai.APIStatusError` passes through).
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import anyio
import openai

from mcp_evalserver.errors import InfrastructureError
from mcp_evalserver.runtime.adaptive import EndpointLimiter
from mcp_evalserver.runtime.limits import RetryPolicy

_T = TypeVar("_T")

#: Hears each retry: why the attempt failed and how long the call now waits.
RetryObserver = Callable[[str, float], None]


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
