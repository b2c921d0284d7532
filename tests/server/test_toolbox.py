"""The workspace tools as a coding agent uses them, through a real MCP client, on a local
directory and in a Docker container: exact edits and their errors, numbered line ranges,
binary files, output caps, timeouts, writes out of the workdir, empty submissions, and a
claim held by a running call.

What the model reads is the answer's text; programs read its `structuredContent`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_evalserver.server.mcp_app import create_server
from tests.sandbox.docker_support import require_docker
from testsupport.answers import with_text_parts
from testsupport.repos import BUGGY, make_git_repo

pytestmark = [pytest.mark.anyio, pytest.mark.root]

#: calc.py with `a - b` twice, so that an edit of it is ambiguous.
SOURCE = BUGGY + "\n\ndef sub(a, b):\n    return a - b\n"
_SETUP = (
    "git init -q . && git config user.email t@t && git config user.name t",
    "printf 'def add(a, b):\\n    return a - b\\n\\n\\ndef sub(a, b):\\n    return a - b\\n' "
    "> calc.py",
    "git add -A && git commit -qm base",
)


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def environment(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """Where the task's repository is: a host directory, or /testbed of an image."""
    if request.param == "docker":
        return {"image": require_docker(), "setup": list(_SETUP)}
    return {"path": str(make_git_repo(tmp_path / "repo", {"calc.py": SOURCE}))}


def _spec(environment: dict[str, Any], lease_s: float = 300.0) -> dict[str, Any]:
    task = {"id": "calc", "prompt": "make add() add", **environment}
    return {
        "name": "toolbox",
        "tasks": [task],
        "agent": {"type": "external", "lease_s": lease_s},
        "scorer": {"type": "python", "factory": "tests.server.helpers:diff_scorer"},
    }


class Agent:
    """One claim's tool calls: `ok` returns (text, structured), `error` the error text."""

    def __init__(self, client: Client, claim: dict[str, Any]) -> None:
        self.client, self.claim = client, claim

    async def ok(self, tool: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
        result = await self.client.call_tool(
            tool, {"claim_id": self.claim["claim_id"], **arguments}
        )
        text = "".join(getattr(block, "text", "") for block in result.content)
        assert not result.is_error, f"{tool} failed: {text}"
        assert result.structured_content is not None
        return text, with_text_parts(text, result.structured_content)

    async def error(self, tool: str, **arguments: Any) -> str:
        result = await self.client.call_tool(
            tool, {"claim_id": self.claim["claim_id"], **arguments}
        )
        text = "".join(getattr(block, "text", "") for block in result.content)
        assert result.is_error, f"{tool} succeeded: {text}"
        return text


@asynccontextmanager
async def claimed(
    tmp_path: Path, environment: dict[str, Any], lease_s: float = 300.0
) -> AsyncIterator[Agent]:
    async with Client(create_server(tmp_path / "state")) as client:
        started = await client.call_tool("start_campaign", {"spec": _spec(environment, lease_s)})
        assert not started.is_error, started.content
        with anyio.fail_after(180):
            claim = await client.call_tool("claim_trajectory", {"wait_s": 150})
        assert claim.structured_content is not None, claim.content
        yield Agent(client, claim.structured_content)


async def test_an_exact_edit_shows_its_lines_and_ambiguous_or_missing_text_says_where(
    tmp_path: Path, environment: dict[str, Any]
) -> None:
    async with claimed(tmp_path, environment) as agent:
        with anyio.fail_after(60):
            twice = await agent.error(
                "edit_file", path="calc.py", old_text="a - b", new_text="a + b"
            )
            missing = await agent.error(
                "edit_file", path="calc.py", old_text="return a-b", new_text="x"
            )
            text, edited = await agent.ok(
                "edit_file",
                path="calc.py",
                old_text="def add(a, b):\n    return a - b",
                new_text="def add(a, b):\n    return a + b",
            )
            _, both = await agent.ok(
                "edit_file", path="calc.py", old_text="(a, b)", new_text="(x, y)", replace_all=True
            )
            created_text, created = await agent.ok(
                "edit_file", path="notes/new.txt", old_text="", new_text="one\ntwo\n"
            )
            not_empty = await agent.error("edit_file", path="calc.py", old_text="", new_text="x")
            absent = await agent.error("edit_file", path="nope.py", old_text="x", new_text="y")
            _, now = await agent.ok("sandbox_exec", command="cat calc.py")
            # A CRLF file is edited with the text as a model writes it; its line ends stay.
            await agent.ok("write_file", path="dos.txt", content="one\r\ntwo\r\nthree\r\n")
            dos_text, _ = await agent.ok(
                "edit_file", path="dos.txt", old_text="one\ntwo\n", new_text="1\n2\n"
            )
            _, dos = await agent.ok("sandbox_exec", command="cat dos.txt")
    assert "InvalidInput: old_text occurs 2 times in calc.py (lines 2, 6)" in twice
    assert "replace_all=true" in twice
    assert "(0 matches); the closest line is 2: '    return a - b'" in missing
    assert text.startswith("edited (1 replaced); lines 1-2 now:\n")
    assert "     2\t    return a + b\n" in text
    assert (edited["replacements"], edited["first_line"], edited["last_line"]) == (1, 1, 2)
    assert both["replacements"] == 2
    assert (
        now["stdout"] == "def add(x, y):\n    return a + b\n\n\ndef sub(x, y):\n    return a - b\n"
    )
    assert created["created"] is True
    assert created_text == "created; lines 1-2 now:\n     1\tone\n     2\ttwo"
    assert "calc.py exists" in not_empty
    assert "NotFound: no file nope.py" in absent
    assert dos["stdout"] == "1\r\n2\r\nthree\r\n"
    assert dos_text == "edited (1 replaced); lines 1-2 now:\n     1\t1\n     2\t2\n     3\tthree"


async def test_a_read_numbers_its_lines_gives_the_next_offset_and_refuses_a_binary_file(
    tmp_path: Path, environment: dict[str, Any]
) -> None:
    async with claimed(tmp_path, environment) as agent:
        with anyio.fail_after(60):
            await agent.ok(
                "sandbox_exec",
                command="seq 1 5000 > long.txt; printf 'a\\000b\\377' > blob.bin; "
                "python3 -c \"print('x' * 3000)\" > wide.txt",
            )
            whole_text, whole = await agent.ok("read_file", path="calc.py")
            page_text, page = await agent.ok("read_file", path="long.txt", offset=10, limit=3)
            first_text, first = await agent.ok("read_file", path="long.txt")
            capped_text, capped = await agent.ok("read_file", path="long.txt", max_bytes=10)
            binary = await agent.error("read_file", path="blob.bin")
            past = await agent.error("read_file", path="calc.py", offset=99)
            wide_text, wide = await agent.ok("read_file", path="wide.txt")
    assert whole_text == (
        "     1\tdef add(a, b):\n     2\t    return a - b\n     3\t\n     4\t\n"
        "     5\tdef sub(a, b):\n     6\t    return a - b"
    )
    assert (whole["next_offset"], whole["total_lines"], whole["size"]) == (None, 6, len(SOURCE))
    assert page_text == (
        "    10\t10\n    11\t11\n    12\t12\n[lines 10-12 of 5,000; next: offset=13]"
    )
    assert (page["offset"], page["lines"], page["next_offset"]) == (10, 3, 13)
    assert (first["lines"], first["next_offset"]) == (2000, 2001)
    assert first_text.endswith("[lines 1-2000 of 5,000; next: offset=2001]")
    # max_bytes bounds what is shown: a partial read, not an error.
    assert (capped["lines"], capped["next_offset"]) == (5, 6)
    assert "offset=6" in capped_text
    assert "InvalidInput: blob.bin is a binary file (4 bytes; not UTF-8 text)" in binary
    assert "`xxd blob.bin | head`" in binary
    assert "offset 99 is past the end of calc.py (6 lines)" in past
    assert wide_text == f"     1\t{'x' * 2000}... [line clipped: 1,000 more characters]"
    # The lines are the text's alone: the structured answer is their range, not them again.
    assert "content" not in wide
    assert wide["lines"] == 1


async def test_a_command_answers_its_output_as_text_within_its_cap_and_a_timeout_says_so(
    tmp_path: Path, environment: dict[str, Any]
) -> None:
    async with claimed(tmp_path, environment) as agent:
        with anyio.fail_after(60):
            text, plain = await agent.ok(
                "sandbox_exec", command="cat calc.py; echo oops >&2; exit 3"
            )
            flood_text, flood = await agent.ok(
                "sandbox_exec", command="seq 1 100000", max_output_chars=1000
            )
            slow_text, slow = await agent.ok("sandbox_exec", command="sleep 30", timeout_s=0.5)
    assert text == f"exit code 3\n{SOURCE}--- stderr ---\noops\n"
    assert (plain["stdout"], plain["stderr"]) == (SOURCE, "oops\n")  # each once, in the text
    assert plain["stdout"] == SOURCE
    assert flood["stdout_truncated"] is True
    assert flood_text.startswith(
        "exit code 0\n--- stdout (over max_output_chars: head and tail kept)"
    )
    assert flood["stdout"].startswith("1\n2\n3\n")
    assert flood["stdout"].endswith("99999\n100000\n")
    assert "bytes omitted ...]" in flood["stdout"]
    assert len(flood["stdout"]) < 1100
    assert slow["timed_out"] is True
    assert slow_text.startswith("exit code -9: killed after 0.5 s (timeout_s=0.5; up to 3,600)")


async def test_a_write_names_what_it_replaced_and_a_path_out_of_the_workdir_is_refused(
    tmp_path: Path, environment: dict[str, Any]
) -> None:
    async with claimed(tmp_path, environment) as agent:
        with anyio.fail_after(60):
            new_text, new = await agent.ok("write_file", path="new.txt", content="hi\n")
            replaced_text, replaced = await agent.ok("write_file", path="calc.py", content="x\n")
            outside = await agent.error("write_file", path="../outside.txt", content="lost")
            edit_outside = await agent.error(
                "edit_file", path="sub/../../outside.txt", old_text="", new_text="lost"
            )
            scratch_text, _ = await agent.ok("write_file", path="/tmp/scratch.txt", content="ok")
            _, diff = await agent.ok("get_diff")
    workdir = agent.claim["workdir"]
    parent = workdir.rsplit("/", 1)[0]
    assert (new["previous_bytes"], new_text) == (None, "created new.txt (3 bytes)")
    assert replaced["previous_bytes"] == len(SOURCE)
    assert replaced_text.startswith(f"replaced calc.py: {len(SOURCE)} bytes before, 2 now")
    assert f"'../outside.txt' leads out of the workdir {workdir} (to {parent}/outside.txt)" in (
        outside
    )
    assert "Write under the workdir (e.g. 'outside.txt')" in outside
    assert "leads out of the workdir" in edit_outside
    assert scratch_text == "created /tmp/scratch.txt (2 bytes)"  # absolute paths as meant
    assert sorted(diff["files"]) == ["calc.py", "new.txt"]


async def test_an_empty_submission_warns_in_its_answer(
    tmp_path: Path, environment: dict[str, Any]
) -> None:
    async with claimed(tmp_path, environment) as agent:
        with anyio.fail_after(60):
            text, submitted = await agent.ok("submit")
    assert submitted["warning"].startswith("the submission is empty")
    assert "\nwarning: the submission is empty: no change in the workspace" in text


async def test_a_running_call_holds_its_claim_past_the_lease_and_returns_its_output(
    tmp_path: Path, environment: dict[str, Any]
) -> None:
    lease_s = 0.5
    async with claimed(tmp_path, environment, lease_s=lease_s) as agent:
        outputs: list[dict[str, Any]] = []

        async def long_command() -> None:
            # Runs until the test lets it end (a file appears), past many leases.
            command = "while [ ! -e go ]; do sleep 0.02; done; echo finished"
            outputs.append((await agent.ok("sandbox_exec", command=command, timeout_s=30))[1])

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(long_command)
                # Another client asks for the trajectory for six leases while the call runs.
                refused = await agent.client.call_tool("claim_trajectory", {"wait_s": 6 * lease_s})
                await agent.ok("write_file", path="go", content="")
            # Once it ended, the claim lapses a lease later and another client takes over.
            taken = await agent.client.call_tool("claim_trajectory", {"wait_s": 30})
    assert refused.is_error
    assert "no trajectory of any campaign is waiting" in str(refused.content)
    assert outputs[0]["stdout"] == "finished\n"
    assert taken.structured_content is not None
    assert taken.structured_content["trajectory_id"] == agent.claim["trajectory_id"]
    assert taken.structured_content["reclaimed"] is True
