"""An evaluation set's page in a real headless Chromium: the leaderboard, sorted in the page,
each agent linked to its campaign's page, and the pairs (issue 42)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from playwright.async_api import expect

from mcp_evalserver.agents.base import Agent
from mcp_evalserver.engine.eval_sets import EvalSetStore, run_set
from mcp_evalserver.engine.store import CampaignStore
from tests.dashboard.helpers import chromium, dashboard_server, log_in, screenshot
from tests.dashboard.test_browser import AnswersFrom

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def answers_from(options: dict[str, Any]) -> Agent:
    return AnswersFrom(set(options["right"]))


def _agent(right: list[str]) -> dict[str, Any]:
    factory = "tests.dashboard.test_set_page:answers_from"
    return {"type": "python", "factory": factory, "options": {"right": right}}


async def test_a_set_page_ranks_its_agents_sorts_in_the_page_and_links_each_campaign(
    tmp_path: Path,
) -> None:
    sets = EvalSetStore(CampaignStore(tmp_path / "state"))
    spec = {
        "name": "trio",
        "tasks": [
            {"id": f"t{n}", "prompt": f"{n} squared?", "answer": str(n * n)} for n in range(4)
        ],
        "samples": 2,
        "agents": {
            "half": _agent(["t0", "t1"]),
            "all": _agent(["t0", "t1", "t2", "t3"]),
            "none": _agent([]),
        },
        "scorer": {"type": "exact"},
    }
    with anyio.fail_after(120):
        evalset = await sets.create(spec, None, "trio")
        await run_set(sets, evalset)
        async with dashboard_server(tmp_path / "state") as base, chromium() as browser:
            page = await browser.new_page()
            await log_in(page, base)
            await page.click("#sets a:has-text('trio')")
            await page.wait_for_url(f"{base}/sets/trio")
            rows = page.locator("#leaderboard tbody tr")
            await expect(rows).to_have_count(3)
            order = [await row.get_attribute("data-agent") for row in await rows.all()]
            assert order == ["all", "half", "none"], "best mean pass rate first"
            await expect(rows.first.locator("td").nth(1)).to_have_text("100.0%")
            await expect(page.locator("#pairs tbody tr")).to_have_count(3)

            await page.click("#leaderboard th button:has-text('mean pass rate')")
            await expect(rows.first).to_have_attribute("data-agent", "none")
            await page.click("#leaderboard th button:has-text('mean pass rate')")
            await expect(rows.first).to_have_attribute("data-agent", "all")
            await page.click("#leaderboard th button:has-text('agent')")
            await expect(rows.first).to_have_attribute("data-agent", "all")
            await expect(rows.last).to_have_attribute("data-agent", "none")
            await screenshot(page, "set")

            await page.click("#leaderboard a:has-text('trio.half')")
            await page.wait_for_url(f"{base}/campaigns/trio.half")
            await expect(page.locator("h1")).to_contain_text("trio.half")

            await page.goto(f"{base}/sets/nope")
            await expect(page.locator("body")).to_contain_text("no evaluation set 'nope'")
