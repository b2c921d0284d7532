"""The openai agent in a real workspace (local backend): it execs, writes; its diff is graded."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.scoring.factory import build_scorer
from mcp_evalserver.spec.scorers import CommandScorerConfig
from tests.agents.fake_openai import FakeOpenAI, Reply, call, serving
from tests.agents.helpers import KEY, KEY_ENV, artifact_text, openai_agent, records, run, spec
from testsupport.repos import BUGGY, FIXED, git_repo

pytestmark = [pytest.mark.anyio, pytest.mark.root]

CHECK = "python3 -c 'import calc; assert calc.add(2, 2) == 4'"
# The product\'s `command` scorer: the patch applied in a fresh workspace, then CHECK.
CHECK_SCORER = build_scorer(CommandScorerConfig(command=CHECK))


@pytest.fixture(autouse=True)
def _a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def _repo_task(root: Path) -> dict[str, str]:
    """A committed git repository with a bug: the task's instance."""
    path = git_repo(root / "repo")
    return {"id": "calc", "path": str(path), "prompt": "calc.add subtracts; make it add."}


async def test_a_model_that_fixes_the_bug_and_submits_hands_in_its_workspace_diff(
    tmp_path: Path,
) -> None:
    task = _repo_task(tmp_path)
    script = [
        call("exec", command="cat calc.py"),
        call("read_file", path="missing.py"),
        call("exec", command="seq 1 5000 > /tmp/big.txt"),
        call("read_file", path="/tmp/big.txt"),
        call("write_file", path="calc.py", content=FIXED),
        call("edit_file", path="calc.py", old_text="return a - b", new_text="x"),
        call("edit_file", path="calc.py", old_text="(a, b):", new_text="(a, b):  # fixed"),
        call("exec", command=CHECK + " && echo checked"),
        call("submit", answer="fixed add"),
    ]
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(60):
        state, directory = await run(
            tmp_path / "state",
            spec([task], openai_agent(fake.url, tool_output_bytes=1024)),
            CHECK_SCORER,
        )

    assert state.trajectories["calc@0"].outcome == "resolved"
    names = [tool["function"]["name"] for tool in fake.seen[0].body["tools"]]
    assert names == [
        "exec",
        "read_file",
        "edit_file",
        "write_file",
        "search",
        "list_files",
        "submit",
    ]
    # What each tool call gave the model is in the next request.
    told = [fake.seen[n].body["messages"][-1]["content"] for n in range(1, 9)]
    assert told[0].startswith("exit code: 0")
    assert "return a - b" in told[0]
    assert told[1].startswith("error:")
    assert "missing.py" in told[1]
    # A long file shows its first lines, numbered, within the agent's output cap, and where
    # to read on.
    assert told[3].startswith("     1\t1\n     2\t2\n     3\t3\n")
    assert told[3].endswith("[lines 1-102 of 5,000; next: offset=103]")
    assert told[4] == f"wrote {len(FIXED)} bytes to calc.py (it replaced {len(BUGGY)} bytes)"
    # An edit that matches nothing says which line came closest; one that matches shows it.
    assert told[5].startswith("error: old_text is not in calc.py (0 matches); the closest line")
    assert told[6] == (
        "edited (1 replaced); lines 1-1 now:\n"
        "     1\tdef add(a, b):  # fixed\n     2\t    return a + b"
    )
    assert told[7].startswith("exit code: 0")
    assert "checked" in told[7]

    (generated,) = records(directory, "generated")
    assert generated["submission"]["answer"] == "fixed add"
    patch = artifact_text(directory, generated["submission"]["patch"])
    assert "-    return a - b" in patch
    assert "+    return a + b" in patch
    assert Path(task["path"], "calc.py").read_text() == BUGGY


async def test_a_model_searches_and_lists_the_repository_and_reads_hits_as_lines(
    tmp_path: Path,
) -> None:
    task = _repo_task(tmp_path)
    script = [
        call("exec", command="mkdir -p lib && seq 1 300 | sed 's/^/row /' > lib/rows.txt"),
        call("search", pattern=r"return a [-+] b"),
        call("search", pattern="^row 1", path="lib", glob="*.txt"),
        call("search", pattern="add(", glob=""),
        call("list_files", glob="*.py"),
        call("list_files", path="lib", glob=""),
        call("write_file", path="calc.py", content=FIXED),
        call("submit"),
    ]
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(60):
        agent = openai_agent(fake.url, tool_output_bytes=1024)
        state, _ = await run(tmp_path / "state", spec([task], agent), CHECK_SCORER)

    assert state.trajectories["calc@0"].outcome == "resolved"
    told = [fake.seen[n].body["messages"][-1]["content"] for n in range(2, 7)]
    assert told[0] == "calc.py:2:    return a - b"
    # row 1, row 10..19, row 100..199: 111 lines, whole lines kept within the agent's cap.
    *rows, cut = told[1].splitlines()
    assert rows[:3] == ["lib/rows.txt:1:row 1", "lib/rows.txt:10:row 10", "lib/rows.txt:11:row 11"]
    assert len("\n".join(rows).encode()) <= 1024
    assert cut == (
        f"[{111 - len(rows)} more lines not shown (the output cap is 1024 bytes); narrow with "
        "path or glob]"
    )
    assert told[2].startswith("error: invalid regular expression 'add(': missing ), ")
    assert "at position 3" in told[2]
    assert told[3] == "calc.py"
    assert told[4] == "lib/rows.txt"


async def test_a_model_out_of_steps_hands_in_what_its_workspace_holds_and_says_so(
    tmp_path: Path,
) -> None:
    task = _repo_task(tmp_path)
    script = [call("write_file", path="calc.py", content=FIXED), call("exec", command="sleep 60")]
    fake = FakeOpenAI(script, then=Reply(content="still thinking"))
    with serving(fake), anyio.fail_after(60):
        agent = openai_agent(fake.url, max_steps=3, command_timeout_s=0.5)
        state, directory = await run(tmp_path / "state", spec([task], agent), CHECK_SCORER)

    assert fake.requests == 3
    # A command past its time limit is killed and the model is told so.
    timed_out = fake.seen[2].body["messages"][-1]["content"]
    assert timed_out.startswith("exit code: ")
    assert "(killed: the command ran longer than 0.5s)" in timed_out
    assert state.trajectories["calc@0"].outcome == "resolved"
    (generated,) = records(directory, "generated")
    transcript = json.loads(artifact_text(directory, generated["submission"]["transcript"]))
    events = [entry["event"] for entry in transcript if "event" in entry]
    assert events[-2:] == ["max_steps_reached", "handed_in_unsubmitted"]
    assert "+    return a + b" in artifact_text(directory, generated["submission"]["patch"])


async def test_with_checkpoints_enabled_a_model_saves_tries_and_rolls_back_a_failed_attempt(
    tmp_path: Path,
) -> None:
    task = _repo_task(tmp_path)
    script = [
        call("write_file", path="calc.py", content=FIXED),
        call("checkpoint"),
        call("exec", command="rm calc.py && echo 'def add(a, b): return 0' > other.py"),
        call("restore", checkpoint_id="cp1"),  # a fresh instance numbers its checkpoints
        call("restore", checkpoint_id="cp9"),
        call("submit"),
    ]
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(60):
        state, directory = await run(
            tmp_path / "state", spec([task], openai_agent(fake.url, checkpoints=True)), CHECK_SCORER
        )

    assert state.trajectories["calc@0"].outcome == "resolved"
    names = [tool["function"]["name"] for tool in fake.seen[0].body["tools"]]
    assert names == [
        "exec", "read_file", "edit_file", "write_file", "search", "list_files", "checkpoint",
        "restore", "submit",
    ]  # fmt: skip
    told = [fake.seen[n].body["messages"][-1]["content"] for n in range(1, 6)]
    assert told[1] == "checkpoint id: cp1"
    assert told[3] == "restored checkpoint cp1"
    assert told[4].startswith("error: no checkpoint 'cp9'")
    (generated,) = records(directory, "generated")
    patch = artifact_text(directory, generated["submission"]["patch"])
    assert "+    return a + b" in patch
    assert "other.py" not in patch  # what came after the checkpoint is gone
