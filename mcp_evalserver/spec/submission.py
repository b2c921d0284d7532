"""What an agent hands in: an answer, a patch, a transcript, and what they cost."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The most tokens one report of usage may claim (a billion: far past any context window).
MAX_TOKENS = 1_000_000_000
#: The most one report of usage may say it cost, in US dollars.
MAX_COST_USD = 10_000.0


class Usage(BaseModel):
    """Token usage and cost of one trajectory, when the agent knows them."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    requests: int = Field(0, ge=0)
    cost_usd: float | None = Field(None, ge=0, allow_inf_nan=False)
    #: The model that was called, for pricing the tokens when the agent knows no cost (left
    #: out of the ledger's `generated` record when unknown, as before it existed).
    model: str | None = Field(None, exclude_if=lambda value: value is None)


#: Who made the calls a usage report counts: the agent, the judge (scoring), or the agent's
#: program reporting its own (a `command` agent's `report_usage`).
UsageSource = Literal["agent", "judge", "reported"]


class ModelUsage(BaseModel):
    """What one model call (or a batch of calls to one model) used, as its caller reports it.

    Bounded and never negative: a report comes from code that may be the agent under
    evaluation, and must not lower what the campaign spent or hide it. `cost_usd` is the
    provider's own figure where it gives one (OpenRouter's `usage.cost`, litellm's cost); it
    wins over the price table.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = Field(None, max_length=200, description="The model called.")
    input_tokens: int = Field(
        0, ge=0, le=MAX_TOKENS, description="Prompt tokens, cached ones included."
    )
    cached_input_tokens: int = Field(
        0, ge=0, le=MAX_TOKENS, description="Of the prompt tokens, those read from a cache."
    )
    output_tokens: int = Field(0, ge=0, le=MAX_TOKENS, description="Completion tokens.")
    requests: int = Field(1, ge=0, le=1_000_000, description="Calls this report covers.")
    cost_usd: float | None = Field(
        None,
        ge=0,
        le=MAX_COST_USD,
        allow_inf_nan=False,
        description="What the provider said the calls cost (US dollars), if it said.",
    )

    @model_validator(mode="after")
    def _cached_within_input(self) -> ModelUsage:
        if self.cached_input_tokens > self.input_tokens:
            raise ValueError("cached_input_tokens cannot exceed input_tokens (they are a part)")
        return self


class Submission(BaseModel):
    """What an agent hands in. Patches and transcripts are stored as artifacts."""

    model_config = ConfigDict(extra="forbid")

    answer: str | None = Field(None, description="A final answer (answer-matching scorers).")
    patch: str | None = Field(None, description="A unified diff against the base commit.")
    transcript: list[dict[str, Any]] | None = Field(None, description="Messages, tool calls.")
    usage: Usage | None = None

    @property
    def empty(self) -> bool:
        return not self.answer and not self.patch
