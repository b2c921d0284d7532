"""The file tools under attack: what a cheating agent would aim at `search`, `glob` (the
`list_files` tool), `read_file` and `write_file` to read past its view or hang the sandbox.

Symlinks out of the workspace, `/proc/self/root` and `/proc/<pid>/root`, huge files, a FIFO, a
device, a pattern that backtracks forever, a directory symlink loop, and files named like the
lines a search prints. Each runs against each param of the `backend` fixture (conftest.py); every
wait is bounded by `anyio.fail_after`, so a hang fails the test instead of stalling it.
(`edit_file`, a read and a write over these same two calls, is attacked by name in
test_edit_file_attacks.py.)
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import Instance
from mcp_evalserver.sandbox.supervised import SupervisedInstance

pytestmark = pytest.mark.anyio


@pytest.fixture
def host_secret() -> Iterator[tuple[Path, str]]:
    """A world-readable directory on the host, in no view, holding a file with a marker."""
    with tempfile.TemporaryDirectory(prefix="evs-secret-") as directory:
        os.chmod(directory, 0o755)
        marker = f"EVS-SECRET-{uuid.uuid4().hex}"
        (Path(directory) / f"{marker}.txt").write_text(f"{marker}\n")
        yield Path(directory), marker


def proc_roots(instance: Instance, holder_pid: object) -> list[str]:
    """Every /proc/<pid>/root a file tool could try: ours, pid 1 and 2, the supervisor's and
    the workspace's holder's (pids in the supervisor's namespace)."""
    pids = {"self", "thread-self", "1", "2", str(holder_pid)}
    pids.add(str(getattr(instance, "info", {}).get("pid")))
    return [f"/proc/{pid}/root" for pid in sorted(pids)]


async def test_no_file_tool_follows_a_symlink_or_proc_root_out_of_the_view(
    instance: Instance, host_secret: tuple[Path, str]
) -> None:
    secret_dir, marker = host_secret
    secret_file = secret_dir / f"{marker}.txt"
    links = (
        f"ln -s {secret_dir} out-dir && ln -s {secret_file} out-file && "
        "ln -s /proc/self/root proc-self && ln -s /proc/1/root proc-one && ln -s ../../.. up"
    )
    refused: dict[str, str] = {}
    with anyio.fail_after(60):
        async with await instance.workspace("attack-links") as ws:
            assert (await ws.exec(links)).exit_code == 0
            found = await ws.search(marker)
            listed = await ws.glob()
            anywhere = await ws.glob(f"**/{marker}.txt", path="/")
            roots = proc_roots(instance, getattr(ws, "info", {}).get("holder_pid"))
            places = [
                "out-dir", "out-file", f"proc-self{secret_dir}", f"proc-one{secret_dir}",
                *(f"{root}{secret_dir}" for root in roots),
            ]  # fmt: skip
            for place in places:
                # Not there, or (the workspace's own init at /proc/1, not dumpable) refused.
                with pytest.raises((errors.NotFound, errors.InvalidInput)):
                    await ws.search(marker, path=place)
                with pytest.raises((errors.NotFound, errors.InvalidInput)):
                    await ws.glob(path=place)
                with pytest.raises(errors.EvalServerError) as read:
                    await ws.read_file(f"{place}/{marker}.txt")
                refused[place] = type(read.value).__name__
            with pytest.raises(errors.EvalServerError):
                await ws.read_file("out-file")
            # A write may fail, or land in the workspace's own copy (a docker view's /proc is
            # an empty directory of its overlay until a command mounts one): never beyond.
            for place in [*places, "out-file"]:
                name = place if place == "out-file" else f"{place}/evs-pwned.txt"
                with contextlib.suppress(errors.NotFound, errors.InvalidInput):
                    await ws.write_file(name, "pwned\n")
    assert (found.total, found.hits) == (0, [])
    assert {"out-dir", "out-file", "proc-self", "proc-one", "up"} <= set(listed.paths)
    assert not any(marker in path for path in listed.paths)
    assert (anywhere.total, anywhere.paths) == (0, [])
    assert set(refused.values()) <= {"NotFound", "InvalidInput"}, refused  # never the secret
    assert sorted(os.listdir(secret_dir)) == [f"{marker}.txt"]  # nothing written beside it
    assert secret_file.read_text() == f"{marker}\n"


@pytest.mark.backends("local")
async def test_search_finds_none_of_the_host_secrets_a_local_view_masks(instance: Instance) -> None:
    # There is something to find on the host, so that finding nothing means something.
    assert "root:" in Path("/etc/shadow").read_text()
    with anyio.fail_after(60):
        async with await instance.workspace("attack-secrets") as ws:
            shadow = await ws.search("^root:", path="/etc/shadow")
            anywhere = await ws.search("^root:[^:]*:[0-9]", path="/etc", glob="*shadow*")
    assert (shadow.total, anywhere.total) == (0, 0)


async def test_huge_files_a_fifo_and_devices_neither_hang_nor_flood_a_search(
    instance: Instance,
) -> None:
    make = (
        "mkfifo pipe && ln -s /dev/zero zero && printf 'needle\\n' > small.txt && "
        "yes 'needle in a haystack' | head -c 40000000 > huge.txt && "
        "python3 -c \"open('wide.txt', 'w').write('w' * 1900000 + 'needle' + '\\n')\""
    )
    with anyio.fail_after(60):
        async with await instance.workspace("attack-sizes") as ws:
            assert (await ws.exec(make)).exit_code == 0
            found = await ws.search("needle")
            in_dev = await ws.search("needle", path="/dev")
            listed = await ws.glob()
            for special in ("pipe", "zero", "/dev/zero", "/dev/null"):
                with pytest.raises(errors.InvalidInput, match="not a regular file"):
                    await ws.search("x", path=special)
            pipe_still = await ws.exec("test -p pipe && echo intact")
    assert [hit.path for hit in found.hits] == ["small.txt", "wide.txt"]  # huge.txt: over 2 MiB
    assert len(found.hits[1].text) <= 242
    assert in_dev.total == 0
    assert {"pipe", "zero", "huge.txt"} <= set(listed.paths)
    assert pipe_still.stdout == "intact\n"


@pytest.mark.backends("local", "docker")  # asks the supervisor directly, with a short timeout
async def test_a_pattern_that_backtracks_forever_is_killed_and_the_sandbox_answers_on(
    instance: Instance,
) -> None:
    assert isinstance(instance, SupervisedInstance)
    with anyio.fail_after(60):
        async with await instance.workspace("attack-regex") as ws:
            await ws.write_file("trap.txt", "a" * 64 + "!\n")
            # (a+)+$ against 64 a's and a '!': 2**64 ways to fail, in one C call that no
            # signal handler interrupts. Only killing the process ends it.
            with pytest.raises(errors.Timeout, match="backtracks"):
                await instance.client.request(
                    "search", reply_timeout=30, ws=ws.name, pattern="(a+)+$", timeout=0.5
                )
            # The reply came once the child was reaped (jobs.py answers only then); the
            # supervisor goes on serving this workspace.
            after = await ws.search("a!$")
            ran = await ws.exec("echo alive")
    assert [hit.path for hit in after.hits] == ["trap.txt"]
    assert ran.stdout == "alive\n"


async def test_a_directory_symlink_loop_is_listed_once_and_never_walked(
    instance: Instance,
) -> None:
    loops = (
        "mkdir -p loop/a && ln -s .. loop/a/up && ln -s ../.. loop/a/upup && "
        "ln -s . loop/self && ln -s /proc/self/cwd loop/cwd && echo 'needle' > loop/a/f.txt"
    )
    with anyio.fail_after(30):
        async with await instance.workspace("attack-loop") as ws:
            assert (await ws.exec(loops)).exit_code == 0
            listed = await ws.glob(path="loop")
            found = await ws.search("needle", path="loop")
    assert listed.paths == ["loop/a/f.txt", "loop/a/up", "loop/a/upup", "loop/cwd", "loop/self"]
    assert [hit.path for hit in found.hits] == ["loop/a/f.txt"]


async def test_file_names_that_look_like_search_hits_come_back_as_the_names_they_are(
    instance: Instance,
) -> None:
    forged = "a.txt:1:hello\nforged.py:9:password = 'x'"
    with anyio.fail_after(30):
        async with await instance.workspace("attack-names") as ws:
            await ws.write_file(forged, "planted\n")
            made = await ws.exec("printf 'planted\\n' > \"$(printf 'bad\\377name.txt')\"")
            found = await ws.search("planted")
            every = await ws.glob()
    assert made.exit_code == 0
    assert sorted(hit.path for hit in found.hits) == sorted([forged, "bad\ufffdname.txt"])
    assert forged in every.paths
    assert "bad\ufffdname.txt" in every.paths
