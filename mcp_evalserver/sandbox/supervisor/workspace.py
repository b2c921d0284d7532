"""A workspace as the supervisor keeps it: where it lives, its holder, its layers."""

from __future__ import annotations

import os
import select
import socket
from typing import TYPE_CHECKING, Any

from .layers import WorkspaceLayers

if TYPE_CHECKING:
    from .view_dir import ViewDir


class Workspace:
    """A trajectory's copy-on-write view: its area (`path`), the view's `root`, its holder."""

    def __init__(self, name: str, path: str) -> None:
        self.name, self.path = name, path
        self.holder_pid = 0
        self.ctl: socket.socket | None = None  # to the holder; closing it ends the workspace
        # Not named after the workspace: one made ahead (workspaces.prepare_ready) is named later.
        self.root = os.path.join(path, "r", "view")
        self.cgroups: list[str] = []
        self.jobs: set[int] = set()  # request ids running in this workspace
        self.limits: dict[str, Any] = {}
        self.layers: WorkspaceLayers | None = None  # its stack (supervisor side)
        self.overlay: dict[str, Any] = {}  # what its holder mounts: WorkspaceLayers.overlay()
        self.view_dir: ViewDir | None = None  # where file ops resolve (in_view.view_dir)

    def holder_gone(self) -> bool:
        """Whether the holder has died (or there is none): its end of the control socket is
        closed. The kernel closes a dying process's files first, before its namespaces go and
        before its parent or its children learn of its death; only the holder holds that end
        (its runners and init close every fd they did not make). A poll of one socket: a
        look at /proc/<holder>/ns/mnt walked procfs and cost 8 us, every file operation's."""
        if self.ctl is None:
            return True
        poller = select.poll()
        poller.register(self.ctl, select.POLLRDHUP)
        return bool(poller.poll(0))
