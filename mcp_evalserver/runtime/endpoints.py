"""Where model calls go: one rule for every model caller, the operator's own endpoints, and URL
prefixes compared safely.

The rule (`model_endpoint`), the same for the `openai` agent, the `llm_judge` scorer and
mini-swe-agent's OpenAI models (litellm): the spec's `base_url`, else $OPENAI_BASE_URL, else
OpenAI's endpoint. It is the `openai` library's and litellm's own rule too, so a user who points
$OPENAI_BASE_URL at a local server never sends a prompt or a key to OpenAI by surprise. The
CLI agents' model bridge applies the same rule per provider ($ANTHROPIC_BASE_URL,
$GOOGLE_GEMINI_BASE_URL).

Kept apart from `endpoint_calls` (which imports the `openai` library, half a second at
start-up) so that the server's privileges and the spec checks can ask where a call would go
without loading a model client.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel

from mcp_evalserver.spec.agents import (
    ANTHROPIC_BASE_URL,
    DEFAULT_BASE_URL,
    GEMINI_BASE_URL,
    MiniSweAgentConfig,
    OpenAIAgentConfig,
)
from mcp_evalserver.spec.campaign import CampaignSpec, nested_configs
from mcp_evalserver.spec.scorers import LlmJudgeScorerConfig

#: The variable every model caller reads when its spec names no `base_url`.
BASE_URL_ENV = "OPENAI_BASE_URL"


#: Each provider's own endpoint and the variable naming the operator's other one: the
#: providers' own clients read the same variables (the `openai` library, Claude Code, Gemini CLI).
PROVIDERS: dict[str, tuple[str, str]] = {
    "openai": (DEFAULT_BASE_URL, BASE_URL_ENV),
    "anthropic": (ANTHROPIC_BASE_URL, "ANTHROPIC_BASE_URL"),
    "gemini": (GEMINI_BASE_URL, "GOOGLE_GEMINI_BASE_URL"),
}


@dataclass(frozen=True)
class ModelEndpoint:
    """Where a caller's requests go, and which part of the rule chose it."""

    url: str
    chosen_by: Literal["spec", "environment", "default"]
    provider: str = "openai"

    def describe(self) -> str:
        """For reports and statuses. $OPENAI_BASE_URL is named, never shown: its value is the
        operator's, and a client of a shared server must not learn (or confirm) it."""
        if self.chosen_by == "environment":
            return f"${PROVIDERS[self.provider][1]} (the server's)"
        if self.chosen_by == "default":
            return f"{_OWNER[self.provider]}'s ({self.url})"
        return self.url


_OWNER = {"openai": "OpenAI", "anthropic": "Anthropic", "gemini": "Google"}


def model_endpoint(base_url: str | None, provider: str = "openai") -> ModelEndpoint:
    """The spec's `base_url`, else the operator's variable ($OPENAI_BASE_URL for `openai`,
    $ANTHROPIC_BASE_URL, $GOOGLE_GEMINI_BASE_URL), else the provider's own endpoint."""
    default, variable = PROVIDERS[provider]
    if base_url:
        return ModelEndpoint(base_url, "spec", provider)
    if configured := os.environ.get(variable):
        return ModelEndpoint(configured, "environment", provider)
    return ModelEndpoint(default, "default", provider)


def litellm_endpoint(model: Mapping[str, Any]) -> ModelEndpoint | None:
    """The endpoint of mini-swe-agent's `model` section: its `model_kwargs.api_base` (or
    `base_url`), else for an OpenAI model (`openai/...`) the rule's; None for another provider,
    whose endpoint is litellm's choice by the model's name."""
    kwargs = model.get("model_kwargs") or {}
    if given := kwargs.get("api_base") or kwargs.get("base_url"):
        return ModelEndpoint(str(given), "spec")
    name = str(model.get("model_name") or "")
    if name.startswith("openai/") or kwargs.get("custom_llm_provider") == "openai":
        return model_endpoint(None)
    return None


def model_endpoints(spec: CampaignSpec) -> dict[str, str]:
    """Which endpoint each model caller of `spec` sends to, by its place in the spec
    (`agent`, `scorer.scorers[1]`), as `ModelEndpoint.describe` says it."""
    found: dict[str, str] = {}
    for where, config in (("agent", spec.agent), ("scorer", spec.scorer)):
        for at, part in nested_configs(config, where):
            found.update(_described(at, part))
    return found


def _described(at: str, config: BaseModel) -> dict[str, str]:
    if isinstance(config, OpenAIAgentConfig | LlmJudgeScorerConfig):
        return {at: model_endpoint(config.base_url).describe()}
    if isinstance(config, MiniSweAgentConfig):
        model = {**(config.config.get("model") or {}), **config.model}
        endpoint = litellm_endpoint(model)
        name = model.get("model_name") or "its configured model"
        return {at: endpoint.describe() if endpoint else f"litellm's endpoint for {name}"}
    return {}


def operators_endpoints(provider: str = "openai") -> list[str]:
    """Where the operator's own settings go: the provider's own endpoint and the operator's
    variable for it (`PROVIDERS`: $OPENAI_BASE_URL, $ANTHROPIC_BASE_URL,
    $GOOGLE_GEMINI_BASE_URL)."""
    default, variable = PROVIDERS[provider]
    return [default, *filter(None, [os.environ.get(variable)])]


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
