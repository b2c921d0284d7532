"""A wrong spec is refused field by field, as a person reads it: the path of the field, what
was wrong, the choices; never pydantic's own text (union members in the path, one mistake
repeated per member, links to its website). The same text on the CLI (`run`) and the MCP tools
(tests/server/test_surface_size.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcp_evalserver.engine.rescoring import parse_scorer
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.spec.campaign import validate_spec

AGENTS = (
    "claude-code, codex, command, external, gemini-cli, mini-swe-agent, noop, openai, opencode, "
    "oracle, predictions, python, validation"
)
TASK = {"id": "a", "prompt": "1 + 1?", "answer": "2"}


def refused(spec: Any) -> str:
    with pytest.raises(InvalidInput) as raised:
        validate_spec(spec)
    return str(raised.value)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"tasks": [TASK], "agent": {"type": "opeanai"}},
            f"agent.type: unknown 'opeanai' (known: {AGENTS})",
        ),
        ({"tasks": [TASK], "agent": {}}, f"agent.type: required (known: {AGENTS})"),
        ({"tasks": [TASK], "agent": {"type": "openai"}}, "agent.model: required"),
        (
            {"tasks": [TASK], "agent": {"type": "noop", "max_turns": 3}},
            "agent.max_turns: unknown field (known: type)",
        ),
        (
            {"tasks": [TASK], "sampels": 2},
            "sampels: unknown field; did you mean 'samples'? (known: name, tasks, samples, "
            "agent, scorer, limits, sandbox, prices)",
        ),
        ({"tasks": [TASK], "samples": 0}, "samples: must be >= 1 (got 0)"),
        ({"tasks": [TASK], "samples": "many"}, 'samples: expected an integer, got "many"'),
        ({"tasks": [{"id": "a", "repo": 3}]}, "tasks.0.repo: expected a string, got 3"),
        ({"tasks": 3}, "tasks: expected a list or a string, got 3"),
        (
            {"tasks": [TASK], "limits": {"per_endpoint": "lots"}},
            'limits.per_endpoint: expected an integer or an object, got "lots"',
        ),
        (
            {"tasks": [TASK], "sandbox": {"type": "dokcer"}},
            "sandbox.type: unknown 'dokcer' (known: host, ray)",
        ),
        ({"tasks": [TASK], "agent": "openai"}, 'agent: expected an object, got "openai"'),
    ],
)
def test_each_wrong_field_is_named_with_what_was_wrong_and_the_choices(
    spec: dict[str, Any], expected: str
) -> None:
    assert refused(spec) == f"invalid campaign spec: {expected}"


def test_no_error_carries_pydantics_own_text_or_a_link() -> None:
    wrong = [
        {"tasks": [TASK], "agent": {"type": "opeanai"}},
        {"tasks": [{"id": "a", "repo": 3}], "samples": {"min": 0}, "scorer": {"type": "x"}},
        {"tasks": [TASK], "limits": {"concurrency": 0, "per_endpoint": {"mode": "auto", "min": 0}}},
    ]
    for spec in wrong:
        text = refused(spec)
        for pydantic_text in ("http", "Input should", "Field required", "list[Task]", ".str"):
            assert pydantic_text not in text, text


def test_every_problem_of_a_spec_is_said_once() -> None:
    text = refused({"tasks": [TASK], "samples": 0, "agent": {"type": "opeanai"}})
    assert text.count("samples: must be >= 1") == 1
    assert text.count("agent.type: unknown 'opeanai'") == 1


def test_a_scorer_inside_a_combined_scorer_is_named_by_its_path() -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_scorer({"type": "all_of", "scorers": [{"type": "exact"}, {"type": "regexx"}]})
    assert str(raised.value).startswith("invalid scorer: scorers.1.type: unknown 'regexx' (known:")


def test_the_cli_says_the_same_on_stderr_and_exits_with_a_usage_error(tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"tasks": [TASK], "agent": {"type": "opeanai"}}))
    done = subprocess.run(
        [sys.executable, "-m", "mcp_evalserver.cli", "--state-dir", str(tmp_path), "run", spec],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"mcp-evalserver: invalid campaign spec: agent.type: unknown 'opeanai' (known: {AGENTS})"
    )
