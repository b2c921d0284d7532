"""The supervisor's state: one instance, its workspaces and what serves them. Every operation
handler takes it (loop.OPERATIONS)."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any

from .cgroups import Cgroups
from .connections import Connection
from .jobs import Jobs
from .layers import LayerStore
from .protocol import SupervisorError
from .view import View
from .workspace import Workspace

if TYPE_CHECKING:
    from collections.abc import Mapping


class Supervisor:
    """What the supervisor knows; `jobs` runs its children, `view` builds its views."""

    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs
        self.running = True  # False: the loop ends, everything is torn down
        self.cfg: dict[str, Any] = {}  # init's arguments, checked
        self.view = View(self.cfg)  # made again by init
        self.frozen = False
        self.base: str | None = None  # HEAD of the workdir when frozen
        self.cgroups: Cgroups | None = None
        self.stale_cgroups: list[str] = []  # of ended holders, removed once empty
        self.layer_store: LayerStore | None = None  # every workspace's layers
        self.workspaces: dict[str, Workspace] = {}
        self.native_holder = ""  # the compiled holder's binary, if init named one that can run here
        self.created = 0  # holders forked so far
        self.spares: list[tuple[int, socket.socket, list[str]]] = []  # see holders.spawn_spare
        # Fresh workspaces built ahead with the limits of the last plain ws_create: the next
        # one takes its name and goes (see workspaces.prepare_ready).
        self.ready: list[Workspace] = []
        self.ready_limits: dict[str, Any] | None = None
        self.prepare_after = 0.0  # monotonic time before which nothing is made ahead
        self.routes: dict[int, tuple[Connection, int]] = {}  # our id -> (connection, its id)
        self.openat2_missing = False  # the kernel lacks it: every file op forks (files.py)

    def require_init(self) -> None:
        if not self.cfg:
            raise SupervisorError("Conflict", "send 'init' first")

    def workspace(self, args: Mapping[str, Any]) -> Workspace:
        ws = self.workspaces.get(str(args.get("ws")))
        if ws is None:
            raise SupervisorError("NotFound", "no workspace {!r}".format(args.get("ws")))
        return ws

    def idle_workspace(self, args: Mapping[str, Any], what: str) -> Workspace:
        """The workspace, if no command runs in it: its upper is about to freeze or go."""
        ws = self.workspace(args)
        if ws.jobs:
            raise SupervisorError(
                "Conflict",
                f"workspace {ws.name!r} has {len(ws.jobs)} command(s) running; {what} it when "
                "they finish (or cancel them)",
            )
        return ws

    def cancel(self, target: int) -> bool:
        """Kills what request `target` runs; it is never answered."""
        route = self.routes.pop(target, None)
        if route is not None:
            route[0].asked.discard(target)
        return self.jobs.cancel(target)

    def remove_stale_cgroups(self) -> None:
        for d in list(self.stale_cgroups):
            try:
                os.rmdir(d)
                self.stale_cgroups.remove(d)
            except FileNotFoundError:
                self.stale_cgroups.remove(d)
            except OSError:
                pass  # processes still exiting: retried from the loop
