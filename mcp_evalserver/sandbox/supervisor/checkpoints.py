"""Checkpoints, restores and forks of a workspace, and exports of a checkpoint that outlive
the instance (the stacking itself is layers.py's)."""

from __future__ import annotations

import errno
import os

from .in_view import forget_view_dir
from .jobs import Job
from .layers import write_archive
from .linux import CLONE_NEWNS, libc, setns_fd, umount
from .protocol import (
    Empty,
    HolderResult,
    SupervisorError,
    WorkspaceArgs,
    WsCheckpointResult,
    WsExportArgs,
    WsExportResult,
    WsForkArgs,
    WsForkResult,
    WsRestoreArgs,
)
from .state import Supervisor
from .workspace import Workspace
from .workspaces import attach_holder, create_workspace, detach_holder, teardown


def remount(sup: Supervisor, ws: Workspace) -> None:
    """The workspace's view on its current stack: its holder mounts it in place of the old
    one; a holder that is gone or fails is replaced by a new one. If that fails too, the
    workspace goes."""
    assert ws.layers is not None
    forget_view_dir(ws)  # it holds the old view: file ops would read and write its old upper
    try:
        remount_in_holder(sup, ws)
        return
    except OSError:
        pass
    detach_holder(sup, ws)
    try:
        attach_holder(sup, ws)
    except BaseException:
        del sup.workspaces[ws.name]
        teardown(sup, ws)
        raise


def remount_in_holder(sup: Supervisor, ws: Workspace) -> None:
    """The view again at the same root, on the workspace's new stack, in its holder's mount
    namespace, from here: the old view goes with every mount under it. No new holder, no
    cgroup, no namespace made; the holder (Python or compiled) only drops its spare. Asked only
    when no command runs there, so nothing has the old view open; an exec started later
    copies the new one.

    Raises:
        OSError: the holder is gone (its pid stays ours until the loop reaps it, so the
            namespace opened is its own), or the mounts failed.
    """
    assert ws.layers is not None
    # The holder's runners and the workspace's processes run in the view: they must be gone,
    # and their hold on the old overlay with them, before the old upper becomes a lower. The
    # answer also says the holder lives: one killed (its socket and namespace outlast it a
    # moment) never runs again to answer, and its pid stays ours until the loop reaps it, so
    # the namespace opened below is its own.
    drop_in_holder(ws)
    target = os.open(f"/proc/{ws.holder_pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    own = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        setns_fd(target, CLONE_NEWNS, "setns into the holder's view")
        try:
            umount(ws.root)  # detached with everything under it
            ws.overlay = ws.layers.overlay()
            sup.view.mount_view(ws)
        finally:
            if libc.setns(own, CLONE_NEWNS) != 0:  # never serve from a holder's view
                os._exit(70)
            os.fchdir(cwd)
    finally:
        for fd in (target, own, cwd):
            os.close(fd)
    assert ws.ctl is not None  # drop_in_holder raised otherwise
    ws.ctl.send(b"respare")


def drop_in_holder(ws: Workspace) -> None:
    """Has the holder drop its spare runners and end the workspace's init, and with it every
    process of the workspace; "respare" then makes them anew.

    Raises:
        OSError: the holder is gone.
    """
    if ws.ctl is None:
        raise OSError(errno.EPIPE, "no holder")
    ws.ctl.settimeout(60)
    ws.ctl.send(b"drop spare")
    answer = ws.ctl.recv(64)
    ws.ctl.settimeout(None)
    if answer != b"dropped":
        raise OSError(errno.EPIPE, f"holder answered {answer!r}")


def checkpoint(sup: Supervisor, ws: Workspace) -> str:
    """A checkpoint of the workspace's files. Its processes keep running: where it has any,
    its upper is copied (they write to the mounted one) and nothing is remounted."""
    assert ws.layers is not None
    cid, changed = ws.layers.checkpoint(keep_upper=has_processes(ws))
    if changed:
        remount(sup, ws)
    return cid


def has_processes(ws: Workspace) -> bool:
    """Whether a process runs in the workspace besides its init: its pid namespace's /proc
    (in the view, seen through the holder's root) lists more than pid 1. Asked while no
    command runs. If it cannot be read, the holder is dead or dying, and its processes with
    it: the remount gives the workspace a new one."""
    try:
        entries = os.listdir(f"/proc/{ws.holder_pid}/root{ws.root}/proc")
    except OSError:
        return False
    return any(name.isdigit() and name != "1" for name in entries)


# --- operations ------------------------------------------------------------------------------
def ws_checkpoint(sup: Supervisor, req_id: int, args: WorkspaceArgs) -> WsCheckpointResult:
    ws = sup.idle_workspace(args, "checkpoint")
    cid = checkpoint(sup, ws)
    depth = len(ws.layers.stack) if ws.layers else 0
    return {"checkpoint": cid, "depth": depth, "holder_pid": ws.holder_pid}


def ws_restore(sup: Supervisor, req_id: int, args: WsRestoreArgs) -> HolderResult:
    """The files of a checkpoint, and no process: those running go with the old view."""
    ws = sup.idle_workspace(args, "restore")
    assert ws.layers is not None
    ws.layers.restore(str(args["checkpoint"]))
    remount(sup, ws)
    return {"holder_pid": ws.holder_pid}


def ws_end_processes(sup: Supervisor, req_id: int, args: WorkspaceArgs) -> Empty:
    """Kills every process the workspace's commands left running (its pid namespace goes
    with its init; the holder makes a new one). Its files stay as they are."""
    ws = sup.idle_workspace(args, "end the processes of")
    try:
        drop_in_holder(ws)
        assert ws.ctl is not None
        ws.ctl.send(b"respare")
    except OSError:
        remount(sup, ws)  # a dead holder: its processes died with it; a new one
    return {}


def ws_fork(sup: Supervisor, req_id: int, args: WsForkArgs) -> WsForkResult:
    """A new workspace `name` on a checkpoint of `ws` (a new one of its current state)."""
    cid = args.get("checkpoint")
    parent = sup.workspace(args) if cid else sup.idle_workspace(args, "fork")
    name = str(args["name"])
    if name in sup.workspaces:  # before a checkpoint remounts the parent for nothing
        raise SupervisorError("Conflict", f"workspace {name!r} exists")
    if not cid:
        cid = checkpoint(sup, parent)
    made = create_workspace(sup, name, dict(parent.limits), (parent, str(cid)))
    return {**made, "checkpoint": cid, "parent_holder_pid": parent.holder_pid}


def ws_export(sup: Supervisor, req_id: int, args: WsExportArgs) -> None:
    """Checkpoint `checkpoint` of `ws` as an archive `ws_create` takes (`start_b64`), in a
    child: a checkpoint that outlives this supervisor, or this instance."""
    ws = sup.workspace(args)
    assert ws.layers is not None
    assert sup.layer_store is not None
    stack, store = ws.layers.stack_of(str(args["checkpoint"])), sup.layer_store
    dirs = [layer.dir for layer in stack]
    cap = int(args.get("max_bytes") or 256 << 20)

    def child() -> None:
        with os.fdopen(1, "wb", closefd=False) as out:
            write_archive(dirs, out)

    def finish(job: Job) -> WsExportResult:
        (archive, truncated), (err, _) = job.output()
        for msg in job.messages():
            if "error" in msg:
                raise SupervisorError("InfrastructureError", "export failed: " + msg["error"])
        if job.timed_out or not os.WIFEXITED(job.status or 0) or os.WEXITSTATUS(job.status or 0):
            why = err[-2000:].decode(errors="replace")
            raise SupervisorError("InfrastructureError", "export failed: " + why)
        if truncated:
            over = (
                f"the checkpoint's archive is over {cap} bytes ({cap / (1 << 20):g} MiB), "
                "the most asked for: keep less in the workspace when it is checkpointed "
                "(build outputs, caches, virtual environments), or ask for a larger max_bytes"
            )
            raise SupervisorError("LimitExceeded", over)
        return {"archive": archive}

    # Held while the child reads them: the workspace may be destroyed meanwhile.
    store.hold(stack)
    job = sup.jobs.spawn(req_id, child, None, float(args.get("timeout") or 300), cap=cap)
    job.finish, job.on_done = finish, lambda: store.release(stack)
