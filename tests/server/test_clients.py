"""The scripts in clients/ run as their users run them, against real servers."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.root import require_root
from tests.server.helpers import answer_spec, repo_spec
from testsupport.servers import REPO, TOKEN, call, http_client, http_server

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


async def test_the_ci_client_exits_zero_above_the_threshold_and_non_zero_below_or_refused(
    tmp_path: Path,
) -> None:
    good = REPO / "examples" / "answers-oracle.json"  # its task file is a relative path
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(answer_spec(3, agent="noop")))
    refused = tmp_path / "refused.json"
    refused.write_text(json.dumps({"tasks": [{"id": "a"}], "samples": 0}))
    results: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def ci(name: str, *arguments: str, env: dict[str, str] | None = None) -> None:
        results[name] = await _run("clients/ci_client.py", *arguments, env=env)

    # The three runs overlap: each is a client process (and, over stdio, a server process).
    async with http_server(tmp_path / "http-state") as url, anyio.create_task_group() as group:
        stdio_state = ("--state-dir", str(tmp_path / "stdio-state"))
        group.start_soon(ci, "good", str(good), "--min-pass-rate", "0.5", *stdio_state)
        group.start_soon(ci, "refused", str(refused), *stdio_state)
        token = {"MCP_EVALSERVER_TOKEN": TOKEN}
        group.start_soon(
            functools.partial(
                ci, "bad", str(bad), "--min-pass-rate", "0.5", "--http", url, env=token
            )
        )
    good_run, bad_run, refused_run = results["good"], results["bad"], results["refused"]
    assert good_run.returncode == 0, good_run.stderr.decode()
    assert "# Campaign answers-oracle-" in good_run.stdout.decode()
    assert "pass rate 1.000 (threshold 0.5): passed" in good_run.stderr.decode()
    assert "finished, 18/18 done" in good_run.stderr.decode()
    assert "mean pass rate 1.000 (95% CI 1.000-1.000), pass@1 1.000" in good_run.stderr.decode()
    assert bad_run.returncode == 1, bad_run.stderr.decode()
    assert "pass rate 0.000 (threshold 0.5): FAILED" in bad_run.stderr.decode()
    assert "finished, 3/3 done" in bad_run.stderr.decode()
    assert refused_run.returncode == 2
    assert "samples" in refused_run.stderr.decode()


@pytest.mark.root
async def test_the_example_agent_fixes_a_trajectory_through_the_tools(tmp_path: Path) -> None:
    require_root()
    spec = repo_spec(tmp_path / "repos", 1)
    # repo_spec's scorer is a plugin and its tasks host directories: the token holder needs both.
    privileges = ("--allow-plugins", "--allow-paths", str(tmp_path))
    async with (
        http_server(tmp_path / "state", *privileges) as url,
        http_client(url) as client,
    ):
        started = await call(client, "start_campaign", spec=spec)
        agent = await _run(
            "clients/example_agent.py", "--http", url, "--token", TOKEN,
            "--campaign", started["campaign_id"], "--replace", "calc.py", "a - b", "a + b",
            "--check", "python3 -c 'import calc; assert calc.add(2, 2) == 4'",
        )  # fmt: skip
        assert agent.returncode == 0, agent.stderr.decode()
        assert "check exited 0" in agent.stdout.decode()
        assert "edited (1 replaced); lines" in agent.stdout.decode()
        with anyio.fail_after(30):
            status = await call(
                client, "campaign_status", campaign_id=started["campaign_id"], wait_s=20
            )
    assert status["resolved"] == 1


def test_the_ready_to_paste_configs_start_the_real_server() -> None:
    from mcp_evalserver.cli.main import build_parser

    configs = REPO / "clients" / "configs"
    for path in sorted(configs.glob("*.json")):
        document = json.loads(path.read_text())
        servers = document.get("mcpServers") or document["servers"]
        entry = servers["evalserver"]
        if "command" in entry:
            assert entry["command"] == "mcp-evalserver", path.name
            parsed = build_parser().parse_args(entry["args"])
            assert parsed.stdio, path.name
            assert parsed.tools == ("agent" if "agent" in path.name else "all"), path.name
        else:
            assert entry["url"] == "http://127.0.0.1:8765/mcp", path.name
            assert entry["headers"]["Authorization"].startswith("Bearer "), path.name
