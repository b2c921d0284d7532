"""`edit_file` under attack: what a cheating agent would aim at the edit tool by name to write
past its view, or to hang or flood the sandbox.

`edit_file` (agents/file_text.edit) reads a whole file, then writes it back: every attack on a
read or a write is also one on it, plus the moment between the two. The host's secret is named
every way a path can reach it (`..` past the root, symlinks out of the workspace,
/proc/self/root and other /proc roots); a symlink is swapped in between the read and the write;
a FIFO, a device and a file over the tools' 16 MiB are edited. Nothing may be read or written
beyond the view and nothing may hang. Each test runs against each param of the `backend`
fixture (conftest.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from mcp_evalserver import errors
from mcp_evalserver.agents import file_text
from mcp_evalserver.sandbox.base import Instance, Workspace

from . import test_file_resolution_attacks as resolution_attacks
from .test_file_resolution_attacks import CLIMB, LINKS, SWAP_X, ways_to, while_swapping
from .test_file_tool_attacks import proc_roots

pytestmark = pytest.mark.anyio

#: The host's secret, outside every view (the fixture of the read and write attacks).
host_secret = resolution_attacks.host_secret


async def edit_file(ws: Workspace, path: str, old_text: str, new_text: str) -> str:
    """What the edit_file tool answers a model: the edited region, or the error's kind."""
    try:
        return (await file_text.edit(ws, path, old_text, new_text, replace_all=False)).region
    except errors.EvalServerError as refused:
        return type(refused).__name__


async def test_edit_file_follows_no_path_out_of_the_view(
    instance: Instance, host_secret: Path
) -> None:
    secret = (host_secret / "secret").read_text()
    edited: dict[str, str] = {}
    with anyio.fail_after(120):
        async with await instance.workspace("edit-climber") as ws:
            links = await ws.exec(LINKS.format(host=host_secret, climb=CLIMB))
            assert links.exit_code == 0, links.stderr
            holder = getattr(ws, "info", {}).get("holder_pid")
            inside = str(host_secret).lstrip("/")
            paths = [
                *ways_to(host_secret),
                *(f"{root}/{inside}/secret" for root in proc_roots(instance, holder)),
            ]
            for path in paths:
                # The secret's own words as old_text: an edit that found them read the host.
                edited[path] = await edit_file(ws, path, secret.strip(), "pwned")
                planted = path.replace("/secret", "/planted")
                await edit_file(ws, planted, "", "planted\n")  # may land in the view: never out
    assert set(edited.values()) <= {"NotFound", "InvalidInput"}, edited
    assert sorted(os.listdir(host_secret)) == ["secret"]
    assert (host_secret / "secret").read_text() == secret


async def test_edit_file_never_writes_out_through_a_symlink_swapped_in_after_its_read(
    instance: Instance, host_secret: Path
) -> None:
    secret = (host_secret / "secret").read_text()
    swap = SWAP_X.format(host=host_secret)
    answers: set[str] = set()
    with anyio.fail_after(180):
        async with await instance.workspace("edit-swapper") as ws:

            async def tools() -> None:
                # Back and forth, so that every round has something to replace.
                answers.add(await edit_file(ws, "x/secret", "inside\n", "edited\n"))
                answers.add(await edit_file(ws, "x/secret", "edited\n", "inside\n"))

            setup = "mkdir real && echo inside > real/secret && ln -s real x"
            await while_swapping(ws, setup, swap, tools)
            kept = await ws.exec("cat real/secret")
    assert answers, answers
    assert not [a for a in answers if "pwned" in a or secret.strip() in a], answers
    assert kept.stdout in ("inside\n", "edited\n")
    assert sorted(os.listdir(host_secret)) == ["secret"]
    assert (host_secret / "secret").read_text() == secret


async def test_edit_file_refuses_a_fifo_a_device_and_a_huge_file_at_once(
    instance: Instance,
) -> None:
    make = (
        "mkfifo pipe && ln -s /dev/zero zero && "
        f"head -c {file_text.MAX_FILE_BYTES + 1} /dev/zero | tr '\\0' 'a' > huge.txt"
    )
    with anyio.fail_after(60):  # an edit that waited on the FIFO or read /dev/zero never returns
        async with await instance.workspace("edit-sizes") as ws:
            made = await ws.exec(make)
            assert made.exit_code == 0, made.stderr
            fifo = await edit_file(ws, "pipe", "a", "b")
            fifo_created = await edit_file(ws, "pipe", "", "b")
            device = await edit_file(ws, "zero", "\0", "b")
            null = await edit_file(ws, "/dev/null", "", "b")
            huge = await edit_file(ws, "huge.txt", "a", "b")
            left = await ws.exec("test -p pipe && echo fifo; stat -c %s huge.txt")
    assert fifo == fifo_created == device == "InvalidInput"
    # /dev/null reads as empty: an "edit" that creates it writes to the device, like `echo`.
    assert null in ("InvalidInput", "     1\tb")
    assert huge == "LimitExceeded"
    assert left.stdout == f"fifo\n{file_text.MAX_FILE_BYTES + 1}\n"


async def test_edit_file_with_climbing_paths_stays_in_the_view_and_in_its_own_workspace(
    instance: Instance,
) -> None:
    host_shadow = Path("/etc/shadow").read_text()
    with anyio.fail_after(60):
        async with await instance.workspace("edit-dots") as ws:
            made = await ws.exec("echo mine > note.txt")
            assert made.exit_code == 0, made.stderr
            # `..` above / is / again: the same file, inside the view, whatever the depth.
            here = (await ws.exec("pwd")).stdout.strip()
            climbed = await edit_file(ws, f"{CLIMB}{here.lstrip('/')}/note.txt", "mine", "ours")
            shadow = await edit_file(ws, f"{CLIMB}etc/shadow", "root:", "pwned:")
            kept = await ws.exec("cat note.txt")
            async with await instance.workspace("edit-dots-other") as other:
                seen = await other.exec("grep -c '^pwned:' /etc/shadow 2>/dev/null; true")
    assert climbed.endswith("\tours")
    assert kept.stdout == "ours\n"
    # A local view masks the host's /etc/shadow (refused); a docker view's is its own copy,
    # in its private upper layer: edited there, seen by no other workspace, never the host's.
    assert shadow in ("NotFound", "InvalidInput") or "pwned:" in shadow, shadow
    assert seen.stdout.strip() in ("", "0"), seen.stdout
    assert Path("/etc/shadow").read_text() == host_shadow
