"""A worker of `--workers N` that fails is explained once, in words an operator acts on: at
start-up as the server's own error (exit 2), later beside its restart (front/workers.py).

Real processes: the CLI, or the real parent (`serve_workers`) over workers that fail as
asked (tests/server/failing_workers.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.server.failing_workers import LATER_REASON
from testsupport.servers import REPO, TOKEN, server_command, stop_process

pytestmark = pytest.mark.anyio

ENVIRONMENT = {**os.environ, "PYTHONPATH": str(REPO)}


def _failing_workers(how: str, directory: Path) -> list[str]:
    return [sys.executable, "-m", "tests.server.failing_workers", how, str(directory)]


async def _ended(command: list[str]) -> tuple[int, str]:
    """`command` run to its end: its exit status and what it printed on stderr."""
    with anyio.fail_after(120):
        done = await anyio.run_process(command, env=ENVIRONMENT, check=False)
    return done.returncode, done.stderr.decode()


async def test_workers_whose_app_fails_to_load_stop_the_server_with_their_reason_said_once(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nonexistent"
    command = server_command(tmp_path / "state", "--http", "--port", "0", "--workers", "2",
                             "--token", TOKEN, "--allow-paths", str(missing))  # fmt: skip
    code, said = await _ended(command)
    assert code == 2, said
    assert said.splitlines() == [f"mcp-evalserver: --allow-paths {missing}: not a directory"]


async def test_a_worker_that_fails_on_a_bug_shows_its_traceback_and_the_server_names_it(
    tmp_path: Path,
) -> None:
    code, said = await _ended(_failing_workers("bug", tmp_path))
    assert code == 2, said
    assert "Traceback" in said
    assert said.splitlines()[-1] == (
        "mcp-evalserver: RuntimeError: boom (a bug: its traceback is above)"
    )
    assert said.count("(a bug: its traceback is above)") == 1, said


async def test_a_worker_killed_during_start_up_is_named_with_its_signal_and_what_to_do(
    tmp_path: Path,
) -> None:
    code, said = await _ended(_failing_workers("killed", tmp_path))
    assert code == 2, said
    (line,) = said.splitlines()
    assert line.startswith("mcp-evalserver: worker "), said
    assert line.endswith(
        " exited during start-up (signal SIGKILL) without saying why: run with --workers 1 "
        "to see it in this process"
    ), said


async def test_a_worker_that_fails_while_serving_is_restarted_beside_its_reason(
    tmp_path: Path,
) -> None:
    command = _failing_workers("later", tmp_path)
    said = ""
    async with await anyio.open_process(
        command, env=ENVIRONMENT, stderr=subprocess.STDOUT
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stdin is not None
            with anyio.fail_after(60):
                async for chunk in process.stdout:
                    said += chunk.decode()
                    if "workers on that port" in said:
                        await process.stdin.send(b"fail now\n")  # worker 0 reads it
                    if "starting another" in said:
                        break
        finally:
            await stop_process(process)
    restarted = [line for line in said.splitlines() if "starting another" in line]
    assert len(restarted) == 1, said
    assert restarted[0].startswith("mcp-evalserver: worker 0 (pid "), said
    assert restarted[0].endswith(f"died (exit status 1): {LATER_REASON}; starting another")
    assert process.returncode == 0, said
