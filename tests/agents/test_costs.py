"""What a campaign's model calls cost, and its budget, against the fake provider on loopback.

The `openai` agent and the `llm_judge` talk to a real HTTP server (the fake) that reports
token usage and, where a reply says so, its own cost (OpenRouter's `usage.cost`); the ledger's
`model_usage` records are checked against what the fake sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.costs import check_budget_prices, price_table
from mcp_evalserver.engine.ledger import LEDGER_FILE, read_ledger
from mcp_evalserver.engine.records import AttemptStarted, ModelUsageRecorded
from mcp_evalserver.engine.replay import replay
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.pricing import PRICES_ENV, PriceTable
from mcp_evalserver.spec.campaign import CampaignSpec
from mcp_evalserver.spec.prices import ModelPrice
from mcp_evalserver.spec.submission import ModelUsage, Submission
from tests.agents.fake_openai import FakeOpenAI, Reply, Responder, Response, serving
from tests.agents.helpers import KEY, KEY_ENV, openai_agent, records, run, spec

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.delenv(PRICES_ENV, raising=False)


def questions(n: int) -> list[dict[str, Any]]:
    return [
        {"id": f"q{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(n)
    ]


def right_answer(
    cost: float | None,
    prompt_tokens: int = 100,
    cached_tokens: int = 0,
    completion_tokens: int = 20,
) -> Responder:
    """A model that answers each question right, each reply reporting `cost`."""

    def reply(body: dict[str, Any]) -> Response:
        number = int(body["messages"][-1]["content"].split()[2])
        return Reply(
            content=str(2 * number),
            cost=cost,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached_tokens,
            completion_tokens=completion_tokens,
        )

    return reply


def cents(dollars: float) -> int:
    return round(dollars * 100)


async def test_the_ledger_total_equals_to_the_cent_what_the_provider_reported(
    tmp_path: Path,
) -> None:
    # Costs that do not add up exactly in binary floating point, over 24 calls.
    fake = FakeOpenAI([], then=right_answer(0.0123457))
    with serving(fake), anyio.fail_after(60):
        state, directory = await run(
            tmp_path / "state", spec(questions(8), openai_agent(fake.url), samples=3)
        )

    assert fake.requests == 24
    usage = records(directory, "model_usage")
    assert len(usage) == 24, "one record per call"
    assert {u["priced_by"] for u in usage} == {"provider"}
    assert cents(state.spend.priced_usd) == cents(fake.reported_cost)
    assert state.spend.priced_usd == pytest.approx(fake.reported_cost, abs=1e-9)
    assert state.spend.input_tokens == fake.reported_tokens["prompt"]
    report = build_report(state)
    assert report["cost"]["cost_usd"] == pytest.approx(fake.reported_cost)
    assert report["cost"]["cost_per_resolved_usd"] == pytest.approx(fake.reported_cost / 24)
    assert report["cost"]["tasks"]["q1"]["cost_usd"] == pytest.approx(3 * 0.0123457)
    trajectory = state.trajectories["q1@2"]
    assert trajectory.spend is not None
    assert trajectory.spend.cost_usd == pytest.approx(0.0123457)
    assert "cost: **$0.2963** (agent $0.2963)" in render_markdown(report)


async def test_tokens_are_priced_by_the_table_with_cached_input_apart(tmp_path: Path) -> None:
    # No provider cost: gpt-4o-mini's shipped price ($0.15 in, $0.075 cached, $0.60 out).
    fake = FakeOpenAI(
        [], then=right_answer(None, prompt_tokens=1000, cached_tokens=400, completion_tokens=50)
    )
    with serving(fake), anyio.fail_after(60):
        state, directory = await run(
            tmp_path / "state", spec(questions(2), openai_agent(fake.url, model="gpt-4o-mini"))
        )

    per_call = (600 * 0.15 + 400 * 0.075 + 50 * 0.60) / 1_000_000
    (first, _) = records(directory, "model_usage")
    assert first["priced_by"] == "table"
    assert (first["input_tokens"], first["cached_input_tokens"]) == (1000, 400)
    assert first["cost_usd"] == pytest.approx(per_call)
    assert state.spend.priced_usd == pytest.approx(2 * per_call)


async def test_a_price_file_overrides_the_table_and_an_unknown_model_costs_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {"scripted-model": {"input": 10.0, "output": 100.0}}}))
    fake = FakeOpenAI([], then=right_answer(None))
    with serving(fake), anyio.fail_after(60):
        # Unknown: no provider cost, no price. Shown as unknown, never as $0.
        unknown, _ = await run(tmp_path / "a", spec(questions(1), openai_agent(fake.url)))
        # The spec's `prices`, a file path: read into the ledger's spec when it is created.
        priced_spec = spec(questions(1), openai_agent(fake.url)).model_copy(
            update={"prices": str(prices)}
        )
        priced, directory = await run(tmp_path / "b", priced_spec.resolved())
        # The same file through the environment.
        monkeypatch.setenv(PRICES_ENV, str(prices))
        from_env, _ = await run(tmp_path / "c", spec(questions(1), openai_agent(fake.url)))

    assert unknown.spend.cost_usd is None
    assert unknown.spend.unpriced == 1
    report = build_report(unknown)
    assert report["cost"]["cost_usd"] is None
    assert "cost: **unknown**" in render_markdown(report)
    expected = (100 * 10.0 + 20 * 100.0) / 1_000_000
    assert priced.spend.cost_usd == pytest.approx(expected)
    assert from_env.spend.cost_usd == pytest.approx(expected)
    created = json.loads((directory / LEDGER_FILE).read_text().splitlines()[0])
    assert created["spec"]["prices"] == {
        "scripted-model": {"input": 10.0, "cached_input": None, "output": 100.0}
    }, "the ledger keeps the prices the campaign ran with"


def test_a_bad_price_file_is_refused_with_what_to_write(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {"m": {"input": -1, "output": 1}}}))
    with pytest.raises(InvalidInput, match=r"models\.m\.input.*per million tokens"):
        CampaignSpec.model_validate({"tasks": questions(1), "prices": str(prices)}).resolved()


def test_model_names_are_found_without_their_provider_prefix_or_date() -> None:
    table = PriceTable.for_campaign({"my-model": ModelPrice(input=1.0, output=2.0)}, environ={})
    assert table.lookup("openrouter/openai/gpt-4o") == table.lookup("gpt-4o")
    assert table.lookup("claude-3-5-haiku-20241022") == table.lookup("claude-3-5-haiku")
    assert table.lookup("MY-MODEL") == ModelPrice(input=1.0, output=2.0)
    assert table.lookup("nobody-knows-me") is None
    priced = table.price(ModelUsage(model="my-model", input_tokens=10, cost_usd=0.5))
    assert (priced.cost_usd, priced.priced_by) == (0.5, "provider"), "the provider's cost wins"


def test_a_budget_needs_a_price_for_every_model_the_spec_names() -> None:
    budgeted = spec(questions(1), openai_agent("http://127.0.0.1:9/v1"), budget_usd=1.0)
    with pytest.raises(InvalidInput, match="scripted-model has none"):
        check_budget_prices(budgeted, price_table(budgeted))
    priced = budgeted.model_copy(
        update={"prices": {"scripted-model": ModelPrice(input=1, output=1)}}
    )
    check_budget_prices(priced, price_table(priced))
    unbudgeted = spec(questions(1), openai_agent("http://127.0.0.1:9/v1"))
    check_budget_prices(unbudgeted, price_table(unbudgeted))
    with pytest.raises(InvalidInput, match="scripted-model has none"):
        check_budget_prices(unbudgeted, price_table(unbudgeted), budget_usd=5.0)  # a resume's


async def test_the_judge_calls_are_counted_apart_from_the_agent(tmp_path: Path) -> None:
    def answer_or_verdict(body: dict[str, Any]) -> Response:
        if body["model"] == "judge-model":
            return Reply(content='{"fulfilled": true, "reason": "ok"}', cost=0.002)
        return agent_reply(body)

    agent_reply = right_answer(0.01)

    judge = {"type": "llm_judge", "model": "judge-model", "rubric": ["is right"]}
    fake = FakeOpenAI([], then=answer_or_verdict)
    with serving(fake), anyio.fail_after(60):
        campaign = spec(questions(3), openai_agent(fake.url), scorer=judge)
        campaign.scorer.base_url = fake.url  # type: ignore[union-attr]
        campaign.scorer.api_key_env = KEY_ENV  # type: ignore[union-attr]
        state, _ = await run(tmp_path / "state", campaign)

    assert {t.outcome for t in state.trajectories.values()} == {"resolved"}
    assert state.spend.by_source == {
        "agent": pytest.approx(0.03),
        "judge": pytest.approx(0.006),
    }
    assert cents(state.spend.priced_usd) == cents(fake.reported_cost)


def spent_at(found: list[Any], budget: float) -> int | None:
    total = 0.0
    for record in found:
        if isinstance(record, ModelUsageRecorded):
            total += record.cost_usd or 0.0
            if total >= budget:
                return int(record.seq)
    return None


async def test_the_budget_stops_new_trajectories_and_a_larger_one_finishes_the_campaign(
    tmp_path: Path,
) -> None:
    # 12 questions, two at a time, a cent per call: the budget of 4.5 cents is spent at the
    # fifth call. Latency makes the calls overlap, so some are in flight when it is.
    fake = FakeOpenAI([], then=right_answer(0.01), service_s=0.05)
    store = CampaignStore(tmp_path / "state")
    with serving(fake), anyio.fail_after(120):
        campaign = spec(questions(12), openai_agent(fake.url), concurrency=2, budget_usd=0.045)
        campaign_id = await store.create(
            campaign.model_copy(
                update={"prices": {"scripted-model": ModelPrice(input=0, output=0)}}
            )
        )
        first = await CampaignRunner(store, campaign_id).run()
        directory = store.directory(campaign_id)
        found = read_ledger(directory / LEDGER_FILE).records

        spent = spent_at(found, 0.045)
        assert spent is not None
        starts = [r.seq for r in found if isinstance(r, AttemptStarted)]
        assert max(starts, default=spent) < spent, "no trajectory starts once the budget is spent"
        stopped = first.budget_exhausted
        assert first.status == "finished"
        assert len(stopped) >= 12 - 6
        assert first.count("resolved") + len(stopped) == 12
        in_flight = [t for t in stopped if first.trajectories[t].attempts]
        assert in_flight, "a generation in flight when the budget was spent ends there too"
        assert first.over_budget
        assert first.spend.priced_usd >= 0.045
        report = build_report(first)
        assert report["outcomes"]["budget_exhausted"] == len(stopped)
        assert report["pass_rate"] == 1.0, "stopped trajectories are not graded"
        assert report["summary"]["attempts"] == first.count("resolved")
        assert report["cost"]["budget"]["trajectories_stopped"] == len(stopped)
        assert "stopped at the budget" in render_markdown(report)
        assert "resume with a larger budget_usd" in first.describe_status()

        with pytest.raises(InvalidInput, match="not more than"):
            await CampaignRunner(store, campaign_id, budget_usd=0.01).run()
        finished = await CampaignRunner(store, campaign_id, budget_usd=1.0).run()

    assert finished.status == "finished"
    assert finished.count("resolved") == 12
    assert finished.budget_usd == 1.0
    assert not finished.budget_exhausted
    generated = records(directory, "generated")
    assert sorted(g["trajectory"] for g in generated) == sorted(finished.trajectories), (
        "every trajectory generated exactly once: nothing ran twice"
    )
    # Every call is in the ledger, paid ones of stopped attempts included.
    assert len(records(directory, "model_usage")) == fake.requests
    assert cents(finished.spend.priced_usd) == cents(fake.reported_cost)
    # The ledger alone gives the same: a crash at any point resumes from exactly this.
    again = replay(read_ledger(directory / LEDGER_FILE).records)
    assert again.spend == finished.spend
    assert again.budget_usd == finished.budget_usd
    assert {t.id: t.spend for t in again.trajectories.values()} == {
        t.id: t.spend for t in finished.trajectories.values()
    }
    (budget_set,) = records(directory, "budget_set")
    assert budget_set["budget_usd"] == 1.0
    assert sorted(budget_set["trajectories"]) == sorted(stopped)


class Paying(Agent):
    """Answers right after one model call its provider says cost $0.25 (a `python` agent).

    With a `control_dir` holding `block-<trajectory>`, once that call is recorded it says
    `paid <trajectory>` on the FIFO `events` there and hangs (for a test to kill it).
    """

    def __init__(self, control_dir: str | None = None) -> None:
        self.control_dir = Path(control_dir) if control_dir else None

    async def generate(self, context: TrajectoryContext) -> Submission:
        assert context.meter is not None
        usage = ModelUsage(model="m", input_tokens=1000, output_tokens=50, cost_usd=0.25)
        await context.meter(usage, "agent")
        control = self.control_dir
        if control is not None and (control / f"block-{context.trajectory_id}").exists():
            event = f"paid {context.trajectory_id}\n"
            await anyio.to_thread.run_sync((control / "events").write_text, event)
            await anyio.sleep_forever()
        return Submission(answer=context.task.answer)


def paying(options: dict[str, Any]) -> Agent:
    return Paying(options.get("control_dir"))


def test_the_command_line_resumes_a_campaign_its_budget_stopped_only_with_a_larger_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(
        json.dumps(
            {
                "tasks": questions(3),
                "agent": {"type": "python", "factory": "tests.agents.test_costs:paying"},
                "limits": {"concurrency": 1, "budget_usd": 0.3},
            }
        )
    )
    state = str(tmp_path / "state")
    assert main(["--state-dir", state, "run", str(spec_file), "--id", "p", "--no-progress"]) == 0
    assert "budget: $0.5000 spent of $0.30" in capsys.readouterr().out
    assert main(["--state-dir", state, "resume", "p", "--no-progress"]) == 2
    assert "give --budget-usd larger than that" in capsys.readouterr().err
    resumed = ["--state-dir", state, "resume", "p", "--budget-usd", "2", "--no-progress"]
    assert main(resumed) == 0
    finished = CampaignStore(Path(state)).load("p")
    assert finished.count("resolved") == 3
    assert finished.spend.priced_usd == 0.75


def cli(state_dir: Path, *arguments: str) -> subprocess.Popen[bytes]:
    """The real command line in a process of its own."""
    environment = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    command = [sys.executable, "-m", "mcp_evalserver.cli", "--state-dir", str(state_dir)]
    return subprocess.Popen(
        [*command, *arguments], env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


@pytest.mark.slow
async def test_a_run_killed_after_a_paid_call_resumes_with_every_cent_counted(
    tmp_path: Path,
) -> None:
    control = tmp_path / "control"
    control.mkdir()
    os.mkfifo(control / "events")
    (control / "block-q2@0").touch()
    options = {"control_dir": str(control)}
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(
        json.dumps(
            {
                "tasks": questions(6),
                "agent": {
                    "type": "python",
                    "factory": "tests.agents.test_costs:paying",
                    "options": options,
                },
                "limits": {"concurrency": 1, "budget_usd": 1.0},
            }
        )
    )
    state_dir = tmp_path / "state"
    process = cli(state_dir, "run", str(spec_file), "--id", "k", "--no-progress")
    try:
        with anyio.fail_after(60):
            # Blocks until the agent has written it: no polling.
            line = await anyio.to_thread.run_sync((control / "events").read_text)
        assert line == "paid q2@0\n"
    finally:
        process.kill()
        process.communicate(timeout=30)
    killed = CampaignStore(state_dir).load("k")
    # q2's call was paid, and its record durable before the agent went on.
    assert killed.spend.priced_usd == 0.75
    assert killed.trajectories["q2@0"].phase == "generating"

    (control / "block-q2@0").unlink()
    resumed = cli(state_dir, "resume", "k", "--no-progress")
    with anyio.fail_after(120):
        _, err = await anyio.to_thread.run_sync(resumed.communicate)
    assert resumed.returncode == 0, err.decode()
    directory = state_dir / "campaigns" / "k"
    found = read_ledger(directory / LEDGER_FILE).records
    state = replay(found)
    # q2 paid twice (killed, then again): $1.00 reached at its second call; nothing after.
    assert state.spend.priced_usd == 1.0
    spent = spent_at(found, 1.0)
    assert spent is not None
    assert max(r.seq for r in found if isinstance(r, AttemptStarted)) < spent
    assert [t.outcome for t in state.trajectories.values()] == [
        "resolved", "resolved", "resolved", "budget_exhausted", "budget_exhausted",
        "budget_exhausted",
    ]  # fmt: skip
    generated = [g["trajectory"] for g in records(directory, "generated")]
    assert generated == ["q0@0", "q1@0", "q2@0"], "what was generated is never generated again"
