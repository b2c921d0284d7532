"""OpenTelemetry traces of a real campaign, as a real OTLP/HTTP receiver on loopback decodes them.

The campaign: the `openai` agent fixing a bug in a git repository (local backend) against the
fake OpenAI-compatible server, graded by the `llm_judge` scorer against the same server.
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
from mcp import Client

from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.judge import SYSTEM_PROMPT
from mcp_evalserver.server.mcp_app import create_server
from tests.agents.fake_openai import FakeOpenAI, Reply, Response, call, serving
from tests.agents.helpers import KEY, KEY_ENV, openai_agent, run, spec
from tests.server.helpers import repo_spec
from testsupport.otlp import ReceivedSpan, Receiver, receiving
from testsupport.repos import FIXED, git_repo
from testsupport.servers import call as call_tool

pytestmark = [pytest.mark.anyio, pytest.mark.root]

REPO = Path(__file__).resolve().parents[2]
PROMPT = "calc.add subtracts; make it add."
#: Two tasks, so that neither trajectory's verdicts come from the judge's cache of the other's.
TASKS = ("calc", "calc2")


@pytest.fixture(autouse=True)
def _a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)


def _model(body: dict[str, Any]) -> Response:
    """The agent looks, fixes and submits; the judge finds every requirement met."""
    messages: list[dict[str, Any]] = body["messages"]
    if messages[0]["content"] == SYSTEM_PROMPT:
        return Reply(content='{"fulfilled": true, "reason": "it adds"}', prompt_tokens=50)
    tools_done = len([m for m in messages if m["role"] == "tool"])
    script: list[Response] = [
        call("exec", command="cat calc.py"),
        call("write_file", path="calc.py", content=FIXED),
        call("submit", answer="fixed add"),
    ]
    return script[tools_done]


async def _campaign(tmp_path: Path) -> None:
    tasks = [
        {"id": name, "path": str(git_repo(tmp_path / name)), "prompt": f"{PROMPT} ({name})"}
        for name in TASKS
    ]
    with serving(FakeOpenAI([], then=_model)) as fake, anyio.fail_after(60):
        judge = {
            "type": "llm_judge",
            "model": "judge-model",
            "base_url": fake.url,
            "api_key_env": KEY_ENV,
            "rubric": ["add adds", "nothing else changed"],
        }
        state, _ = await run(
            tmp_path / "state",
            spec(tasks, openai_agent(fake.url), scorer=judge),
        )
    assert {t.outcome for t in state.trajectories.values()} == {"resolved"}


def _children(trace: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return [span for span in trace if span.parent_id == parent.span_id]


def _one(spans: list[ReceivedSpan], prefix: str) -> ReceivedSpan:
    (found,) = [span for span in spans if span.name.startswith(prefix)]
    return found


def _trajectory_traces(receiver: Receiver) -> dict[str, list[ReceivedSpan]]:
    """Each trajectory's trace, by the trajectory's id."""
    found = {}
    for trace in receiver.traces().values():
        roots = [span for span in trace if not span.parent_id]
        assert len(roots) == 1, [span.name for span in roots]
        if roots[0].name.startswith("trajectory "):
            found[roots[0].attributes["mcp_evalserver.trajectory.id"]] = trace
    return found


async def test_each_trajectory_is_one_trace_of_agent_model_tool_and_scoring_spans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiving() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        await _campaign(tmp_path)
        # Flushed when the run ended: nothing to wait for.
        traces = _trajectory_traces(receiver)

    (campaign,) = [s for s in receiver.spans if s.name.startswith("campaign ")]
    assert not campaign.parent_id
    assert campaign.attributes["mcp_evalserver.campaign.resumed"] is False
    assert campaign.attributes["mcp_evalserver.campaign.status"] == "finished"
    assert campaign.attributes["mcp_evalserver.campaign.done"] == len(TASKS)
    assert campaign.resource["service.name"] == "mcp-evalserver"
    assert set(traces) == {"calc@0", "calc2@0"}
    assert len({span.trace_id for trace in traces.values() for span in trace}) == len(TASKS)
    for tid, trace in traces.items():
        assert {span.attributes["gen_ai.conversation.id"] for span in trace} == {tid}
        root = _one(trace, "trajectory ")
        assert root.links == [(campaign.trace_id, campaign.span_id)]
        assert root.attributes["mcp_evalserver.trajectory.resumed"] is False
        assert root.attributes["mcp_evalserver.trajectory.outcome"] == "resolved"
        steps = [s.name for s in _children(trace, root)]
        assert steps == ["invoke_agent openai", "score llm_judge"]

        agent = _one(trace, "invoke_agent")
        assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert agent.attributes["gen_ai.agent.name"] == "openai"
        assert agent.attributes["gen_ai.request.model"] == "scripted-model"
        assert agent.attributes["gen_ai.usage.input_tokens"] == 300
        assert agent.attributes["gen_ai.usage.output_tokens"] == 60
        chats = [s for s in _children(trace, agent) if s.name.startswith("chat ")]
        assert [s.name for s in chats] == ["chat scripted-model"] * 3
        for chat in chats:
            assert chat.kind == "client"
            assert chat.attributes["gen_ai.operation.name"] == "chat"
            assert chat.attributes["gen_ai.provider.name"] == "openai"
            assert chat.attributes["gen_ai.request.model"] == "scripted-model"
            assert chat.attributes["gen_ai.response.model"] == "scripted-model"
            assert chat.attributes["gen_ai.usage.input_tokens"] == 100
            assert chat.attributes["gen_ai.usage.output_tokens"] == 20
            assert chat.attributes["server.address"] == "127.0.0.1"
            assert "gen_ai.input.messages" not in chat.attributes, "contents only when asked"
        tools = [s for s in _children(trace, agent) if s.name.startswith("execute_tool ")]
        names = [s.attributes["gen_ai.tool.name"] for s in tools]
        assert names == ["exec", "write_file", "submit"]
        executed = tools[0]
        assert executed.attributes["gen_ai.operation.name"] == "execute_tool"
        assert executed.attributes["gen_ai.tool.call.id"].startswith("call_")
        assert executed.attributes["process.exit.code"] == 0
        ran_s = executed.attributes["mcp_evalserver.exec.duration_s"]
        assert ran_s > 0
        assert executed.duration_ns >= ran_s * 1e9
        assert "gen_ai.tool.call.arguments" not in executed.attributes

        scoring = _one(trace, "score ")
        assert scoring.attributes["mcp_evalserver.score.status"] == "resolved"
        judged = _children(trace, scoring)
        assert [s.name for s in judged] == ["chat judge-model"] * 2
        assert {s.attributes["gen_ai.usage.input_tokens"] for s in judged} == {50}


async def test_contents_are_recorded_only_when_asked_and_the_exporter_honours_its_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "evals-ci")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=team-a")
    with receiving() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        await _campaign(tmp_path)
        traces = _trajectory_traces(receiver)

    assert {h.get("x-tenant") for h in receiver.headers} == {"team-a"}
    assert {s.resource["service.name"] for s in receiver.spans} == {"evals-ci"}
    trace = traces["calc@0"]
    agent = _one(trace, "invoke_agent")
    first = next(s for s in _children(trace, agent) if s.name.startswith("chat "))
    sent = json.loads(first.attributes["gen_ai.input.messages"])
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[1]["parts"] == [{"type": "text", "content": f"{PROMPT} (calc)"}]
    (answer,) = json.loads(first.attributes["gen_ai.output.messages"])
    assert answer["finish_reason"] == "tool_calls"
    assert answer["parts"][0]["name"] == "exec"
    executed = _one(trace, "execute_tool exec")
    assert json.loads(executed.attributes["gen_ai.tool.call.arguments"]) == {
        "command": "cat calc.py"
    }
    assert "return a - b" in executed.attributes["gen_ai.tool.call.result"]


def test_with_no_endpoint_a_campaign_imports_no_opentelemetry_sdk(tmp_path: Path) -> None:
    program = f"""
import sys, anyio
from pathlib import Path
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.spec.campaign import CampaignSpec

async def main():
    store = CampaignStore(Path({str(tmp_path)!r}))
    spec = CampaignSpec.model_validate({{"tasks": [{{"id": "t", "answer": "1"}}]}})
    state = await CampaignRunner(store, await store.create(spec)).run()
    assert state.status == "finished", state.status

anyio.run(main)
prefixes = ("opentelemetry.sdk", "opentelemetry.exporter")
print(sorted(m for m in sys.modules if m.startswith(prefixes)))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


async def test_a_command_agents_tool_calls_through_its_endpoint_join_its_trajectorys_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The program's MCP calls arrive in the server's tasks, not the trajectory's: their spans
    still land under the trajectory's `invoke_agent`."""
    notes = tmp_path / "notes"
    notes.mkdir()
    task = {"id": "calc", "path": str(git_repo(tmp_path / "repo")), "prompt": "make add() add"}
    program = REPO / "tests" / "agents" / "command_program.py"
    agent = {"type": "command", "command": [sys.executable, str(program), "fix", str(notes)]}
    with receiving() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        with anyio.fail_after(120):
            await run(tmp_path / "state", spec([task], agent))
        traces = _trajectory_traces(receiver)

    trace = traces["calc@0"]
    agent_span = _one(trace, "invoke_agent command")
    tools = [s for s in _children(trace, agent_span) if s.name.startswith("execute_tool ")]
    names = [s.attributes["gen_ai.tool.name"] for s in tools]
    assert names == ["read_file", "write_file", "sandbox_exec"]
    assert tools[2].attributes["process.exit.code"] == 0
    assert {s.attributes["gen_ai.conversation.id"] for s in tools} == {"calc@0"}


async def test_a_command_agents_program_is_handed_the_trace_context_of_its_invoke_agent_span(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its environment is the least one (no OTLP settings of the server's), but TRACEPARENT
    lets the program's own spans join the trajectory's trace."""
    notes = tmp_path / "notes"
    notes.mkdir()
    dump = f'echo "$TRACEPARENT" > {notes}/traceparent; env > {notes}/env'
    agent = {"type": "command", "command": ["sh", "-c", dump]}
    task = {"id": "q", "prompt": "2 + 2?", "answer": "4"}
    with receiving() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        with anyio.fail_after(60):
            await run(tmp_path / "state", spec([task], agent))
        traces = _trajectory_traces(receiver)

    agent_span = _one(traces["q@0"], "invoke_agent command")
    handed = (notes / "traceparent").read_text().strip()
    version, trace_id, span_id, flags = handed.split("-")
    assert (version, trace_id, span_id) == ("00", agent_span.trace_id, agent_span.span_id)
    assert int(flags, 16) & 1, "sampled"
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in (notes / "env").read_text()


async def test_an_endpoint_without_the_otel_extra_refuses_the_run_before_it_records_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The extra's exporter made unimportable, as where it is not installed.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    store = CampaignStore(tmp_path)
    campaign_id = await store.create(spec([{"id": "t", "answer": "1"}], {"type": "noop"}))
    with pytest.raises(InvalidInput, match=r"pip install 'mcp-evalserver\[otel\]'"):
        await CampaignRunner(store, campaign_id).run()
    assert store.load(campaign_id).runs == 0


async def test_an_external_agents_tool_calls_over_mcp_join_the_trace_of_the_trajectory_it_claimed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its calls arrive in the server's request tasks: the trajectory is found by its id."""
    spec = repo_spec(tmp_path / "repos", 1)
    with receiving() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        async with Client(create_server(tmp_path / "state")) as client:
            started = await call_tool(client, "start_campaign", spec=spec)
            with anyio.fail_after(60):
                claim = await call_tool(client, "claim_trajectory", wait_s=30)
                claim_id = claim["claim_id"]
                await call_tool(client, "sandbox_exec", claim_id=claim_id, command="exit 3")
                await call_tool(
                    client, "write_file", claim_id=claim_id, path="calc.py", content=FIXED
                )
                await call_tool(client, "submit", claim_id=claim_id)
                campaign = started["campaign_id"]
                await call_tool(client, "campaign_status", campaign_id=campaign, wait_s=30)
        # The server's end ended the run, which sent its spans.
        traces = _trajectory_traces(receiver)

    (trace,) = traces.values()
    agent = _one(trace, "invoke_agent external")
    tools = [s for s in _children(trace, agent) if s.name.startswith("execute_tool ")]
    assert [s.attributes["gen_ai.tool.name"] for s in tools] == ["sandbox_exec", "write_file"]
    assert tools[0].attributes["process.exit.code"] == 3
