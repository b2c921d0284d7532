"""Builds the scorer a config describes."""

from __future__ import annotations

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.plugins import load_factory
from mcp_evalserver.scoring.answers import ExactScorer
from mcp_evalserver.scoring.base import Scorer
from mcp_evalserver.spec import ExactScorerConfig, ScorerConfig


def build_scorer(config: ScorerConfig) -> Scorer:
    """Makes the scorer a config describes.

    Raises:
        InvalidInput: a plugin factory cannot be loaded or returns something not a Scorer.
    """
    if isinstance(config, ExactScorerConfig):
        return ExactScorer(case_sensitive=config.case_sensitive)
    scorer = load_factory(config.factory)(config.options)
    if not isinstance(scorer, Scorer):
        raise InvalidInput(
            f"factory {config.factory!r} returned {type(scorer).__name__}, not Scorer"
        )
    return scorer
