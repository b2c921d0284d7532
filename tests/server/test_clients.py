"""The scripts in clients/ run as their users run them, against real servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.server.helpers import (
    REPO,
    TOKEN,
    answer_spec,
    call,
    http_client,
    http_server,
    repo_spec,
    require_root,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def _run(
    *command: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    with anyio.fail_after(90):
        return await anyio.run_process(
            [sys.executable, *command],
            cwd=REPO,
            env={**os.environ, "CI": "true", "PYTHONPATH": str(REPO), **(env or {})},
            check=False,
        )


async def test_the_ci_client_passes_a_good_campaign_and_fails_a_bad_one(tmp_path: Path) -> None:
    good = REPO / "examples" / "answers-oracle.json"  # its task file is a relative path
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(answer_spec(3, agent="noop")))
    results: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def over_stdio() -> None:
        results["stdio"] = await _run(
            "clients/ci_client.py", str(good), "--min-pass-rate", "0.5",
            "--state-dir", str(tmp_path / "stdio-state"),
        )  # fmt: skip

    async def over_http(url: str) -> None:
        results["http"] = await _run(
            "clients/ci_client.py", str(bad), "--min-pass-rate", "0.5", "--http", url,
            env={"MCP_EVALSERVER_TOKEN": TOKEN},
        )  # fmt: skip

    async with http_server(tmp_path / "http-state") as url, anyio.create_task_group() as group:
        group.start_soon(over_stdio)
        group.start_soon(over_http, url)
    passed, failed = results["stdio"], results["http"]
    assert passed.returncode == 0, passed.stderr.decode()
    assert "# Campaign answers-" in passed.stdout.decode()
    assert "passed" in passed.stderr.decode()
    assert failed.returncode == 1, failed.stderr.decode()
    assert "FAILED" in failed.stderr.decode()


async def test_the_ci_client_says_why_when_the_spec_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"tasks": [{"id": "a"}], "samples": 0}))
    result = await _run("clients/ci_client.py", str(spec), "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 2
    assert "samples" in result.stderr.decode()


@pytest.mark.root
async def test_the_example_agent_fixes_a_trajectory_through_the_tools(tmp_path: Path) -> None:
    require_root()
    spec = repo_spec(tmp_path / "repos", 1)
    async with http_server(tmp_path / "state") as url, http_client(url) as client:
        started = await call(client, "start_campaign", spec=spec)
        agent = await _run(
            "clients/example_agent.py", "--http", url, "--token", TOKEN,
            "--campaign", started["campaign_id"], "--replace", "calc.py", "a - b", "a + b",
            "--check", "python3 -c 'import calc; assert calc.add(2, 2) == 4'",
        )  # fmt: skip
        assert agent.returncode == 0, agent.stderr.decode()
        assert "check exited 0" in agent.stdout.decode()
        with anyio.fail_after(30):
            status = await call(
                client, "campaign_status", campaign_id=started["campaign_id"], wait_s=20
            )
    assert status["resolved"] == 1


def test_the_ready_to_paste_configs_start_the_real_server() -> None:
    from mcp_evalserver.cli import build_parser

    configs = REPO / "clients" / "configs"
    for path in sorted(configs.glob("*.json")):
        document = json.loads(path.read_text())
        servers = document.get("mcpServers") or document["servers"]
        entry = servers["evalserver"]
        if "command" in entry:
            assert entry["command"] == "mcp-evalserver", path.name
            assert build_parser().parse_args(entry["args"]).stdio, path.name
        else:
            assert entry["url"] == "http://127.0.0.1:8765/mcp", path.name
            assert entry["headers"]["Authorization"].startswith("Bearer "), path.name
