"""Judge calibration: rank correlations equal scipy's, and `calibrate` over a real campaign whose
`llm_judge` is the fake OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp import Client
from scipy import stats  # type: ignore[import-untyped]

from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.stats.agreement import (
    average_ranks,
    bootstrap_correlation,
    kendall_tau_b,
    spearman,
)
from mcp_evalserver.server.mcp_app import create_server
from mcp_evalserver.spec.campaign import CampaignSpec
from tests.agents.fake_openai import Failure, FakeOpenAI, Reply, Response, serving
from tests.agents.helpers import KEY, KEY_ENV, records
from testsupport.servers import call, call_error

pytestmark = pytest.mark.anyio

# Fixed data with ties on both sides (judge shares in quarters, human grades 0..1).
JUDGE = [0.0, 0.25, 0.25, 0.5, 0.75, 0.75, 1.0, 1.0, 0.5, 0.0, 1.0, 0.25]
HUMAN = [0.0, 0.0, 0.5, 0.5, 1.0, 0.5, 1.0, 1.0, 0.0, 0.5, 0.5, 0.0]


def test_spearman_and_kendall_equal_scipys_on_fixed_data_with_and_without_ties() -> None:
    cases = [
        (JUDGE, HUMAN),
        ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2.0, 1.0, 4.0, 3.0, 6.0, 5.0]),
        ([3.1, 1.2, 8.5, 2.2, 7.0, 4.4, 5.9], [10.0, 3.0, 2.0, 6.0, 9.0, 4.0, 1.0]),
    ]
    for x, y in cases:
        assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
        assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
    # Hand-checked: adjacent swaps of 6 items: 3 discordant of 15 pairs; d² = 6 * 1.
    assert kendall_tau_b(cases[1][0], cases[1][1]) == pytest.approx((12 - 3) / 15)
    assert spearman(cases[1][0], cases[1][1]) == pytest.approx(1 - 6 * 6 / (6 * 35))
    assert average_ranks([10.0, 20.0, 20.0, 5.0]) == [2.0, 3.5, 3.5, 1.0]


def test_a_list_without_spread_has_no_correlation_and_bootstraps_are_reproducible() -> None:
    assert spearman([1.0, 1.0, 1.0], [0.0, 1.0, 0.5]) is None
    assert kendall_tau_b([1.0, 1.0, 1.0], [0.0, 1.0, 0.5]) is None
    first = bootstrap_correlation(spearman, JUDGE, HUMAN, resamples=500, seed=3)
    again = bootstrap_correlation(spearman, JUDGE, HUMAN, resamples=500, seed=3)
    assert first == again
    assert first.low is not None
    assert first.high is not None
    assert first.low <= (first.value or 0) <= first.high
    assert 0 < first.resamples_used <= 500
    with pytest.raises(InvalidInput, match="at least 3 labelled pairs"):
        bootstrap_correlation(spearman, [0.0, 1.0], [1.0, 0.0])


RUBRIC = ["mentions alpha", "mentions beta", "mentions gamma", "mentions delta"]
# Each task's gold answer (what the oracle submits) names some of the rubric's words.
ANSWERS = ["alpha", "alpha beta", "beta gamma delta", "", "alpha beta gamma delta", "gamma",
           "delta alpha", "beta"]  # fmt: skip


def _judge(body: dict[str, Any]) -> Reply:
    """A judge that reads the requirement's word in the submission."""
    user = body["messages"][-1]["content"]
    submission = user.split("Submission:\n", 1)[1].split("\n\nRequirement:", 1)[0]
    word = re.search(r"mentions (\w+)", user.rsplit("Requirement:", 1)[1])
    assert word is not None
    found = word.group(1) in submission.split()
    return Reply(content=json.dumps({"fulfilled": found, "reason": "looked for the word"}))


async def _judged_campaign(tmp_path: Path, url: str) -> tuple[CampaignStore, str]:
    tasks = [
        {"id": f"t{n}", "prompt": "name some Greek letters", "answer": answer or "none"}
        for n, answer in enumerate(ANSWERS)
    ]
    spec = CampaignSpec.model_validate(
        {
            "name": "judged",
            "tasks": tasks,
            "agent": {"type": "oracle"},
            "scorer": {"type": "llm_judge", "model": "judge", "base_url": url,
                       "api_key_env": KEY_ENV, "rubric": RUBRIC, "threshold": 0.5},
        }
    )  # fmt: skip
    store = CampaignStore(tmp_path)
    campaign_id = await store.create(spec, "judged")
    state = await CampaignRunner(store, campaign_id).run()
    assert state.status == "finished"
    return store, campaign_id


async def test_calibrate_compares_the_judge_with_labels_and_the_report_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    with serving(FakeOpenAI([], then=_judge)) as fake, anyio.fail_after(60):
        store, campaign_id = await _judged_campaign(tmp_path, fake.url)
    state = store.load(campaign_id)
    judge = [state.trajectories[f"t{n}@0"].score["score"] for n in range(len(ANSWERS))]  # type: ignore[index]
    assert judge == [0.25, 0.5, 0.75, 0.0, 1.0, 0.25, 0.5, 0.25]
    # People graded the same submissions; they disagree with the judge on two of them.
    human = [0.0, 0.5, 1.0, 0.0, 1.0, 0.5, 0.0, 0.25]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"trajectory": f"t{n}@0", "label": label}) + "\n"
                              for n, label in enumerate(human)))  # fmt: skip

    arguments = ["calibrate", campaign_id, "--labels", str(labels), "--format", "json"]
    # The CLI runs its own event loop: in a thread of its own, as from a shell.
    code = await anyio.to_thread.run_sync(main, ["--state-dir", str(tmp_path), *arguments])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["unit"] == "trajectory"
    assert result["pairs"] == 8
    assert result["spearman"]["value"] == pytest.approx(stats.spearmanr(judge, human).statistic)
    assert result["kendall"]["value"] == pytest.approx(stats.kendalltau(judge, human).statistic)
    assert result["spearman"]["low"] <= result["spearman"]["value"] <= result["spearman"]["high"]
    # Judge resolves at >= 0.5 (the scorer's threshold), people at >= 0.5.
    assert result["confusion"] == {
        "true_positive": 3, "false_positive": 1, "true_negative": 3, "false_negative": 1,
    }  # fmt: skip
    assert result["agreement"] == pytest.approx(6 / 8)
    assert result["clears"] is (result["spearman"]["value"] >= 0.8)
    assert result["labels"]["rows"] == 8

    (recorded,) = records(store.directory(campaign_id), "judge_calibrated")
    assert recorded["calibration"]["spearman"] == result["spearman"]
    report = build_report(store.load(campaign_id))
    assert report["judge_calibration"]["pairs"] == 8
    line = next(x for x in render_markdown(report).splitlines() if "judge calibration" in x)
    assert f"spearman {result['spearman']['value']:.2f}" in line
    assert "clears 0.80: **" in line
    html = tmp_path / "report.html"
    arguments = ["report", campaign_id, "--format", "html", "--out", str(html)]
    assert await anyio.to_thread.run_sync(main, ["--state-dir", str(tmp_path), *arguments]) == 0
    page = html.read_text()
    assert 'id="judge-calibration"' in page
    assert f"ρ {result['spearman']['value']:.2f}" in page


async def test_per_requirement_labels_go_through_the_mcp_tool_and_bad_labels_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    with serving(FakeOpenAI([], then=_judge)) as fake, anyio.fail_after(60):
        _, campaign_id = await _judged_campaign(tmp_path, fake.url)
    # People agree with the judge on every requirement: a perfect calibration.
    labels = [
        {"trajectory": f"t{n}@0", "requirement": requirement,
         "label": requirement.split()[-1] in answer.split()}
        for n, answer in enumerate(ANSWERS) for requirement in RUBRIC
    ]  # fmt: skip
    async with Client(create_server(tmp_path)) as client:
        result = await call(client, "calibrate_judge", campaign_id=campaign_id, labels=labels)
        bad = await call_error(
            client, "calibrate_judge", campaign_id=campaign_id,
            labels=[{"trajectory": "t0@0", "label": 2}],
        )  # fmt: skip
        mixed = await call_error(
            client, "calibrate_judge", campaign_id=campaign_id,
            labels=[labels[0], {"trajectory": "t0@0", "label": 1}],
        )  # fmt: skip

    assert result["unit"] == "requirement"
    assert result["pairs"] == 32
    assert result["spearman"]["value"] == pytest.approx(1.0)
    assert result["kendall"]["value"] == pytest.approx(1.0)
    assert result["agreement"] == 1.0
    assert result["clears"] is True
    assert result["clears_with_confidence"] is True
    assert "`label` must be true/false or a number in [0, 1]" in bad
    assert "labels mix per-trajectory and per-requirement rows" in mixed


async def test_a_verdict_the_judge_failed_to_give_is_left_out_of_the_calibration_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def rejecting(body: dict[str, Any]) -> Response:
        # The endpoint rejects one question outright: that requirement counts as unmet in the
        # score, but it is no evidence that the judge agrees with people, or disagrees.
        user = body["messages"][-1]["content"]
        if "Submission:\nbeta gamma delta\n" in user and user.endswith("mentions delta"):
            return Failure(400, message="content policy")
        return _judge(body)

    monkeypatch.setenv(KEY_ENV, KEY)
    with serving(FakeOpenAI([], then=rejecting)) as fake, anyio.fail_after(60):
        store, campaign_id = await _judged_campaign(tmp_path, fake.url)
    t2 = store.load(campaign_id).trajectories["t2@0"].score
    assert t2 is not None
    assert t2["score"] == 0.5
    assert t2["details"]["errors"] == 1
    # People agree with what the judge would have said, everywhere.
    per_requirement = [
        {"trajectory": f"t{n}@0", "requirement": requirement,
         "label": requirement.split()[-1] in answer.split()}
        for n, answer in enumerate(ANSWERS) for requirement in RUBRIC
    ]  # fmt: skip
    per_trajectory = [
        {"trajectory": f"t{n}@0",
         "label": sum(r.split()[-1] in answer.split() for r in RUBRIC) / len(RUBRIC)}
        for n, answer in enumerate(ANSWERS)
    ]  # fmt: skip
    async with Client(create_server(tmp_path)) as client:
        by_requirement = await call(
            client, "calibrate_judge", campaign_id=campaign_id, labels=per_requirement
        )
        by_trajectory = await call(
            client, "calibrate_judge", campaign_id=campaign_id, labels=per_trajectory
        )
    assert (by_requirement["pairs"], by_requirement["judge_errors"]) == (31, 1)
    assert by_requirement["spearman"]["value"] == pytest.approx(1.0)
    assert by_requirement["agreement"] == 1.0
    assert (by_trajectory["pairs"], by_trajectory["judge_errors"]) == (7, 1)
    assert by_trajectory["spearman"]["value"] == pytest.approx(1.0)


async def test_calibrating_a_campaign_without_a_judge_says_what_it_needs(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    spec = CampaignSpec.model_validate({"tasks": [{"id": "a", "answer": "1"}]})
    campaign_id = await store.create(spec, "plain")
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"a@0": 1, "a@1": 0, "a@2": 1}))
    arguments = ["--state-dir", str(tmp_path), "calibrate", campaign_id, "--labels", str(labels)]
    code = await anyio.to_thread.run_sync(main, arguments)
    assert code == 2
    assert records(store.directory(campaign_id), "judge_calibrated") == []
