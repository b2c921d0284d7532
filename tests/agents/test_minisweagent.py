"""mini-swe-agent's own loop on our workspaces: its `environment_class` and the agent type.

Real components throughout: mini-swe-agent's `DefaultAgent` with its `DeterministicModel`, and
its litellm model against the fake OpenAI-compatible server on loopback; local overlay
workspaces (root), and the environment class on the docker backend too.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from minisweagent.agents.default import DefaultAgent
from minisweagent.environments import get_environment
from minisweagent.models import get_model
from minisweagent.models.test_models import DeterministicModel, make_output

from mcp_evalserver.agents.minisweagent.environment import LoopCall
from mcp_evalserver.agents.minisweagent.model import EndpointGatedModel
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput, LimitExceeded
from mcp_evalserver.integrations.minisweagent import EvalserverEnvironment, close_shared
from mcp_evalserver.runtime.adaptive import EndpointLimiter
from mcp_evalserver.scoring.factory import build_scorer
from mcp_evalserver.server.privileges import Privileges
from mcp_evalserver.spec.agents import MiniSweAgentConfig
from mcp_evalserver.spec.prices import ModelPrice
from mcp_evalserver.spec.scorers import CommandScorerConfig
from tests.agents.fake_openai import Failure, FakeOpenAI, Reply, Response, call, serving
from tests.agents.helpers import artifact_text, records, run, spec
from tests.litellm_sockets import LITELLM_SOCKETS
from tests.root import require_root
from tests.sandbox.docker_support import require_docker
from testsupport.otlp import receiving
from testsupport.servers import REPO

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
CHECK = "python3 -c 'import calc; assert calc.add(2, 2) == 4'"
CHECK_SCORER = build_scorer(CommandScorerConfig(command=CHECK))
FIX = "sed -i 's/a - b/a + b/' calc.py"
# Local-backend workspaces need root; the docker cases run with the rest.
pytestmark = [pytest.mark.root, *LITELLM_SOCKETS]

SUBMIT_DIFF = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"
ENVIRONMENT_CLASS = "mcp_evalserver.integrations.minisweagent.EvalserverEnvironment"
AGENT: dict[str, Any] = {"system_template": "You fix bugs.", "instance_template": "{{task}}"}


def _repo(root: Path) -> Path:
    path = root / "repo"
    path.mkdir()
    (path / "calc.py").write_text(BUGGY)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    for command in (["git", "init", "-q", "."], [*git, "add", "-A"], [*git, "commit", "-qm", "b"]):
        subprocess.run(command, cwd=path, check=True)
    return path


def _task(root: Path) -> dict[str, str]:
    return {"id": "calc", "path": str(_repo(root)), "prompt": "calc.add subtracts; make it add."}


def _outputs(*commands: str) -> list[dict[str, Any]]:
    return [make_output(f"step {n}", [{"command": c}]) for n, c in enumerate(commands)]


def _deterministic(*commands: str, **agent: Any) -> dict[str, Any]:
    return {
        "type": "mini-swe-agent",
        "config": {"agent": AGENT | agent},
        "model": {
            "model_name": "deterministic",
            "model_class": "deterministic",
            "outputs": _outputs(*commands),
        },
    }


def _litellm(url: str, **model_kwargs: Any) -> dict[str, Any]:
    """The agent type with mini-swe-agent's litellm model pointed at the fake endpoint."""
    return {
        "type": "mini-swe-agent",
        "config": {"agent": {"step_limit": 10}},
        "model": {
            "model_name": "openai/scripted-model",
            "model_kwargs": {"api_base": url, "api_key": "sk-none"} | model_kwargs,
            "cost_tracking": "ignore_errors",
        },
    }


SUBMIT = call("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")


# --- the environment class, in mini-swe-agent's own runs ---------------------------------------


def _setup_in_image() -> list[str]:
    """Setup commands that make the image's /testbed what `_repo` makes on the host."""
    git = "git -c user.email=t@t -c user.name=t"
    return [
        f"mkdir -p /testbed && cd /testbed && printf {shlex.quote(BUGGY)} > calc.py"
        f" && git init -q . && {git} add -A && {git} commit -qm b"
    ]


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def instance(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The `environment` section's instance fields for each backend, on the buggy calc repo."""
    if request.param == "local":
        require_root()
        yield {"path": str(_repo(tmp_path))}
    else:
        yield {"image": require_docker(), "setup": _setup_in_image()}
    close_shared()


def test_mini_swe_agent_runs_in_a_copy_on_write_workspace_named_by_environment_class(
    instance: dict[str, Any],
) -> None:
    config = {"environment_class": ENVIRONMENT_CLASS, "timeout": 20, **instance}
    first, second = get_environment(config), get_environment(config)
    assert isinstance(first, EvalserverEnvironment)
    assert isinstance(second, EvalserverEnvironment)
    script = _outputs("cat calc.py", FIX, SUBMIT_DIFF)
    model = DeterministicModel(outputs=script)  # type: ignore[no-untyped-call]
    agent = DefaultAgent(model, first, **AGENT)

    result = agent.run("calc.add subtracts; make it add.")

    assert result["exit_status"] == "Submitted"
    assert "-    return a - b\n+    return a + b" in result["submission"]
    assert "return a - b" in agent.messages[3]["content"]  # what `cat` showed the model
    assert "+    return a + b" in first.diff()
    # The fix lives in the first environment's workspace only: the instance they share (and,
    # on the local backend, the repository on the host) is untouched.
    assert second.execute({"command": "cat calc.py"})["output"] == BUGGY
    assert second.diff() == ""
    if "path" in instance:
        assert Path(instance["path"], "calc.py").read_text() == BUGGY
    assert first.workspace is not second.workspace
    first.close()
    second.close()


def test_a_command_past_its_timeout_is_killed_and_reported_as_mini_swe_agent_does(
    instance: dict[str, Any],
) -> None:
    config = {"environment_class": ENVIRONMENT_CLASS, "timeout": 1, **instance}
    env = get_environment(config)
    assert isinstance(env, EvalserverEnvironment)
    with env:
        output = env.execute({"command": "echo started; sleep 30"})
        assert output["returncode"] == -1
        assert "timed out after 1 s" in output["exception_info"]
        assert output["output"].startswith("started")


# --- the agent type, in a campaign ---------------------------------------------------------------


@pytest.mark.anyio
async def test_a_deterministic_model_fixes_the_bug_through_the_real_loop_and_its_patch_resolves(
    tmp_path: Path,
) -> None:
    agent = _deterministic("cat calc.py", FIX, SUBMIT_DIFF)
    with anyio.fail_after(60):
        state, directory = await run(
            tmp_path / "state", spec([_task(tmp_path)], agent), CHECK_SCORER
        )

    assert state.trajectories["calc@0"].outcome == "resolved"
    (generated,) = records(directory, "generated")
    assert generated["usage"]["requests"] == 3
    assert generated["usage"]["cost_usd"] == 3.0  # DeterministicModel's 1.0 per call
    # Its own cost is the campaign's: a record per call as it returned, in the report beside
    # what it resolved.
    usage = records(directory, "model_usage")
    assert [(u["source"], u["cost_usd"], u["priced_by"]) for u in usage] == [
        ("agent", 1.0, "provider")
    ] * 3
    cost = build_report(state)["cost"]
    assert (cost["cost_usd"], cost["cost_per_resolved_usd"]) == (3.0, 3.0)
    transcript = json.loads(artifact_text(directory, generated["submission"]["transcript"]))
    assert [m.get("role") for m in transcript[:3]] == ["system", "user", "assistant"]
    assert transcript[1]["content"] == "calc.add subtracts; make it add."
    assert transcript[-2]["role"] == "exit"
    assert transcript[-1] == {
        "event": "exit",
        "exit_status": "Submitted",
        "api_calls": 3,
        "cost": 3.0,
    }


@pytest.mark.anyio
async def test_its_step_limit_ends_the_loop_and_the_workspace_changes_are_handed_in(
    tmp_path: Path,
) -> None:
    agent = _deterministic("cat calc.py", FIX, "ls", "ls", step_limit=2, cost_limit=0)
    with anyio.fail_after(60):
        state, directory = await run(
            tmp_path / "state", spec([_task(tmp_path)], agent), CHECK_SCORER
        )

    assert state.trajectories["calc@0"].outcome == "resolved"  # the fix was made before the limit
    (generated,) = records(directory, "generated")
    assert generated["usage"]["requests"] == 2
    transcript = json.loads(artifact_text(directory, generated["submission"]["transcript"]))
    assert transcript[-2]["exit_status"] == "LimitsExceeded"
    assert transcript[-1]["event"] == "handed_in_unsubmitted"


@pytest.mark.anyio
async def test_its_cost_limit_ends_the_loop_once_the_cost_is_reached(tmp_path: Path) -> None:
    agent = _deterministic("ls", "ls", "ls", "ls", cost_limit=2.0)
    with anyio.fail_after(60):
        state, directory = await run(
            tmp_path / "state", spec([_task(tmp_path)], agent), CHECK_SCORER
        )

    (generated,) = records(directory, "generated")
    assert generated["usage"]["requests"] == 2
    assert state.trajectories["calc@0"].outcome != "resolved"


@pytest.mark.anyio
async def test_its_litellm_model_drives_the_loop_against_an_openai_compatible_endpoint(
    tmp_path: Path,
) -> None:
    script = [
        Reply(content="Let me look.", tool_calls=(("bash", {"command": "cat calc.py"}),)),
        call("bash", command=FIX),
        call("bash", command=SUBMIT_DIFF),
    ]
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(60):
        # litellm has no price for it (cost_tracking: ignore_errors): the campaign's has.
        prices = {"scripted-model": ModelPrice(input=1.0, output=2.0)}
        campaign = spec([_task(tmp_path)], _litellm(fake.url)).model_copy(update={"prices": prices})
        state, directory = await run(tmp_path / "state", campaign, CHECK_SCORER)

    assert state.trajectories["calc@0"].outcome == "resolved"
    assert state.spend.cost_usd == pytest.approx((300 * 1.0 + 60 * 2.0) / 1_000_000)
    assert len(fake.seen) == 3
    assert fake.seen[0].body["model"] == "scripted-model"
    assert [t["function"]["name"] for t in fake.seen[0].body["tools"]] == ["bash"]
    # The model saw what its command printed, through mini-swe-agent's observation template.
    assert "return a - b" in json.dumps(fake.seen[1].body["messages"][-1])
    (generated,) = records(directory, "generated")
    assert generated["usage"]["requests"] == 3
    assert generated["usage"]["input_tokens"] == 300
    assert generated["usage"]["output_tokens"] == 60


@pytest.mark.anyio
async def test_its_model_calls_stay_within_the_campaigns_per_endpoint_limit(
    tmp_path: Path,
) -> None:
    fake = FakeOpenAI([], then=SUBMIT, overlap=2)
    with serving(fake), anyio.fail_after(60):
        campaign = spec(
            [_task(tmp_path)],
            _litellm(fake.url),
            samples=4,
            concurrency=4,
            per_instance=4,
            per_endpoint=2,
        )
        state, directory = await run(tmp_path / "state", campaign, CHECK_SCORER)

    assert len(state.trajectories) == 4
    # Every request waited for a second one to be in flight, and no third ever joined them.
    assert fake.max_in_flight == 2
    (counted,) = records(directory, "endpoint_calls")
    assert counted["calls"] == {fake.url: {"ok": 4}}


@pytest.mark.anyio
async def test_each_model_call_is_metered_as_it_returns_so_a_budget_stops_the_loop_mid_run(
    tmp_path: Path,
) -> None:
    # A model that never submits: without metering per call the loop would run to its step
    # limit (10) and be counted once, at its hand-in.
    fake = FakeOpenAI([], then=call("bash", command="true"))
    with serving(fake), anyio.fail_after(60):
        prices = {"scripted-model": ModelPrice(input=1.0, output=2.0)}  # 140 µ$ per call
        campaign = spec([_task(tmp_path)], _litellm(fake.url), budget_usd=0.00025)
        campaign = campaign.model_copy(update={"prices": prices})
        state, directory = await run(tmp_path / "state", campaign, CHECK_SCORER)

    # The second call crossed the budget: it is paid and recorded, and no third was sent.
    assert len(fake.seen) == 2
    assert state.trajectories["calc@0"].outcome == "budget_exhausted"
    usage = records(directory, "model_usage")
    assert [(u["source"], u["input_tokens"], u["output_tokens"]) for u in usage] == [
        ("agent", 100, 20),
        ("agent", 100, 20),
    ]
    # The ledger's spend is the provider's, call for call.
    assert state.spend.cost_usd == pytest.approx(2 * (100 * 1.0 + 20 * 2.0) / 1_000_000)


@pytest.mark.anyio
async def test_no_model_call_starts_once_the_campaigns_budget_is_spent() -> None:
    def spent() -> None:
        raise LimitExceeded("the campaign's budget is spent")

    fake = FakeOpenAI([], then=call("bash", command="true"))
    with serving(fake), anyio.fail_after(30):
        queried = get_model(config=_litellm(fake.url)["model"])
        model = EndpointGatedModel(
            queried,
            EndpointLimiter(fake.url, 1),
            cast("LoopCall", anyio.from_thread.run),
            anyio.CapacityLimiter(1),
            admit=spent,
        )
        messages = [{"role": "user", "content": "hi"}]
        with pytest.raises(LimitExceeded):
            await anyio.to_thread.run_sync(model.query, messages)
    assert fake.seen == []


@pytest.mark.anyio
async def test_killed_between_two_calls_then_resumed_the_ledger_holds_what_the_provider_served(
    tmp_path: Path,
) -> None:
    """The real CLI, SIGKILLed once its third model call is on the wire (the second answered
    and metered), then resumed: the ledger's tokens equal the provider's, call for call."""
    third_sent, let_go = threading.Event(), threading.Event()

    def respond(body: dict[str, Any]) -> Response:
        if len(fake.seen) == 3:  # the first run's third call: it never gets an answer
            third_sent.set()
            let_go.wait(60)
            return Failure(500, message="its client is gone")
        if len(fake.seen) < 3:
            return call("bash", command="true")
        return SUBMIT

    fake = FakeOpenAI([], then=respond)
    spec_file = tmp_path / "spec.json"
    state_dir = tmp_path / "state"
    cli = [sys.executable, "-m", "mcp_evalserver.cli", "--state-dir", str(state_dir)]
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    with serving(fake), anyio.fail_after(180):
        campaign = spec([_task(tmp_path)], _litellm(fake.url), retry_base_delay_s=0)
        checked = campaign.model_copy(update={"scorer": CommandScorerConfig(command=CHECK)})
        spec_file.write_text(checked.model_dump_json())
        started = [*cli, "run", str(spec_file), "--id", "killed", "--no-progress"]
        async with await anyio.open_process(started, env=environment) as first:
            try:
                assert await anyio.to_thread.run_sync(third_sent.wait, 120)
            finally:
                first.kill()
                await first.wait()
                let_go.set()
        assert first.returncode == -signal.SIGKILL
        killed = CampaignStore(state_dir).load("killed")
        assert killed.spend.records == 2, "both answered calls were recorded before the third"
        resume = [*cli, "resume", "killed", "--no-progress"]
        resumed = await anyio.run_process(resume, env=environment, check=False)
        assert resumed.returncode == 0, resumed.stderr.decode()

    state = CampaignStore(state_dir).load("killed")
    assert state.trajectories["calc@0"].outcome == "failed"  # it never fixed calc.py
    usage = records(CampaignStore(state_dir).directory("killed"), "model_usage")
    served = fake.reported_tokens
    assert sum(u["input_tokens"] for u in usage) == served["prompt"] == 100 * (len(fake.seen) - 1)
    assert sum(u["output_tokens"] for u in usage) == served["completion"]
    assert len(usage) == len(fake.seen) - 1, "every answered call once; the unanswered none"


@pytest.mark.anyio
async def test_a_model_call_refused_for_load_after_its_retries_is_retried_by_the_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # mini-swe-agent retries a failed query itself; one attempt keeps the test quick.
    monkeypatch.setenv("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    fake = FakeOpenAI([Failure(429, message="slow down")], then=SUBMIT)
    with serving(fake), anyio.fail_after(60):
        # litellm's own client retries are off too (as the openai agent's are).
        campaign = spec([_task(tmp_path)], _litellm(fake.url, max_retries=0))
        state, directory = await run(tmp_path / "state", campaign, CHECK_SCORER)

    (failure,) = records(directory, "generation_failed")
    assert failure["error"]["type"] == "InfrastructureError"
    assert "HTTP 429" in failure["error"]["message"]
    assert state.trajectories["calc@0"].attempts == 2
    assert len(fake.seen) == 2
    (counted,) = records(directory, "endpoint_calls")
    assert counted["calls"] == {fake.url: {"HTTP 429": 1, "ok": 1}}


def test_over_http_the_agent_type_needs_plugins_allowed() -> None:
    config = MiniSweAgentConfig(model={"model_name": "openai/x"})
    with pytest.raises(InvalidInput, match="--allow-plugins"):
        Privileges(plugins=False).admit_plugins(config, "agent")
    Privileges(plugins=True).admit_plugins(config, "agent")


def test_an_environment_class_in_the_agent_types_config_is_refused() -> None:
    from mcp_evalserver.agents.factory import build_agent

    config = MiniSweAgentConfig(config={"environment": {"environment_class": "docker"}})
    with pytest.raises(InvalidInput, match="trajectory's workspace"):
        build_agent(config)


@pytest.mark.anyio
async def test_its_model_calls_and_commands_are_spans_in_the_trajectorys_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop runs in a worker thread; its queries and commands join the trajectory's trace."""
    script = [call("bash", command="cat calc.py"), call("bash", command=FIX)]
    script.append(call("bash", command=SUBMIT_DIFF))
    with receiving() as receiver, serving(FakeOpenAI(script)) as fake:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        with anyio.fail_after(60):
            await run(tmp_path / "state", spec([_task(tmp_path)], _litellm(fake.url)), CHECK_SCORER)

    (root,) = [s for s in receiver.spans if s.name == "trajectory calc@0"]
    trace = [s for s in receiver.spans if s.trace_id == root.trace_id]
    (invoked,) = [s for s in trace if s.name == "invoke_agent mini-swe-agent"]
    chats = [s for s in trace if s.name == "chat openai/scripted-model"]
    assert [s.parent_id for s in chats] == [invoked.span_id] * 3
    for chat in chats:
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.response.model"] == "scripted-model"
        assert chat.attributes["gen_ai.usage.input_tokens"] == 100
        assert chat.attributes["gen_ai.usage.output_tokens"] == 20
    commands = [s for s in trace if s.name == "execute_tool bash"]
    assert [s.parent_id for s in commands] == [invoked.span_id] * 3
    assert [s.attributes["process.exit.code"] for s in commands] == [0, 0, 0]
    assert {s.attributes["gen_ai.conversation.id"] for s in trace} == {"calc@0"}
