"""What a client of this server may make it do to its own host: least privilege for token holders.

Over stdio the client is the user's own process, and may do what the user may: load Python
plugins, run host programs, name any directory. Over HTTP anyone holding the token is a client,
so those are off unless the operator turns them on: `--allow-plugins` lets a spec import Python
modules (`python` agents and scorers), run host programs (`command` agents) and connect the
server to a Ray cluster of their choosing (not its own `--ray`); `--allow-paths DIR...` lets it
name host paths (a task's `path` and `paths`, a task file, a predictions file) under those
directories. A path is judged by where it really leads (symlinks followed, `..` resolved), and
the campaign records that real path, so a later symlink cannot lead it elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mcp_evalserver.agents.config import (
    CommandAgentConfig,
    PredictionsAgentConfig,
    PythonAgentConfig,
)
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.config import PythonScorerConfig
from mcp_evalserver.scoring.swebench_compat import GOLD
from mcp_evalserver.spec import CampaignSpec, RaySandboxConfig, Task

# The configs that make the server import a module or run a program of the client's choosing
# (a `command` scorer runs in the sandbox: it is not one of them).
_PLUGINS: dict[type[BaseModel], str] = {
    PythonAgentConfig: "imports a Python module into the server",
    PythonScorerConfig: "imports a Python module into the server",
    CommandAgentConfig: "runs a program on the server's host",
}


@dataclass(frozen=True)
class Privileges:
    """What clients may make the server do on its host.

    `plugins`: load Python plugins and run host programs. `path_roots`: the directories under
    which host paths may be named (real paths), or None for any path.
    """

    plugins: bool = True
    path_roots: tuple[Path, ...] | None = None

    @classmethod
    def for_http(
        cls, *, allow_plugins: bool = False, allow_paths: Sequence[Path] = ()
    ) -> Privileges:
        """What token holders get: nothing beyond campaigns unless the operator allows it.

        Raises:
            InvalidInput: an allowed path is not an existing directory.
        """
        roots = []
        for given in allow_paths:
            real = Path(os.path.realpath(given))
            if not real.is_dir():
                raise InvalidInput(f"--allow-paths {given}: not a directory")
            roots.append(real)
        return cls(plugins=allow_plugins, path_roots=tuple(roots))

    def admit(
        self, spec: CampaignSpec, base_dir: Path, *, ray_address: str | None = None
    ) -> CampaignSpec:
        """The spec with its task file loaded, once the client may ask for all of it; host
        paths are recorded as the real paths they lead to when paths are restricted.
        `ray_address` is the server's own cluster, which every client's spec may use.

        Raises:
            InvalidInput: it needs a privilege this server does not grant (the message says
                which flag grants it), or its task file is invalid.
        """
        self.admit_plugins(spec.agent, "agent")
        self.admit_plugins(spec.scorer, "scorer")
        placement = spec.sandbox
        if isinstance(placement, RaySandboxConfig) and placement.address != ray_address:
            # Ray's client and driver unpickle what the cluster sends: a cluster of the
            # client's choosing runs code in the server.
            self._refuse_plugin(
                f"sandbox {{'type': 'ray', 'address': {placement.address!r}}}",
                "connects the server to a Ray cluster of the spec's choosing (which runs code "
                "in it)",
                also=" or --ray ADDRESS (a cluster every client's spec may use)",
            )
        if isinstance(spec.tasks, str):
            spec = spec.model_copy(
                update={"tasks": self.host_path(spec.tasks, "task file", base_dir)}
            )
        resolved = spec.resolved(base_dir)
        assert not isinstance(resolved.tasks, str)
        tasks = [self._admit_task(task, base_dir) for task in resolved.tasks]
        agent = resolved.agent
        if isinstance(agent, PredictionsAgentConfig) and agent.path != GOLD:
            path = self.host_path(agent.path, "predictions file", base_dir)
            agent = agent.model_copy(update={"path": path})
        return resolved.model_copy(update={"tasks": tasks, "agent": agent})

    def admit_plugins(self, config: BaseModel, where: str) -> None:
        """Refuses an agent or scorer config (and the scorers it combines) that would load a
        plugin or run a host program, unless plugins are allowed.

        Raises:
            InvalidInput: it would, and they are not.
        """
        if self.plugins:
            return
        for part in _configs(config):
            does = _PLUGINS.get(type(part))
            if does is not None:
                self._refuse_plugin(f"the {where} {{'type': {getattr(part, 'type', '?')!r}}}", does)

    def _refuse_plugin(self, what: str, does: str, also: str = "") -> None:
        if self.plugins:
            return
        raise InvalidInput(
            f"{what} {does}, which this server does not let its HTTP clients do: its operator "
            f"can allow it with --allow-plugins (then whoever holds the token runs code as the "
            f"server's user){also}, or run the campaign over stdio or with the CLI"
        )

    def host_path(self, given: str, what: str, base_dir: Path) -> str:
        """`given` (relative to `base_dir`) if clients may name it: unchanged when any path is
        allowed, else the real path it leads to, which must lie under an allowed root.

        Raises:
            InvalidInput: it leads outside every allowed root, or no path is allowed.
        """
        if self.path_roots is None:
            return given
        if not self.path_roots:
            raise InvalidInput(
                f"{what} {given!r}: this server does not let its HTTP clients name host paths; "
                "its operator can allow directories with --allow-paths DIR..., or give tasks "
                "inline with an `image` (docker backend)"
            )
        real = Path(os.path.realpath(base_dir / given))
        if any(real == root or root in real.parents for root in self.path_roots):
            return str(real)
        allowed = ", ".join(str(root) for root in self.path_roots)
        leads = f" (it leads to {real})" if str(real) != given else ""
        raise InvalidInput(
            f"{what} {given!r}{leads} is outside the directories this server lets its HTTP "
            f"clients use ({allowed}): move it under one of them, or ask the server's operator "
            "to add its directory with --allow-paths"
        )

    def _admit_task(self, task: Task, base_dir: Path) -> Task:
        if (task.path is None and not task.paths) or self.path_roots is None:
            return task
        update: dict[str, Any] = {}
        if task.path is not None:
            update["path"] = self.host_path(task.path, f"task {task.id}: path", base_dir)
        if task.workdir is not None and task.path is not None:
            update["workdir"] = self.host_path(task.workdir, f"task {task.id}: workdir", base_dir)
        # What the view shows besides the instance (README, "What a trajectory sees").
        if task.paths:
            update["paths"] = [
                entry.model_copy(
                    update={"path": self.host_path(entry.path, f"task {task.id}: paths", base_dir)}
                )
                for entry in task.paths
            ]
        return task.model_copy(update=update)


def _configs(config: BaseModel) -> Iterator[BaseModel]:
    """`config` and every config nested in it (a combined scorer's parts)."""
    yield config
    for name in type(config).model_fields:
        value = getattr(config, name)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, BaseModel):
                yield from _configs(item)
