"""The openai agent against a scripted OpenAI-compatible server on loopback, via the real client.

These tasks are answer-only (no environment): by default the model's first reply is its answer
(no tools offered); with `answer_from: "submit"` it gets only `submit`. Repository tasks, where
it works in a real workspace, are in test_openai_agent_repo.py.
"""

from __future__ import annotations

import email.utils
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.agents.factory import build_agent
from mcp_evalserver.agents.openai_agent import (
    ATTEMPT_HEADER,
    IDEMPOTENCY_HEADER,
)
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.errors import LimitExceeded
from mcp_evalserver.runtime.endpoint_calls import retry_after_seconds
from mcp_evalserver.runtime.limits import Limiters
from mcp_evalserver.runtime.sandboxes import TrajectorySandbox
from mcp_evalserver.spec.agents import OpenAIAgentConfig
from mcp_evalserver.spec.campaign import Limits, Task
from mcp_evalserver.spec.submission import Submission
from tests.agents.fake_openai import Failure, FakeOpenAI, Reply, call, serving
from tests.agents.helpers import KEY, KEY_ENV, artifact_text, openai_agent, records, run, spec

pytestmark = pytest.mark.anyio

TASK = {"id": "t4", "prompt": "What is 4 squared?", "answer": "16"}


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


async def test_a_model_that_submits_the_right_answer_resolves_the_task_and_is_recorded(
    tmp_path: Path,
) -> None:
    script = [Reply(content="Let me think.", prompt_tokens=50, completion_tokens=7)]
    script.append(call("submit", answer=" 16 "))
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(30):
        agent = openai_agent(
            fake.url, seed=7, temperature=0.0, max_output_tokens=256, answer_from="submit"
        )
        state, directory = await run(tmp_path, spec([TASK], agent))

    assert state.trajectories["t4@0"].outcome == "resolved"
    assert fake.requests == 2
    first = fake.seen[0]
    assert first.authorization == f"Bearer {KEY}"
    assert [tool["function"]["name"] for tool in first.body["tools"]] == ["submit"]
    assert first.body["model"] == "scripted-model"
    assert (first.body["seed"], first.body["temperature"]) == (7, 0.0)
    assert first.body["max_completion_tokens"] == 256
    assert first.body["messages"][1] == {"role": "user", "content": TASK["prompt"]}
    # A reply without a tool call is answered with a reminder to use the tools.
    assert fake.seen[1].body["messages"][-1]["role"] == "user"
    assert "submit" in fake.seen[1].body["messages"][-1]["content"]

    (generated,) = records(directory, "generated")
    assert generated["usage"] == {
        "input_tokens": 150,
        "output_tokens": 27,
        "requests": 2,
        "cost_usd": None,
    }
    assert generated["duration_s"] > 0
    transcript = json.loads(artifact_text(directory, generated["submission"]["transcript"]))
    calls = [m["tool_calls"] for m in transcript if m.get("tool_calls")]
    assert calls[0][0]["function"] == {"name": "submit", "arguments": '{"answer": " 16 "}'}
    events = [m["event"] for m in transcript if "event" in m]
    assert events == ["completion", "completion", "submitted"]


async def test_rate_limits_and_server_errors_are_retried_with_the_servers_retry_after(
    tmp_path: Path,
) -> None:
    script: list[Reply | Failure] = [
        Failure(429, {"retry-after-ms": "20"}),
        Failure(500),
        Failure(503),
        call("submit", answer="16"),
    ]
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(30):
        agent = openai_agent(fake.url, retry_attempts=4)
        state, directory = await run(tmp_path, spec([TASK], agent))

    assert state.trajectories["t4@0"].outcome == "resolved"
    assert fake.requests == 4
    (generated,) = records(directory, "generated")
    assert generated["usage"]["requests"] == 1
    transcript = json.loads(artifact_text(directory, generated["submission"]["transcript"]))
    retries = [(e["reason"], e["delay_s"]) for e in transcript if e.get("event") == "retry"]
    # The base delay is 0 here, so the 429's wait can only come from its Retry-After.
    assert retries == [("HTTP 429", 0.02), ("HTTP 500", 0.0), ("HTTP 503", 0.0)]


async def test_an_endpoint_that_keeps_failing_is_an_infra_error_after_the_runners_retries(
    tmp_path: Path,
) -> None:
    with serving(FakeOpenAI([], then=Failure(500))) as fake, anyio.fail_after(30):
        agent = openai_agent(fake.url, retry_attempts=2)
        state, directory = await run(tmp_path, spec([TASK], agent, max_attempts=2))

    assert state.trajectories["t4@0"].outcome == "infra_error"
    # Two requests per attempt inside the agent, two attempts by the runner.
    assert fake.requests == 4
    failures = records(directory, "generation_failed")
    assert [f["final"] for f in failures] == [False, True]
    assert failures[-1]["error"]["type"] == "InfrastructureError"
    assert "HTTP 500" in failures[-1]["error"]["message"]


async def test_every_request_carries_the_attempt_and_an_idempotency_key_kept_across_attempts(
    tmp_path: Path,
) -> None:
    # The first attempt fails (an infrastructure error after two requests), the second submits.
    script = [Failure(500), Failure(500)]
    with serving(FakeOpenAI(script, then=call("submit", answer="16"))) as fake:
        with anyio.fail_after(30):
            agent = openai_agent(fake.url, retry_attempts=2)
            state, _ = await run(tmp_path, spec([TASK], agent, max_attempts=2))

    assert state.trajectories["t4@0"].outcome == "resolved"
    sent = [
        (s.headers[IDEMPOTENCY_HEADER.lower()], s.headers[ATTEMPT_HEADER.lower()])
        for s in fake.seen
    ]
    (key,) = {key for key, _ in sent}
    assert [attempt for _, attempt in sent] == ["1", "1", "2"]
    assert len(key) == 32
    # Another trajectory (here: the same task in another campaign) has another key.
    with serving(FakeOpenAI([call("submit", answer="16")])) as other, anyio.fail_after(30):
        await run(tmp_path, spec([TASK], openai_agent(other.url)))
    assert other.seen[0].headers[IDEMPOTENCY_HEADER.lower()] != key


async def test_a_rejected_request_is_the_trajectorys_error_and_is_not_retried(
    tmp_path: Path,
) -> None:
    rejected = Failure(400, message="model 'scripted-model' does not exist")
    with serving(FakeOpenAI([], then=rejected)) as fake, anyio.fail_after(30):
        state, directory = await run(tmp_path, spec([TASK], openai_agent(fake.url)))

    assert state.trajectories["t4@0"].outcome == "error"
    assert fake.requests == 1
    (failure,) = records(directory, "generation_failed")
    assert "HTTP 400" in failure["error"]["message"]
    assert "does not exist" in failure["error"]["message"]


async def test_an_unreachable_endpoint_is_an_infra_error(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port any more: every connection is refused.
    agent = openai_agent(f"http://127.0.0.1:{port}/v1", retry_attempts=2)
    with anyio.fail_after(30):
        state, directory = await run(tmp_path, spec([TASK], agent, max_attempts=1))

    assert state.trajectories["t4@0"].outcome == "infra_error"
    (failure,) = records(directory, "generation_failed")
    assert "APIConnectionError" in failure["error"]["message"]


async def test_without_a_key_or_a_base_url_the_error_says_which_variable_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV)
    agent = openai_agent("")
    del agent["base_url"]  # so the agent would call OpenAI itself, which needs a key
    with anyio.fail_after(30):
        state, directory = await run(tmp_path, spec([TASK], agent))

    assert state.trajectories["t4@0"].outcome == "error"
    (failure,) = records(directory, "generation_failed")
    assert f"${KEY_ENV}" in failure["error"]["message"]


async def test_the_operators_openai_settings_go_to_the_operators_endpoint_and_nowhere_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The openai library reads these by itself: they are for OpenAI or $OPENAI_BASE_URL.
    monkeypatch.setenv("OPENAI_ORG_ID", "org-operator")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-operator")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Operator-Gateway: gw-secret")
    submit = call("submit", answer="16")
    with (
        serving(FakeOpenAI([], then=submit)) as own,
        serving(FakeOpenAI([], then=submit)) as other,
        anyio.fail_after(30),
    ):
        monkeypatch.setenv("OPENAI_BASE_URL", own.url)
        await run(tmp_path / "own", spec([TASK], openai_agent(own.url)))
        await run(tmp_path / "other", spec([TASK], openai_agent(other.url)))
    (to_own,), (to_other,) = own.seen, other.seen
    operators = ("openai-organization", "openai-project", "x-operator-gateway")
    assert [to_own.headers.get(name) for name in operators] == [
        "org-operator",
        "proj-operator",
        "gw-secret",
    ]
    assert [to_other.headers.get(name) for name in operators] == [None, None, None]
    assert not [name for name in to_other.headers if name.startswith("x-stainless")]
    assert to_other.authorization == f"Bearer {KEY}"
    assert to_other.headers[ATTEMPT_HEADER.lower()] == "1"
    assert to_other.body["model"] == "scripted-model"


async def test_without_base_url_the_agent_goes_where_openai_base_url_points_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A user who points $OPENAI_BASE_URL at a local server sends nothing to OpenAI: the agent
    # follows the same rule as the judge and the openai library. A local server needs no key.
    monkeypatch.delenv(KEY_ENV)
    with serving(FakeOpenAI([], then=call("submit", answer="16"))) as local, anyio.fail_after(30):
        monkeypatch.setenv("OPENAI_BASE_URL", local.url)
        agent = openai_agent(local.url, base_url=None, answer_from="submit")
        state, directory = await run(tmp_path, spec([TASK], agent))
    assert state.trajectories["t4@0"].outcome == "resolved"
    assert local.requests == 1
    assert local.seen[0].body["messages"][1]["content"] == TASK["prompt"]
    report = build_report(state)
    # Named, never shown: the value is the operator's (a tenant must not learn it).
    assert report["model_endpoints"] == {"agent": "$OPENAI_BASE_URL (the server's)"}
    assert "- agent sends its model calls to $OPENAI_BASE_URL" in render_markdown(report)
    (counted,) = records(directory, "endpoint_calls")
    assert counted["calls"] == {local.url: {"ok": 1}}


async def test_a_redirect_is_not_followed(tmp_path: Path) -> None:
    with serving(FakeOpenAI([], then=call("submit", answer="16"))) as elsewhere:
        moved = Failure(307, headers={"Location": f"{elsewhere.url}/chat/completions"})
        with serving(FakeOpenAI([moved])) as fake, anyio.fail_after(30):
            state, _ = await run(tmp_path, spec([TASK], openai_agent(fake.url)))
    assert elsewhere.requests == 0
    assert state.trajectories["t4@0"].outcome == "error"


async def test_a_tool_the_task_does_not_offer_is_answered_with_the_tools_it_has(
    tmp_path: Path,
) -> None:
    script = [call("exec", command="ls"), call("submit", answer="16")]
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(30):
        state, _ = await run(tmp_path, spec([TASK], openai_agent(fake.url)))

    assert state.trajectories["t4@0"].outcome == "resolved"
    # Options the config leaves unset are not sent: the endpoint's defaults apply.
    assert not {"seed", "temperature", "max_completion_tokens"} & fake.seen[0].body.keys()
    told = fake.seen[1].body["messages"][-1]
    assert told["role"] == "tool"
    assert "no tool named 'exec'" in told["content"]
    assert "submit" in told["content"]


async def test_arguments_that_are_not_json_are_sent_back_to_the_model_to_fix(
    tmp_path: Path,
) -> None:
    script = [Reply(tool_calls=(("submit", '{"answer": 16'),)), call("submit", answer=16)]
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(30):
        state, _ = await run(tmp_path, spec([TASK], openai_agent(fake.url)))

    told = fake.seen[1].body["messages"][-1]["content"]
    assert told.startswith("error: arguments are not valid JSON")
    # A non-string answer is handed in as its JSON text.
    assert state.trajectories["t4@0"].outcome == "resolved"


async def test_a_model_that_never_submits_hands_in_nothing_after_max_steps(
    tmp_path: Path,
) -> None:
    with serving(FakeOpenAI([], then=Reply(content="hmm"))) as fake, anyio.fail_after(30):
        state, directory = await run(
            tmp_path, spec([TASK], openai_agent(fake.url, max_steps=3, answer_from="submit"))
        )

    assert fake.requests == 3
    assert state.trajectories["t4@0"].outcome == "failed"
    (generated,) = records(directory, "generated")
    assert generated["submission"]["empty"] is True
    transcript = json.loads(artifact_text(directory, generated["submission"]["transcript"]))
    events = [entry["event"] for entry in transcript if "event" in entry]
    assert events[-2:] == ["max_steps_reached", "handed_in_unsubmitted"]


CONTEXT_FULL = Failure(
    400,
    message="This model's maximum context length is 32768 tokens. However, you requested 40000.",
)


async def test_a_conversation_that_outgrows_the_context_hands_in_what_it_has(
    tmp_path: Path,
) -> None:
    script: list[Reply | Failure] = [Reply(content="thinking"), CONTEXT_FULL]
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(30):
        agent = openai_agent(fake.url, answer_from="submit")
        state, directory = await run(tmp_path, spec([TASK], agent))

    # Graded like a model out of steps (failed here: no answer), not an error.
    assert state.trajectories["t4@0"].outcome == "failed"
    assert fake.requests == 2
    (generated,) = records(directory, "generated")
    transcript = json.loads(artifact_text(directory, generated["submission"]["transcript"]))
    events = [entry["event"] for entry in transcript if "event" in entry]
    assert events[-2:] == ["context_exhausted", "handed_in_unsubmitted"]


async def test_a_prompt_that_does_not_fit_the_context_is_an_error(tmp_path: Path) -> None:
    with serving(FakeOpenAI([CONTEXT_FULL])) as fake, anyio.fail_after(30):
        state, directory = await run(tmp_path, spec([TASK], openai_agent(fake.url)))

    assert state.trajectories["t4@0"].outcome == "error"
    (failure,) = records(directory, "generation_failed")
    assert failure["error"]["type"] == "ContextExhausted"
    assert "maximum context length" in failure["error"]["message"]


async def test_calls_to_one_endpoint_stay_within_the_campaigns_per_endpoint_limit(
    tmp_path: Path,
) -> None:
    tasks = [{"id": f"t{n}", "prompt": "-", "answer": "16"} for n in range(6)]
    fake = FakeOpenAI([], then=call("submit", answer="16"), overlap=2)
    with serving(fake), anyio.fail_after(30):
        campaign = spec(tasks, openai_agent(fake.url), concurrency=6, per_endpoint=2)
        state, _ = await run(tmp_path, campaign)

    assert {t.outcome for t in state.trajectories.values()} == {"resolved"}
    # Every request waited for a second one to be in flight, and no third ever joined them.
    assert fake.max_in_flight == 2


async def test_the_agent_waits_for_its_endpoints_limiter_before_each_request(
    tmp_path: Path,
) -> None:
    limiters = Limiters(Limits(per_endpoint=1))
    with serving(FakeOpenAI([call("submit", answer="16")])) as fake, anyio.fail_after(30):
        context = _context(tmp_path, limiters)
        agent = build_agent(OpenAIAgentConfig.model_validate(openai_agent(fake.url)))
        endpoint = limiters.endpoint(fake.url)
        submissions: list[Submission] = []

        async def generate() -> None:
            submissions.append(await agent.generate(context))

        async with anyio.create_task_group() as group, endpoint:
            group.start_soon(generate)
            while endpoint.statistics().tasks_waiting == 0:
                await anyio.lowlevel.checkpoint()
            assert fake.requests == 0
        assert fake.requests == 1
    assert submissions[0].answer == "16"


async def test_no_request_starts_once_the_campaigns_budget_is_spent(tmp_path: Path) -> None:
    def spent() -> None:
        raise LimitExceeded("the campaign's budget is spent")

    with serving(FakeOpenAI([call("submit", answer="16")])) as fake, anyio.fail_after(30):
        context = _context(tmp_path, Limiters(Limits()), admit=spent)
        agent = build_agent(OpenAIAgentConfig.model_validate(openai_agent(fake.url)))
        with pytest.raises(LimitExceeded):
            await agent.generate(context)
    assert fake.requests == 0


def _context(
    tmp_path: Path, limiters: Limiters, admit: Callable[[], None] | None = None
) -> TrajectoryContext:
    """A context for TASK with no campaign around it."""
    task = Task.model_validate(TASK)
    return TrajectoryContext(
        campaign_id="c",
        trajectory_id="t4@0",
        task=task,
        sample=0,
        attempt=1,
        campaign_dir=tmp_path,
        limiters=limiters,
        sandbox=TrajectorySandbox(None, task, "w", limiters.provisioning),
        admit=admit,
    )


def test_retry_after_is_read_in_milliseconds_seconds_or_as_an_http_date() -> None:
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"Retry-After": "7"}) == 7.0
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    hinted = retry_after_seconds({"Retry-After": in_a_minute})
    assert hinted is not None
    assert 55 <= hinted <= 60
    assert retry_after_seconds({"Retry-After": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_the_docs_openai_agent_example_is_a_valid_agent_config() -> None:
    page = (Path(__file__).parents[2] / "docs" / "reference" / "agents.md").read_text()
    section = page.split("## Model agents", 1)[1]
    example = section.split("```json\n", 1)[1].split("```", 1)[0]
    agent = json.loads("{" + example + "}")["agent"]
    campaign = spec([TASK], agent)
    assert campaign.agent.type == "openai"
    assert agent["base_url"].startswith("http://127.0.0.1")


async def test_a_reply_without_a_tool_call_is_the_answer_in_one_request(tmp_path: Path) -> None:
    with serving(FakeOpenAI([Reply(content=" 16\n")])) as fake, anyio.fail_after(30):
        state, directory = await run(tmp_path, spec([TASK], openai_agent(fake.url)))

    assert state.trajectories["t4@0"].outcome == "resolved"
    assert fake.requests == 1
    assert "tools" not in fake.seen[0].body, "no tools: a model without tool calling works"
    assert "submit" not in fake.seen[0].body["messages"][0]["content"]
    (generated,) = records(directory, "generated")
    assert generated["submission"]["answer"] == " 16\n"
    transcript = json.loads(artifact_text(directory, generated["submission"]["transcript"]))
    assert [m["event"] for m in transcript if "event" in m] == ["completion", "answered"]


async def test_with_answer_from_submit_a_text_reply_is_nudged_toward_the_submit_tool(
    tmp_path: Path,
) -> None:
    script = [Reply(content="16"), call("submit", answer="16")]
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(30):
        agent = openai_agent(fake.url, answer_from="submit")
        state, _ = await run(tmp_path, spec([TASK], agent))

    assert state.trajectories["t4@0"].outcome == "resolved"
    assert fake.requests == 2
    assert [tool["function"]["name"] for tool in fake.seen[0].body["tools"]] == ["submit"]
    assert "submit" in fake.seen[1].body["messages"][-1]["content"]
