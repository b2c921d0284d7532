"""The exact, regex and json scorers, built from their configs as a campaign spec holds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import anyio
import pytest

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.limits import Limiters
from mcp_evalserver.runtime.sandboxes import TrajectorySandbox
from mcp_evalserver.scoring.base import ScoreResult, ScoringContext
from mcp_evalserver.scoring.factory import build_scorer
from mcp_evalserver.spec.campaign import CampaignSpec, Limits, Task
from mcp_evalserver.spec.scorers import PythonScorerConfig, ScorerConfig
from mcp_evalserver.spec.submission import Submission

pytestmark = pytest.mark.anyio


async def _score(scorer: dict[str, Any], answer: str | None, gold: str | None) -> ScoreResult:
    task = Task(id="t", answer=gold)
    spec = CampaignSpec(tasks=[task], scorer=scorer)
    limiters = Limiters(Limits())
    context = ScoringContext(
        campaign_id="c",
        trajectory_id="t@0",
        task=task,
        submission=Submission(answer=answer),
        campaign_dir=Path("/nonexistent"),
        limiters=limiters,
        sandbox=TrajectorySandbox(None, task, "s", anyio.CapacityLimiter(1)),
    )
    return await build_scorer(spec.scorer).score(context)


@pytest.mark.parametrize(
    ("scorer", "answer", "gold", "resolved"),
    [
        ({"type": "exact"}, "  forty\n two ", "forty two", True),
        ({"type": "exact"}, "Forty Two", "forty two", False),
        ({"type": "exact", "case_sensitive": False}, "STRASSE", "Straße", True),
        ({"type": "regex"}, " 42 ", r"\d+", True),
        ({"type": "regex"}, "x 42", r"\d+", False),
        ({"type": "regex", "mode": "search"}, "x 42", r"\d+", True),
        ({"type": "regex", "pattern": "(?i)yes"}, "YES", "ignored", True),
        ({"type": "json"}, '```json\n{"a": [1, 2.0]}\n```', '{"a": [1, 2]}', True),
        ({"type": "json"}, '{"a": [1, 2], "b": 0}', '{"a": [1, 2]}', False),
        ({"type": "json", "subset": True}, '{"a": [1, 2], "b": 0}', '{"a": [1, 2]}', True),
        ({"type": "json"}, "not json", '{"a": 1}', False),
    ],
)
async def test_answers_are_matched_with_the_documented_normalisation(
    scorer: dict[str, Any], answer: str, gold: str, resolved: bool
) -> None:
    result = await _score(scorer, answer, gold)
    assert (result.resolved, result.outcome) == (resolved, "resolved" if resolved else "failed")
    assert result.score == float(resolved)
    assert result.explanation


@pytest.mark.parametrize("kind", ["exact", "regex", "json"])
async def test_a_missing_answer_fails_and_a_missing_gold_is_an_evaluation_error(
    kind: str,
) -> None:
    empty = await _score({"type": kind}, None, "1")
    no_gold = await _score({"type": kind}, "1", None)
    assert (empty.status, empty.outcome) == ("empty", "failed")
    assert (no_gold.status, no_gold.outcome) == ("no_gold", "error")


async def test_a_gold_that_is_not_json_is_an_evaluation_error() -> None:
    result = await _score({"type": "json"}, "{}", "{oops")
    assert (result.status, result.outcome) == ("invalid_gold", "error")


def test_an_invalid_configured_pattern_fails_when_the_scorer_is_built() -> None:
    spec = CampaignSpec(tasks=[Task(id="t")], scorer={"type": "regex", "pattern": "("})
    with pytest.raises(InvalidInput, match="invalid regex"):
        build_scorer(spec.scorer)


def test_unknown_scorer_fields_are_rejected_by_the_spec() -> None:
    with pytest.raises(ValueError, match="extra"):
        CampaignSpec(tasks=[Task(id="t")], scorer={"type": "exact", "casesensitive": False})


def test_a_score_result_cannot_contradict_its_outcome() -> None:
    with pytest.raises(ValueError, match="contradicts"):
        ScoreResult(resolved=False, score=0, status="x", outcome="resolved")
    assert ScoreResult(resolved=True, score=1, status="resolved").outcome == "resolved"


def test_the_docs_document_every_scorer_kind() -> None:
    page = (Path(__file__).parents[2] / "docs" / "reference" / "scorers.md").read_text()
    section = page.split("## Kinds", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert rows[0] == "type", "the table's header"
    documented = set(rows[1:])
    kinds = {
        member.model_fields["type"].default
        for member in get_args(get_args(ScorerConfig)[0])
        if member is not PythonScorerConfig
    }
    assert documented == kinds
