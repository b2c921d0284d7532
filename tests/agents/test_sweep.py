"""The concurrency sweep against a provider with a hidden ceiling (the fake OpenAI-compatible
server on loopback refuses with 429 whatever arrives while K requests are open)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.engine.sweep import (
    PLOT_FILE,
    SWEEP_FILE,
    parse_levels,
    plan_sweep,
    plot_series,
    run_sweep,
    sweep_figure,
    sweeps_dir,
)
from mcp_evalserver.server.mcp_app import create_server
from tests.agents.fake_openai import Failure, FakeOpenAI, Reply, call, serving
from tests.agents.helpers import KEY, KEY_ENV, openai_agent, records, spec
from testsupport.servers import call as call_tool
from testsupport.servers import call_error

pytestmark = pytest.mark.anyio

CEILING = 8  # K: never told to the client
# Two below K, two past it. The lowest is 2, not 1: at 1 its 32 trajectories' 96 calls ran one
# at a time (19 s of the provider's time); at 2 they run two at a time, as far under K.
LEVELS = [2, 4, 16, 64]


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def _three_calls(body: dict[str, Any]) -> Reply:
    """Thinks aloud twice (each answered with a nudge), then submits: three calls a trajectory,
    so the provider's time, not the harness's per-trajectory work, dominates."""
    if len(body["messages"]) < 6:
        return Reply(content="thinking")
    return call("submit", answer="16")


def _provider(service_s: float = 0.2) -> FakeOpenAI:
    """The provider with the hidden ceiling. Its default `service_s` is long beside the client's
    own work per call (which grows with the machine's load): past K the server must see the
    client's concurrency, not a fraction of it. Tests whose levels do not depend on where K
    is found take `service_s=0`: each trajectory's three calls cost no wait."""
    return FakeOpenAI(
        [],
        then=_three_calls,
        capacity=CEILING,
        over_capacity=Failure(429, message="Rate limit reached"),
        service_s=service_s,
    )


def _spec(url: str) -> Any:
    tasks = [{"id": f"t{n}", "prompt": "4 squared?", "answer": "16"} for n in range(20)]
    # No retry inside the agent, one attempt by the runner: a refusal loses the trajectory, as
    # retries run out for a provider pushed past its ceiling for long.
    agent = openai_agent(url, retry_attempts=1, answer_from="submit")
    return spec(tasks, agent, samples=4, max_attempts=1)


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


async def test_a_sweep_finds_the_errors_past_the_ceiling_and_recommends_the_level_below_it(
    tmp_path: Path,
) -> None:
    store = CampaignStore(tmp_path)
    with serving(_provider()) as fake, anyio.fail_after(240):
        plan = plan_sweep(store, _spec(fake.url), levels=LEVELS, tasks=16, samples=2, sweep_id="s1")
        result = await run_sweep(store, plan)

    by_level = {row["level"]: row for row in result["levels"]}
    assert list(by_level) == LEVELS
    for level, row in by_level.items():
        assert row["trajectories"] == 32, level
        # The fake refuses with 429 only: any other refusal (a dropped connection) is the
        # harness's, and would also lose trajectories the count below does not allow for.
        assert row["refused"] == row["http_429"], (level, row)
        assert row["requests"] >= 32 * 3 - row["http_429"] * 2, (level, row)
        assert row["throughput_per_min"] > 0
        assert row["latency_p50_s"] <= row["latency_p95_s"]
        assert row["tokens_per_s"] > 0
        assert len(row["load_average"]) == 3  # recorded beside the figures it qualifies
    # At or below K: nothing refused, nothing lost.
    for level in (2, 4):
        assert by_level[level]["http_429"] == 0
        assert by_level[level]["error_rate"] == 0.0
    # Past K: refusals, and trajectories lost to them (infrastructure errors, not task errors).
    for level in (16, 64):
        assert by_level[level]["http_429"] > 0
        assert by_level[level]["infra_error_rate"] > 0.02
        assert by_level[level]["task_error_rate"] == 0.0
        assert by_level[level]["http_5xx"] == 0
    assert by_level[4]["throughput_per_min"] > by_level[2]["throughput_per_min"]
    assert result["recommended"] == 4
    assert result["knee"] == 16
    assert result["reason"].startswith("4 is the highest level before errors climb")
    assert "at 16: error rate" in result["reason"]

    directory = sweeps_dir(store) / "s1"
    assert json.loads((directory / SWEEP_FILE).read_text())["recommended"] == 4
    assert _png_size(directory / PLOT_FILE) == (800, 450)

    # The data behind the PNG: the axes, the series and the knee it draws.
    series = plot_series(result)
    assert series["x"] == LEVELS
    assert series["throughput"] == [by_level[lv]["throughput_per_min"] for lv in LEVELS]
    good = [by_level[lv]["good_throughput_per_min"] for lv in LEVELS]
    assert series["good_throughput"] == good
    # Without errors, throughput is all of it up to K and a part of it past K.
    assert good[:2] == series["throughput"][:2]
    assert all(g < t for g, t in zip(good[2:], series["throughput"][2:], strict=True))
    infra = [100 * by_level[lv]["infra_error_rate"] for lv in LEVELS]
    assert series["rates"]["infrastructure error rate"] == infra
    figure = sweep_figure(result)
    throughput_axis, rate_axis = figure.axes
    assert throughput_axis.get_xlabel().startswith("concurrency")
    assert throughput_axis.get_ylabel() == "throughput (trajectories/min)"
    assert rate_axis.get_ylabel() == "rate (%)"
    drawn = {line.get_label(): list(line.get_ydata()) for line in rate_axis.get_lines()}
    assert drawn["infrastructure error rate"] == infra
    drawn = {line.get_label(): list(line.get_ydata()) for line in throughput_axis.get_lines()}
    assert drawn["throughput without errors"] == good
    verticals = {line.get_label(): line.get_xdata()[0] for line in throughput_axis.get_lines()
                 if line.get_label().startswith(("recommended", "knee"))}  # fmt: skip
    assert verticals == {"recommended: 4": 4, "knee: errors climb at 16": 16}


async def test_running_a_finished_sweep_again_measures_its_campaigns_without_rerunning_them(
    tmp_path: Path,
) -> None:
    store = CampaignStore(tmp_path)
    # Levels 2 and 3 stay under K: what is measured is not under test, only that it is kept.
    with serving(_provider(service_s=0)) as fake, anyio.fail_after(120):
        plan = plan_sweep(store, _spec(fake.url), levels=[2, 3], tasks=4, sweep_id="again")
        first = await run_sweep(store, plan)
        requests = fake.requests
        # The same id resumes the stored plan, whatever else is asked.
        again = plan_sweep(store, _spec(fake.url), levels=[7], tasks=1, sweep_id="again")
        second = await run_sweep(store, again)

    assert again == plan
    assert fake.requests == requests
    for level in ("2", "3"):
        assert len(records(store.directory(plan["campaigns"][level]), "run_started")) == 1
    assert [r["trajectories"] for r in second["levels"]] == [16, 16]
    assert first["levels"] == second["levels"]


def test_the_cli_sweep_command_writes_the_sweep_and_says_what_it_recommends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serving(_provider(service_s=0)) as fake:  # levels 1 and 2 stay under K
        spec_file = tmp_path / "spec.json"
        spec_file.write_text(_spec(fake.url).model_dump_json())
        state = str(tmp_path / "state")
        arguments = ["--levels", "1,2", "--tasks", "2", "--samples", "1", "--id", "cli"]
        code = main(["--state-dir", state, "sweep", str(spec_file), *arguments])

    assert code == 0
    out = capsys.readouterr().out
    assert "recommended concurrency: 2" in out
    assert "| 1 |" in out
    assert (tmp_path / "state" / "sweeps" / "cli" / "sweep.png").is_file()


def test_levels_are_parsed_sorted_and_bad_ones_are_refused() -> None:
    assert parse_levels("50,1,10,10") == [1, 10, 50]
    with pytest.raises(Exception, match="give positive integers"):
        parse_levels("1,ten")
    with pytest.raises(Exception, match="give positive integers"):
        parse_levels("0,4")


async def test_the_sweep_concurrency_tool_runs_in_the_background_and_sweep_status_follows_it(
    tmp_path: Path,
) -> None:
    # Whichever level it recommends is accepted below: where K is found is not under test.
    with serving(_provider(service_s=0)) as fake, anyio.fail_after(120):
        async with Client(create_server(tmp_path)) as client:
            spec_json = _spec(fake.url).model_dump(mode="json")
            started = await call_tool(
                client, "sweep_concurrency", spec=spec_json, levels=[1, 16], tasks=4, sweep_id="m"
            )
            assert started["campaigns"] == {"1": "m-c1", "16": "m-c16"}
            assert started["active"] is True
            status = started
            while not status["finished"]:
                status = await call_tool(client, "sweep_status", sweep_id="m", wait_s=30)
            assert status["error"] is None
            # A level's campaign is an ordinary campaign: campaign_status reads it.
            level = await call_tool(client, "campaign_status", campaign_id="m-c16")
            missing = await call_error(client, "sweep_status", sweep_id="nope")

    assert status["recommended"] in (1, 16)
    assert [row["level"] for row in status["figures"]] == [1, 16]
    assert status["figures"][0]["http_429"] == 0
    assert status["sweep_png"] is not None
    assert Path(status["sweep_png"]).is_file()
    assert level["trajectories"] == 16
    assert "no sweep 'nope'; known: m" in missing
