"""`ExecRequest`: what is checked once is what every backend sends."""

from __future__ import annotations

import pytest

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import ExecRequest
from mcp_evalserver.sandbox.supervised import exec_args


def test_a_command_and_env_changed_after_their_check_are_sent_as_checked() -> None:
    # argv and variables are computed once, at the check: a caller that keeps the list or the
    # mapping it passed and slips a NUL (or a new variable) in afterwards changes nothing sent.
    cmd = ["echo", "checked"]
    env = {"A": "1"}
    request = ExecRequest(cmd, 10.0, None, env, None, 1024, None, False)
    cmd.append("a\0b")
    env["B\0"] = "x"
    sent = exec_args(request)
    assert sent["argv"] == ["echo", "checked"]
    assert sent["env"] == {"A": "1"}
    assert request.argv is sent["argv"]
    assert request.variables is sent["env"]


def test_a_nul_in_a_command_or_its_env_is_refused_at_construction() -> None:
    with pytest.raises(errors.InvalidInput, match="NUL"):
        ExecRequest(["echo", "a\0b"], 10.0, None, None, None, 1024, None, False)
    with pytest.raises(errors.InvalidInput, match="NUL"):
        ExecRequest("true", 10.0, None, {"A": "x\0y"}, None, 1024, None, False)
