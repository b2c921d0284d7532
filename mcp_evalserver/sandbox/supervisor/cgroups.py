"""Per-workspace cgroups (pids, memory) under the supervisor's own, where the hierarchy is
writable: v1 controllers or the v2 tree."""

from __future__ import annotations

import contextlib
import errno
import os

from .linux import MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_REMOUNT, mount, write_file
from .protocol import EnforcedLimits


class Cgroups:
    """Per-workspace cgroups under the supervisor's own (v1 controllers or the v2 tree)."""

    def __init__(self, in_container: bool) -> None:
        self.version = ""
        self.bases: dict[str, str] = {}  # controller ("pids", "memory", "" for v2) -> dir
        self.in_container = in_container
        try:
            self._setup()
        except OSError:
            self.bases = {}
        if not self.bases:
            self.version = ""

    def _setup(self) -> None:
        own: dict[str, str] = {}
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                for c in ctrls.split(","):
                    own[c] = path
        name = f"mcp-evalserver-{os.getpid()}"
        if os.path.isdir("/sys/fs/cgroup/pids") or os.path.isdir("/sys/fs/cgroup/memory"):
            self.version = "v1"
            for ctrl in ("pids", "memory"):
                mnt = "/sys/fs/cgroup/" + ctrl
                if ctrl not in own or not os.path.isdir(mnt):
                    continue
                if not os.access(mnt, os.W_OK):
                    # Docker mounts the container's cgroup read-only; with CAP_SYS_ADMIN we
                    # may remount it rw in our private mount namespace (the container's view
                    # stays read-only) and nest per-workspace limits under the container's.
                    with contextlib.suppress(OSError):
                        flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC
                        mount("none", mnt, None, flags)
                # Without a cgroup namespace the path names the host's tree; inside a
                # container only our own cgroup is mounted, at the controller's root.
                parent = mnt + own[ctrl] if os.path.isdir(mnt + own[ctrl]) else mnt
                with contextlib.suppress(OSError):
                    os.makedirs(os.path.join(parent, name), exist_ok=True)
                    self.bases[ctrl] = os.path.join(parent, name)
        elif os.path.exists("/sys/fs/cgroup/cgroup.controllers") and "" in own:
            # v2: processes may only sit in leaves, so we move into a leaf of our own subtree
            # and enable the controllers for its siblings (works where the parent delegates).
            self.version = "v2"
            root = "/sys/fs/cgroup"
            if not os.access(root, os.W_OK):  # as for v1 in docker
                with contextlib.suppress(OSError):
                    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC
                    mount("none", root, None, flags)
            parent = root + own[""] if os.path.isdir(root + own[""]) else root
            self._delegate(parent.rstrip("/"))
            base = os.path.join(parent, name)
            os.makedirs(os.path.join(base, "supervisor"), exist_ok=True)
            write_file(os.path.join(base, "supervisor", "cgroup.procs"), str(os.getpid()))
            write_file(os.path.join(base, "cgroup.subtree_control"), "+pids +memory")
            self.bases[""] = base

    def _delegate(self, parent: str) -> None:
        """Enables pids and memory for `parent`'s children (v2), if it has not already."""
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            if {"pids", "memory"} <= set(f.read().split()):
                return
        try:
            write_file(os.path.join(parent, "cgroup.subtree_control"), "+pids +memory")
            return
        except OSError as e:
            if e.errno != errno.EBUSY or not self.in_container:
                raise
        # A container's own (namespaced) root cgroup holds its processes, and v2 enables
        # controllers only below a cgroup without any: move them into a leaf, as nested
        # container runtimes do. Only ever inside a container: never a host's processes.
        leaf = os.path.join(parent, "init")
        os.makedirs(leaf, exist_ok=True)
        with open(os.path.join(parent, "cgroup.procs")) as f:
            for pid in f.read().split():
                with contextlib.suppress(OSError):  # gone meanwhile
                    write_file(os.path.join(leaf, "cgroup.procs"), pid)
        write_file(os.path.join(parent, "cgroup.subtree_control"), "+pids +memory")

    def create(self, name: str) -> list[str]:
        dirs = []
        for base in self.bases.values():
            d = os.path.join(base, name)
            os.makedirs(d, exist_ok=True)
            dirs.append(d)
        return dirs

    def limit(self, dirs: list[str], pids: int | None, memory: int | None) -> None:
        ctrls = list(self.bases)  # create() made one directory per controller, in this order
        for i, d in enumerate(dirs):
            ctrl = ctrls[i]
            if pids and ctrl in ("pids", ""):
                write_file(os.path.join(d, "pids.max"), str(pids))
            if memory and ctrl == "memory":
                write_file(os.path.join(d, "memory.limit_in_bytes"), str(memory))
                swap = os.path.join(d, "memory.memsw.limit_in_bytes")
                if os.path.exists(swap):
                    write_file(swap, str(memory))
            if memory and ctrl == "":
                write_file(os.path.join(d, "memory.max"), str(memory))
                if os.path.exists(os.path.join(d, "memory.swap.max")):
                    write_file(os.path.join(d, "memory.swap.max"), "0")

    def limits(self) -> EnforcedLimits:
        v2 = "" in self.bases
        return {"pids": v2 or "pids" in self.bases, "memory": v2 or "memory" in self.bases}


def remove_cgroup_tree(base: str) -> None:
    """Removes our (empty) cgroup directory and its children; best effort."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            if entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)
        os.rmdir(base)
