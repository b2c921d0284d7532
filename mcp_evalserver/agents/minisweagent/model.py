"""mini-swe-agent's model behind the campaign's per-endpoint limiter (`limits.per_endpoint`).

`EndpointGatedModel` implements mini-swe-agent's `Model` protocol by delegation: each
`query` takes a slot of the endpoint's limiter on the event loop and runs the wrapped model's
`query` in a thread while holding it, so mini-swe-agent trajectories and `openai` agents of a
campaign share one bound per endpoint, fixed or adaptive, and the calls are counted in the
report's endpoint calls.

One difference from the `openai` agent, whose retries are ours: mini-swe-agent's litellm models
retry a failed request themselves (tenacity, inside `query`, with its own backoff), and nothing
public lets us in between those attempts. So a slot is held for one `query` with its retries,
and only a `query` that still failed for load (429, 408, 5xx, no connection) counts as
congestion; it becomes `InfrastructureError`, which the runner retries like any endpoint
trouble.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.to_thread
from pydantic import ValidationError

from mcp_evalserver.agents.minisweagent.environment import LoopCall
from mcp_evalserver.errors import InfrastructureError
from mcp_evalserver.runtime.adaptive import EndpointLimiter
from mcp_evalserver.runtime.endpoint_calls import retry_after_seconds, shorten
from mcp_evalserver.runtime.endpoints import litellm_endpoint
from mcp_evalserver.runtime.pricing import Meter
from mcp_evalserver.spec.submission import ModelUsage

#: HTTP statuses that say "later": the provider's load or its own fault.
_LOAD_STATUSES = {408, 429}


def with_endpoint(model: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """mini-swe-agent's `model` section with the endpoint rule applied, and the limiter's key.

    An OpenAI model without `model_kwargs.api_base` gets the rule's endpoint as its `api_base`
    (the spec's, else $OPENAI_BASE_URL, else OpenAI's: what the `openai` agent and the judge
    use, and not litellm's other variables); the key is that URL. Another provider's model is
    left to litellm, keyed by the model's name (litellm picks the provider by it).
    """
    endpoint = litellm_endpoint(model)
    if endpoint is None:
        return model, str(model.get("model_name") or "mini-swe-agent")
    kwargs = model.get("model_kwargs") or {}
    if not (kwargs.get("api_base") or kwargs.get("base_url")):
        model = {**model, "model_kwargs": {**kwargs, "api_base": endpoint.url}}
    return model, endpoint.url


def load_failure(exc: BaseException) -> str | None:
    """Why `exc` says the endpoint is loaded (e.g. "HTTP 429"), or None when it does not.

    litellm's exceptions carry the provider's `status_code`; a connection failure is one too.
    """
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and (status in _LOAD_STATUSES or status >= 500):
        return f"HTTP {status}"
    if "connection" in type(exc).__name__.lower():
        return type(exc).__name__
    return None


def call_usage(model: str | None, message: Mapping[str, Any]) -> ModelUsage:
    """What the model call that answered `message` used: the tokens of its response's `usage`
    and mini-swe-agent's cost for it (litellm's price; none when 0: the runner prices the
    tokens by the model's name)."""
    extra = message.get("extra") or {}
    response = extra.get("response")
    counts = response.get("usage") if isinstance(response, dict) else None
    counts = counts if isinstance(counts, dict) else {}
    details = counts.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    cost = extra.get("cost")
    cost = cost if isinstance(cost, int | float) and cost else None
    fields: dict[str, Any] = {
        "model": model,
        "input_tokens": int(counts.get("prompt_tokens") or 0),
        "output_tokens": int(counts.get("completion_tokens") or 0),
    }
    fields["cached_input_tokens"] = min(int(cached or 0), fields["input_tokens"])
    try:
        return ModelUsage(
            **fields, cost_usd=cost if isinstance(cost, int | float) and cost else None
        )
    except ValidationError:
        return ModelUsage(**fields)  # a figure no price could be: the tokens are priced


class EndpointGatedModel:
    """A mini-swe-agent model whose queries go through `limiter`, called from the loop thread;
    each answered query is metered as it returns (`meter`), so a budget stops the loop at its
    next call with every paid call recorded.

    Raises (from `query`):
        InfrastructureError: the model's query failed for load after its own retries.
        Exception: any other failure of the wrapped model, unchanged, or the budget's stop.
    """

    def __init__(
        self,
        model: Any,
        limiter: EndpointLimiter,
        call: LoopCall,
        threads: anyio.CapacityLimiter,
        meter: Meter | None = None,
        admit: Callable[[], None] | None = None,
    ) -> None:
        self.model = model
        self.config = model.config
        self._limiter = limiter
        self._call = call
        # Model calls wait in threads of their own: the loops' threads are all taken at peak.
        self._threads = threads
        self._meter = meter
        self._admit = admit

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = self._call(self._query, messages, kwargs)
        return result

    async def _query(self, messages: list[dict[str, Any]], kwargs: dict[str, Any]) -> Any:
        if self._admit is not None:
            self._admit()  # no call starts once the campaign's budget is spent
        try:
            result = await self._limited(messages, kwargs)
        except Exception as exc:
            # A reply it could not parse was paid for all the same (mini-swe-agent's
            # FormatError carries it).
            paid = getattr(exc, "messages", None)
            if isinstance(paid, list) and paid and isinstance(paid[0], dict):
                await self._metered(paid[0])
            raise
        await self._metered(result)
        return result

    async def _metered(self, message: Mapping[str, Any]) -> None:
        if self._meter is not None and "extra" in message:
            name = getattr(self.config, "model_name", None)
            await self._meter(call_usage(name if isinstance(name, str) else None, message), "agent")

    async def _limited(self, messages: list[dict[str, Any]], kwargs: dict[str, Any]) -> Any:
        async with self._limiter.call() as slot:
            try:
                result = await anyio.to_thread.run_sync(
                    lambda: self.model.query(messages, **kwargs), limiter=self._threads
                )
            except Exception as exc:
                reason = load_failure(exc)
                if reason is None:
                    raise
                response = getattr(exc, "response", None)
                headers = getattr(response, "headers", None) or {}
                slot.congested(reason, retry_after_seconds(headers))
                raise InfrastructureError(
                    f"the model endpoint {self._limiter.endpoint} still failed after "
                    f"mini-swe-agent's retries ({reason}): {shorten(str(exc), 300)}"
                ) from exc
            slot.succeeded()
            return result

    def format_message(self, **kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.model.format_message(**kwargs)
        return result

    def format_observation_messages(
        self,
        message: dict[str, Any],
        outputs: list[dict[str, Any]],
        template_vars: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.model.format_observation_messages(
            message, outputs, template_vars
        )
        return result

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.model.get_template_vars(**kwargs)
        return result

    def serialize(self) -> dict[str, Any]:
        result: dict[str, Any] = self.model.serialize()
        return result
