"""Judge calibration: does a campaign's `llm_judge` agree with human labels?

Labels come per trajectory (`{"trajectory": "t1@0", "label": 0.5}`) or per rubric requirement
(`{"trajectory": "t1@0", "requirement": "...", "label": true}`), as JSONL, a JSON list, or a JSON
object `{trajectory: label}`. A label is a boolean or a number in [0, 1]. Per trajectory the
judge's value is its score (the share of requirements fulfilled); per requirement it is that
requirement's verdict (1 or 0). A verdict the judge failed to give (its call rejected, its
answer unreadable) is no evidence of agreement: such labels are left out and counted
(`judge_errors`), as are, per trajectory, trajectories with any such requirement.

The result: Spearman and Kendall with bootstrap intervals, agreement and the confusion matrix
at the threshold (the judge's verdict: score >= the scorer's threshold; the human's: label >=
0.5), and whether Spearman clears 0.80, the usual bar for trusting a judge. It is recorded in
the campaign's ledger (`judge_calibrated`), so the campaign's report shows it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from mcp_evalserver.engine.ledger import LedgerWriter
from mcp_evalserver.engine.records import JudgeCalibrated
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.stats.agreement import bootstrap_correlation, kendall_tau_b, spearman

TARGET = 0.80
RESAMPLES = 2000
SEED = 0
CONFIDENCE = 0.95
#: A human label at or above this counts as "resolved" for agreement and the confusion matrix.
LABEL_CUT = 0.5

Label = tuple[str, str | None, float]


def parse_labels(data: Any, *, source: str = "labels") -> list[Label]:
    """Labels from parsed JSON: a list of objects, or an object {trajectory: label}.

    Raises:
        InvalidInput: a row without trajectory or label, or a label outside [0, 1].
    """
    rows = (
        [{"trajectory": k, "label": v} for k, v in data.items()] if isinstance(data, dict) else data
    )
    if not isinstance(rows, list) or not rows:
        raise InvalidInput(f"{source}: expected a non-empty list of labels or an object")
    labels: list[Label] = []
    for number, row in enumerate(rows, start=1):
        where = f"{source} item {number}"
        if not isinstance(row, dict) or not isinstance(row.get("trajectory"), str):
            raise InvalidInput(f'{where}: needs a `trajectory` id (e.g. "t1@0") and a `label`')
        label = row.get("label")
        if isinstance(label, bool) or (isinstance(label, int | float) and 0 <= label <= 1):
            value = float(label)
        else:
            raise InvalidInput(f"{where}: `label` must be true/false or a number in [0, 1]")
        requirement = row.get("requirement")
        if requirement is not None and not isinstance(requirement, str):
            raise InvalidInput(f"{where}: `requirement` must be the requirement's text")
        labels.append((row["trajectory"], requirement, value))
    return labels


def load_labels(path: Path) -> tuple[list[Label], str]:
    """Labels from a JSONL or JSON file, and the file's sha256.

    Raises:
        InvalidInput: unreadable, not JSON, or an invalid label (line named).
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read labels file {path}: {exc.strerror}") from exc
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    data.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise InvalidInput(f"{path} line {number} is not JSON: {exc}") from exc
    if isinstance(data, dict) and "trajectory" in data:
        data = [data]  # JSONL of one row
    return parse_labels(data, source=str(path)), hashlib.sha256(raw).hexdigest()


def calibrate(state: CampaignState, labels: list[Label]) -> dict[str, Any]:
    """Compares the judge's scores with the labels (see the module docstring).

    Raises:
        InvalidInput: the campaign is not scored by `llm_judge`, labels mix per-trajectory and
            per-requirement rows, or fewer than 3 labels match a judged trajectory.
    """
    scorer = state.spec.scorer
    if scorer.type != "llm_judge":
        raise InvalidInput(
            f"campaign {state.id} is scored by {scorer.type!r}; calibration compares an "
            "`llm_judge` scorer's verdicts with human labels"
        )
    per_requirement = {requirement is not None for _, requirement, _ in labels}
    if len(per_requirement) > 1:
        raise InvalidInput("labels mix per-trajectory and per-requirement rows; use one kind")
    unit = "requirement" if per_requirement == {True} else "trajectory"
    judged: list[float] = []
    human: list[float] = []
    unmatched: list[str] = []
    judge_errors = 0
    for trajectory_id, requirement, label in labels:
        value = _judge_value(state, trajectory_id, requirement)
        if value is _JUDGE_ERROR:
            judge_errors += 1
            continue
        if value is None:
            unmatched.append(
                trajectory_id if requirement is None else f"{trajectory_id}: {requirement[:60]}"
            )
            continue
        judged.append(value)
        human.append(label)
    if len(judged) < 3:
        raise InvalidInput(
            f"only {len(judged)} label(s) match a judged trajectory of campaign {state.id} "
            f"(unmatched: {', '.join(unmatched[:5]) or 'none'}; judge errors: {judge_errors}); "
            "calibration needs at least 3"
        )
    threshold = scorer.threshold if unit == "trajectory" else 0.5
    confusion = {"true_positive": 0, "false_positive": 0, "true_negative": 0, "false_negative": 0}
    for judge_value, label in zip(judged, human, strict=True):
        says, truth = judge_value >= threshold, label >= LABEL_CUT
        key = ("true_" if says == truth else "false_") + ("positive" if says else "negative")
        confusion[key] += 1
    rho = bootstrap_correlation(spearman, judged, human, confidence=CONFIDENCE,
                                resamples=RESAMPLES, seed=SEED)  # fmt: skip
    tau = bootstrap_correlation(kendall_tau_b, judged, human, confidence=CONFIDENCE,
                                resamples=RESAMPLES, seed=SEED)  # fmt: skip
    agreed = confusion["true_positive"] + confusion["true_negative"]
    return {
        "unit": unit,
        "pairs": len(judged),
        "spearman": rho.as_json(),
        "kendall": tau.as_json(),
        "agreement": agreed / len(judged),
        "threshold": threshold,
        "label_cut": LABEL_CUT,
        "confusion": confusion,
        "target": TARGET,
        "clears": rho.value is not None and rho.value >= TARGET,
        "clears_with_confidence": rho.low is not None and rho.low >= TARGET,
        "unmatched_labels": len(unmatched),
        "judge_errors": judge_errors,
        "unmatched_examples": unmatched[:10],
        "bootstrap": {"resamples": RESAMPLES, "seed": SEED, "confidence": CONFIDENCE},
    }


async def calibrate_campaign(
    store: CampaignStore, campaign_id: str, labels: list[Label], *, source: dict[str, Any]
) -> dict[str, Any]:
    """Calibrates and records the result in the campaign's ledger (`judge_calibrated`).

    Raises:
        NotFound: no such campaign.
        InvalidInput: see `calibrate`.
        Conflict: another process is running the campaign (its ledger has one writer).
    """
    result = calibrate(store.load(campaign_id), labels) | {"labels": source}
    async with await LedgerWriter.open(store.directory(campaign_id), campaign_id) as ledger:
        await ledger.append(JudgeCalibrated(calibration=result))
    return result


#: A verdict the judge never gave: its call was rejected or its answer unreadable. Counted as
#: unmet in the score, but it says nothing of the judge's agreement with people.
_JUDGE_ERROR = float("nan")


def _judge_value(state: CampaignState, trajectory_id: str, requirement: str | None) -> float | None:
    """The judge's value for one label, None when there is none, `_JUDGE_ERROR` when the judge
    failed to give it (per trajectory: failed on any of its requirements)."""
    trajectory = state.trajectories.get(trajectory_id)
    if trajectory is None or trajectory.score is None:
        return None
    details = trajectory.score.get("details") or {}
    if requirement is None:
        return _JUDGE_ERROR if details.get("errors") else float(trajectory.score["score"])
    for verdict in details.get("requirements", []):
        if verdict.get("requirement") == requirement:
            if verdict.get("error"):
                return _JUDGE_ERROR
            return 1.0 if verdict.get("fulfilled") else 0.0
    return None
