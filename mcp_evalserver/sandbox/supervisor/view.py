"""What a trajectory sees: its view, built per workspace by its holder.

"container" mode: the overlay's lower is `/` (the container's root: a `pip install` by one
trajectory never reaches another); uppers live on a non-overlay store. "host" mode (the local
backend): a view is an allowlist (docs/design/isolation.md), never the host's `/` minus masks:
the system directories (HOST_SYSTEM) read-only with /etc's secrets masked, the instance at its
own path (the overlay), the paths the task declares, the workspace's own PRIVATE_DIRS, a
minimal /dev whose nodes cannot be chmod'ed and, per exec, a fresh /proc. Nothing else.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import Any

from .layers import overlay_options
from .linux import (
    CLONE_NEWNS,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    attach_mount,
    clone_mount,
    make_readonly_recursive,
    mount,
    setns_fd,
    unshare,
)
from .protocol import SupervisorError
from .workspace import Workspace

# Host mode: the host's system directories a view holds (or their symlinks), read-only,
# nosuid, nodev.
HOST_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")
# Per workspace, on its disk cap: /tmp and /var/tmp share one directory; /root is HOME.
PRIVATE_DIRS = {"/tmp": "tmp", "/var/tmp": "tmp", "/root": "home"}
# Under /etc, besides whatever a non-root user may not read: key and credential directories
# whose public halves need not be visible either.
ETC_SECRETS = ("ssh", "ssl/private", "docker", "sudoers.d")
PROC_MASKED = ("kcore", "keys", "timer_list", "sched_debug", "latency_stats", "acpi", "scsi")
PROC_READONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


class View:
    """The parts every workspace's view shares, made once per instance from `cfg` (init's
    arguments), and how a holder mounts a view from them."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.mask_file = self.mask_dir = self.skeleton = ""  # see make_masks, build_skeleton
        self.dev = ""  # every view's /dev: see make_dev
        self.late_paths: list[dict[str, Any]] = []  # mounted per workspace (build_skeleton)
        self.snapshot = -1  # the mount namespace holders copy (see snapshot_namespace)

    def make_masks(self) -> None:
        """An empty file and an empty directory on a read-only tmpfs, to bind over what a view
        must not show. Never the host's /dev/null: a chmod through a writable bind of it
        changes the host's node."""
        masks = os.path.join(self.cfg["store"], ".masks")
        os.makedirs(masks, 0o755, exist_ok=True)
        nothing = MS_NOSUID | MS_NODEV | MS_NOEXEC
        mount("tmpfs", masks, "tmpfs", nothing, "size=4k,mode=0555")
        self.mask_file, self.mask_dir = masks + "/file", masks + "/dir"
        with open(self.mask_file, "w"):
            pass
        os.chmod(self.mask_file, 0o444)
        os.mkdir(self.mask_dir, 0o555)
        mount("none", masks, None, MS_REMOUNT | MS_RDONLY | nothing)  # every bind of it too

    def mask(self, path: str) -> None:
        """Hides `path` (a directory, a file or anything else) behind an empty, read-only one."""
        mount(self.mask_dir if os.path.isdir(path) else self.mask_file, path, None, MS_BIND)

    def build_skeleton(self, declared: list[dict[str, Any]]) -> None:
        """Host mode, once per instance: what every workspace's view shares, read-only.

        The system directories (HOST_SYSTEM) with /etc's secrets masked, the declared read-only
        paths, and a mount point for everything mount_view adds, on a tmpfs remounted
        read-only: a workspace binds it as its root (one call), so a view costs no more than
        the old whole-host bind did. Paths that are copy-on-write or lie under something
        mounted per workspace are left for mount_view (`late_paths`).
        """
        cfg = self.cfg
        for entry in declared:
            path = entry["path"]
            if not os.path.exists(path) or (entry["writable"] and not os.path.isdir(path)):
                kind = "a directory" if entry["writable"] else "there"
                msg = f"declared path {path!r} is not {kind} on this host (after setup)"
                raise SupervisorError("InvalidInput", msg + ": make it there, or drop it")
        skeleton = os.path.join(cfg["store"], ".view")
        os.makedirs(skeleton, 0o755, exist_ok=True)
        mount("tmpfs", skeleton, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        for name in HOST_SYSTEM:
            source, target = "/" + name, os.path.join(skeleton, name)
            if os.path.islink(source):
                os.symlink(os.readlink(source), target)
            elif os.path.isdir(source):
                os.mkdir(target, 0o755)
                mount(source, target, None, MS_BIND | MS_REC)
                make_readonly_recursive(target)
        for name in HOST_SYSTEM:  # what an ordinary user may not read, in /usr as in /etc
            if os.path.isdir("/" + name) and not os.path.islink("/" + name):
                for path in secrets_under("/" + name, ETC_SECRETS if name == "etc" else ()):
                    self.mask(skeleton + path)
        for target in ("/proc", "/dev", *PRIVATE_DIRS):
            os.makedirs(skeleton + target, 0o755, exist_ok=True)
        instance = {"path": cfg["instance"], "writable": True}
        late = [instance]
        for entry in sorted(declared, key=lambda e: shown_at(e).count("/")):
            tops = [e["path"] for e in late if e["writable"]] + list(PRIVATE_DIRS)
            if entry["writable"] or any(is_under(shown_at(entry), top) for top in tops):
                late.append(entry)
                continue
            target = skeleton + shown_at(entry)
            make_mountpoint(target, os.path.isdir(entry["path"]))
            mount(entry["path"], target, None, MS_BIND | MS_REC)
            make_readonly_recursive(target)
        for entry in late:  # mount points outside the private directories exist already
            if not any(is_under(shown_at(entry), top) for top in PRIVATE_DIRS):
                make_mountpoint(skeleton + shown_at(entry), os.path.isdir(entry["path"]))
        mount("none", skeleton, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        self.skeleton = skeleton
        self.late_paths = sorted(late, key=lambda e: shown_at(e).count("/"))

    def make_dev(self) -> None:
        """A minimal /dev that every view binds: nothing in it can be chmod'ed, chown'ed or
        added.

        Nodes are made afresh (or, where mknod is refused, as in a user namespace, read-only
        binds) on a tmpfs that is then remounted read-only, the same for every workspace: the
        host's and the container's device inodes are never reachable for a metadata change.
        Made once, so a view costs one bind here rather than twenty calls (checkpoints and
        forks mount views often).
        """
        dev = os.path.join(self.cfg["store"], ".dev")
        os.makedirs(dev, 0o755, exist_ok=True)
        mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
        for name in DEVICES:
            source, node = "/dev/" + name, os.path.join(dev, name)
            try:
                rdev = os.stat(source).st_rdev
            except OSError:
                continue
            try:
                os.mknod(node, stat.S_IFCHR | 0o666, rdev)
                os.chmod(node, 0o666)  # past our umask
            except PermissionError:
                with open(node, "w"):
                    pass
                mount(source, node, None, MS_BIND)
                mount("none", node, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
        links = {"fd": "", "stdin": "/0", "stdout": "/1", "stderr": "/2"}
        for name, suffix in links.items():
            target = "/proc/self/fd" + suffix
            os.symlink(target, os.path.join(dev, name))
        for sub in ("shm", "pts", "mqueue"):
            os.mkdir(os.path.join(dev, sub))
        mount("none", dev, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
        self.dev = dev

    def mount_dev(self, ws: Workspace) -> None:
        """The view's /dev (make_dev's); /dev/shm is the workspace's own directory (its bytes
        count in the disk cap)."""
        dev = ws.root + "/dev"
        os.makedirs(dev, exist_ok=True)
        mount(self.dev, dev, None, MS_BIND | MS_REC)
        shm = os.path.join(ws.path, "shm")
        os.makedirs(shm, exist_ok=True)
        os.chmod(shm, 0o1777)
        mount(shm, os.path.join(dev, "shm"), None, MS_BIND)

    def mount_view(self, ws: Workspace) -> None:
        """In the workspace's fresh mount namespace: build the trajectory's view at ws.root."""
        root, cfg = ws.root, self.cfg
        if cfg["mode"] == "container":
            self.mount_overlay(root, overlay_options("/", ws.overlay))
            mount("/sys", root + "/sys", None, MS_BIND | MS_REC)
            make_readonly_recursive(root + "/sys")
            for f in ("/etc/resolv.conf", "/etc/hosts", "/etc/hostname"):
                if os.path.isfile(f) and os.path.isfile(root + f):
                    mount(f, root + f, None, MS_BIND)
                    mount("none", root + f, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
            for entry in cfg.get("paths") or []:  # read-only, their mount points in the lower
                target = root + shown_at(entry)
                if os.path.isdir(target):
                    mount(shown_at(entry), target, None, MS_BIND | MS_REC)
                    make_readonly_recursive(target)
        else:
            # The part every workspace shares was built once (build_skeleton); what is left is
            # this workspace's own: its private directories, then the copy-on-write paths.
            mount(self.skeleton, root, None, MS_BIND | MS_REC)
            for target, sub in PRIVATE_DIRS.items():
                private = os.path.join(ws.path, sub)
                os.makedirs(private, 0o700, exist_ok=True)
                mount(private, root + target, None, MS_BIND)
            for number, entry in enumerate(self.late_paths):
                path, target = entry["path"], root + shown_at(entry)
                make_mountpoint(target, os.path.isdir(path))
                if path == cfg["instance"]:
                    self.mount_overlay(target, overlay_options(path, ws.overlay))
                elif entry["writable"]:  # on the area, kept as is across checkpoints
                    own = os.path.join(ws.path, "paths", str(number))
                    for sub in ("upper", "work"):
                        os.makedirs(os.path.join(own, sub), 0o700, exist_ok=True)
                    opts = f"lowerdir={path},upperdir={own}/upper,workdir={own}/work"
                    self.mount_overlay(target, opts)
                else:
                    mount(path, target, None, MS_BIND | MS_REC)
                    make_readonly_recursive(target)
        self.mount_dev(ws)
        store = root + cfg["store"]
        if os.path.isdir(store):  # other workspaces' uppers: never visible
            mount("tmpfs", store, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=0555")

    @staticmethod
    def mount_overlay(target: str, opts: str) -> None:
        """An overlay at `target`; its upper is on the workspace's area (the disk cap)."""
        try:
            mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, opts + ",redirect_dir=on")
        except OSError:
            mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, opts)

    def snapshot_namespace(self) -> None:
        """Keeps our mount namespace as it is now, before any workspace, as the one every
        holder copies (enter_view_namespace), and goes on in a copy of it.

        A holder that copied our namespace copied every mount in it, the area (a tmpfs) of
        every workspace made before it among them: N workspaces kept N*N/2 mounts, 16 GB of
        kernel memory at 6,900. A copy of this snapshot is a few dozen mounts, plus the areas
        the workspace's layers lie on, attached by open_tree(2). Where that is refused
        (kernels before 5.2, a seccomp profile that lacks it), holders copy ours as before.
        """
        try:
            os.close(clone_mount(self.cfg["store"]))
        except OSError as e:
            sys.stderr.write(f"supervisor: no open_tree ({e}): holders copy every area\n")
            return
        self.snapshot = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        unshare(CLONE_NEWNS)  # areas are mounted from now on: in our copy only

    def enter_view_namespace(self, areas: list[str]) -> None:
        """A holder's own mount namespace: a copy of the snapshot with `areas` (the mount
        points of the tmpfs areas its workspace's layers lie on) attached, or else of ours."""
        if self.snapshot < 0:
            unshare(CLONE_NEWNS)
            return
        clones = [(clone_mount(path), path) for path in areas]  # from ours, where they are
        setns_fd(self.snapshot, CLONE_NEWNS, "setns into the snapshot")
        unshare(CLONE_NEWNS)
        os.close(self.snapshot)  # a holder keeps nothing that leads out of its own view
        self.snapshot = -1
        for fd, path in clones:
            attach_mount(fd, path)

    def mount_proc(self, root: str) -> None:
        """A fresh /proc in the view at `root` (of the caller's pid namespace), its kernel
        knobs read-only and what reveals the host masked. In an exec's own mount namespace."""
        proc = root + "/proc"
        mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for name in PROC_READONLY:
            path = os.path.join(proc, name)
            if os.path.exists(path):
                mount(path, path, None, MS_BIND | MS_REC)
                mount("none", path, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        for name in PROC_MASKED:
            path = os.path.join(proc, name)
            if os.path.lexists(path):
                self.mask(path)


def shown_at(entry: dict[str, Any]) -> str:
    """Where the view shows a declared path: its `target`, else its own path."""
    return str(entry.get("target") or entry["path"])


def is_under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def make_mountpoint(path: str, directory: bool) -> None:
    """An empty directory (or file) to mount on at `path`, with its parents, unless one exists."""
    if os.path.lexists(path):
        return
    os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
    if directory:
        os.mkdir(path, 0o755)
    else:
        with open(path, "w"):
            pass


def secrets_under(top: str, named: tuple[str, ...]) -> list[str]:
    """What under `top` a user other than root may not read, and the `named` entries (relative).

    Sandboxed processes are uid 0, the owner of most of what the host keeps from ordinary
    users (shadow files, private keys, root-only configs): all of it must leave the view.
    Sockets, FIFOs and devices go too. Symlinks stay: they resolve inside the view.
    """
    found = [os.path.join(top, name) for name in named if os.path.lexists(os.path.join(top, name))]
    for parent, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            path = os.path.join(parent, name)
            if path in found:
                continue
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                hidden = mode & 0o005 != 0o005
            elif stat.S_ISREG(mode):
                hidden = not mode & 0o004
            else:
                hidden = not stat.S_ISLNK(mode)
            if hidden:
                found.append(path)
        dirs[:] = [d for d in dirs if os.path.join(parent, d) not in found]
    return found


def declared_paths(paths: Any, instance: str) -> list[dict[str, Any]]:
    """The task's extra host paths, checked: [{"path": absolute and resolved, "writable": bool}]."""
    checked = []
    for entry in paths or []:
        path, writable = str(entry["path"]), bool(entry.get("writable"))
        if not path.startswith("/") or os.path.normpath(path) != path or path == "/":
            msg = f"declared path {path!r}: give an absolute, normalised path other than /"
            raise SupervisorError("InvalidInput", msg)
        if os.path.realpath(path) != path:
            msg = (
                f"declared path {path!r} goes through a symlink: declare {os.path.realpath(path)!r}"
            )
            raise SupervisorError("InvalidInput", msg)
        if any(is_under(path, top) for top in ("/proc", "/dev", "/sys")) or path == instance:
            msg = f"declared path {path!r}: /proc, /dev and /sys are the view's own, and the "
            raise SupervisorError("InvalidInput", msg + "instance is always there")
        target = entry.get("target")
        if target is not None and not writable:
            target = str(target)
            if not target.startswith("/") or os.path.normpath(target) != target or target == "/":
                msg = f"declared path {path!r}: its target {target!r} must be absolute, normalised"
                raise SupervisorError("InvalidInput", msg)
            if any(is_under(target, top) for top in ("/proc", "/dev", "/sys")):
                msg = f"declared path {path!r}: target {target!r} is the view's own"
                raise SupervisorError("InvalidInput", msg)
            checked.append({"path": path, "writable": writable, "target": target})
            continue
        checked.append({"path": path, "writable": writable})
    return checked
