"""Attacks through the file tools on how they resolve a path: served without a fork, by openat2
inside the workspace's view (supervisor/in_view.py), or by the forked child when openat2 cannot.

A secret is planted on the host, outside every view; the agent names it every way a path can
reach it (`..` past the root, absolute symlinks, /proc/self/root and other magic links, a
symlink swapped in while the tools run), reads it and writes beside it. Nothing may come back
and nothing may land there. FIFOs and another user's private files are refused, never waited
on or opened past their modes. Each test runs against each param of the `backend` fixture.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import Instance, Workspace

from .conftest import REPO_SETUP, BackendUnderTest

pytestmark = pytest.mark.anyio

CLIMB = "../" * 16


@pytest.fixture
def host_secret() -> Iterator[Path]:
    """A directory on the host, outside every view, holding a file `secret`."""
    where = Path(f"/var/tmp/evs-host-{uuid.uuid4().hex}")
    where.mkdir()
    (where / "secret").write_text(f"host secret {uuid.uuid4().hex}\n")
    try:
        yield where
    finally:
        shutil.rmtree(where)


def ways_to(host: Path) -> list[str]:
    """Paths that would name `host`'s secret if resolution could leave the view."""
    inside = str(host).lstrip("/")
    return [
        f"{CLIMB}{inside}/secret",
        f"/{CLIMB}{inside}/secret",
        f"root-link/{inside}/secret",
        "host-link/secret",
        f"up-link/{inside}/secret",
        f"/proc/self/root/{inside}/secret",
        f"/proc/1/root/{inside}/secret",
        f"self-root/{inside}/secret",
        f"fd-link/{inside}/secret",
    ]


LINKS = (
    "ln -s / root-link && ln -s {host} host-link && ln -s {climb} up-link && "
    "ln -s /proc/self/root self-root && ln -s /proc/self/fd/3 fd-link"
)


async def read_or_refused(ws: Workspace, path: str) -> bytes:
    try:
        return await ws.read_file(path)
    except (errors.NotFound, errors.InvalidInput):
        return b""


#: A command that swaps `x` between a directory of the workspace and `{host}`, atomically.
SWAP_X = "ln -sfn real x.new && mv -T x.new x; ln -sfn {host} x.new && mv -T x.new x"


async def while_swapping(
    ws: Workspace, setup: str, swap: str, tools: Callable[[], Awaitable[None]]
) -> None:
    """Runs `setup`, then `tools()` 300 times while a command runs `swap` in a loop."""
    made = await ws.exec(setup)
    assert made.exit_code == 0, made.stderr
    async with anyio.create_task_group() as group:
        group.start_soon(ws.exec, f"echo on > swapping && while :; do {swap}; done")
        while not await read_or_refused(ws, "swapping"):
            pass
        for _ in range(300):
            await tools()
        group.cancel_scope.cancel()


async def test_no_path_the_file_tools_are_given_reads_or_writes_outside_the_view(
    instance: Instance, host_secret: Path
) -> None:
    secret = (host_secret / "secret").read_bytes()
    got: dict[str, bytes] = {}
    with anyio.fail_after(60):
        async with await instance.workspace("climber") as ws:
            links = await ws.exec(LINKS.format(host=host_secret, climb=CLIMB))
            assert links.exit_code == 0, links.stderr
            for path in ways_to(host_secret):
                got[path] = await read_or_refused(ws, path)
                planted = path.replace("/secret", "/planted")
                with contextlib.suppress(errors.NotFound, errors.InvalidInput):
                    await ws.write_file(planted, "planted\n")
    assert not [path for path, data in got.items() if secret.strip() in data], got
    assert sorted(os.listdir(host_secret)) == ["secret"]


async def test_a_symlink_swapped_in_while_the_tools_run_never_leads_outside_the_view(
    instance: Instance, host_secret: Path
) -> None:
    secret = (host_secret / "secret").read_bytes()
    swap = SWAP_X.format(host=host_secret)
    seen: set[bytes] = set()
    with anyio.fail_after(120):
        async with await instance.workspace("swapper") as ws:

            async def tools() -> None:
                seen.add(await read_or_refused(ws, "x/secret"))
                with contextlib.suppress(errors.NotFound, errors.InvalidInput):
                    await ws.write_file("x/planted", "planted\n")

            setup = "mkdir real && echo inside > real/secret && ln -s real x"
            await while_swapping(ws, setup, swap, tools)
    assert secret not in seen
    assert seen <= {b"", b"inside\n"}, seen
    assert sorted(os.listdir(host_secret)) == ["secret"]


async def test_a_fifo_is_refused_at_once_even_swapped_in_for_a_file_while_the_tools_run(
    instance: Instance,
) -> None:
    swap = "ln -f fifo f.new && mv -T f.new f; ln -f plain f.new && mv -T f.new f"
    answers: set[str] = set()
    with anyio.fail_after(120):  # a tool that waited on the FIFO would never return
        async with await instance.workspace("fifo-swap") as ws:

            async def tools() -> None:
                try:
                    answers.add((await ws.read_file("f")).decode())
                except errors.InvalidInput as refused:
                    answers.add("refused: FIFO" if "is a FIFO" in str(refused) else "?")
                except errors.NotFound:
                    answers.add("between")
                with contextlib.suppress(errors.InvalidInput, errors.NotFound):
                    await ws.write_file("f", "written\n")

            setup = "mkfifo fifo && echo text > plain && ln plain f"
            await while_swapping(ws, setup, swap, tools)
            kinds = await ws.exec("test -p fifo && echo still-a-fifo")
    assert answers <= {"text\n", "written\n", "refused: FIFO", "between"}, answers
    assert kinds.stdout == "still-a-fifo\n"


PRIVATE = (
    "printf secret > other.key && chown 4242:4242 other.key && chmod 0600 other.key && "
    "mkdir -p theirs && printf secret > theirs/file && chown -R 4242:4242 theirs && "
    "chmod 0700 theirs"
)


async def test_the_file_tools_open_nothing_a_command_could_not_and_make_files_as_it_would(
    backend: BackendUnderTest,
) -> None:
    """A command is uid 0 without capabilities: another user's private file or directory is
    closed to it, and so to the file tools; what the tools make, a command would have made."""
    refused: list[str] = []
    with anyio.fail_after(120):
        instance = await backend.backend.instance(backend.spec(setup=(*REPO_SETUP, PRIVATE)))
        try:
            async with await instance.workspace("modes") as ws:
                for attempt in (
                    ws.read_file("other.key"),
                    ws.write_file("other.key", "taken\n"),
                    ws.read_file("theirs/file"),
                    ws.write_file("theirs/new.txt", "planted\n"),
                    ws.write_file("theirs/deeper/new.txt", "planted\n"),
                ):
                    try:
                        await attempt
                    except errors.InvalidInput as e:
                        refused.append(str(e))
                await ws.write_file("made/by/tool.txt", "mine\n")
                owners = await ws.exec(
                    "mkdir -p made/by/command && touch made/by/command/cmd.txt && "
                    "stat -c '%u %g %a' made/by/tool.txt made/by/command/cmd.txt made/by "
                    "made/by/command && stat -c '%u %a %s' other.key"
                )
        finally:
            await instance.aclose()
    assert len(refused) == 5, refused
    assert all("ermission denied" in text for text in refused), refused
    tool, command, tool_dir, command_dir, key = owners.stdout.splitlines()
    assert tool == command, owners.stdout
    assert tool_dir == command_dir, owners.stdout
    assert key == "4242 600 6"


async def test_the_file_tools_follow_the_view_a_checkpoint_or_a_restore_mounts_anew(
    instance: Instance,
) -> None:
    """A checkpoint freezes the upper layer and mounts the view again on a new one: a file
    tool still holding the old view would write into a frozen layer, or read the past."""
    with anyio.fail_after(60):
        async with await instance.workspace("layers") as ws:
            await ws.write_file("note.txt", "first\n")
            first = await ws.checkpoint()
            await ws.write_file("note.txt", "second\n")
            seen = [(await ws.read_file("note.txt")).decode()]
            seen.append((await ws.exec("cat note.txt")).stdout)
            await ws.restore(first)
            seen.append((await ws.read_file("note.txt")).decode())
            await ws.write_file("note.txt", "third\n")
            seen.append((await ws.exec("cat note.txt")).stdout)
            async with await ws.fork("layers-fork", checkpoint=first) as fork:
                seen.append((await fork.read_file("note.txt")).decode())
    assert seen == ["second\n", "second\n", "first\n", "third\n", "first\n"]
