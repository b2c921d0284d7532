"""Conformance of checkpoints, restores and forks on every backend, and the isolation attacks
of test_conformance_*.py and test_attacks.py replayed on forked workspaces.

A fork shares its parent's frozen layers, so every test here is also a test that nothing a
workspace does reaches a layer another workspace stands on.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import anyio
import pytest

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import Instance, Workspace
from mcp_evalserver.sandbox.supervised import SupervisedWorkspace

from . import conformance_support, host_processes
from . import test_attacks as attacks
from . import test_conformance_isolation as conformance_isolation
from . import test_conformance_limits as conformance_limits
from .conftest import LIMITED, REPO_SETUP, BackendUnderTest
from .faults import kill_holder, sigkill_supervisor

pytestmark = pytest.mark.anyio

# Modes, symlinks, a binary file, a nested tree to rename and files to delete, all committed.
TREE_SETUP = (
    *REPO_SETUP[:-1],
    "printf '#!/bin/sh\\necho run\\n' > tool.sh && chmod 0751 tool.sh",
    "ln -s pkg/mod.py link.py && mkdir -p old/deep && printf 'd\\n' > old/deep/f.txt",
    "printf 'gone\\n' > doomed.txt && mkdir doomed_dir && printf 'x\\n' > doomed_dir/x",
    REPO_SETUP[-1],
)
# A digest of the whole view of the workdir: names, kinds, modes, link targets and content.
SNAPSHOT = (
    "find . -path ./.git -prune -o -print | LC_ALL=C sort | while read -r p; do "
    'if [ -L "$p" ]; then echo "$p L $(readlink "$p")"; '
    'elif [ -d "$p" ]; then echo "$p D $(stat -c %a "$p")"; '
    'elif [ -p "$p" ]; then echo "$p P $(stat -c %a "$p")"; '
    'else echo "$p F $(stat -c %a "$p") $(sha256sum < "$p" | cut -c1-16)"; fi; done'
)


@pytest.fixture(scope="module")
async def instance(backend: BackendUnderTest) -> AsyncIterator[Instance]:
    with anyio.fail_after(60):
        instance = await backend.backend.instance(backend.spec(setup=TREE_SETUP))
    yield instance
    await instance.aclose()


#: What a snapshot reads, without its processes per file: every file but .git's, whole.
READ_EVERY_FILE = "find . -path ./.git -prune -o -type f -print0 | xargs -0r sha256sum >/dev/null"


async def snapshot(ws: Workspace) -> str:
    result = await ws.exec(SNAPSHOT)
    assert result.exit_code == 0, result.stderr
    return result.stdout


async def cat(ws: Workspace, *paths: str) -> list[str]:
    """Each file's content, or "-" where it does not exist in this view."""
    found = []
    for path in paths:
        try:
            found.append((await ws.read_file(path)).decode())
        except errors.NotFound:
            found.append("-")
    return found


# --- behaviour ---------------------------------------------------------------------------------


async def test_a_fork_sees_its_parents_files_at_fork_time_and_neither_sees_later_writes(
    instance: Instance,
) -> None:
    with anyio.fail_after(60):
        async with await instance.workspace("parent") as parent:
            await parent.write_file("a.txt", "parent before\n")
            await parent.exec("echo new > made.txt && rm doomed.txt")
            async with await parent.fork("child") as child:
                await parent.write_file("a.txt", "parent after\n")
                await parent.write_file("later.txt", "p\n")
                await child.write_file("mine.txt", "c\n")
                await child.exec("echo child > made.txt")
                in_child = await cat(child, "a.txt", "made.txt", "doomed.txt", "later.txt")
                in_parent = await cat(parent, "a.txt", "made.txt", "doomed.txt", "mine.txt")
                child_diff = await child.diff()
    assert in_child == ["parent before\n", "child\n", "-", "-"]
    assert in_parent == ["parent after\n", "new\n", "-", "-"]
    # The fork's diff is against the instance's base: the parent's changes are its own now.
    assert "+parent before" in child_diff
    assert "deleted file mode" in child_diff
    assert "mine.txt" in child_diff


async def test_sibling_forks_never_see_each_other(instance: Instance) -> None:
    with anyio.fail_after(60):
        async with await instance.workspace("root") as root:
            await root.write_file("shared.txt", "from root\n")
            checkpoint = await root.checkpoint()
            siblings = [await root.fork(f"sib{i}", checkpoint=checkpoint) for i in range(3)]
            try:
                for i, ws in enumerate(siblings):
                    await ws.write_file("shared.txt", f"sibling {i}\n")
                    await ws.write_file(f"only{i}.txt", "x\n")
                seen = [await cat(ws, "shared.txt", "only0.txt", "only1.txt", "only2.txt")
                        for ws in siblings]  # fmt: skip
                at_root = await cat(root, "shared.txt", "only0.txt")
            finally:
                for ws in siblings:
                    await ws.destroy()
    assert seen == [
        ["sibling 0\n", "x\n", "-", "-"],
        ["sibling 1\n", "-", "x\n", "-"],
        ["sibling 2\n", "-", "-", "x\n"],
    ]
    assert at_root == ["from root\n", "-"]


async def test_restore_discards_exactly_what_came_after_the_checkpoint(instance: Instance) -> None:
    with anyio.fail_after(60):
        async with await instance.workspace("undo") as ws:
            await ws.exec("echo one > a.txt && rm -r doomed_dir && chmod 0600 tool.sh")
            first = await ws.checkpoint()
            at_first = await snapshot(ws)
            await ws.exec("echo two > a.txt && echo extra > extra.txt && rm pkg/mod.py")
            second = await ws.checkpoint()
            at_second = await snapshot(ws)
            await ws.exec("echo three > a.txt && mkdir doomed_dir && rm -r old")
            await ws.restore(first)
            back_at_first = await snapshot(ws)
            await ws.restore(second)  # a later checkpoint stays restorable
            back_at_second = await snapshot(ws)
            await ws.restore(first)
            await ws.exec("echo after-restore > a.txt")
            again = await cat(ws, "a.txt", "extra.txt")
            with pytest.raises(errors.NotFound, match=first):
                await ws.restore("cp-unknown")
    assert back_at_first == at_first
    assert back_at_second == at_second
    assert "./a.txt F 644" in at_first
    assert "./doomed_dir" not in at_first
    assert "./tool.sh F 600" in at_first
    assert "./extra.txt" in at_second
    assert "./pkg/mod.py" not in at_second
    assert again == ["after-restore\n", "-"]


async def test_modes_symlinks_deletions_and_binary_content_pass_to_a_fork_exactly(
    instance: Instance,
) -> None:
    binary = bytes(range(256)) * 64 + b"\0\xff"
    with anyio.fail_after(60):
        async with await instance.workspace("rich") as parent:
            await parent.write_file("bin/data.bin", binary, mode=0o640)
            await parent.exec(
                "rm doomed.txt && rm -r doomed_dir && mv old renamed && ln -sf a.txt link.py && "
                "ln -s /nonexistent dangling && chmod 0700 tool.sh && mkfifo pipe && "
                "echo new > renamed/deep/added.txt"
            )
            expected = await snapshot(parent)
            async with await parent.fork("heir") as heir:
                inherited = await snapshot(heir)
                data = await heir.read_file("bin/data.bin")
                gone = await heir.exec("test -e doomed.txt || test -e doomed_dir || test -e old")
                kinds = await heir.exec("stat -c %F pipe; readlink link.py; ./tool.sh")
    assert inherited == expected
    assert data == binary
    assert gone.exit_code == 1  # deleted files and directories stay deleted
    assert kinds.stdout == "fifo\na.txt\nrun\n"
    assert "./bin/data.bin F 640" in expected
    assert "./renamed/deep/f.txt F 644" in expected


async def test_a_deep_chain_of_checkpoints_keeps_working_past_the_layer_limit(
    instance: Instance,
) -> None:
    depth = 50  # past the supervisor's 32 layers twice: its oldest layers are squashed
    early_step, middle_step = 5, 30
    checkpoints: list[str] = []
    states: dict[str, str] = {}
    with anyio.fail_after(240):
        async with await instance.workspace("deep") as ws:
            for i in range(depth):
                step = f"echo {i} > f{i}.txt && echo {i} >> log.txt && rm -f f{i - 2}.txt"
                if i % 7 == 3:  # directory renames and deletions land in squashed layers too
                    step += f" && mv d{i - 7} d{i} 2>/dev/null || mkdir -p d{i}/sub"
                    step += (
                        f" && echo {i} > d{i}/sub/n{i} && chmod 0{6 + i % 2}{4 + i % 2}0 f{i}.txt"
                    )
                if i == 20:
                    step += " && rm -r old pkg && ln -s a.txt alias"
                result = await ws.exec(step)
                assert result.exit_code == 0, result.stderr
                checkpoints.append(await ws.checkpoint())
                # A snapshot (a few processes per file) of the states compared below; every
                # other step's files are read whole in one go, as each snapshot read them.
                if i in (early_step, middle_step, depth - 1):
                    states[checkpoints[-1]] = await snapshot(ws)
                else:
                    read = await ws.exec(READ_EVERY_FILE)
                    assert read.exit_code == 0, read.stderr
            last = await snapshot(ws)
            log = await ws.read_file("log.txt")
            early, middle = checkpoints[early_step], checkpoints[middle_step]
            await ws.restore(early)
            at_early = await snapshot(ws)
            async with await ws.fork("deep-fork", checkpoint=middle) as fork:
                at_middle = await snapshot(fork)
    assert log.decode().split() == [str(i) for i in range(depth)]
    assert len(set(checkpoints)) == depth
    assert last == states[checkpoints[-1]]
    assert at_early == states[early]
    assert at_middle == states[middle]
    assert "./alias L a.txt" in last
    assert "./pkg" not in last


async def test_checkpointing_a_workspace_with_a_command_running_is_refused(
    instance: Instance,
) -> None:
    arg = host_processes.marker()
    with anyio.fail_after(30):
        async with await instance.workspace("busy") as ws, anyio.create_task_group() as tg:
            tg.start_soon(ws.exec, conformance_support.started(arg))
            await conformance_support.wait_for_file(ws, "/tmp/started")
            with pytest.raises(errors.Conflict, match="running"):
                await ws.checkpoint()
            with pytest.raises(errors.Conflict, match="running"):
                await ws.fork("busy-fork")
            tg.cancel_scope.cancel()
        await host_processes.wait_until_gone(arg)


async def test_a_forks_name_must_be_free_and_its_checkpoint_known(instance: Instance) -> None:
    with anyio.fail_after(30):
        async with await instance.workspace("namer") as ws, await instance.workspace("taken"):
            with pytest.raises(errors.Conflict):
                await ws.fork("taken")
            with pytest.raises(errors.NotFound):
                await ws.fork("orphan", checkpoint="cp-none")
            still = await cat(ws, "a.txt")
    assert still == ["hello\n"]


async def test_a_fork_outlives_its_parent_and_keeps_its_layers(instance: Instance) -> None:
    with anyio.fail_after(30):
        parent = await instance.workspace("mortal")
        await parent.write_file("legacy.txt", "kept\n")
        child = await parent.fork("survivor")
        await parent.destroy()
        async with child:
            reborn = await instance.workspace("mortal")  # the name is free again, and empty
            async with reborn:
                kept = await cat(child, "legacy.txt")
                fresh = await cat(reborn, "legacy.txt")
                grandchild = await child.fork("grandchild")
                async with grandchild:
                    inherited = await cat(grandchild, "legacy.txt")
    assert (kept, fresh, inherited) == (["kept\n"], ["-"], ["kept\n"])


@pytest.mark.backends("local", "docker")
async def test_a_checkpoint_and_a_restore_keep_a_live_workspaces_holder(
    instance: Instance,
) -> None:
    # The view is remounted in place, in the holder's namespaces: a new holder per checkpoint
    # (the fallback for a dead one) costs a cgroup, namespaces and a process each time.
    with anyio.fail_after(30):
        async with await instance.workspace("kept-holder") as ws:
            assert isinstance(ws, SupervisedWorkspace)
            holder = ws.info["holder_pid"]
            await ws.write_file("a.txt", "changed\n")
            checkpoint = await ws.checkpoint()
            after_checkpoint = ws.info["holder_pid"]
            await ws.write_file("a.txt", "later\n")
            await ws.restore(checkpoint)
            after_restore = ws.info["holder_pid"]
            content = await cat(ws, "a.txt")
    assert (after_checkpoint, after_restore) == (holder, holder)
    assert content == ["changed\n"]


@pytest.mark.backends("local", "docker")
async def test_a_checkpoint_gives_a_workspace_whose_holder_died_a_new_one(
    instance: Instance,
) -> None:
    # A checkpoint remounts the view inside the workspace's holder; without one, a new holder.
    with anyio.fail_after(30):
        async with await instance.workspace("orphan") as ws:
            assert isinstance(ws, SupervisedWorkspace)
            await ws.write_file("kept.txt", "kept\n")
            await kill_holder(ws)
            checkpoint = await ws.checkpoint()
            await ws.write_file("later.txt", "later\n")
            ran = await ws.exec("cat kept.txt later.txt")
            await ws.restore(checkpoint)
            restored = await cat(ws, "kept.txt", "later.txt")
    assert (ran.exit_code, ran.stdout) == (0, "kept\nlater\n")
    assert restored == ["kept\n", "-"]


async def test_a_checkpoint_keeps_the_workspaces_processes_a_fork_starts_without_them(
    instance: Instance,
) -> None:
    # Processes are not files: a checkpoint lets them run on (their writes land after it, and
    # never in it), a fork of it starts with none, a restore ends them with the view they ran
    # in (the files they wrote are gone too).
    arg = host_processes.marker()
    clock = "(while :; do date +%s%N > c.tmp; mv c.tmp clock.txt; done) >/dev/null 2>&1 & "
    with anyio.fail_after(60):
        async with await instance.workspace("busy-bee") as ws:
            await ws.write_file("a.txt", "before\n")
            await ws.exec(f"{clock} sleep {arg} >/dev/null 2>&1 & echo started")
            await conformance_support.wait_for_file(ws, "clock.txt")
            checkpoint = await ws.checkpoint()
            running = await ws.exec(f"ps -eo args= | grep -cx 'sleep {arg}'; cat a.txt")
            await ws.write_file("a.txt", "after\n")
            async with await ws.fork("bee-1", checkpoint=checkpoint) as first:
                seen_first = await first.exec(
                    f"cat a.txt clock.txt; ps -eo args= | grep -cx 'sleep {arg}'"
                )
            await ws.exec("sleep 0.05")  # the clock goes on in the parent meanwhile
            async with await ws.fork("bee-2", checkpoint=checkpoint) as second:
                seen_second = await second.exec("cat a.txt clock.txt")
            await ws.restore(checkpoint)
            await host_processes.wait_until_gone(arg)
            restored = await ws.exec(f"cat a.txt; ps -eo args= | grep -c 'sleep {arg}$'")
    assert running.stdout == "1\nbefore\n"
    before, tick, none = seen_first.stdout.splitlines()
    assert (before, none) == ("before", "0")
    assert seen_second.stdout == f"before\n{tick}\n"  # the checkpoint did not move on
    assert restored.stdout == "before\n0\n"


#: Swaps the workspace's directory `d` and symlink `s` back and forth, as fast as a process can
#: (renameat2 RENAME_EXCHANGE: each name is always there, as one or the other).
SWAPPER = """\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
open("swapping", "w").close()
while True:
    libc.renameat2(-100, b"d", -100, b"s", 2)
"""
#: Checkpoints taken while it swaps. The copy that walked the upper by path (before 800e6fc)
#: failed one of the first few on every backend (EINVAL: a readlink of what was a directory
#: again) when it did not follow the symlink (test_live_copy.py saw that at its first copy).
SWAPPED_CHECKPOINTS = 20


@pytest.mark.backends("local", "docker")
async def test_a_checkpoint_never_copies_in_what_the_workspaces_processes_swap_for_a_directory(
    instance: Instance,
) -> None:
    # A checkpoint of a workspace whose processes run copies its upper, as root, in the
    # supervisor's own view, where a symlink leads anywhere the supervisor sees: here another
    # workspace's area (its files), swapped in for a directory between the copy seeing a
    # directory and entering it. Every checkpoint is taken, and no fork of any holds a file of
    # the other workspace.
    secret = f"secret-{os.urandom(8).hex()}"
    with anyio.fail_after(180):
        async with (
            await instance.workspace("victim") as victim,
            await instance.workspace("swapper") as ws,
        ):
            await victim.write_file("secret.txt", secret + "\n")
            assert isinstance(victim, SupervisedWorkspace)
            area = str(victim.info["root"]).removesuffix("/r/view")
            await ws.write_file("swap.py", SWAPPER)
            made = await ws.exec(f"mkdir -p d/in && echo mine > d/in/f.txt && ln -s {area} s")
            assert made.exit_code == 0, made.stderr
            await ws.exec("python3 swap.py >/dev/null 2>&1 &")
            await conformance_support.wait_for_file(ws, "swapping")
            leaked: list[str] = []
            for n in range(SWAPPED_CHECKPOINTS):
                checkpoint = await ws.checkpoint()
                async with await ws.fork(f"look-{n}", checkpoint=checkpoint) as look:
                    found = await look.exec(f"grep -rl {secret} . 2>/dev/null; true")
                leaked += found.stdout.split()
            swapping = await ws.exec("ps -eo args= | grep -cx 'python3 swap.py'")
    assert leaked == []
    assert swapping.stdout == "1\n"  # it swapped throughout


# --- exported checkpoints: what outlives a supervisor ------------------------------------------

# A first layer with every kind of change, then a second one over it (a hard link included).
EXPORTED_CHANGES = (
    "rm doomed.txt && rm -r doomed_dir && mv old renamed && ln -sf a.txt link.py && "
    "ln -s /nonexistent dangling && chmod 0700 tool.sh && mkfifo pipe && "
    "echo new > renamed/deep/added.txt && setfattr -n user.note -v kept a.txt 2>/dev/null; true",
    "echo two > a.txt && rm pkg/mod.py && ln a.txt hard.txt && mkdir -p pkg/new && "
    "echo n > pkg/new/n.txt",
)


def tar(*members: tuple[str, bytes | None, str]) -> bytes:
    """An archive of (name, data or None for a directory, symlink target or "") members."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as out:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if link:
                info.type, info.linkname = tarfile.SYMTYPE, link
            elif data is None:
                info.type = tarfile.DIRTYPE
            else:
                info.size = len(data)
            out.addfile(info, io.BytesIO(data) if data else None)
    return buffer.getvalue()


async def exported(ws: Workspace) -> tuple[bytes, str, bytes]:
    """Makes EXPORTED_CHANGES in two checkpoints; (archive, snapshot at it, binary file)."""
    binary = bytes(range(256)) * 64 + b"\0\xff"
    await ws.write_file("bin/data.bin", binary, mode=0o640)
    for step in EXPORTED_CHANGES:
        assert (result := await ws.exec(step)).exit_code == 0, result.stderr
        checkpoint = await ws.checkpoint()
    expected = await snapshot(ws)
    archive = await ws.export_checkpoint(checkpoint)
    await ws.write_file("later.txt", "after the export\n")
    return archive, expected, binary


async def test_a_workspace_started_from_an_exported_checkpoint_has_exactly_its_files(
    instance: Instance,
) -> None:
    with anyio.fail_after(60):
        async with await instance.workspace("exporter") as ws:
            archive, expected, binary = await exported(ws)
        async with await instance.workspace_from_archive("importer", archive) as heir:
            inherited = await snapshot(heir)
            data = await heir.read_file("bin/data.bin")
            checks = await heir.exec(
                "test -e later.txt || test -e doomed.txt || test -e doomed_dir || test -e old;"
                " echo $?; stat -c %h hard.txt; cat pkg/new/n.txt"
            )
            # It works like any workspace: checkpoints and forks on top of what it started with.
            await heir.write_file("a.txt", "three\n")
            again = await heir.checkpoint()
            async with await heir.fork("importer-fork", checkpoint=again) as fork:
                forked = await cat(fork, "a.txt", "hard.txt")
    assert inherited == expected
    assert data == binary
    assert checks.stdout == "1\n2\nn\n"  # deletions stay deleted; the hard link is one
    assert forked == ["three\n", "two\n"]


async def test_an_archive_that_is_not_an_exported_checkpoint_is_refused(
    instance: Instance,
) -> None:
    escapes = (
        b"not a tar at all",
        tar(("0", None, ""), ("0/../../../etc/evs-escape", b"x", "")),
        # A symlink to the host's /etc, then a file "inside" it: never followed.
        tar(("0", None, ""), ("0/up", None, "/etc"), ("0/up/evs-escape", b"x", "")),
        tar(("0", None, ""), ("/etc/evs-escape", b"x", "")),
    )
    with anyio.fail_after(60):
        for number, archive in enumerate(escapes):
            with pytest.raises(errors.InvalidInput, match="not a checkpoint archive"):
                await instance.workspace_from_archive(f"bogus{number}", archive)
        async with await instance.workspace("bogus0") as ws:  # the refusals left nothing behind
            assert await cat(ws, "a.txt") == ["hello\n"]
    assert not os.path.exists("/etc/evs-escape")


async def test_a_checkpoint_too_big_for_the_disk_cap_is_refused_as_a_limit_not_a_bad_archive(
    limited: Instance,
) -> None:
    # Well formed, but its one file is larger than a workspace of `limited` may write.
    big = b"\xa5" * (LIMITED["disk_bytes"] + (1 << 20))
    with anyio.fail_after(120):
        with pytest.raises(errors.LimitExceeded, match="disk_bytes") as refused:
            await limited.workspace_from_archive(
                "too-big", tar(("0", None, ""), ("0/big", big, ""))
            )
        async with await limited.workspace("too-big") as ws:  # nothing was left behind
            left = await cat(ws, "big")
    assert "not a checkpoint archive" not in str(refused.value)
    assert left == ["-"]


async def test_a_checkpoint_over_the_export_cap_is_refused_with_what_to_do(
    instance: Instance,
) -> None:
    with anyio.fail_after(60):
        async with await instance.workspace("bulky") as ws:
            await ws.write_file("build/out.bin", os.urandom(64 << 10))
            checkpoint = await ws.checkpoint()
            with pytest.raises(errors.LimitExceeded) as refused:
                await ws.export_checkpoint(checkpoint, max_bytes=16 << 10)
            kept = await ws.export_checkpoint(checkpoint)  # the default cap holds it
    assert "16384 bytes" in str(refused.value)
    assert "keep less in the workspace" in str(refused.value)
    assert len(kept) > 64 << 10


@pytest.mark.backends("local", "docker")
async def test_an_exported_checkpoint_outlives_its_supervisor(
    backend: BackendUnderTest,
) -> None:
    spec = backend.spec(setup=TREE_SETUP)
    with anyio.fail_after(120):
        first = await backend.backend.instance(spec)
        ws = await first.workspace("doomed")
        archive, expected, binary = await exported(ws)
        await sigkill_supervisor(first)  # its layers, checkpoints and workspaces go with it
        with pytest.raises(errors.SandboxUnavailable):
            await ws.exec("true")
        again = await backend.backend.instance(spec)  # provisioned anew
        assert again is not first
        try:
            async with await again.workspace_from_archive("reborn", archive) as heir:
                inherited = await snapshot(heir)
                data = await heir.read_file("bin/data.bin")
        finally:
            await again.aclose()
    assert inherited == expected
    assert data == binary


# --- the isolation attacks, on forked workspaces -------------------------------------------------


class ForkingInstance(Instance):
    """The same instance, but every workspace is a fork of one seed workspace's checkpoint
    (which changed a file git does not see, so the attacks' expectations still hold)."""

    def __init__(self, inner: Instance, seed: Workspace, checkpoint: str) -> None:
        self.spec, self._inner, self._seed, self._checkpoint = inner.spec, inner, seed, checkpoint

    @property
    def base_commit(self) -> str | None:
        return self._inner.base_commit

    async def workspace(self, name: str) -> Workspace:
        return await self._seed.fork(name, checkpoint=self._checkpoint)

    async def aclose(self) -> None:
        await self._seed.destroy()


async def forking(instance: Instance) -> ForkingInstance:
    seed = await instance.workspace("seed")
    await seed.write_file(".git/evs-seed", os.urandom(64))
    return ForkingInstance(instance, seed, await seed.checkpoint())


@pytest.fixture(scope="module")
async def forked(backend: BackendUnderTest) -> AsyncIterator[Instance]:
    with anyio.fail_after(60):
        instance = await backend.backend.instance(backend.spec())
        wrapper = await forking(instance)
    yield wrapper
    await wrapper.aclose()
    await instance.aclose()


@pytest.fixture(scope="module")
async def forked_limited(backend: BackendUnderTest) -> AsyncIterator[Instance]:
    with anyio.fail_after(60):
        instance = await backend.backend.instance(backend.spec(**LIMITED))
        wrapper = await forking(instance)
    yield wrapper
    await wrapper.aclose()
    await instance.aclose()


Attack = Callable[..., Awaitable[None]]
ATTACKS: Sequence[Attack] = (
    conformance_isolation.test_a_trajectory_cannot_see_or_signal_another_trajectorys_processes,
    conformance_isolation.test_a_trajectory_cannot_read_or_write_another_trajectorys_files,
    conformance_isolation.test_a_trajectory_cannot_reach_the_network_or_the_host_loopback,
    conformance_isolation.test_host_unix_sockets_are_out_of_reach,
    conformance_isolation.test_a_trajectory_cannot_mount_unmount_or_unshare,
    conformance_isolation.test_a_timeout_kills_the_commands_process_group_and_what_left_it_lasts,
    conformance_isolation.test_what_a_command_leaves_running_lasts_across_calls_until_the_workspace_goes,
    conformance_limits.test_a_trajectory_cannot_see_or_signal_another_trajectorys_lasting_processes,
    attacks.test_a_command_runs_in_a_session_of_its_own_without_a_terminal,
    attacks.test_calls_dockers_default_profile_refuses_are_refused,
    attacks.test_device_nodes_cannot_be_changed_and_still_work,
    attacks.test_file_tools_refuse_devices_fifos_and_sockets,
)
LIMIT_ATTACKS: Sequence[Attack] = (
    conformance_limits.test_a_fork_bomb_hits_the_pids_limit_and_the_instance_survives,
    conformance_limits.test_a_memory_hog_is_killed_and_the_instance_survives,
    conformance_limits.test_filling_the_disk_stops_at_the_workspace_cap,
)


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.__name__.removeprefix("test_"))
async def test_every_isolation_attack_fails_on_forked_workspaces_too(
    forked: Instance, attack: Attack
) -> None:
    await attack(forked)


@pytest.mark.parametrize("attack", LIMIT_ATTACKS, ids=lambda a: a.__name__.removeprefix("test_"))
async def test_every_limit_holds_on_forked_workspaces_too(
    forked_limited: Instance, attack: Attack
) -> None:
    await attack(forked_limited)


async def test_a_fork_cannot_change_the_layers_its_parent_and_siblings_stand_on(
    backend: BackendUnderTest, forked: Instance
) -> None:
    await conformance_isolation.test_the_frozen_filesystem_cannot_be_changed(backend, forked)
    secret = hashlib.sha256(os.urandom(16)).hexdigest()
    with anyio.fail_after(30):
        async with await forked.workspace("writer") as writer:
            # Through every name the layer's file has: the fork's own copy changes, only.
            await writer.exec(f"echo {secret} > a.txt; echo {secret} >> .git/evs-seed")
            async with await forked.workspace("reader") as reader:
                after = await reader.exec("cat a.txt; grep -c . .git/evs-seed; ls -a /trajs")
    assert after.stdout.startswith("hello\n")
    assert secret not in after.stdout
