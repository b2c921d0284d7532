"""The `llm_judge` scorer against a scripted OpenAI-compatible server on loopback.

The server is a real HTTP server (stdlib, one thread per request). Each requirement's text says
how the server answers it: `[yes]`, `[no]`, `[400]` (a rejection), `[500]` (a server that
stays down), `[busy]` (429 with a Retry-After on its first call, then as its other tags say),
`[garbage]` (an unreadable reply), `[together]` (wait at a barrier until `BOUND` requests are
in flight).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.engine.rescoring import request_rescore
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InfrastructureError
from mcp_evalserver.runtime.limits import Limiters
from mcp_evalserver.runtime.sandboxes import TrajectorySandbox
from mcp_evalserver.scoring.base import ScoreResult, ScoringContext
from mcp_evalserver.scoring.factory import build_scorer
from mcp_evalserver.spec.campaign import CampaignSpec, Limits, Task
from mcp_evalserver.spec.scorers import LlmJudgeScorerConfig
from mcp_evalserver.spec.submission import Submission

pytestmark = pytest.mark.anyio

BOUND = 3


class ScriptedJudge:
    """Counts calls per requirement and the most requests in flight at once."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(BOUND, timeout=20)

    def reply(self, body: dict[str, object]) -> tuple[int, dict[str, object]]:
        messages = body["messages"]
        assert isinstance(messages, list)
        user = messages[-1]["content"]
        requirement = user.rsplit("Requirement:\n", 1)[1]
        with self.lock:
            self.calls.append(requirement)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if "[together]" in requirement:
                self.barrier.wait()
            if "[500]" in requirement:
                return 500, {"error": {"message": "scripted failure", "type": "server_error"}}
            if "[400]" in requirement:
                return 400, {"error": {"message": "scripted rejection", "type": "invalid_request"}}
            if "[busy]" in requirement and self.calls.count(requirement) == 1:
                return 429, {"error": {"message": "slow down", "type": "rate_limit"}}
            if "[garbage]" in requirement:
                content = "I would rather not say."
            else:
                verdict = "[yes]" in requirement or "[together]" in requirement
                content = json.dumps({"fulfilled": verdict, "reason": "scripted"})
            return 200, {
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": content},
                    }
                ],
            }
        finally:
            with self.lock:
                self.in_flight -= 1


@pytest.fixture
def judge_server() -> Iterator[tuple[str, ScriptedJudge]]:
    judge = ScriptedJudge()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            status, payload = judge.reply(json.loads(self.rfile.read(length)))
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # A short poll interval: shutdown() waits for the loop to notice it.
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", judge
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def _score(
    base_url: str,
    rubric: list[str],
    campaign_dir: Path,
    answer: str = "42",
    task_rubric: list[str] | None = None,
    **options: object,
) -> ScoreResult:
    config = LlmJudgeScorerConfig.model_validate(
        {
            "model": "judge-1",
            "base_url": base_url,
            "api_key_env": "MCP_EVALSERVER_TEST_NO_SUCH_KEY",
            "rubric": rubric,
            "concurrency": BOUND,
            "retry_base_delay_s": 0.0,
            **options,
        }
    )
    metadata = {"rubric": task_rubric} if task_rubric else {}
    task = Task(id="t", prompt="What is six times seven?", metadata=metadata)
    context = ScoringContext(
        campaign_id="c",
        trajectory_id="t@0",
        task=task,
        submission=Submission(answer=answer),
        campaign_dir=campaign_dir,
        limiters=Limiters(Limits()),
        sandbox=TrajectorySandbox(None, task, "s", anyio.CapacityLimiter(1)),
    )
    with anyio.fail_after(60):
        return await build_scorer(config).score(context)


async def test_each_requirement_is_judged_and_a_failing_call_only_fails_its_own(
    judge_server: tuple[str, ScriptedJudge], tmp_path: Path
) -> None:
    url, judge = judge_server
    rubric = ["states 42 [yes]", "shows work [no]", "is polite [400]", "is brief [garbage]"]
    result = await _score(url, rubric, tmp_path)
    assert not result.resolved
    assert result.score == 0.25
    assert result.outcome == "failed"
    by_text = {r["requirement"]: r for r in result.details["requirements"]}
    assert by_text["states 42 [yes]"]["fulfilled"] is True
    assert by_text["shows work [no]"] | {"reason": ""} == {
        "requirement": "shows work [no]", "fulfilled": False, "reason": "", "error": None,
        "cached": False,
    }  # fmt: skip
    assert "BadRequestError" in by_text["is polite [400]"]["error"]
    assert "unreadable verdict" in by_text["is brief [garbage]"]["error"]
    assert result.details["errors"] == 2
    assert sorted(judge.calls) == sorted(rubric)


async def test_requirements_are_judged_concurrently_under_the_bound(
    judge_server: tuple[str, ScriptedJudge], tmp_path: Path
) -> None:
    url, judge = judge_server
    rubric = [f"requirement {n} [together]" for n in range(2 * BOUND)]
    # The barrier opens only when BOUND calls are in flight at once: were they judged one by
    # one, every call would time out at the barrier and fail.
    result = await _score(url, rubric, tmp_path)
    assert result.resolved, result.details
    assert judge.max_in_flight == BOUND


async def test_rescoring_asks_the_judge_only_what_it_has_not_answered(
    judge_server: tuple[str, ScriptedJudge], tmp_path: Path
) -> None:
    url, judge = judge_server
    rubric = ["states 42 [yes]", "shows work [no]", "is polite [400]"]
    first = await _score(url, rubric, tmp_path)
    again = await _score(url, rubric, tmp_path)
    assert [r["cached"] for r in again.details["requirements"]] == [True, True, False]
    assert first.score == again.score == pytest.approx(1 / 3)
    # The failed call is asked again; the two verdicts are not.
    assert sorted(judge.calls) == sorted([*rubric, "is polite [400]"])
    # Another submission is another question.
    await _score(url, rubric[:1], tmp_path, answer="41")
    assert judge.calls.count("states 42 [yes]") == 2
    cached = list((tmp_path / "artifacts").glob("judge-*.json"))
    assert len(cached) == 3
    assert re.fullmatch(r"judge-[0-9a-f]{64}\.json", cached[0].name)


async def test_a_judge_that_answers_nothing_is_an_infrastructure_error(
    judge_server: tuple[str, ScriptedJudge], tmp_path: Path
) -> None:
    url, _ = judge_server
    with pytest.raises(InfrastructureError, match="answered none of 2"):
        await _score(url, ["a [400]", "b [400]"], tmp_path)


async def test_a_requirement_refused_for_load_is_asked_again_and_its_verdict_counts(
    judge_server: tuple[str, ScriptedJudge], tmp_path: Path
) -> None:
    url, judge = judge_server
    result = await _score(
        url, ["states 42 [yes]", "is brief [busy] [yes]"], tmp_path, threshold=1.0
    )
    # A rate-limited judge must not mark the requirement unmet: that would grade the endpoint's
    # weather, not the submission.
    assert result.resolved, result.details
    assert result.details["errors"] == 0
    assert judge.calls.count("is brief [busy] [yes]") == 2


async def test_an_endpoint_that_stays_down_is_an_infrastructure_error_and_keeps_the_others_verdicts(
    judge_server: tuple[str, ScriptedJudge], tmp_path: Path
) -> None:
    url, judge = judge_server
    rubric = ["states 42 [yes]", "is polite [500]"]
    with pytest.raises(InfrastructureError, match="1 of 2 requirement"):
        await _score(url, rubric, tmp_path, retry_attempts=3)
    assert judge.calls.count("is polite [500]") == 3
    # The verdict that was given is cached: the runner's retry asks only what is missing.
    assert len(list((tmp_path / "artifacts").glob("judge-*.json"))) == 1
    with pytest.raises(InfrastructureError):
        await _score(url, rubric, tmp_path, retry_attempts=1)
    assert judge.calls.count("states 42 [yes]") == 1


async def test_the_task_metadata_rubric_joins_the_configured_one_and_threshold_applies(
    judge_server: tuple[str, ScriptedJudge], tmp_path: Path
) -> None:
    url, _ = judge_server
    result = await _score(
        url, ["a [yes]", "b [yes]"], tmp_path, task_rubric=["c [no]"], threshold=0.6
    )
    assert result.resolved
    assert result.score == pytest.approx(2 / 3)
    assert [r["requirement"] for r in result.details["requirements"]] == [
        "a [yes]", "b [yes]", "c [no]"
    ]  # fmt: skip
    empty = await _score(url, [], tmp_path)
    assert (empty.status, empty.outcome) == ("no_rubric", "error")


async def test_a_rescored_campaign_asks_the_judge_nothing_again(
    judge_server: tuple[str, ScriptedJudge], tmp_path: Path
) -> None:
    url, judge = judge_server
    store = CampaignStore(tmp_path)
    spec = CampaignSpec.model_validate(
        {
            "name": "judged",
            "tasks": [
                {"id": f"t{n}", "prompt": f"{n} squared?", "answer": str(n * n)} for n in (1, 2, 3)
            ],
            "samples": 2,
            "agent": {"type": "oracle"},
            "scorer": {
                "type": "llm_judge",
                "model": "judge-1",
                "base_url": url,
                "api_key_env": "MCP_EVALSERVER_TEST_NO_SUCH_KEY",
                "rubric": ["is correct [yes]", "shows the steps [no]"],
                "threshold": 0.5,
            },
            "limits": {"retry_base_delay_s": 0},
        }
    )
    campaign_id = await store.create(spec)
    with anyio.fail_after(60):
        await CampaignRunner(store, campaign_id).run()
        asked = len(judge.calls)
        assert await request_rescore(store, campaign_id)
        state = await CampaignRunner(store, campaign_id).run()
    assert len(judge.calls) == asked, "every verdict came from the cache"
    assert {t.outcome for t in state.trajectories.values()} == {"resolved"}
    assert all(
        r["cached"]
        for t in state.trajectories.values()
        for r in (t.score or {})["details"]["requirements"]
    )
