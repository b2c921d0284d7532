"""The local backend's view is an allowlist: what a trajectory sees of the host, and what not.

Laid out as `make demo` lays out a campaign: the task file (with its gold patch) and the state
directory sit beside the instance directories, outside /tmp (which a view replaces anyway).
A misbehaving agent goes looking for them, for host sockets and root-only files; a task's
declared paths are there, read-only or copy-on-write as declared.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from mcp_evalserver import errors
from mcp_evalserver.runtime.sandboxes import instance_spec
from mcp_evalserver.sandbox.base import InstanceSpec
from mcp_evalserver.sandbox.local import LocalBackend
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.host_paths import HostPath

pytestmark = [pytest.mark.anyio, pytest.mark.root]

GOLD = "GOLD-PATCH-" + uuid.uuid4().hex
SCORES = "OTHER-TRAJECTORIES-SCORES-" + uuid.uuid4().hex
REFERENCE = "DECLARED-READ-ONLY-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def layout() -> Iterator[Path]:
    """<top>/{tasks.jsonl, .state/, instances/task, data/, cache/}, under /var/lib as root."""
    top = Path(tempfile.mkdtemp(prefix="evs-view-", dir="/var/lib"))
    try:
        (top / "tasks.jsonl").write_text(f'{{"id": "t", "patch": "{GOLD}"}}\n')
        (top / ".state").mkdir()
        (top / ".state" / "ledger.jsonl").write_text(SCORES + "\n")
        (top / "data").mkdir()
        (top / "data" / "reference.txt").write_text(REFERENCE + "\n")
        (top / "cache").mkdir()
        (top / "cache" / "seed.txt").write_text("seed\n")
        task = top / "instances" / "task"
        task.mkdir(parents=True)
        (task / "a.txt").write_text("hello\n")
        subprocess.run(["git", "init", "-q", str(task)], check=True)
        yield top
    finally:
        shutil.rmtree(top)


@pytest.fixture(scope="module")
async def backend() -> AsyncIterator[LocalBackend]:
    async with LocalBackend() as backend:
        yield backend


async def test_a_trajectory_sees_neither_the_task_file_nor_the_state_beside_its_instance(
    layout: Path, backend: LocalBackend
) -> None:
    spec = InstanceSpec(path=str(layout / "instances" / "task"))
    with anyio.fail_after(60):
        instance = await backend.instance(spec)
        async with await instance.workspace("snoop") as ws:
            snooped = await ws.exec(
                f"cat ../../tasks.jsonl {layout}/tasks.jsonl {layout}/.state/ledger.jsonl; "
                f"ls -A .. ../.. {layout} /var /; grep -rs {GOLD} ../.. /tmp /root /var; "
                "cat a.txt"
            )
            with pytest.raises(errors.NotFound):
                await ws.read_file(f"{layout}/tasks.jsonl")
    assert GOLD not in snooped.stdout + snooped.stderr
    assert SCORES not in snooped.stdout + snooped.stderr
    listing = snooped.stdout.split()
    assert "tasks.jsonl" not in listing
    assert ".state" not in listing
    # The root holds the system directories and the view's own, nothing else of the host.
    assert {"srv", "opt", "home", "run", "work", "mnt", "media", "boot"}.isdisjoint(listing)
    assert snooped.stdout.endswith("hello\n")


async def test_a_trajectory_reads_what_its_task_declared_and_changes_it_only_in_its_copy(
    layout: Path, backend: LocalBackend
) -> None:
    spec = InstanceSpec(
        path=str(layout / "instances" / "task"),
        paths=(
            HostPath(path=str(layout / "data")),
            HostPath(path=str(layout / "cache"), writable=True),
        ),
    )
    data, cache = layout / "data", layout / "cache"
    with anyio.fail_after(60):
        instance = await backend.instance(spec)
        async with await instance.workspace("reader") as ws:
            read = await ws.exec(f"cat {data}/reference.txt {cache}/seed.txt")
            vandal = await ws.exec(f"echo x > {data}/reference.txt || echo refused")
            await ws.exec(f"echo mine > {cache}/seed.txt; echo new > {cache}/new.txt")
            own = await ws.exec(f"cat {cache}/seed.txt {cache}/new.txt")
            beside = await ws.exec(f"cat {layout}/tasks.jsonl; ls -A {layout}")
            async with await instance.workspace("neighbour") as other:
                theirs = await other.exec(f"cat {cache}/seed.txt; ls {cache}")
    assert read.stdout == f"{REFERENCE}\nseed\n"
    assert vandal.stdout == "refused\n"
    assert "Read-only file system" in vandal.stderr
    assert own.stdout == "mine\nnew\n"
    assert theirs.stdout == "seed\nseed.txt\n"  # copy-on-write per workspace
    assert (cache / "seed.txt").read_text() == "seed\n"
    assert not (cache / "new.txt").exists()
    assert (data / "reference.txt").read_text() == f"{REFERENCE}\n"
    assert GOLD not in beside.stdout
    assert sorted(beside.stdout.split()) == [
        "cache",
        "data",
        "instances",
    ]


async def test_declared_paths_that_cannot_be_shown_are_refused_with_what_to_do(
    layout: Path, backend: LocalBackend
) -> None:
    os.symlink(layout / "data", layout / "data-link")
    try:
        refusals = []
        for declared in (
            HostPath(path=str(layout / "absent")),
            HostPath(path=str(layout / "data-link")),
            HostPath(path=str(layout / "tasks.jsonl"), writable=True),
            HostPath(path="/proc/1"),
        ):
            spec = InstanceSpec(path=str(layout / "instances" / "task"), paths=(declared,))
            with anyio.fail_after(60), pytest.raises(errors.InvalidInput) as refused:
                await backend.instance(spec)
            refusals.append(str(refused.value))
    finally:
        os.unlink(layout / "data-link")
    assert "is not there on this host" in refusals[0]
    assert f"declare {str(layout / 'data')!r}" in refusals[1]
    assert "is not a directory" in refusals[2]
    assert "/proc, /dev and /sys are the view's own" in refusals[3]


async def test_host_sockets_and_root_only_files_outside_the_instance_are_not_there(
    layout: Path, backend: LocalBackend
) -> None:
    """The old view was the host's / minus a list: a socket or a 0600 file elsewhere leaked."""
    secret = layout / "root-only.key"
    secret.write_text(GOLD + "\n")
    secret.chmod(0o600)
    etc_secret = Path("/etc") / f"evs-view-{uuid.uuid4().hex[:8]}.key"  # as /etc/docker/key.json
    etc_secret.write_text(GOLD + "\n")
    etc_secret.chmod(0o600)
    # As /etc is scanned, so is /usr: root's own 0600 file and 0700 directory.
    usr_secret = Path("/usr/local/share") / f"evs-view-{uuid.uuid4().hex[:8]}.key"
    usr_secret.write_text(GOLD + "\n")
    usr_secret.chmod(0o600)
    usr_private = Path("/usr/local/share") / f"evs-view-{uuid.uuid4().hex[:8]}"
    usr_private.mkdir(0o700)
    (usr_private / "answer").write_text(GOLD + "\n")
    (usr_private / "answer").chmod(0o644)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(layout / "host.sock"))
    listener.listen()
    probe = (
        "import socket, sys\n"
        "try:\n"
        "    socket.socket(socket.AF_UNIX).connect(sys.argv[1]); print('connected')\n"
        "except OSError as e:\n"
        "    print(type(e).__name__)\n"
    )
    try:
        with anyio.fail_after(60):
            # An instance of its own: /etc's secrets are found when an instance starts.
            spec = InstanceSpec(path=str(layout / "instances" / "task"), key="escape")
            instance = await backend.instance(spec)
            async with await instance.workspace("escape") as ws:
                reached = await ws.exec(["python3", "-c", probe, str(layout / "host.sock")])
                read = await ws.exec(
                    f"cat {secret} {etc_secret} {usr_secret} {usr_private}/answer; "
                    f"ls -l {etc_secret} {usr_secret}"
                )
    finally:
        listener.close()
        usr_secret.unlink()
        (usr_private / "answer").unlink()
        usr_private.rmdir()
        etc_secret.unlink()
        secret.unlink()
        (layout / "host.sock").unlink()
    assert reached.stdout == "FileNotFoundError\n"
    assert GOLD not in read.stdout


async def test_masks_over_host_secrets_cannot_have_their_metadata_changed(
    layout: Path, backend: LocalBackend
) -> None:
    """/etc/shadow was the host's /dev/null bound writable: chmod through it changed the host's."""
    null_before = os.stat("/dev/null")
    with anyio.fail_after(60):
        instance = await backend.instance(InstanceSpec(path=str(layout / "instances" / "task")))
        async with await instance.workspace("masks") as ws:
            changed = await ws.exec(
                "for f in /etc/shadow /etc/gshadow; do chmod 0666 $f && echo changed $f; done; "
                "wc -c < /etc/shadow"
            )
    null_after = os.stat("/dev/null")
    assert "changed" not in changed.stdout, changed.stdout
    assert changed.stdout == "0\n"
    assert null_after.st_ctime_ns == null_before.st_ctime_ns


def test_a_task_declares_extra_paths_read_only_by_default_or_writable() -> None:
    task = Task.model_validate(
        {
            "id": "t",
            "path": "/srv/repo",
            "paths": ["/opt/tools", {"path": "/srv/cache", "writable": True}],
        }
    )
    spec = instance_spec(task)
    assert spec.paths == (
        HostPath(path="/opt/tools"),
        HostPath(path="/srv/cache", writable=True),
    )
    plain = Task.model_validate({"id": "t", "path": "/srv/repo"})
    assert task.instance_key != plain.instance_key  # a different view is another instance


def area_mounts(holder_pid: int) -> list[str]:
    """The mount points of workspace areas (`<store>/.aN`, tmpfs) in a holder's namespace."""
    mountinfo = Path(f"/proc/{holder_pid}/mountinfo").read_text().splitlines()
    points = [line.split()[4] for line in mountinfo]
    return [p for p in points if os.path.basename(p).startswith(".a")]


async def test_a_holder_keeps_the_areas_of_its_own_layers_only_however_many_workspaces_exist(
    layout: Path, backend: LocalBackend
) -> None:
    # A holder that copied the supervisor's namespace kept every earlier workspace's area:
    # N workspaces held N*N/2 mounts of kernel memory (bench/density.py).
    spec = InstanceSpec(path=str(layout / "instances" / "task"))
    with anyio.fail_after(60):
        instance = await backend.instance(spec)
        earlier = [await instance.workspace(f"earlier{i}") for i in range(3)]
        async with await instance.workspace("parent") as parent:
            await parent.exec("echo parent > a.txt")
            async with await parent.fork("child") as child:
                await child.exec("echo child >> a.txt")
                parents = area_mounts(int(parent.info["holder_pid"]))
                childs = area_mounts(int(child.info["holder_pid"]))
                seen = await child.exec("cat a.txt")
        for ws in earlier:
            await ws.destroy()
    assert len(parents) == 1
    assert len(childs) == 2  # its own and its parent's, where its layers lie
    assert parents[0] in childs
    assert seen.stdout == "parent\nchild\n"
