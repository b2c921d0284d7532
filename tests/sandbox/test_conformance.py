"""Conformance of every sandbox backend: behaviour, isolation and limits, by real attacks.

Each test runs against each param of the `backend` fixture (see conftest.py). Waits are
bounded with `anyio.fail_after`; nothing sleeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import Instance

from .conftest import BackendUnderTest

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def instance(backend: BackendUnderTest) -> AsyncIterator[Instance]:
    """One shared instance with default limits; tests make their own workspaces on it."""
    with anyio.fail_after(60):
        instance = await backend.backend.instance(backend.spec())
    yield instance
    await instance.aclose()


async def test_a_command_runs_in_the_workdir_and_a_nonzero_exit_is_data(instance: Instance) -> None:
    with anyio.fail_after(20):
        async with await instance.workspace("basic") as ws:
            result = await ws.exec("cat a.txt; echo oops >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "hello\n", "oops\n")
    assert not result.timed_out
    assert not result.stdout_truncated


async def test_writes_stay_in_their_workspace(instance: Instance) -> None:
    with anyio.fail_after(20):
        async with await instance.workspace("w1") as one, await instance.workspace("w2") as two:
            await one.exec("echo changed > a.txt")
            assert (await two.exec("cat a.txt")).stdout == "hello\n"
            assert await one.read_file("a.txt") == b"changed\n"
            fresh = await instance.workspace("w3")
            assert (await fresh.exec("cat a.txt")).stdout == "hello\n"
            await fresh.destroy()


async def test_an_unknown_workspace_is_not_found(instance: Instance) -> None:
    with anyio.fail_after(20):
        ws = await instance.workspace("gone")
        await ws.destroy()
        with pytest.raises(errors.NotFound):
            await ws.exec("true")
