"""What an agent hands in: an answer, a patch, a transcript, and what they cost."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Usage(BaseModel):
    """Token usage and cost of one trajectory, when the agent knows them."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    cost_usd: float | None = None


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
