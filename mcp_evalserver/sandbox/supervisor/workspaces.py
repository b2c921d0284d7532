"""Workspaces: create (fresh, forked, or from an exported checkpoint), destroy, reset; and the
spare holders and whole workspaces the loop makes ahead while it is idle."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import signal
import sys
import time
from typing import Any

from .cgroups import remove_cgroup_tree
from .holders import spawn_spare
from .in_view import forget_view_dir
from .layers import WorkspaceLayers
from .protocol import Empty, SupervisorError, WorkspaceArgs, WsCreateArgs, WsCreateResult
from .state import Supervisor
from .workspace import Workspace

SPARE_HOLDERS = 2  # prepared ahead: see holders.spawn_spare
READY_WORKSPACES = 2  # whole workspaces prepared ahead: see prepare_ready
IDLE_S = 0.002  # how long the loop has nothing to do before it prepares spares


# --- operations ------------------------------------------------------------------------------
def ws_create(sup: Supervisor, req_id: int, args: WsCreateArgs) -> WsCreateResult:
    start = args.get("start_b64")
    archive = base64.b64decode(start) if start else None
    return create_workspace(sup, str(args["ws"]), dict(args.get("limits") or {}), archive=archive)


def ws_destroy(sup: Supervisor, req_id: int, args: WorkspaceArgs) -> Empty:
    ws = sup.workspace(args)
    del sup.workspaces[ws.name]
    teardown(sup, ws)
    return {}


def ws_reset(sup: Supervisor, req_id: int, args: WorkspaceArgs) -> WsCreateResult:
    ws = sup.workspace(args)
    limits = ws.limits
    ws_destroy(sup, req_id, args)
    return create_workspace(sup, ws.name, dict(limits))


# --- the workspace's life --------------------------------------------------------------------


def create_workspace(
    sup: Supervisor,
    name: str,
    limits: dict[str, Any],
    fork: tuple[Workspace, str] | None = None,
    archive: bytes | None = None,
) -> WsCreateResult:
    """A workspace on a fresh area; `fork`: (parent, checkpoint) it starts from; `archive`:
    an exported checkpoint it starts from (read here, in the loop: a rare, resume-time
    cost of about the size of the trajectory's changes)."""
    sup.require_init()
    if not sup.frozen or sup.layer_store is None:
        raise SupervisorError("Conflict", "freeze the instance before creating workspaces")
    if not name or "/" in name or name.startswith(".") or len(name) > 128:
        raise SupervisorError("InvalidInput", f"workspace name {name!r} not allowed")
    if name in sup.workspaces:
        raise SupervisorError("Conflict", f"workspace {name!r} exists")
    started = time.monotonic()
    if fork is None and archive is None:
        ready = take_ready(sup, name, limits)
        if ready is not None:
            sup.workspaces[name] = ready
            ms = (time.monotonic() - started) * 1000
            return {"ws": name, "ms": ms, "holder_pid": ready.holder_pid, "root": ready.root,
                    "made_ahead": True, "ready_left": len(sup.ready)}  # fmt: skip
    # A tmpfs per workspace (its area) is its disk cap.
    area = sup.layer_store.open_area(limits.get("disk_bytes"))
    ws = Workspace(name, area.path)
    ws.limits = limits
    start = None
    try:
        if archive is not None:
            ws.layers = WorkspaceLayers.imported(sup.layer_store, area, io.BytesIO(archive))
            start = ws.layers.checkpoint()[0]  # to restore: the files it started with
        elif fork is None:
            ws.layers = WorkspaceLayers(sup.layer_store, area)
        else:
            assert fork[0].layers is not None
            ws.layers = fork[0].layers.fork(fork[1], area)
    except BaseException:
        sup.layer_store.retire(area)
        raise
    try:
        build_workspace(sup, ws)
    except BaseException:
        teardown(sup, ws)
        raise
    sup.workspaces[name] = ws
    # The holder (its pid in our pid namespace) keeps the view at `root` in its mount
    # namespace: what an operator's shell enters (`nsenter -t PID -m ... chroot ROOT`).
    ms = (time.monotonic() - started) * 1000
    result: WsCreateResult = {"ws": name, "ms": ms, "holder_pid": ws.holder_pid, "root": ws.root,
                              "made_ahead": False}  # fmt: skip
    if start is not None:
        result["checkpoint"] = start
    return result


def build_workspace(sup: Supervisor, ws: Workspace) -> None:
    os.makedirs(ws.root, 0o700)
    os.mkdir(os.path.join(ws.path, "tmp"), 0o1777)
    os.chmod(os.path.join(ws.path, "tmp"), 0o1777)
    attach_holder(sup, ws)


def attach_holder(sup: Supervisor, ws: Workspace) -> None:
    """Gives `ws` a holder that mounts its view on its current stack."""
    limits = ws.limits
    assert ws.layers is not None
    spare = sup.spares.pop(0) if sup.spares else spawn_spare(sup)
    ws.holder_pid, ws.ctl, ws.cgroups = spare
    if sup.cgroups is not None:
        sup.cgroups.limit(ws.cgroups, limits.get("pids"), limits.get("memory_bytes"))
    try:
        ws.ctl.settimeout(60)
        view = {"ws": ws.name, "path": ws.path, "overlay": ws.layers.overlay()}
        view["areas"] = ws.layers.mounted_areas()
        ws.ctl.send(json.dumps(view).encode())
        ack = ws.ctl.recv(4096).decode(errors="replace")
        ws.ctl.settimeout(None)
    except OSError as e:
        ack = f"error: holder did not answer ({e})"
    if not ack.startswith("ok"):
        raise SupervisorError("InfrastructureError", "workspace mount failed: " + ack.strip())


def teardown(sup: Supervisor, ws: Workspace) -> None:
    for req_id in list(ws.jobs):
        job = sup.jobs.by_req.get(req_id)
        if job is not None:
            sup.jobs.kill(job)
    holder = ws.holder_pid
    detach_holder(sup, ws)
    if ws.layers is not None:  # frees its area, but for layers other workspaces hold
        # Once the holder is reaped: a directory removed while it is still a mount point in
        # the dying holder's namespace makes the kernel walk every mount of ours (an area
        # per workspace) to see whether it is one here too.
        sup.jobs.after_holder(holder, ws.layers.close)
        ws.layers = None


def detach_holder(sup: Supervisor, ws: Workspace) -> None:
    """Ends the holder of `ws` (and with it the mounts of its view)."""
    forget_view_dir(ws)
    if ws.ctl is not None:
        ws.ctl.close()
        ws.ctl = None
    if ws.holder_pid:  # reaped by the loop: its namespaces' teardown need not block us
        with contextlib.suppress(OSError):
            os.kill(ws.holder_pid, signal.SIGKILL)
        sup.jobs.dying.setdefault(ws.holder_pid, [])
        ws.holder_pid = 0
    sup.stale_cgroups.extend(ws.cgroups)
    ws.cgroups = []
    sup.remove_stale_cgroups()


# --- made ahead, while the loop is idle -------------------------------------------------------


def wants_spares(sup: Supervisor) -> bool:
    if not (sup.frozen and sup.running) or time.monotonic() < sup.prepare_after:
        return False
    return len(sup.spares) < SPARE_HOLDERS or (
        sup.ready_limits is not None and len(sup.ready) < READY_WORKSPACES
    )


def prepare_ready(sup: Supervisor) -> None:
    """Builds one fresh workspace ahead (area, layers, a holder with the view mounted and
    its next exec's runner ready) with the limits the last plain ws_create asked for, so the
    next such create only names one: creating a workspace is then off the path of the
    trajectory that asks. A failure here is logged and stops this until the next plain
    create: made on demand then, the error reaches a caller."""
    limits, store = sup.ready_limits, sup.layer_store
    if limits is None or store is None:
        return
    area = store.open_area(limits.get("disk_bytes"))
    ws = Workspace(".ready", area.path)
    ws.limits = dict(limits)
    try:
        ws.layers = WorkspaceLayers(store, area)
    except Exception as e:
        store.retire(area)
        stop_ready(sup, e)
        return
    try:
        build_workspace(sup, ws)
    except Exception as e:
        teardown(sup, ws)
        stop_ready(sup, e)
        return
    sup.ready.append(ws)


def stop_ready(sup: Supervisor, e: Exception) -> None:
    sys.stderr.write(f"supervisor: a workspace made ahead failed: {e}\n")
    sup.ready_limits = None


def take_ready(sup: Supervisor, name: str, limits: dict[str, Any]) -> Workspace | None:
    """A workspace built ahead with these limits, now called `name`; None if there is none
    (the ones built for other limits go)."""
    if limits != sup.ready_limits:
        for ws in sup.ready:
            teardown(sup, ws)
        sup.ready.clear()
        sup.ready_limits = dict(limits)
        return None
    if not sup.ready:
        return None
    ws = sup.ready.pop(0)
    ws.name = name
    return ws


def prepare_one(sup: Supervisor) -> None:
    """One spare holder, else one ready workspace: each blocks this loop for milliseconds,
    so a request that arrives meanwhile waits for one of them at most."""
    try:
        if len(sup.spares) < SPARE_HOLDERS:
            sup.spares.append(spawn_spare(sup))
        elif len(sup.ready) < READY_WORKSPACES:
            prepare_ready(sup)
    except Exception as e:  # e.g. no memory or disk for one more: on demand, then
        stop_ready(sup, e)
        sup.prepare_after = time.monotonic() + 1  # not again at once


def close_all(sup: Supervisor) -> None:
    """Tears every workspace and spare down, and the cgroups we made: the supervisor ends."""
    for pid, ctl, cgroups in sup.spares:
        ctl.close()
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        sup.stale_cgroups.extend(cgroups)
    sup.spares.clear()
    for ws in [*sup.workspaces.values(), *sup.ready]:
        teardown(sup, ws)
    sup.workspaces.clear()
    sup.ready.clear()
    for pid in list(sup.jobs.dying):  # nothing reaps from here on: free their areas now
        sup.jobs.ended(pid, None)
    deadline = time.monotonic() + 2
    while sup.stale_cgroups and time.monotonic() < deadline:
        time.sleep(0.02)
        sup.remove_stale_cgroups()
    if sup.cgroups is not None:
        for base in sup.cgroups.bases.values():
            remove_cgroup_tree(base)
