"""OpenCode's sessions read straight from its database are what its own `session list` and
`export` print, byte for byte (agents/cli/opencode_sessions.py), on a store the real OpenCode
wrote; a store of another version is read through OpenCode instead.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.agents.cli import opencode_sessions, packages
from mcp_evalserver.spec.agents import CLI_PACKAGES
from tests.root import require_root
from testsupport.servers import REPO

pytestmark = [pytest.mark.anyio, pytest.mark.root, pytest.mark.slow]

SCRIPT = Path(opencode_sessions.__file__)
#: A launcher that is not there: a read that needed OpenCode fails.
NO_LAUNCHER = "/nonexistent/opencode"


def _database(root: Path) -> Path:
    return root / "home" / ".local" / "share" / "opencode" / "opencode.db"


def _launcher() -> str:
    name = "opencode"
    package, version = CLI_PACKAGES[name]
    installed = packages.install_sync(name, package, version)
    return str(installed.module() / "bin" / "opencode.exe")


async def _sessions(root: Path, launcher: str, *, through_cli: bool = False) -> str:
    """What the session reader prints in the run's directory; `through_cli`: as OpenCode's
    own commands print it (the database named by $OPENCODE_DB, which the reader leaves to
    OpenCode), offline."""
    env = {"PATH": os.environ["PATH"], "HOME": str(root / "home"), "LANG": "C.UTF-8"}
    command = [sys.executable, str(SCRIPT), launcher]
    if through_cli:
        env["OPENCODE_DB"] = str(_database(root))
        command = ["unshare", "-n", *command]
    with anyio.fail_after(120):
        done = await anyio.run_process(command, cwd=root / "add", env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return str(done.stdout.decode())


async def test_the_sessions_read_from_the_database_are_what_opencode_export_prints(
    tmp_path: Path,
) -> None:
    require_root()
    launcher = _launcher()
    run = ["unshare", "-n", sys.executable, "-m", "tests.agents.opencode_offline"]
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    with anyio.fail_after(300):
        ran = await anyio.run_process(
            [*run, launcher, str(tmp_path)], cwd=REPO, env=environment, check=False
        )
    assert ran.returncode == 0, ran.stderr.decode()[-2000:]

    direct = await _sessions(tmp_path, NO_LAUNCHER)  # OpenCode is never started
    exported = await _sessions(tmp_path, launcher, through_cli=True)
    assert direct == exported
    lines = direct.splitlines()
    assert lines[0].startswith('{"session": {"id": "ses_')
    assert len(lines) >= 5, "the prompt and the fix's model turns"
    assert '"tool": "edit"' in direct

    # A session written by a version whose layout the reader does not know: OpenCode's own
    # commands are asked (here: a launcher that is not there, so the read fails).
    with contextlib.closing(sqlite3.connect(_database(tmp_path))) as database, database:
        database.execute("UPDATE session SET version = '0.0.1'")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")}
    with anyio.fail_after(60):
        refused = await anyio.run_process(
            [sys.executable, str(SCRIPT), NO_LAUNCHER],
            cwd=tmp_path / "add",
            env=env,
            check=False,
            stderr=subprocess.PIPE,
        )
    assert refused.returncode != 0
    assert NO_LAUNCHER in refused.stderr.decode()
