"""The `command` agent: a real program per trajectory, acting through its own MCP endpoint."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_evalserver.agents import command
from mcp_evalserver.agents.command import CommandAgent
from mcp_evalserver.agents.factory import build_agent
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.factory import build_scorer
from mcp_evalserver.server.mcp_app import serve_trajectory
from mcp_evalserver.spec.agents import CommandAgentConfig
from mcp_evalserver.spec.scorers import CommandScorerConfig
from tests.agents.helpers import artifact_text, records, run, spec
from testsupport.repos import BUGGY, git_repo

pytestmark = pytest.mark.anyio

PROGRAM = Path(__file__).with_name("command_program.py")
CHECK = "python3 -c 'import calc; assert calc.add(2, 2) == 4'"
# The product\'s `command` scorer: the patch applied in a fresh workspace, then CHECK.
CHECK_SCORER = build_scorer(CommandScorerConfig(command=CHECK))
ANSWER_TASK = {"id": "q", "prompt": "2 + 2?", "answer": "4"}


def program(mode: str, *arguments: str | Path, **fields: Any) -> dict[str, Any]:
    """A `command` agent config running the test program in `mode`."""
    command = [sys.executable, str(PROGRAM), mode, *map(str, arguments)]
    return {"type": "command", "command": command} | fields


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    """Where the test program leaves what it saw (its requests, its pids, its branches)."""
    path = tmp_path / "notes"
    path.mkdir()
    return path


def repo_task(root: Path) -> dict[str, str]:
    return {"id": "calc", "path": str(git_repo(root / "repo")), "prompt": "make add() add"}


@pytest.mark.root
async def test_a_program_fixes_the_bug_through_its_endpoint_and_its_submission_resolves(
    tmp_path: Path, notes: Path
) -> None:
    task = repo_task(tmp_path)
    agent = program("fix", notes, env={"AGENT_EXTRA": "from the config"})
    with anyio.fail_after(120):
        state, directory = await run(tmp_path / "state", spec([task], agent), CHECK_SCORER)

    assert state.trajectories["calc@0"].outcome == "resolved"
    seen = json.loads((notes / "calc@0.json").read_text())
    assert seen["task_id"] == "calc"
    assert seen["prompt"] == seen["prompt_file"] == "make add() add"
    assert seen["extra"] == "from the config"
    assert seen["attempt"] == "1"
    assert len(seen["idempotency_key"]) == 32
    # Only this trajectory's tools, and none takes a trajectory or claim to name another one.
    assert seen["tools"] == {
        "sandbox_exec": ["command", "max_output_chars", "stdin", "timeout_s"],
        "read_file": ["limit", "max_bytes", "offset", "path"],
        "edit_file": ["new_text", "old_text", "path", "replace_all"],
        "write_file": ["content", "path"],
        "search": ["glob", "path", "pattern"],
        "list_files": ["glob", "path"],
        "get_diff": [],
        "checkpoint": [],
        "restore": ["checkpoint_id"],
        "fork_trajectory": ["n"],
        "submit": ["answer"],
        "report_usage": [
            "cached_input_tokens",
            "cost_usd",
            "input_tokens",
            "model",
            "output_tokens",
            "requests",
        ],
    }
    assert seen["before"] == BUGGY
    assert seen["check"] == 0
    assert seen["diff_files"] == ["calc.py"]
    assert seen["submitted"]["trajectory_id"] == "calc@0"
    assert seen["after_submit_refused"]

    (generated,) = records(directory, "generated")
    assert generated["submission"]["answer"] == "fixed by calc@0"
    assert "+    return a + b" in artifact_text(directory, generated["submission"]["patch"])
    transcript = json.loads(artifact_text(directory, generated["submission"]["transcript"]))
    assert [entry.get("tool") for entry in transcript[1:6]] == [
        "read_file",
        "write_file",
        "sandbox_exec",
        "get_diff",
        "submit",
    ]
    assert transcript[3]["exit_code"] == 0
    assert transcript[-1]["event"] == "exited"
    assert transcript[-1]["exit_code"] == 0
    assert Path(task["path"], "calc.py").read_text() == BUGGY


@pytest.mark.root
async def test_two_trajectories_at_once_cannot_reach_each_others_endpoint(
    tmp_path: Path, notes: Path
) -> None:
    campaign = spec(
        [repo_task(tmp_path)], program("probe", notes), samples=2, concurrency=2, per_instance=2
    )
    with anyio.fail_after(120):
        state, _ = await run(tmp_path / "state", campaign, CHECK_SCORER)

    # Each program waited for the other to publish its URL: both ran at the same time.
    for trajectory in ("calc@0", "calc@1"):
        assert state.trajectories[trajectory].outcome == "resolved"
        seen = json.loads((notes / f"{trajectory}.json").read_text())
        assert seen["other_url_differs"]
        assert seen["other_with_my_token"] == 401
        assert seen["mine_with_a_wrong_token"] == 401
        assert seen["submitted"]["trajectory_id"] == trajectory


@pytest.mark.root
async def test_a_program_that_exits_cleanly_without_submitting_hands_in_its_workspace_diff(
    tmp_path: Path,
) -> None:
    campaign = spec([repo_task(tmp_path)], program("edit-and-exit"))
    with anyio.fail_after(120):
        state, directory = await run(tmp_path / "state", campaign, CHECK_SCORER)

    assert state.trajectories["calc@0"].outcome == "resolved"
    (generated,) = records(directory, "generated")
    assert generated["submission"]["answer"] is None
    assert "+    return a + b" in artifact_text(directory, generated["submission"]["patch"])
    transcript = json.loads(artifact_text(directory, generated["submission"]["transcript"]))
    assert transcript[-1] == {"event": "handed_in_unsubmitted"}


async def test_a_program_that_fails_without_submitting_is_an_error_showing_its_stderr(
    tmp_path: Path,
) -> None:
    # A string is run by the shell.
    agent = {"type": "command", "command": shlex.join([sys.executable, str(PROGRAM), "fail"])}
    with anyio.fail_after(60):
        state, directory = await run(tmp_path / "state", spec([ANSWER_TASK], agent))

    assert state.trajectories["q@0"].outcome == "error"
    (failed,) = records(directory, "generation_failed")
    assert failed["error"]["type"] == "ProgramFailed"
    assert "exited with status 3 without submitting" in failed["error"]["message"]
    assert "no idea how to fix calc.py" in failed["error"]["message"]


async def test_a_program_answers_a_task_without_a_workspace_and_is_told_it_has_none(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        state, directory = await run(tmp_path / "state", spec([ANSWER_TASK], program("answer")))

    assert state.trajectories["q@0"].outcome == "resolved"
    (generated,) = records(directory, "generated")
    assert generated["submission"]["answer"] == "4"
    transcript = json.loads(artifact_text(directory, generated["submission"]["transcript"]))
    assert "has no workspace" in transcript[-1]["stdout"]
    assert "submit an `answer` instead" in transcript[-1]["stdout"]


async def test_a_program_gets_the_least_environment_and_never_a_secret_of_the_servers(
    tmp_path: Path, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Planted in the server's environment: a secret nothing names, an OTLP exporter's
    # headers (Langfuse keys travel there) and the server's own token.
    monkeypatch.setenv("SECRET_X", "planted-secret-9f2c")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Basic bGYtc2VjcmV0")
    monkeypatch.setenv("MCP_EVALSERVER_TOKEN", "the-servers-own-token")
    monkeypatch.setenv("PASSED_KEY", "named-by-the-spec")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    # What it is handed, not what it could find: it runs as the server's user (a host program
    # needs --allow-plugins over HTTP), so /proc/<server>/environ is its to read.
    dump = f"env > {notes}/env"
    agent = {
        "type": "command",
        "command": ["sh", "-c", dump],
        "env": {"SPEC_VAR": "from the spec"},
        "pass_env": ["PASSED_KEY", "NOT_SET_ANYWHERE"],
    }
    with anyio.fail_after(60):
        await run(tmp_path / "state", spec([ANSWER_TASK], agent))
    seen = dict(line.split("=", 1) for line in (notes / "env").read_text().splitlines())
    everything = (notes / "env").read_text()
    assert "planted-secret-9f2c" not in everything
    assert "bGYtc2VjcmV0" not in everything
    assert "the-servers-own-token" not in everything
    assert seen["PASSED_KEY"] == "named-by-the-spec"
    assert seen["SPEC_VAR"] == "from the spec"
    assert seen["OPENAI_BASE_URL"] == "http://127.0.0.1:9/v1"
    assert seen["PATH"] == os.environ["PATH"]
    assert seen["MCP_EVALSERVER_TRAJECTORY"] == "q@0"
    # Nothing else of the server's: the base, what the spec named or gave, the trajectory's.
    base = {"PATH", "HOME", "LANG", "OPENAI_BASE_URL", "PASSED_KEY", "SPEC_VAR"}
    shell = {"PWD", "SHLVL", "_", "OLDPWD"}  # what `sh` itself sets
    assert set(seen) - base - shell == {name for name in seen if name.startswith("MCP_EVALSERVER_")}


async def test_a_program_that_lingers_after_submitting_is_stopped_and_its_submission_stands(
    tmp_path: Path, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(command, "EXIT_GRACE_S", 0.5)
    campaign = spec([ANSWER_TASK], program("answer", notes), trajectory_timeout_s=60)
    with anyio.fail_after(30):
        state, directory = await run(tmp_path / "state", campaign)

    assert (notes / "submitted").exists()
    assert state.trajectories["q@0"].outcome == "resolved"
    (generated,) = records(directory, "generated")
    transcript = json.loads(artifact_text(directory, generated["submission"]["transcript"]))
    assert transcript[-1]["exit_code"] == -9


def test_the_docs_command_agent_example_builds_a_command_agent() -> None:
    page = (Path(__file__).parents[2] / "docs" / "reference" / "agents.md").read_text()
    section = page.split("## Your own agent program: `command`", 1)[1]
    example = section.split("```json\n", 1)[1].split("```", 1)[0]
    campaign = spec([ANSWER_TASK], json.loads("{" + example + "}")["agent"])
    assert isinstance(campaign.agent, CommandAgentConfig)
    built = build_agent(campaign.agent, trajectory_endpoints=serve_trajectory)
    assert isinstance(built, CommandAgent)


def test_a_command_agent_without_an_endpoint_factory_is_refused_with_what_to_do() -> None:
    campaign = spec([ANSWER_TASK], program("answer", "/nonexistent"))
    with pytest.raises(InvalidInput, match="run the campaign with `mcp-evalserver run`"):
        build_agent(campaign.agent)


def _gone(pid: int) -> bool:
    """Whether a process is dead: no longer there, or a zombie nobody reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def test_a_program_that_hangs_is_killed_with_its_children_at_the_trajectory_timeout(
    tmp_path: Path, notes: Path
) -> None:
    # Long enough for the program to start and write its pids (~1 s at a load of 7).
    campaign = spec([ANSWER_TASK], program("hang", notes), trajectory_timeout_s=4)
    with anyio.fail_after(60):
        state, _ = await run(tmp_path / "state", campaign)

    assert state.trajectories["q@0"].outcome == "timeout"
    pids = json.loads((notes / "pids.json").read_text())
    assert _gone(pids["program"])
    assert _gone(pids["child"])


@pytest.mark.root
async def test_a_program_forks_its_trajectory_and_each_branch_runs_the_program_in_a_copy(
    tmp_path: Path, notes: Path
) -> None:
    task = repo_task(tmp_path)
    with anyio.fail_after(180):
        state, _ = await run(
            tmp_path / "state", spec([task], program("branch", notes)), CHECK_SCORER
        )

    outcomes = {tid: t.outcome for tid, t in state.trajectories.items()}
    assert outcomes == {"calc@0": "failed", "calc@0.1": "failed", "calc@0.2": "resolved"}
    assert json.loads((notes / "calc@0.json").read_text())["branches"] == ["calc@0.1", "calc@0.2"]
    for branch in ("calc@0.1", "calc@0.2"):
        # The root's files at the fork, nothing it wrote after.
        assert json.loads((notes / f"{branch}.json").read_text())["files"] == [
            "calc.py",
            "note.txt",
        ]
        assert state.trajectories[branch].parent == "calc@0"


#: What a cheating program reports, and whether each report must be refused.
CHEATS: list[tuple[dict[str, Any], bool]] = [
    ({"model": "gpt-4o", "input_tokens": -1_000_000}, True),  # to lower the total
    ({"cost_usd": -5.0}, True),
    ({"cost_usd": 1e9}, True),  # absurd
    ({"model": "gpt-4o", "input_tokens": 10**12}, True),
    ({"model": "gpt-4o", "input_tokens": 5, "cached_input_tokens": 10}, True),
    ({"model": "its-own-model", "cost_usd": 0.5}, False),  # honest: the provider's cost
]
#: Under a budget, a report whose cost nobody could know would slip past it.
UNPRICED = ({"model": "a-free-model", "input_tokens": 10_000}, True)


def usage_program(reports: list[tuple[dict[str, Any], bool]]) -> dict[str, Any]:
    arguments = json.dumps([report for report, _ in reports])
    return program("usage", "NOTES", env={"USAGE_REPORTS": arguments})


async def test_a_program_reporting_negative_or_absurd_usage_cannot_lower_the_cost(
    tmp_path: Path, notes: Path
) -> None:
    agent = usage_program(CHEATS)
    agent["command"][-1] = str(notes)
    with anyio.fail_after(60):
        state, directory = await run(tmp_path / "state", spec([ANSWER_TASK], agent))

    assert state.trajectories["q@0"].outcome == "resolved"
    replies = json.loads((notes / "q@0.json").read_text())
    assert [r["error"] for r in replies] == [refused for _, refused in CHEATS]
    assert "must be >= 0 (got -" in replies[0]["text"]
    assert replies[-1]["reply"]["cost_usd"] == 0.5
    assert replies[-1]["reply"]["priced_by"] == "provider"
    (usage,) = records(directory, "model_usage")
    assert usage["source"] == "reported"
    assert state.spend.priced_usd == 0.5


async def test_a_program_cannot_evade_the_budget_and_a_larger_one_finishes(
    tmp_path: Path, notes: Path
) -> None:
    # Each trajectory's program reports $0.50 honestly, among its cheats; the budget of $0.75
    # is spent by the second, which is stopped where it stands; the third never starts.
    agent = usage_program([*CHEATS, UNPRICED])
    agent["command"][-1] = str(notes)
    store = CampaignStore(tmp_path / "state")
    campaign = spec([ANSWER_TASK], agent, samples=3, concurrency=1, budget_usd=0.75)
    with anyio.fail_after(120):
        campaign_id = await store.create(campaign)
        first = await CampaignRunner(
            store, campaign_id, trajectory_endpoints=serve_trajectory
        ).run()
        directory = store.directory(campaign_id)
        assert first.spend.priced_usd == 1.0, "cheats and unpriced reports left no trace"
        assert [t.outcome for t in first.trajectories.values()] == [
            "resolved",
            "budget_exhausted",
            "budget_exhausted",
        ]
        assert first.trajectories["q@2"].attempts == 0, "never started"
        replies = json.loads((notes / "q@0.json").read_text())
        assert replies[-1]["error"]
        assert "has a budget" in replies[-1]["text"]
        finished = await CampaignRunner(
            store, campaign_id, trajectory_endpoints=serve_trajectory, budget_usd=5.0
        ).run()

    assert [t.outcome for t in finished.trajectories.values()] == ["resolved"] * 3
    assert finished.spend.priced_usd == 2.0
    generated = [g["trajectory"] for g in records(directory, "generated")]
    assert sorted(generated) == ["q@0", "q@1", "q@2"], "nothing ran twice"
