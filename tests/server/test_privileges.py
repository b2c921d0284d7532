"""Least privilege for token holders, over a real HTTP server (uvicorn on loopback, bearer
token, the SDK's client): no plugins and no host paths unless the operator allows them, and
no way out of the allowed directories through symlinks or `..`. Over stdio (the user's own
process) both stay on.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.engine.sweep import plan_sweep, sweeps_dir
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.server.privileges import Privileges
from mcp_evalserver.spec.campaign import CampaignSpec, RaySandboxConfig
from tests.agents.fake_openai import FakeOpenAI, Reply, serving
from tests.agents.fake_openai import call as fake_call
from tests.root import require_root
from tests.server.helpers import answer_spec, attempt
from testsupport.repos import FIXED, git_repo
from testsupport.servers import TOKEN, call, call_error, http_client, http_server, stdio_client

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MARKER_ENV = "MCP_EVALSERVER_TEST_IMPORT_MARKER"
PLUGIN = "tests.plugins.import_marker"
GOLD_PATCH = (
    "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n"
    " def add(a, b):\n-    return a - b\n+    return a + b\n"
)


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the plugin module leaves when a server (a child of this test) imports it."""
    path = tmp_path / "imported"
    monkeypatch.setenv(MARKER_ENV, str(path))
    return path


def recorded(state_dir: Path) -> list[str]:
    return CampaignStore(state_dir).list_ids()


def answers(count: int, **fields: Any) -> dict[str, Any]:
    """Answer tasks t1..tN with the given agent/scorer configs."""
    return {**answer_spec(count), **fields}


async def test_a_token_holder_cannot_make_the_server_import_a_module_or_run_a_program(
    tmp_path: Path, marker: Path
) -> None:
    state_dir = tmp_path / "state"
    ran = tmp_path / "ran"
    python_agent = {"type": "python", "factory": f"{PLUGIN}:agent"}
    python_scorer = {"type": "python", "factory": f"{PLUGIN}:scorer"}
    hidden_scorer = {"type": "all_of", "scorers": [{"type": "exact"}, python_scorer]}
    command_agent = {"type": "command", "command": ["touch", str(ran)]}
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("start_campaign", {"spec": answers(2, agent=python_agent)}),
        ("start_campaign", {"spec": answers(2, scorer=python_scorer)}),
        ("start_campaign", {"spec": answers(2, scorer=hidden_scorer)}),
        ("start_campaign", {"spec": answers(2, agent=command_agent)}),
        ("sweep_concurrency", {"spec": answers(2, agent=python_agent), "levels": [1]}),
        ("start_campaign", {"spec": answers(2, sandbox={"type": "ray", "address": "10.9.9.9:1"})}),
    ]
    with anyio.fail_after(120):
        async with http_server(state_dir) as url, http_client(url) as client:
            errors = [await call_error(client, tool, **arguments) for tool, arguments in attempts]
            # A campaign it may run, then an attempt to re-score it with a plugin.
            started = await call(client, "start_campaign", spec=answer_spec(2))
            campaign_id = started["campaign_id"]
            status = await call(client, "campaign_status", campaign_id=campaign_id, wait_s=60)
            assert status["status"] == "finished"
            ledger = (CampaignStore(state_dir).directory(campaign_id) / "ledger.jsonl").read_text()
            errors.append(
                await call_error(
                    client, "score", campaign_id=campaign_id, rescore=True, scorer=python_scorer
                )
            )
            listed = await call(client, "list_campaigns")
    for error in errors:
        assert "--allow-plugins" in error, error
        assert "HTTP clients" in error, error
    assert "imports a Python module into the server" in errors[0]
    assert "the scorer {'type': 'python'}" in errors[2], "found inside a combined scorer"
    assert "runs a program on the server's host" in errors[3]
    assert "connects the server to a Ray cluster of the spec's choosing" in errors[5]
    assert "--ray ADDRESS" in errors[5]
    assert not marker.exists(), "the server imported the client's module"
    assert not ran.exists(), "the server ran the client's program"
    # Nothing recorded: one campaign (the allowed one), its ledger as it was, no sweep.
    assert recorded(state_dir) == [campaign_id]
    assert [c["campaign_id"] for c in listed["campaigns"]] == [campaign_id]
    assert (CampaignStore(state_dir).directory(campaign_id) / "ledger.jsonl").read_text() == ledger
    assert not (state_dir / "sweeps").exists() or not any((state_dir / "sweeps").iterdir())


async def test_with_allow_plugins_a_token_holder_runs_python_agents_and_scorers(
    tmp_path: Path, marker: Path
) -> None:
    spec = answers(
        3,
        agent={"type": "python", "factory": f"{PLUGIN}:agent"},
        scorer={"type": "python", "factory": f"{PLUGIN}:scorer"},
    )
    with anyio.fail_after(120):
        async with (
            http_server(tmp_path / "state", "--allow-plugins") as url,
            http_client(url) as client,
        ):
            started = await call(client, "start_campaign", spec=spec)
            status = await call(
                client, "campaign_status", campaign_id=started["campaign_id"], wait_s=60
            )
    assert marker.exists()
    assert status["status"] == "finished"
    assert status["resolved"] == 2  # the scripted agent answers t3 wrongly


async def test_a_token_holder_cannot_name_host_paths_without_allow_paths(
    tmp_path: Path,
) -> None:
    repo = git_repo(tmp_path / "repo")
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text(json.dumps({"id": "t1", "prompt": "1 squared?", "answer": "1"}) + "\n")
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("")
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {}}))
    specs = [
        {
            "tasks": [{"id": "calc", "path": str(repo)}],
            "scorer": {"type": "command", "command": "true"},
        },
        {"tasks": str(task_file)},
        answers(1, agent={"type": "predictions", "path": str(predictions)}),
        answers(1) | {"prices": str(prices)},
    ]
    state_dir = tmp_path / "state"
    with anyio.fail_after(60):
        async with (
            http_server(state_dir, "--allow-plugins") as url,
            http_client(url) as client,
        ):
            errors = [await call_error(client, "start_campaign", spec=spec) for spec in specs]
            # What the refusal offers is true: an inline task without path or image runs.
            inline = await call(client, "start_campaign", spec=answers(1))
    assert inline["trajectories"] == 1
    assert "a task without `path` or `image` is answered as text" in errors[0]
    assert "task calc: path" in errors[0]
    assert "task file" in errors[1]
    assert "predictions file" in errors[2]
    assert "price file" in errors[3]
    for error in errors:
        assert "does not let its HTTP clients name host paths" in error, error
        assert "--allow-paths" in error, error
    assert recorded(state_dir) == [inline["campaign_id"]], "none of the refused was recorded"


async def test_symlinks_and_dotdot_do_not_lead_out_of_the_allowed_directories(
    tmp_path: Path,
) -> None:
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    secret_repo = git_repo(outside / "repo")
    (outside / "tasks.jsonl").write_text(json.dumps({"id": "t1", "answer": "1"}) + "\n")
    (allowed / "repo-link").symlink_to(secret_repo)
    (allowed / "tasks.jsonl").symlink_to(outside / "tasks.jsonl")
    inner = git_repo(allowed / "inner")
    (inner / "escape").symlink_to(outside)

    def path_task(path: str, **fields: str) -> dict[str, Any]:
        task = {"id": "calc", "path": path, **fields}
        return {"tasks": [task], "scorer": {"type": "command", "command": "true"}}

    specs = [
        path_task(f"{allowed}/../outside/repo"),
        path_task(f"{allowed}/repo-link"),
        path_task(str(inner), workdir=f"{inner}/escape"),
        {"tasks": f"{allowed}/tasks.jsonl"},
        {"tasks": f"{allowed}/../outside/tasks.jsonl"},
        # Paths the view would show besides the instance (docs/design/isolation.md).
        {
            "tasks": [{"id": "calc", "path": str(inner), "paths": [f"{allowed}/../outside"]}],
            "scorer": {"type": "command", "command": "true"},
        },
        {
            "tasks": [{"id": "calc", "path": str(inner), "paths": [{"path": f"{inner}/escape"}]}],
            "scorer": {"type": "command", "command": "true"},
        },
    ]
    state_dir = tmp_path / "state"
    with anyio.fail_after(60):
        async with (
            http_server(state_dir, "--allow-paths", str(allowed)) as url,
            http_client(url) as client,
        ):
            errors = [await call_error(client, "start_campaign", spec=spec) for spec in specs]
    real_allowed = os.path.realpath(allowed)
    for error in errors:
        assert (
            f"is outside the directories this server lets its HTTP clients use ({real_allowed})"
            in error
        ), error
        assert "it leads to" in error, error
    assert f"it leads to {os.path.realpath(secret_repo)}" in errors[1]
    assert "workdir" in errors[2]
    assert "task calc: paths" in errors[5]
    assert "task calc: paths" in errors[6]
    assert recorded(state_dir) == []


@pytest.mark.root
async def test_with_allow_paths_a_task_under_the_root_runs_and_its_real_path_is_recorded(
    tmp_path: Path,
) -> None:
    require_root()
    allowed = tmp_path / "allowed"
    repo = git_repo(allowed / "real" / "repo")
    (allowed / "alias").symlink_to(allowed / "real")  # a symlink that stays inside
    task = {
        "id": "calc",
        "prompt": "make add() add",
        "path": f"{allowed}/alias/repo",
        "patch": GOLD_PATCH,
    }
    task_file = allowed / "tasks.jsonl"
    task_file.write_text(json.dumps(task) + "\n")
    spec = {
        "name": "paths",
        "tasks": str(task_file),
        "agent": {"type": "oracle"},
        "scorer": {
            "type": "command",
            "command": "python3 -c 'import calc; assert calc.add(2, 2) == 4'",
        },
    }
    state_dir = tmp_path / "state"
    with anyio.fail_after(120):
        async with (
            http_server(state_dir, "--allow-paths", str(allowed)) as url,
            http_client(url) as client,
        ):
            started = await call(client, "start_campaign", spec=spec)
            status = await call(
                client, "campaign_status", campaign_id=started["campaign_id"], wait_s=90
            )
    assert status["status"] == "finished"
    assert status["resolved"] == 1, status
    recorded_tasks = CampaignStore(state_dir).load(started["campaign_id"]).spec.task_list()
    assert recorded_tasks[0].path == os.path.realpath(repo)
    assert (repo / "calc.py").read_text() != FIXED, "the instance directory stays untouched"


async def test_over_stdio_plugins_and_any_path_stay_on(tmp_path: Path, marker: Path) -> None:
    task_file = tmp_path / "anywhere" / "tasks.jsonl"
    task_file.parent.mkdir()
    task_file.write_text(json.dumps({"id": "t1", "prompt": "1 squared?", "answer": "1"}) + "\n")
    spec = {
        "name": "stdio",
        "tasks": str(task_file),
        "agent": {"type": "python", "factory": f"{PLUGIN}:agent"},
        "scorer": {"type": "python", "factory": f"{PLUGIN}:scorer"},
    }
    with anyio.fail_after(120):
        async with stdio_client(tmp_path / "state") as client:
            started = await call(client, "start_campaign", spec=spec)
            status = await call(
                client, "campaign_status", campaign_id=started["campaign_id"], wait_s=60
            )
    assert marker.exists()
    assert status["resolved"] == 1


def _in_process_http(state_dir: Path) -> list[str]:
    """`main`'s arguments for an HTTP server of one worker: its app loads in this process,
    whose stderr capsys reads (a worker's goes to the real one: test_http_start.py checks that
    case on a real process)."""
    return ["--state-dir", str(state_dir), "--http", "--port", "0", "--workers", "1",
            "--token", TOKEN]  # fmt: skip


def test_an_allowed_path_that_is_no_directory_stops_the_server_with_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-dir"
    argv = _in_process_http(tmp_path)
    assert main([*argv, "--allow-paths", str(missing)]) == 2
    assert f"--allow-paths {missing}: not a directory" in capsys.readouterr().err


def test_a_spec_may_use_the_servers_own_ray_cluster_without_allow_plugins(tmp_path: Path) -> None:
    own = answers(1, sandbox={"type": "ray", "address": "10.9.9.9:6379"})
    admitted = Privileges.for_http().admit(
        CampaignSpec.model_validate(own), tmp_path, ray_address="10.9.9.9:6379"
    )
    assert admitted.sandbox == RaySandboxConfig(address="10.9.9.9:6379")
    with pytest.raises(InvalidInput, match="--allow-plugins"):
        Privileges.for_http().admit(CampaignSpec.model_validate(own), tmp_path, ray_address=None)


SECRET_ENV = "MCP_EVALSERVER_TEST_SERVER_SECRET"
SECRET = "server-secret-4f1c"
KEY_ENV = "MCP_EVALSERVER_TEST_PROVIDER_KEY"
KEY = "sk-provider-77aa"


@pytest.fixture
def server_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Variables of the server's environment (the servers are children of this test)."""
    monkeypatch.setenv(SECRET_ENV, SECRET)
    monkeypatch.setenv(KEY_ENV, KEY)


def endpoint() -> FakeOpenAI:
    """An OpenAI-compatible endpoint that answers the agent (submit "1") and the judge (yes)."""

    def answer(body: dict[str, Any]) -> Reply:
        if body.get("tools"):
            return fake_call("submit", answer="1")
        return Reply(content=json.dumps({"fulfilled": True, "reason": "scripted"}))

    return FakeOpenAI([], then=answer)


def model_agent(url: str, key_env: str) -> dict[str, Any]:
    return {"type": "openai", "model": "m", "base_url": url, "api_key_env": key_env,
            "retry_base_delay_s": 0.0, "retry_attempts": 1}  # fmt: skip


def judge(url: str | None, key_env: str) -> dict[str, Any]:
    config = {"type": "llm_judge", "model": "m", "api_key_env": key_env, "rubric": ["is 1"]}
    return config if url is None else {**config, "base_url": url}


async def created_elsewhere(state_dir: Path, campaign_id: str, spec: dict[str, Any]) -> None:
    """Records a campaign in another process, which then exits: what a killed server leaves."""
    code = (
        "import anyio, json, sys\n"
        "from pathlib import Path\n"
        "from mcp_evalserver.engine.store import CampaignStore\n"
        "from mcp_evalserver.spec.campaign import CampaignSpec\n"
        "spec = CampaignSpec.model_validate(json.loads(sys.argv[2]))\n"
        "anyio.run(CampaignStore(Path(sys.argv[1])).create, spec, sys.argv[3])\n"
    )
    argv = [sys.executable, "-c", code, str(state_dir), json.dumps(spec), campaign_id]
    await anyio.run_process(argv, check=True)


def ledgers(state_dir: Path) -> dict[str, str]:
    store = CampaignStore(state_dir)
    return {cid: (store.directory(cid) / "ledger.jsonl").read_text() for cid in store.list_ids()}


async def test_a_token_holder_cannot_send_a_server_secret_to_an_endpoint_of_their_choosing(
    tmp_path: Path, server_secrets: None
) -> None:
    state_dir = tmp_path / "state"
    with serving(endpoint()) as attacker:
        agent = model_agent(attacker.url, SECRET_ENV)
        scorer = judge(attacker.url, SECRET_ENV)
        # Made by the user's own process (stdio, CLI): an HTTP caller may not make it run.
        store = CampaignStore(state_dir)
        made_over_stdio = await store.create(CampaignSpec.model_validate(answers(1, agent=agent)))
        # A sweep to resume runs its recorded spec, whatever spec the caller gives.
        sweep = plan_sweep(
            store, CampaignSpec.model_validate(answers(1, agent=agent)), levels=[1], tasks=1
        )
        combined = {"type": "all_of", "scorers": [{"type": "exact"}, scorer]}
        attempts: list[tuple[str, dict[str, Any]]] = [
            ("start_campaign", {"spec": answers(1, agent=agent)}),
            ("start_campaign", {"spec": answers(1, scorer=scorer)}),
            ("start_campaign", {"spec": answers(1, scorer=combined)}),
            ("sweep_concurrency", {"spec": answers(1, agent=agent), "levels": [1]}),
            ("resume", {"campaign_id": made_over_stdio}),
            ("sweep_concurrency", {"spec": answer_spec(1), "levels": [1], "sweep_id": sweep["id"]}),
        ]
        with anyio.fail_after(180):
            async with (
                # Not resumed at start: the `resume` call is what would run it. The endpoint
                # is allowed: what is refused is the variable.
                http_server(
                    state_dir, "--no-resume-running", "--allow-endpoints", attacker.url
                ) as url,
                http_client(url) as client,
            ):
                errors = [await attempt(client, tool, **arguments) for tool, arguments in attempts]
                # A campaign it may run, then an attempt to re-grade it with that judge.
                started = await call(client, "start_campaign", spec=answer_spec(1))
                campaign_id = started["campaign_id"]
                await call(client, "campaign_status", campaign_id=campaign_id, wait_s=60)
                before = ledgers(state_dir)
                errors.append(
                    await attempt(
                        client, "score", campaign_id=campaign_id, rescore=True, scorer=scorer
                    )
                )
    received = [seen.authorization for seen in attacker.seen]
    assert received == [], f"the client's endpoint received {received}"
    refusals = [error for error in errors if error is not None]
    assert len(refusals) == len(errors), f"accepted (None): {errors}"
    for refusal in refusals:
        assert f"api_key_env {SECRET_ENV!r} is not a variable" in refusal, refusal
        assert f"--allow-env {SECRET_ENV}" in refusal, refusal
    assert "agent.api_key_env" in refusals[0]
    assert "scorer.api_key_env" in refusals[1]
    assert "scorer.scorers[1].api_key_env" in refusals[2], "found inside a combined scorer"
    assert f"campaign {made_over_stdio}" in refusals[4]
    assert f"sweep {sweep['id']}" in refusals[5]
    # Nothing recorded: no new campaign, no new sweep, every ledger as it was.
    assert ledgers(state_dir) == before
    assert sorted(before) == sorted([made_over_stdio, campaign_id])
    assert [path.name for path in sweeps_dir(store).iterdir()] == [sweep["id"]]


async def test_an_http_server_does_not_resume_by_itself_a_campaign_that_would_send_a_secret(
    tmp_path: Path, server_secrets: None
) -> None:
    state_dir = tmp_path / "state"
    with serving(endpoint()) as attacker:
        # Both interrupted (created, never run); the server resumes them oldest first, one
        # after the other: once `later` waits for a client, `leaky` has had its turn.
        leaky, later = "leaky", "later"
        await created_elsewhere(
            state_dir, leaky, answers(1, agent=model_agent(attacker.url, SECRET_ENV))
        )
        await created_elsewhere(state_dir, later, answer_spec(1, "external"))
        ledger = CampaignStore(state_dir).directory(leaky) / "ledger.jsonl"
        os.utime(ledger, (1, 1))
        before = ledger.read_text()
        with anyio.fail_after(120):
            async with http_server(state_dir) as url, http_client(url) as client:
                claim = await call(client, "claim_trajectory", campaign_id=later, wait_s=60)
                await call(client, "submit", claim_id=claim["claim_id"], answer="1")
                # Were it running, this would wait for it to finish (and send the secret).
                status = await call(client, "campaign_status", campaign_id=leaky, wait_s=30)
                listing = await call(client, "list_campaigns")
    assert [seen.authorization for seen in attacker.seen] == []
    assert status["active"] is False
    assert listing["interrupted"] == [leaky], "left for `mcp-evalserver resume` (the CLI)"
    assert ledger.read_text() == before


async def test_an_allowed_key_goes_only_to_the_allowed_endpoints(
    tmp_path: Path, server_secrets: None
) -> None:
    state_dir = tmp_path / "state"
    with serving(endpoint()) as provider, serving(endpoint()) as attacker:
        allowed = ("--allow-env", KEY_ENV, "--allow-endpoints", provider.url)
        with anyio.fail_after(180):
            async with (
                http_server(state_dir, *allowed) as url,
                http_client(url) as client,
            ):
                elsewhere = [
                    await attempt(client, "start_campaign", spec=spec)
                    for spec in (
                        answers(1, agent=model_agent(attacker.url, KEY_ENV)),
                        # A look-alike: the allowed endpoint is a prefix of its text only.
                        answers(1, agent=model_agent(provider.url + "x", KEY_ENV)),
                        answers(1, scorer=judge(attacker.url, KEY_ENV)),
                        answers(1, agent=model_agent(provider.url, SECRET_ENV)),
                    )
                ]
                started = await call(
                    client,
                    "start_campaign",
                    spec=answers(
                        2,
                        agent=model_agent(provider.url, KEY_ENV),
                        scorer=judge(provider.url, KEY_ENV),
                    ),
                )
                status = await call(
                    client, "campaign_status", campaign_id=started["campaign_id"], wait_s=60
                )
    assert attacker.requests == 0
    refusals = [error for error in elsewhere if error is not None]
    assert len(refusals) == len(elsewhere)
    for refusal in refusals[:3]:
        assert "is not a model endpoint this server lets its HTTP clients use" in refusal
        assert "--allow-endpoints" in refusal, refusal
    assert f"{provider.url}x" in refusals[1]
    assert "scorer.base_url" in refusals[2]
    assert f"--allow-env {SECRET_ENV}" in refusals[3]
    # The allowed campaign ran with the key: two agent calls and two judge calls.
    assert status["status"] == "finished", status
    assert status["resolved"] == 2, "graded by the judge, which says yes"
    assert [seen.authorization for seen in provider.seen] == [f"Bearer {KEY}"] * 4
    assert recorded(state_dir) == [started["campaign_id"]]


@pytest.mark.parametrize(
    "base_url",
    [
        "https://api.openai.com.attacker.net/v1",
        "https://api.openai.com@attacker.net/v1",
        "https://api.openai.com:8443/v1",
        "http://api.openai.com/v1",
        "https://api.openai.com\\@attacker.net/v1",
        "https://attacker.net/v1?https://api.openai.com/v1",
    ],
)
def test_a_look_alike_of_an_allowed_endpoint_gets_no_key(
    tmp_path: Path, server_secrets: None, base_url: str
) -> None:
    privileges = Privileges.for_http(allow_env=[KEY_ENV])
    spec = CampaignSpec.model_validate(answers(1, agent=model_agent(base_url, KEY_ENV)))
    with pytest.raises(InvalidInput, match="--allow-endpoints"):
        privileges.admit(spec, tmp_path)


def test_with_allow_env_alone_the_key_goes_to_openai_and_the_operators_base_url(
    tmp_path: Path, server_secrets: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    privileges = Privileges.for_http(allow_env=[KEY_ENV])
    for base_url in (
        None,
        "https://api.openai.com/v1",
        "https://API.openai.com/v1/",
        "http://127.0.0.1:9/v1",
    ):
        agent = {**model_agent("", KEY_ENV), "base_url": base_url}
        spec = CampaignSpec.model_validate(answers(1, agent=agent, scorer=judge(None, KEY_ENV)))
        assert privileges.admit(spec, tmp_path).agent == spec.agent
    # A keyless endpoint needs allowing as any other, and names no variable.
    keyless = CampaignSpec.model_validate(
        answers(1, agent={**model_agent("http://10.0.0.9/v1", ""), "api_key_env": None})
    )
    Privileges.for_http(allow_endpoints=["http://10.0.0.9/v1"]).admit(keyless, tmp_path)
    with pytest.raises(InvalidInput, match="is not a model endpoint"):
        Privileges.for_http().admit(keyless, tmp_path)


def test_a_program_gets_only_the_variables_of_allow_env_that_its_spec_names_over_http(
    tmp_path: Path, server_secrets: None
) -> None:
    privileges = Privileges.for_http(allow_plugins=True, allow_env=[KEY_ENV])
    agent: dict[str, Any] = {"type": "command", "command": ["true"], "pass_env": [KEY_ENV]}
    allowed = CampaignSpec.model_validate(answers(1, agent=agent))
    assert privileges.admit(allowed, tmp_path).agent == allowed.agent
    # The cheat: a tenant's program asking for the server's other secrets by name.
    for name in (SECRET_ENV, "OTEL_EXPORTER_OTLP_HEADERS"):
        asking = CampaignSpec.model_validate(answers(1, agent={**agent, "pass_env": [name]}))
        with pytest.raises(InvalidInput, match=f"agent.pass_env '{name}'.*--allow-env {name}"):
            privileges.admit(asking, tmp_path)


def test_an_allowed_endpoint_that_is_no_url_stops_the_server_with_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _in_process_http(tmp_path)
    assert main([*argv, "--allow-endpoints", "api.example.com"]) == 2
    assert "--allow-endpoints api.example.com: give an http(s) URL" in capsys.readouterr().err


def test_a_cli_agents_bridge_follows_the_same_endpoint_and_key_rules_as_the_openai_agent(
    tmp_path: Path, server_secrets: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    privileges = Privileges.for_http(allow_env=[KEY_ENV])
    for kind, base_url in (
        ("claude-code", None),
        ("claude-code", "https://api.anthropic.com"),
        ("claude-code", "http://127.0.0.1:9"),
        ("opencode", "https://api.anthropic.com"),
        ("opencode", "http://127.0.0.1:9"),
        ("codex", "https://api.openai.com/v1"),
    ):
        agent = {"type": kind, "model": "m", "base_url": base_url, "api_key_env": KEY_ENV}
        spec = CampaignSpec.model_validate(answers(1, agent=agent))
        assert privileges.admit(spec, tmp_path).agent == spec.agent
    for kind, base_url, refused in (
        ("claude-code", "https://attacker.net", "is not a model endpoint"),
        ("opencode", "https://attacker.net", "is not a model endpoint"),
        # Anthropic's endpoint is not OpenAI's: a codex agent may not name it unallowed.
        ("codex", "https://api.anthropic.com", "is not a model endpoint"),
    ):
        agent = {"type": kind, "model": "m", "base_url": base_url, "api_key_env": KEY_ENV}
        with pytest.raises(InvalidInput, match=refused):
            privileges.admit(CampaignSpec.model_validate(answers(1, agent=agent)), tmp_path)
    other_key = {"type": "claude-code", "model": "m", "api_key_env": "SOME_OTHER_SECRET"}
    with pytest.raises(InvalidInput, match="--allow-env"):
        privileges.admit(CampaignSpec.model_validate(answers(1, agent=other_key)), tmp_path)


def test_a_gemini_cli_agents_endpoint_is_googles_the_operators_or_an_allowed_one(
    tmp_path: Path, server_secrets: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:9")
    privileges = Privileges.for_http(allow_env=[KEY_ENV])
    for base_url in (None, "https://generativelanguage.googleapis.com", "http://127.0.0.1:9"):
        agent = {"type": "gemini-cli", "model": "m", "base_url": base_url, "api_key_env": KEY_ENV}
        spec = CampaignSpec.model_validate(answers(1, agent=agent))
        assert privileges.admit(spec, tmp_path).agent == spec.agent
    agent = {"type": "gemini-cli", "model": "m", "base_url": "https://api.openai.com/v1",
             "api_key_env": KEY_ENV}  # fmt: skip
    with pytest.raises(InvalidInput, match="is not a model endpoint"):
        privileges.admit(CampaignSpec.model_validate(answers(1, agent=agent)), tmp_path)
