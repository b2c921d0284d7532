"""The instance: `init` (the supervisor's own mount namespace, its store, the parts every view
shares) and `freeze` (the task's setup, then nothing may write to the lower any more)."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

from .cgroups import Cgroups
from .isolation import SECCOMP_PROGRAM, enter_user_namespace, keep_capabilities
from .jobs import Job
from .layers import LayerStore
from .linux import CLONE_NEWNS, MS_NODEV, MS_NOSUID, MS_PRIVATE, MS_REC, mount, unshare
from .protocol import (
    PROTOCOL_VERSION,
    FreezeArgs,
    FreezeResult,
    InitArgs,
    InitResult,
    SupervisorError,
)
from .state import Supervisor
from .view import View, declared_paths, shown_at


def init(sup: Supervisor, req_id: int, args: InitArgs) -> InitResult:
    if sup.cfg:
        raise SupervisorError("Conflict", "supervisor already initialised")
    mode = args["mode"]
    if mode not in ("host", "container"):
        raise SupervisorError("InvalidInput", "mode must be 'host' or 'container'")
    cfg: dict[str, Any] = {"workdir": "/testbed", "network": False}
    cfg["instance"] = "/"
    cfg.update(args)
    if mode == "host":
        instance = cfg["instance"]
        if not os.path.isdir(instance) or instance == "/":
            raise SupervisorError("InvalidInput", f"instance directory {instance!r} missing")
        if os.path.realpath(instance) != instance:
            real = os.path.realpath(instance)
            msg = f"instance directory {instance!r} goes through a symlink: use {real!r}"
            raise SupervisorError("InvalidInput", msg)
        cfg["paths"] = declared_paths(cfg.get("paths"), instance)
    elif cfg.get("paths"):
        # Container mode: only read-only directories the backend bound into the container (the
        # CLI agents' runtime); one that is not there (an older container) is left out.
        paths = declared_paths(cfg.get("paths"), "/")
        if any(entry["writable"] for entry in paths):
            msg = "declared paths are for host directories; an image holds its files itself"
            raise SupervisorError("InvalidInput", msg)
        cfg["paths"] = [entry for entry in paths if os.path.isdir(shown_at(entry))]
    keep_capabilities(str(cfg.get("capabilities") or "none"))
    if os.geteuid() != 0:
        enter_user_namespace()
        cfg["userns"] = True
    # Our own mount namespace: every mount we make dies with us, and ns files can be bound.
    unshare(CLONE_NEWNS)
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    store = cfg["store"]
    os.makedirs(store, mode=0o700, exist_ok=True)
    if cfg.get("store_tmpfs"):
        mount("tmpfs", store, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
    sup.cfg = cfg
    sup.view = View(cfg)
    sup.view.make_masks()
    sup.view.make_dev()
    base = "/" if mode == "container" else cfg["instance"].rstrip("/") or "/"
    sup.layer_store = LayerStore(store, base)
    sup.cgroups = Cgroups(in_container=mode == "container")
    holder = str(cfg.get("holder") or "")
    if holder and os.access(holder, os.X_OK) and SECCOMP_PROGRAM is not None:
        sup.native_holder = holder
    return {
        "version": PROTOCOL_VERSION,
        "holder": "native" if sup.native_holder else "python",
        "pid": os.getpid(),
        "python": platform.python_version(),
        "cgroups": sup.cgroups.version,
        "cgroup_dirs": sorted(sup.cgroups.bases.values()),
        "limits": sup.cgroups.limits(),
    }


def freeze(sup: Supervisor, req_id: int, args: FreezeArgs) -> None:
    """Runs setup (unsandboxed, as the instance's owner would), refreshes the git index."""
    sup.require_init()
    if sup.frozen:
        raise SupervisorError("Conflict", "instance already frozen")
    workdir = sup.cfg["workdir"]
    script = "set -e\n" + "\n".join(args.get("setup") or []) + "\n"
    script += (
        "if git -c safe.directory='*' rev-parse --git-dir >/dev/null 2>&1; then\n"
        "  git -c safe.directory='*' status --porcelain >/dev/null\n"
        '  printf \'{"base": "%s"}\\n\' "$(git -c safe.directory=\'*\' rev-parse HEAD)" >&3\n'
        "fi\n"
    )

    def child() -> None:
        os.chdir(workdir)
        os.execvp("/bin/sh", ["/bin/sh", "-c", script])

    def finish(job: Job) -> FreezeResult:
        (out, _), (err, _) = job.output()
        if job.timed_out or not os.WIFEXITED(job.status or 0) or os.WEXITSTATUS(job.status or 0):
            tail = (out + err)[-4000:].decode(errors="replace")
            raise SupervisorError("InfrastructureError", f"setup failed: {tail}")
        if sup.cfg["mode"] == "host":  # after setup: it may make what the view shows
            sup.view.build_skeleton(sup.cfg["paths"])
        sup.view.snapshot_namespace()
        sup.frozen = True
        sup.base = next((str(m["base"]) for m in job.messages() if "base" in m), None)
        return {"base": sup.base, "duration_s": time.monotonic() - job.started}

    job = sup.jobs.spawn(req_id, child, None, float(args.get("timeout") or 3600), cap=1 << 20)
    job.finish = finish
