"""The dashboard in a real headless Chromium: login, live progress, a trajectory, the report."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from playwright.async_api import Page, Route, expect

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.spec.campaign import CampaignSpec
from mcp_evalserver.spec.submission import Submission
from tests.agents.fake_openai import FakeOpenAI, Reply, serving
from tests.dashboard.helpers import (
    GatedAgent,
    chromium,
    dashboard_server,
    log_in,
    screenshot,
)
from tests.litellm_sockets import litellm_sockets
from tests.root import require_root
from tests.scoring.sandboxed import PYTHON_PYTEST, diff_of, git_repo
from testsupport.repos import BUGGY, FIXED

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TESTS = (
    "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n\n\n"
    "def test_zero():\n    assert add(0, 0) == 0\n"
)
#: What the scripted model has mini-swe-agent run to fix calc.py, and to submit.
MINI_FIX = "sed -i 's/a - b/a + b/' calc.py"
MINI_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
#: What a hostile agent puts in its transcript: markup that must stay text.
HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


def _answers_spec(count: int) -> CampaignSpec:
    tasks = [{"id": f"t{n}", "prompt": f"{n} squared?", "answer": str(n * n)} for n in range(count)]
    return CampaignSpec.model_validate(
        {"name": "live", "tasks": tasks, "agent": {"type": "noop"}, "limits": {"concurrency": 8}}
    )


async def test_a_logged_in_browser_sees_a_running_campaign_advance_without_a_reload(
    tmp_path: Path,
) -> None:
    store = CampaignStore(tmp_path / "state")
    campaign_id = await store.create(_answers_spec(3), "live-campaign")
    agent = GatedAgent({f"t{n}": str(n * n) for n in range(3)})
    runner = CampaignRunner(store, campaign_id, agent=agent)
    with anyio.fail_after(60):
        async with (
            dashboard_server(tmp_path / "state") as base,
            chromium() as browser,
            anyio.create_task_group() as group,
        ):
            group.start_soon(runner.run)
            context = await browser.new_context()
            listing = await context.new_page()
            await log_in(listing, base)
            row = listing.locator(f'tr[data-campaign="{campaign_id}"]')
            await expect(row.locator(".done")).to_have_text("0/3")
            await expect(row.locator(".status")).to_have_text("running")
            # The campaign page too, in a second tab of the same session.
            detail = await context.new_page()
            await detail.goto(f"{base}/campaigns/{campaign_id}")
            await expect(detail.locator("#campaign-done")).to_have_text("0/3")
            navigations: list[str] = []
            for page in (listing, detail):
                # A mark a page keeps only as long as it is not reloaded.
                await page.evaluate("window.notReloaded = true")
                page.on("framenavigated", lambda frame: navigations.append(frame.url))
            await screenshot(listing, "campaigns-0-of-3")
            for done in (1, 2, 3):
                agent.gate(f"t{done - 1}@0").set()
                await expect(row.locator(".done")).to_have_text(f"{done}/3", timeout=20_000)
                await expect(detail.locator("#campaign-done")).to_have_text(
                    f"{done}/3", timeout=20_000
                )
                if done == 1:
                    # Tables and plots follow too, not only the headline.
                    trajectories = detail.locator("#trajectory-table tbody tr")
                    await expect(trajectories.first).to_contain_text("resolved")
                    await expect(detail.locator("svg.plot")).to_have_count(3)
                    await screenshot(detail, "campaign-page-1-of-3")
            await expect(row.locator(".status")).to_have_text("finished", timeout=20_000)
            await expect(detail.locator("#campaign-status")).to_have_text("finished")
            await expect(detail.locator("#pass-rate")).to_have_text("100.0%")
            for page in (listing, detail):
                assert await page.evaluate("window.notReloaded") is True
            assert navigations == []
            await expect(row).to_contain_text("100.0%")
            await screenshot(listing, "campaigns-3-of-3")

            await row.locator("a").click()
            await expect(listing.locator("#pass-rate")).to_have_text("100.0%")
            await expect(listing.locator("svg.plot")).to_have_count(3)
            await screenshot(listing, "campaign-page")


class PatchingAgent(Agent):
    """Hands in the gold patch with a transcript that holds a long output and hostile markup."""

    def __init__(self, patch: str) -> None:
        self.patch = patch

    async def generate(self, context: TrajectoryContext) -> Submission:
        transcript = [
            {"role": "user", "content": context.task.prompt},
            {"role": "assistant", "content": f"Let me look. {HOSTILE}"},
            {"tool": "sandbox_exec", "command": "cat calc.py", "exit_code": 0},
            {"event": "output", "stdout": "x" * 5000 + "END-OF-LONG-OUTPUT"},
            {"role": "assistant", "content": "Fixed the sign in add()."},
        ]
        return Submission(patch=self.patch, transcript=transcript)


@asynccontextmanager
async def _calc_trajectory_page(
    store: CampaignStore, campaign_id: str, agent: Agent | None = None
) -> AsyncIterator[Page]:
    """Runs the campaign (its one task, calc, must resolve; `agent` or the spec's), then opens
    the trajectory's page from the campaign's as a logged-in person would."""
    state = await CampaignRunner(store, campaign_id, agent=agent).run()
    assert state.trajectories["calc@0"].outcome == "resolved"
    async with dashboard_server(store.state_dir) as base, chromium() as browser:
        page = await browser.new_page()
        await log_in(page, base)
        await page.click(f"a[href='/campaigns/{campaign_id}']")
        await page.click("#trajectory-table a")
        await expect(page.locator("h1")).to_have_text("Trajectory calc@0")
        yield page


@pytest.mark.root
async def test_a_trajectory_page_shows_its_transcript_patch_and_marked_test_log(
    tmp_path: Path,
) -> None:
    require_root()
    repo = git_repo(tmp_path / "repo", {"calc.py": BUGGY, "test_calc.py": TESTS})
    gold = diff_of(repo, {"calc.py": FIXED})
    task = {
        "id": "calc",
        "prompt": "add() subtracts; make it add.",
        "path": str(repo),
        "FAIL_TO_PASS": ["test_calc.py::test_add"],
        "PASS_TO_PASS": ["test_calc.py::test_zero"],
        "eval_script": f"{PYTHON_PYTEST} -rA test_calc.py",
    }
    spec = CampaignSpec.model_validate(
        {"name": "patch", "tasks": [task], "agent": {"type": "noop"}, "scorer": {"type": "tests"}}
    )
    store = CampaignStore(tmp_path / "state")
    campaign_id = await store.create(spec, "patch-campaign")
    with anyio.fail_after(120):
        async with _calc_trajectory_page(store, campaign_id, PatchingAgent(gold)) as page:
            await expect(page.locator("#prompt")).to_have_text("add() subtracts; make it add.")
            transcript = page.locator("#transcript")
            await expect(transcript).to_contain_text("Fixed the sign in add().")
            await expect(transcript).to_contain_text(HOSTILE)  # shown as text, never run
            assert await page.evaluate("window.pwned") is None
            # The long output is folded: its end is hidden until the fold is opened.
            await expect(page.get_by_text("END-OF-LONG-OUTPUT")).to_be_hidden()
            await transcript.locator("details.fold > summary").click()
            await expect(page.get_by_text("END-OF-LONG-OUTPUT")).to_be_visible()
            await expect(page.locator("#patch .diff .add")).to_have_text("+    return a + b")
            await expect(page.locator("#patch .diff .del")).to_have_text("-    return a - b")
            tests = page.locator("#tests table")
            await expect(tests).to_contain_text("FAIL_TO_PASS")
            await expect(tests).to_contain_text("test_calc.py::test_add")
            marked = page.locator('#test-log span[data-mark="FAIL_TO_PASS success"]')
            await expect(marked.first).to_contain_text("test_calc.py::test_add")
            passing = page.locator('#test-log span[data-mark="PASS_TO_PASS success"]')
            await expect(passing.first).to_contain_text("test_calc.py::test_zero")
            await page.click("#records summary")
            await expect(page.locator("#records")).to_contain_text('"kind": "scored"')
            await screenshot(page, "trajectory-page")


@pytest.mark.root
@litellm_sockets
async def test_a_mini_swe_agent_trajectory_shows_its_messages_on_the_trajectory_page(
    tmp_path: Path,
) -> None:
    require_root()
    script = [
        Reply(
            content="Let me look at calc.py.", tool_calls=(("bash", {"command": "cat calc.py"}),)
        ),
        Reply(content="It subtracts.", tool_calls=(("bash", {"command": MINI_FIX}),)),
        Reply(content="Fixed.", tool_calls=(("bash", {"command": MINI_SUBMIT}),)),
    ]
    task = {"id": "calc", "prompt": "add() subtracts; make it add.", "path": str(tmp_path / "repo")}
    git_repo(tmp_path / "repo", {"calc.py": BUGGY, "test_calc.py": TESTS})
    store = CampaignStore(tmp_path / "state")
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(120):
        agent = {
            "type": "mini-swe-agent",
            "model": {
                "model_name": "openai/scripted-model",
                "model_kwargs": {"api_base": fake.url, "api_key": "sk-none"},
                "cost_tracking": "ignore_errors",
            },
        }
        check = "python3 -c 'import calc; assert calc.add(2, 2) == 4'"
        spec = CampaignSpec.model_validate(
            {
                "name": "mini",
                "tasks": [task],
                "agent": agent,
                "scorer": {"type": "command", "command": check},
            }
        )
        campaign_id = await store.create(spec, "mini-campaign")
        async with _calc_trajectory_page(store, campaign_id) as page:
            # mini-swe-agent's messages in order: its templates, then each reply with its bash
            # call and the observation of the command, then its exit.
            entries = page.locator("#transcript > details.entry > summary")
            await expect(entries.nth(0)).to_have_text("1. system")
            await expect(entries.nth(1)).to_have_text("2. user")
            await expect(entries.nth(2)).to_have_text("3. assistant")
            await expect(entries.nth(3)).to_have_text("4. tool")
            await expect(entries.last).to_contain_text("event: exit")
            transcript = page.locator("#transcript")
            await expect(transcript).to_contain_text("add() subtracts; make it add.")
            # Its reply reads as every agent's, its text and tool call first; litellm's raw
            # response object (the message's `extra`) is folded after them.
            reply = page.locator("#transcript > details.entry").nth(2)
            await expect(reply.locator(".field .name").first).to_have_text("content")
            await expect(reply.locator(".field pre").first).to_have_text("Let me look at calc.py.")
            await expect(reply.locator(".field .name").nth(1)).to_have_text("tool_calls")
            raw = reply.locator("details.raw")
            await expect(raw.locator("summary")).to_contain_text("extra: the raw object")
            await expect(raw.locator("pre")).to_be_hidden()
            await expect(reply.locator(".field").last.locator("details.raw")).to_have_count(1)
            await raw.locator("summary").click()
            await expect(raw.locator("pre")).to_contain_text('"prompt_tokens"')
            await expect(transcript).to_contain_text('"command": "cat calc.py"')
            # What `cat` printed, as the model was shown it.
            await expect(page.locator("#transcript > details.entry").nth(3)).to_contain_text(
                "return a - b"
            )
            await expect(transcript).to_contain_text("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
            await expect(transcript).to_contain_text('"exit_status": "Submitted"')
            await expect(page.locator("#patch .diff .add")).to_have_text("+    return a + b")
            await screenshot(page, "trajectory-page-mini-swe-agent")


async def test_the_static_report_opens_from_disk_with_the_network_off(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path / "state")
    spec = _answers_spec(4).model_copy(update={"samples": 2})
    campaign_id = await store.create(spec, "static-campaign")
    wrong = {"t0": "0", "t1": "1", "t2": "wrong", "t3": "9"}

    class HalfRight(Agent):
        async def generate(self, context: TrajectoryContext) -> Submission:
            right = context.sample == 0 or context.task.id != "t3"
            return Submission(answer=wrong[context.task.id] if right else "no")

    with anyio.fail_after(60):
        await CampaignRunner(store, campaign_id, agent=HalfRight()).run()
    out = tmp_path / "report.html"
    argv = ["--state-dir", str(store.state_dir), "report", campaign_id, "--format", "html"]
    assert main([*argv, "--out", str(out)]) == 0

    with anyio.fail_after(60):
        async with chromium() as browser:
            context = await browser.new_context(offline=True)
            requests: list[str] = []
            context.on("request", lambda request: requests.append(request.url))

            # Everything but the file itself is refused (and would be listed as failed).
            async def refuse(route: Route) -> None:
                if route.request.url == out.as_uri():
                    await route.continue_()
                else:
                    await route.abort()

            await context.route("**/*", refuse)
            page = await context.new_page()
            failed: list[str] = []
            page.on("requestfailed", lambda request: failed.append(request.url))
            await page.goto(out.as_uri())
            await expect(page.locator("h1")).to_have_text(f"Campaign {campaign_id}")
            await expect(page.locator("#pass-rate")).to_have_text("62.5%")
            await expect(page.locator("svg.plot")).to_have_count(3)
            rows = page.locator("#task-table tbody tr")
            await expect(rows).to_have_count(4)
            await expect(page.locator("#task-table .flag")).to_have_text("flaky")
            # Sorted and filtered in the page: no server behind a file.
            await page.click("#task-table th button[data-key=pass_rate]")
            await expect(rows.first).to_have_attribute("data-task", "t2")
            await page.check("#flaky-only")
            await expect(page.locator("#task-table tbody tr:visible")).to_have_count(1)
            await screenshot(page, "static-report")
            assert requests == [out.as_uri()]
            assert failed == []
    html = out.read_text()
    assert json.dumps(campaign_id)[1:-1] in html
    assert "<link" not in html
    assert " src=" not in html


class AnswersFrom(Agent):
    """Answers from a table: the tasks it gets right are the test's choice."""

    def __init__(self, right: set[str]) -> None:
        self.right = right

    async def generate(self, context: TrajectoryContext) -> Submission:
        task = context.task
        return Submission(answer=task.answer if task.id in self.right else "no")


async def test_two_campaigns_are_compared_side_by_side_with_per_task_wins_and_losses(
    tmp_path: Path,
) -> None:
    store = CampaignStore(tmp_path / "state")
    spec = _answers_spec(4).model_copy(update={"samples": 2})
    with anyio.fail_after(60):
        for campaign_id, right in (("before", {"t0", "t1"}), ("after", {"t0", "t2", "t3"})):
            await store.create(spec, campaign_id)
            await CampaignRunner(store, campaign_id, agent=AnswersFrom(right)).run()
        async with dashboard_server(tmp_path / "state") as base, chromium() as browser:
            page = await browser.new_page()
            await log_in(page, base)
            await page.click("text=compare")
            await page.select_option("select[name=a]", "before")
            await page.select_option("select[name=b]", "after")
            await page.click("button:has-text('compare')")
            await expect(page.locator("#difference")).to_have_text("+25.0 points")
            await expect(page.locator("#difference + .sub")).to_contain_text("CI -50.0 to +100.0")
            rows = page.locator("table tbody tr")
            await expect(rows).to_have_count(4)
            verdicts = {
                await row.locator("td").nth(0).inner_text(): await row.locator("td")
                .nth(3)
                .inner_text()
                for row in await rows.all()
            }
            assert verdicts == {"t0": "tie", "t1": "loss", "t2": "win", "t3": "win"}
            await screenshot(page, "compare")

            # The live task table sorts and filters on the server (it is paged).
            await page.goto(f"{base}/campaigns/after")
            tasks = page.locator("#task-table tbody tr")
            await expect(tasks.first).to_have_attribute("data-task", "t0")
            await page.click("#task-table th a:has-text('pass rate')")
            await expect(page).to_have_url(f"{base}/campaigns/after?sort=pass_rate&dir=asc&page=1")
            await expect(tasks.first).to_have_attribute("data-task", "t1")
            await page.click("#task-table th a:has-text('pass rate')")
            await expect(tasks.last).to_have_attribute("data-task", "t1")
            await page.fill("#task-filter", "t3")
            await page.click("form.filters button")
            await expect(tasks).to_have_count(1)
            await expect(tasks.first).to_have_attribute("data-task", "t3")
