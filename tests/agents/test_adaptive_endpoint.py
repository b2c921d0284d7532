"""`limits.per_endpoint: "auto"` against a provider with a hidden ceiling: the fake
OpenAI-compatible server on loopback refuses (429) every request that arrives while K others are
open. The campaign must lose nothing to rate limits and settle near K, recording every change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.records import LedgerRecord
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.engine.runner import CampaignRunner, resumed_endpoints
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.limits import Limiters
from mcp_evalserver.server.mcp_app import create_server
from mcp_evalserver.spec.campaign import parse_spec
from tests.agents.fake_openai import Failure, FakeOpenAI, call, serving
from tests.agents.helpers import KEY, KEY_ENV, openai_agent, records, spec
from testsupport.servers import call as call_tool

pytestmark = pytest.mark.anyio

CEILING = 8  # K: the test's client is never told
TASKS = [{"id": f"t{n}", "prompt": "4 squared?", "answer": "16"} for n in range(120)]


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def _provider(headers: dict[str, str]) -> FakeOpenAI:
    return FakeOpenAI(
        [],
        then=call("submit", answer="16"),
        capacity=CEILING,
        over_capacity=Failure(429, headers, message="Rate limit reached"),
        # Long beside the client's own work per call (which grows with the machine's load), as
        # a model's answer is: the server then sees the client's concurrency, not a fraction.
        service_s=0.5,
    )


def _campaign(url: str, tasks: list[dict[str, Any]] = TASKS) -> Any:
    agent = openai_agent(url, retry_attempts=30, retry_base_delay_s=0.005, retry_max_delay_s=0.05)
    return spec(tasks, agent, concurrency=32, per_endpoint={"mode": "auto", "max": 64})


@pytest.mark.parametrize(
    "headers", [{"retry-after-ms": "30"}, {}], ids=["with-retry-after", "without-retry-after"]
)
async def test_an_auto_limit_loses_no_trajectory_to_429s_and_settles_near_the_hidden_ceiling(
    tmp_path: Path, headers: dict[str, str]
) -> None:
    store = CampaignStore(tmp_path)
    with serving(_provider(headers)) as fake, anyio.fail_after(120):
        campaign_id = await store.create(_campaign(fake.url))
        state = await CampaignRunner(store, campaign_id).run()

    # Nothing lost: every trajectory resolved, no generation ever failed.
    failed = records(store.directory(campaign_id), "generation_failed")
    assert {t.outcome for t in state.trajectories.values()} == {"resolved"}, failed[:3]
    assert failed == []
    # The ceiling was really met (and refused), then held: never more than K accepted at once.
    assert fake.refused > 0
    assert fake.max_accepted == CEILING
    # Settled within ±25% of K, after finding it from below (slow start) and backing off.
    limit = state.endpoint_limits[fake.url]
    assert 0.75 * CEILING <= limit.limit <= 1.25 * CEILING, limit.history
    assert limit.decreases >= 1
    reasons = {change["reason"] for change in limit.history}
    assert "HTTP 429" in reasons
    assert {"slow start", "increase"} <= reasons
    # Every change is a ledger record, and the replayed state is the live one.
    recorded = records(store.directory(campaign_id), "endpoint_limit")
    assert [r["limit"] for r in recorded] == [c["limit"] for c in limit.history]
    if headers:
        assert {r["retry_after_s"] for r in recorded if r["reason"] == "HTTP 429"} == {0.03}
    assert store.load(campaign_id).endpoint_limits[fake.url] == limit

    report = build_report(state)
    assert report["endpoint_limits"][fake.url]["limit"] == limit.limit
    assert f"adaptive limit for {fake.url}: **{limit.limit}** calls" in render_markdown(report)
    # campaign_status says the limit now; the HTML report plots its history and names its range.
    async with Client(create_server(tmp_path)) as client:
        status = await call_tool(client, "campaign_status", campaign_id=campaign_id)
    assert status["endpoint_limits"] == {fake.url: limit.limit}
    page = tmp_path / "report.html"
    arguments = ["report", campaign_id, "--format", "html", "--out", str(page)]
    assert await anyio.to_thread.run_sync(main, ["--state-dir", str(tmp_path), *arguments]) == 0
    html = page.read_text()
    assert "<figcaption>Adaptive concurrency</figcaption>" in html
    assert "adaptive concurrency limit" in html  # the plot's own title
    lowest = min(change["limit"] for change in limit.history)
    highest = max(change["limit"] for change in limit.history)
    assert f"limit {limit.limit} now (between {lowest} and {highest})" in html


async def test_a_resumed_campaign_starts_from_its_last_recorded_limit(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    runner: CampaignRunner | None = None

    def stop_once_settled(state: CampaignState, record: LedgerRecord) -> None:
        limits = state.endpoint_limits
        if (
            runner is not None
            and state.done_count >= 40
            and any(e.decreases for e in limits.values())
        ):
            runner.cancel()

    with serving(_provider({})) as fake, anyio.fail_after(120):
        campaign_id = await store.create(_campaign(fake.url))
        runner = CampaignRunner(store, campaign_id, on_record=stop_once_settled)
        first = await runner.run()
        assert first.status == "cancelled"
        left_at = store.load(campaign_id).endpoint_limits[fake.url].limit
        # What a resumed run's limiter starts from: the replayed ledger's last limit.
        limiters = Limiters(first.spec.limits, resumed_endpoints=resumed_endpoints(first))
        assert limiters.endpoint(fake.url).limit == left_at

        second = await CampaignRunner(store, campaign_id).run()

    assert second.status == "finished"
    assert {t.outcome for t in second.trajectories.values()} == {"resolved"}
    ledger = records(store.directory(campaign_id), "run_started")
    resumed_at = ledger[1]["seq"]
    later = [r for r in records(store.directory(campaign_id), "endpoint_limit")
             if r["seq"] > resumed_at]  # fmt: skip
    # The first change of the second run starts from where the first run left the limit, and
    # grows carefully (it had met the ceiling): no slow start again.
    assert later[0]["previous"] == left_at
    assert "slow start" not in {r["reason"] for r in later}


def test_a_fixed_limit_stays_a_number_and_auto_bounds_are_checked() -> None:
    tasks = [{"id": "a"}]
    assert parse_spec({"tasks": tasks, "limits": {"per_endpoint": 3}}).limits.per_endpoint == 3
    auto = parse_spec({"tasks": tasks, "limits": {"per_endpoint": "auto"}}).limits.per_endpoint
    assert auto.model_dump() == {"mode": "auto", "min": 1, "max": 256, "start": None}  # type: ignore[union-attr]
    with pytest.raises(InvalidInput, match=r"min \(9\) is above max \(4\)"):
        parse_spec(
            {"tasks": tasks, "limits": {"per_endpoint": {"mode": "auto", "min": 9, "max": 4}}}
        )
    with pytest.raises(InvalidInput, match="per_endpoint"):
        parse_spec({"tasks": tasks, "limits": {"per_endpoint": "fast"}})
