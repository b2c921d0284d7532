"""What the conformance modules share (test_conformance*.py; test_forks.py and
test_capabilities.py replay their attacks): a command that says when it really runs, and a
poll for the file it leaves (its callers bound it with anyio.fail_after)."""

from __future__ import annotations

import anyio

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import Workspace


def started(argument: str) -> str:
    """Shell that starts `sleep <argument>` and marks /tmp/started once it really runs."""
    return (
        f"sleep {argument} & while ! grep -qs {argument} /proc/$!/cmdline; do :; done; "
        "touch /tmp/started; wait"
    )


async def wait_for_file(ws: Workspace, path: str) -> None:
    """Polls a workspace file through the sandbox API (each try is a real round trip)."""
    while True:
        try:
            await ws.read_file(path)
            return
        except errors.NotFound:
            await anyio.lowlevel.checkpoint()
