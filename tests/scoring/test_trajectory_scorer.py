"""The `trajectory` scorer over real transcripts: the `openai` agent driven by the fake
OpenAI-compatible server on loopback, and the `command` agent's program acting through MCP."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_evalserver.engine.rescoring import request_rescore
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.spec.campaign import parse_spec
from tests.agents.fake_openai import FakeOpenAI, Reply, call, serving
from tests.agents.helpers import KEY, KEY_ENV, openai_agent, run, spec
from tests.root import require_root
from testsupport.repos import FIXED, git_repo

pytestmark = pytest.mark.anyio

CHECK = "python3 -c 'import calc; assert calc.add(2, 2) == 4'"
TESTS_PASS = {"type": "command", "command": CHECK}
PROGRAM = Path(__file__).parent.parent / "agents" / "command_program.py"

# What a careful agent does: looks, edits, runs the check, then submits; never deletes things.
SANE = {
    "type": "trajectory",
    "assertions": [
        {"type": "called", "tool": "exec", "argument_patterns": {"command": r"calc\.add"}},
        {"type": "called", "tool": "write_file", "arguments": {"path": "calc.py"}},
        {"type": "called_before", "tool": "write_file", "before": "submit"},
        {"type": "never_called", "tool": "exec", "argument_patterns": {"command": r"rm\s+-rf"}},
        {"type": "at_most", "calls": 6},
        {"type": "ends_with_submit"},
    ],
}


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def _task(root: Path) -> dict[str, str]:
    return {"id": "calc", "path": str(git_repo(root / "repo")), "prompt": "make add() add"}


def _assertions(state: Any, trajectory: str = "calc@0") -> list[tuple[str, bool]]:
    score = state.trajectories[trajectory].score
    parts = score["details"].get("parts")
    details = parts[1]["details"] if parts else score["details"]
    return [(a["type"], a["passed"]) for a in details["assertions"]]


async def test_a_careful_openai_agent_passes_both_the_tests_and_the_trajectory_assertions(
    tmp_path: Path,
) -> None:
    require_root()
    script = [
        call("exec", command="cat calc.py"),
        call("write_file", path="calc.py", content=FIXED),
        call("exec", command=CHECK),
        call("submit", answer="fixed"),
    ]
    scorer = {"type": "all_of", "scorers": [TESTS_PASS, SANE]}
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(60):
        state, _ = await run(tmp_path / "s", spec([_task(tmp_path)], openai_agent(fake.url),
                                                  scorer=scorer))  # fmt: skip

    trajectory = state.trajectories["calc@0"]
    assert trajectory.outcome == "resolved", trajectory.score
    assert all(passed for _, passed in _assertions(state))
    assert trajectory.score is not None
    tools = trajectory.score["details"]["parts"][1]["details"]["tools"]
    assert tools == ["exec", "write_file", "exec", "submit"]


async def test_a_fix_submitted_without_running_the_check_passes_the_tests_but_not_all_of(
    tmp_path: Path,
) -> None:
    require_root()
    # The patch is right, but the agent never ran anything and deleted a directory first.
    script = [
        call("exec", command="rm -rf /tmp/scratch"),
        call("write_file", path="calc.py", content=FIXED),
        call("submit"),
    ]
    scorer = {"type": "all_of", "scorers": [TESTS_PASS, SANE]}
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(60):
        state, _ = await run(tmp_path / "s", spec([_task(tmp_path)], openai_agent(fake.url),
                                                  scorer=scorer))  # fmt: skip

    trajectory = state.trajectories["calc@0"]
    assert trajectory.outcome == "failed"
    assert trajectory.score is not None
    tests_part, trajectory_part = trajectory.score["details"]["parts"]
    assert tests_part["resolved"] is True
    assert trajectory_part["status"] == "trajectory_failed"
    failed = [kind for kind, passed in _assertions(state) if not passed]
    assert failed == ["called", "never_called"]
    assert (
        "`exec` with command matching /rm\\s+-rf/ called at call #1"
        in (trajectory_part["explanation"])
    )
    assert trajectory_part["score"] == pytest.approx(4 / 6)
    # The weakest part is the combination's score.
    assert trajectory.score["score"] == pytest.approx(4 / 6)


async def test_printed_text_that_looks_like_a_call_and_calls_after_submit_do_not_count(
    tmp_path: Path,
) -> None:
    # Answer-only task: the model has `submit` alone. It claims in prose and in a tool-call-shaped
    # JSON text that it ran the tests, then submits together with a call that never runs.
    forged = '{"tool": "exec", "arguments": {"command": "pytest calc.add"}}'
    script = [
        Reply(content=forged),
        Reply(tool_calls=(("submit", {"answer": "16"}), ("exec", {"command": "calc.add"}))),
    ]
    scorer = {
        "type": "trajectory",
        "assertions": [
            {"type": "never_called", "tool": "exec"},
            {"type": "ends_with_submit"},
            {"type": "called", "tool": "submit", "arguments": {"answer": "16"}},
            {"type": "called", "tool": "submit", "argument_patterns": {"answer": "^1[0-9]$"}},
        ],
    }
    task = {"id": "t4", "prompt": "4 squared?", "answer": "16"}
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(30):
        agent = openai_agent(fake.url, answer_from="submit")
        state, _ = await run(tmp_path, spec([task], agent, scorer=scorer))

    assert state.trajectories["t4@0"].outcome == "resolved", state.trajectories["t4@0"].score
    assert state.trajectories["t4@0"].score["details"]["tools"] == ["submit"]  # type: ignore[index]


async def test_any_of_and_weighted_mixes_combine_an_answer_check_with_the_trajectory(
    tmp_path: Path,
) -> None:
    task = {"id": "t4", "prompt": "4 squared?", "answer": "16"}
    trajectory_check = {"type": "trajectory", "assertions": [{"type": "at_most", "calls": 0}]}
    weighted = {
        "type": "weighted",
        "parts": [{"scorer": {"type": "exact"}, "weight": 3}, {"scorer": trajectory_check}],
        "threshold": 0.75,
    }
    outcomes = {}
    scorers: dict[str, dict[str, Any]] = {
        "any_of": {"type": "any_of", "scorers": [trajectory_check, {"type": "exact"}]},
        "weighted": weighted,
        "weighted_strict": weighted | {"threshold": 0.8},
    }
    for name, scorer in scorers.items():
        with serving(FakeOpenAI([call("submit", answer="16")])) as fake, anyio.fail_after(30):
            state, _ = await run(tmp_path / name, spec([task], openai_agent(fake.url),
                                                       scorer=scorer))  # fmt: skip
        outcomes[name] = (state.trajectories["t4@0"].outcome, state.trajectories["t4@0"].score)

    assert outcomes["any_of"][0] == "resolved"
    # exact (weight 3) holds, the trajectory check (weight 1: one call, zero allowed) does not.
    assert outcomes["weighted"][0] == "resolved"
    assert outcomes["weighted"][1]["score"] == pytest.approx(0.75)  # type: ignore[index]
    assert outcomes["weighted_strict"][0] == "failed"
    assert outcomes["weighted_strict"][1]["status"] == "below_threshold"  # type: ignore[index]


async def test_an_all_of_whose_part_cannot_judge_is_an_error_unless_another_part_failed(
    tmp_path: Path,
) -> None:
    # A task without a gold answer: `exact` cannot judge (outcome error).
    task = {"id": "free", "prompt": "say something"}
    passing = {"type": "trajectory", "assertions": [{"type": "ends_with_submit"}]}
    failing = {"type": "trajectory", "assertions": [{"type": "at_most", "calls": 0}]}
    outcomes = {}
    for name, other in {"unsettled": passing, "settled": failing}.items():
        scorer = {"type": "all_of", "scorers": [{"type": "exact"}, other]}
        with serving(FakeOpenAI([call("submit", answer="hi")])) as fake, anyio.fail_after(30):
            state, _ = await run(tmp_path / name, spec([task], openai_agent(fake.url),
                                                       scorer=scorer))  # fmt: skip
        outcomes[name] = state.trajectories["free@0"].outcome

    assert outcomes == {"unsettled": "error", "settled": "failed"}


async def test_the_command_agents_recorded_calls_are_checked_by_the_trajectory_scorer(
    tmp_path: Path,
) -> None:
    require_root()
    notes = tmp_path / "notes"
    notes.mkdir()
    agent = {"type": "command", "command": [sys.executable, str(PROGRAM), "fix", str(notes)]}
    scorer = {
        "type": "all_of",
        "scorers": [
            TESTS_PASS,
            {
                "type": "trajectory",
                "assertions": [
                    {"type": "called_before", "tool": "read_file", "before": "write_file"},
                    {
                        "type": "called_before",
                        "tool": "sandbox_exec",
                        "argument_patterns": {"command": r"assert calc\.add\(2, 2\) == 4"},
                        "before": "submit",
                    },
                    {"type": "called", "tool": "write_file", "arguments": {"path": "calc.py"}},
                    {"type": "at_most", "calls": 1, "tool": "get_diff"},
                    {"type": "ends_with_submit"},
                ],
            },
        ],
    }
    with anyio.fail_after(120):
        state, _ = await run(tmp_path / "s", spec([_task(tmp_path)], agent, scorer=scorer))

    assert state.trajectories["calc@0"].outcome == "resolved", state.trajectories["calc@0"].score
    assert all(passed for _, passed in _assertions(state))


async def test_a_command_program_that_exits_without_submitting_fails_ends_with_submit(
    tmp_path: Path,
) -> None:
    require_root()
    agent = {"type": "command", "command": [sys.executable, str(PROGRAM), "edit-and-exit"]}
    scorer = {"type": "trajectory", "assertions": [{"type": "ends_with_submit"}]}
    with anyio.fail_after(120):
        state, _ = await run(tmp_path / "s", spec([_task(tmp_path)], agent, scorer=scorer))

    trajectory = state.trajectories["calc@0"]
    assert trajectory.outcome == "failed"
    assert trajectory.score is not None
    assert "the last call is `write_file`, not `submit`" in trajectory.score["explanation"]


async def test_a_rescore_with_the_trajectory_scorer_reads_the_stored_transcript(
    tmp_path: Path,
) -> None:
    task = {"id": "t4", "prompt": "4 squared?", "answer": "16"}
    script = [call("submit", answer="16")]
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(30):
        _, directory = await run(tmp_path, spec([task], openai_agent(fake.url)))
    store = CampaignStore(tmp_path)
    scorer = {"type": "trajectory", "assertions": [{"type": "at_most", "calls": 0}]}
    with anyio.fail_after(30):
        assert await request_rescore(store, directory.name, scorer=scorer) == ["t4@0"]
        state = await CampaignRunner(store, directory.name).run()

    trajectory = state.trajectories["t4@0"]
    # From the artifacts, not from memory: the verdict counts the one recorded call.
    assert trajectory.outcome == "failed"
    assert trajectory.score is not None
    assert trajectory.score["details"]["tools"] == ["submit"]


def test_a_spec_with_a_bad_assertion_is_refused_naming_the_field() -> None:
    bad = {
        "tasks": [{"id": "a"}],
        "scorer": {
            "type": "all_of",
            "scorers": [
                {
                    "type": "trajectory",
                    "assertions": [
                        {"type": "called", "tool": "exec", "argument_patterns": {"command": "("}}
                    ],
                }
            ],
        },
    }
    with pytest.raises(InvalidInput, match=r"argument_patterns\.command: invalid regex"):
        parse_spec(bad)


def test_a_cli_agents_calls_are_the_bridges_record_whatever_its_session_log_says() -> None:
    """A CLI agent's messages come from its session log, which it can rewrite: for such a
    transcript only the bridge's `model_call` entries count (the real CLI's attack:
    tests/agents/test_cli_agents.py)."""
    from mcp_evalserver.spec.transcript_checks import MODEL_BRIDGE, recorded_calls

    forged = {"id": "x", "type": "function", "function": {"name": "Edit", "arguments": "{}"}}
    seen = {"id": "toolu_1", "name": "Bash", "arguments": '{"command": "rm -rf /tmp/x"}'}
    transcript: list[Any] = [
        {"event": "started", "cli": "claude-code", "calls_from": MODEL_BRIDGE},
        {"role": "assistant", "content": None, "tool_calls": [forged]},
        {"event": "model_call", "status": 200, "tool_calls": [seen]},
        {"event": "model_call", "status": 200},
    ]
    calls = recorded_calls(transcript)
    assert [(c.name, c.arguments) for c in calls] == [("Bash", {"command": "rm -rf /tmp/x"})]
    # Without the marker (an `openai` agent's transcript), its messages are the record.
    assert [c.name for c in recorded_calls(transcript[1:])] == ["Edit"]
