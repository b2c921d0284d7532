"""Builds the scorer a config describes."""

from __future__ import annotations

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.plugins import load_factory
from mcp_evalserver.scoring.answers import ExactScorer, JsonScorer, RegexScorer
from mcp_evalserver.scoring.base import Scorer
from mcp_evalserver.scoring.combined import CombinedScorer
from mcp_evalserver.scoring.command import CommandScorer
from mcp_evalserver.scoring.harbor import HarborScorer
from mcp_evalserver.scoring.testsuite import TestsScorer
from mcp_evalserver.scoring.trajectory import TrajectoryScorer
from mcp_evalserver.spec.scorers import (
    AllOfScorerConfig,
    AnyOfScorerConfig,
    CommandScorerConfig,
    ExactScorerConfig,
    HarborScorerConfig,
    JsonScorerConfig,
    LlmJudgeScorerConfig,
    PythonScorerConfig,
    RegexScorerConfig,
    ScorerConfig,
    TestsScorerConfig,
    TrajectoryScorerConfig,
    WeightedScorerConfig,
)


def ignored_tests(config: TestsScorerConfig) -> dict[str, list[str]] | None:
    """The `ignore_tests` of a resolved spec's scorer.

    Raises:
        InvalidInput: it is still a file name (only the spec's top-level scorer reads one).
    """
    if isinstance(config.ignore_tests, str):
        raise InvalidInput(
            f"scorer.ignore_tests {config.ignore_tests!r} was not read: a file is read for the "
            "spec's top-level `tests` scorer only; give the mapping inline here"
        )
    return config.ignore_tests


def build_scorer(config: ScorerConfig) -> Scorer:
    """Makes the scorer a config describes.

    Raises:
        InvalidInput: an invalid pattern or parser name, a judge without endpoint or key, or a
            plugin factory that cannot be loaded or returns something not a Scorer.
    """
    match config:
        case ExactScorerConfig():
            return ExactScorer(case_sensitive=config.case_sensitive)
        case RegexScorerConfig():
            return RegexScorer(
                pattern=config.pattern,
                mode=config.mode,
                ignore_case=config.ignore_case,
                dotall=config.dotall,
            )
        case JsonScorerConfig():
            return JsonScorer(subset=config.subset)
        case CommandScorerConfig():
            return CommandScorer(
                config.command,
                reward_file=config.reward_file,
                threshold=config.threshold,
                timeout_s=config.timeout_s,
                apply_patch=config.apply_patch,
            )
        case TestsScorerConfig():
            return TestsScorer(
                parser=config.parser,
                test_command=config.test_command,
                timeout_s=config.timeout_s,
                output_cap=config.output_cap,
                strict=config.strict,
                grade_empty=config.grade_empty,
                ignore_tests=ignored_tests(config),
            )
        case HarborScorerConfig():
            return HarborScorer(threshold=config.threshold, verify=config.verify)
        case LlmJudgeScorerConfig():
            # Imported here: the openai client is only loaded by campaigns that use a judge.
            from mcp_evalserver.scoring.judge import LlmJudgeScorer

            return LlmJudgeScorer(**config.model_dump(exclude={"type"}))
        case TrajectoryScorerConfig():
            return TrajectoryScorer(config.assertions)
        case AllOfScorerConfig() | AnyOfScorerConfig():
            parts = [(part.type, build_scorer(part)) for part in config.scorers]
            return CombinedScorer(config.type, parts)
        case WeightedScorerConfig():
            parts = [(part.scorer.type, build_scorer(part.scorer)) for part in config.parts]
            weights = [part.weight for part in config.parts]
            return CombinedScorer("weighted", parts, weights=weights, threshold=config.threshold)
        case PythonScorerConfig():
            scorer = load_factory(config.factory)(config.options)
            if not isinstance(scorer, Scorer):
                raise InvalidInput(
                    f"factory {config.factory!r} returned {type(scorer).__name__}, not Scorer"
                )
            return scorer
