"""What a trajectory's transcript keeps of each workspace call (server/trajectory/transcript.py)."""

from __future__ import annotations

from mcp_evalserver.agents.tool_table import WORKSPACE_TOOLS
from mcp_evalserver.server.trajectory.transcript import ARGUMENT_CHARS, call_entry

TOOLS = {tool.name: tool for tool in WORKSPACE_TOOLS}


def test_an_entry_keeps_the_surfaces_arguments_clipped_and_leaves_out_the_unkept() -> None:
    command = "echo " + "x" * (3 * ARGUMENT_CHARS)
    arguments = {"command": command, "timeout_s": 5.0, "stdin": "secret", "max_output_chars": 9}
    for _ in range(2):  # the second entry as the first: what is kept is worked out once
        entry = call_entry(TOOLS["sandbox_exec"], "claimed", arguments)
        assert entry == {"tool": "sandbox_exec", "arguments": {"command": command[:ARGUMENT_CHARS]}}


def test_an_argument_not_given_is_kept_as_none_and_a_number_as_its_text() -> None:
    entry = call_entry(TOOLS["read_file"], "claimed", {"path": "calc.py", "offset": 3})
    assert entry == {
        "tool": "read_file",
        "arguments": {"path": "calc.py", "offset": "3", "limit": None},
    }


def test_each_surface_keeps_its_own_parameters() -> None:
    arguments = {"n": 2, "wait_s": 5.0}
    claimed = call_entry(TOOLS["fork_trajectory"], "claimed", arguments)
    scoped = call_entry(TOOLS["fork_trajectory"], "scoped", arguments)
    assert claimed["arguments"] == {"n": "2", "wait_s": "5.0"}
    assert scoped["arguments"] == {"n": "2"}
