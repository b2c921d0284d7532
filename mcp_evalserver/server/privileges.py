"""What a client of this server may make it do to its own host: least privilege for token holders.

Over stdio the client is the user's own process, and may do what the user may: load Python
plugins, run host programs, name any directory. Over HTTP anyone holding the token is a client,
so those are off unless the operator turns them on: `--allow-plugins` lets a spec import Python
modules (`python` agents and scorers), run host programs (`command` agents) and connect the
server to a Ray cluster of their choosing (not its own `--ray`); `--allow-paths DIR...` lets it
name host paths (a task's `path` and `paths`, a task file, a predictions file) under those
directories. A path is judged by where it really leads (symlinks followed, `..` resolved), and
the campaign records that real path, so a later symlink cannot lead it elsewhere.

An `openai`, `claude-code` or `codex` agent (the last two through their model bridge) or an
`llm_judge` scorer sends requests to its `base_url`, with the value of the
server's environment variable its `api_key_env` names as their bearer. Over HTTP the token
holder is a tenant, and neither is theirs to choose freely: a `base_url` must be OpenAI's
endpoint, the server's $OPENAI_BASE_URL (for `claude-code`: Anthropic's, $ANTHROPIC_BASE_URL)
or lie below a URL of `--allow-endpoints URL...`,
keyed or not (a host is compared as written, so a loopback or link-local address is reached
only when the operator named it); `api_key_env` must be a variable of `--allow-env NAME...`,
or null for an endpoint that needs no key. Both are judged on the spec alone, never on the
environment: a refusal reads the same for a variable the server sets and one it does not. The
same holds for a recorded campaign that an HTTP call would run again (resume, re-scoring): the
caller chooses when the key is spent. What else the server's environment holds for OpenAI
(organisation, project) goes only to the operator's own endpoints (`endpoint_calls.py`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.endpoints import operators_endpoints, plain_url, url_below
from mcp_evalserver.spec.agents import (
    ClaudeCodeAgentConfig,
    CodexAgentConfig,
    CommandAgentConfig,
    GeminiCliAgentConfig,
    MiniSweAgentConfig,
    OpenAIAgentConfig,
    OpenCodeAgentConfig,
    PredictionsAgentConfig,
    PythonAgentConfig,
)
from mcp_evalserver.spec.campaign import CampaignSpec, RaySandboxConfig, Task, nested_configs
from mcp_evalserver.spec.harbor import harbor_of
from mcp_evalserver.spec.predictions import GOLD
from mcp_evalserver.spec.scorers import (
    LlmJudgeScorerConfig,
    PythonScorerConfig,
    TestsScorerConfig,
)

# The configs that make the server import a module or run a program of the client's choosing
# (a `command` scorer runs in the sandbox: it is not one of them).
_PLUGINS: dict[type[BaseModel], str] = {
    PythonAgentConfig: "imports a Python module into the server",
    PythonScorerConfig: "imports a Python module into the server",
    CommandAgentConfig: "runs a program on the server's host",
    # Its config names model classes by import path and litellm reads keys from the server's
    # environment for any endpoint: the `openai` agent's key rules cannot be applied to it.
    MiniSweAgentConfig: "imports the model class its config names and lets litellm send the "
    "server's API keys to the endpoint it names",
}


@dataclass(frozen=True)
class Privileges:
    """What clients may make the server do on its host.

    `plugins`: load Python plugins and run host programs. `path_roots`: the directories under
    which host paths may be named (real paths), or None for any path. `key_names`: the
    environment variables whose values a spec may have sent as API keys, or None for any;
    `endpoints`: the URLs below which a model endpoint may lie besides the operator's own
    (OpenAI's, $OPENAI_BASE_URL), or None for any.
    """

    plugins: bool = True
    path_roots: tuple[Path, ...] | None = None
    key_names: frozenset[str] | None = None
    endpoints: tuple[str, ...] | None = None

    @classmethod
    def for_http(
        cls,
        *,
        allow_plugins: bool = False,
        allow_paths: Sequence[Path] = (),
        allow_env: Sequence[str] = (),
        allow_endpoints: Sequence[str] = (),
    ) -> Privileges:
        """What token holders get: nothing beyond campaigns unless the operator allows it.

        Raises:
            InvalidInput: an allowed path is not an existing directory, or an allowed endpoint
                is not an http(s) URL.
        """
        roots = []
        for given in allow_paths:
            real = Path(os.path.realpath(given))
            if not real.is_dir():
                raise InvalidInput(f"--allow-paths {given}: not a directory")
            roots.append(real)
        for url in allow_endpoints:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname or not plain_url(url):
                raise InvalidInput(
                    f"--allow-endpoints {url}: give an http(s) URL, e.g. https://api.example.com/v1"
                )
        return cls(
            plugins=allow_plugins,
            path_roots=tuple(roots),
            key_names=frozenset(allow_env),
            endpoints=tuple(allow_endpoints),
        )

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
        self.admit_endpoints(spec)
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
        if isinstance(spec.prices, str):
            spec = spec.model_copy(
                update={"prices": self.host_path(spec.prices, "price file", base_dir)}
            )
        scorer = spec.scorer
        if isinstance(scorer, TestsScorerConfig) and isinstance(scorer.ignore_tests, str):
            ignore = self.host_path(scorer.ignore_tests, "ignore_tests file", base_dir)
            spec = spec.model_copy(
                update={"scorer": scorer.model_copy(update={"ignore_tests": ignore})}
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
        for _, part in nested_configs(config, where):
            does = _PLUGINS.get(type(part))
            if does is not None:
                self._refuse_plugin(f"the {where} {{'type': {getattr(part, 'type', '?')!r}}}", does)

    def admit_endpoints(self, spec: CampaignSpec, recorded_as: str | None = None) -> None:
        """Refuses a spec whose agent or scorer would send requests to a model endpoint not
        allowed to clients, or send the value of a server environment variable not allowed to
        them. Judged on the spec alone, each time it is to run: `recorded_as` names the
        recorded campaign or sweep an HTTP call would run again.

        Raises:
            InvalidInput: it would, naming the field, its value and the flag that allows it.
        """
        for where, config in (("agent", spec.agent), ("scorer", spec.scorer)):
            for at, part in nested_configs(config, where):
                refused = None
                if isinstance(part, OpenAIAgentConfig | LlmJudgeScorerConfig | CodexAgentConfig):
                    refused = self._endpoint_refusal(
                        at, part.base_url, "openai"
                    ) or self._key_refusal(at, part.api_key_env)
                elif isinstance(part, ClaudeCodeAgentConfig | OpenCodeAgentConfig):
                    refused = self._endpoint_refusal(
                        at, part.base_url, "anthropic"
                    ) or self._key_refusal(at, part.api_key_env)
                elif isinstance(part, GeminiCliAgentConfig):
                    refused = self._endpoint_refusal(
                        at, part.base_url, "gemini"
                    ) or self._key_refusal(at, part.api_key_env)
                elif isinstance(part, CommandAgentConfig):
                    refused = next(filter(None, map(self._passed_refusal, part.pass_env)), None)
                if refused is not None:
                    raise InvalidInput(f"{recorded_as}: {refused}" if recorded_as else refused)

    def _endpoint_refusal(self, at: str, base_url: str | None, provider: str) -> str | None:
        if self.endpoints is None or base_url is None:
            return None  # None: the default endpoint, the provider's or the operator's $..._URL
        own = operators_endpoints(provider)
        if any(url_below(base_url, allowed) for allowed in [*own, *self.endpoints]):
            return None
        # The operator's $OPENAI_BASE_URL is not named: its value is the server's, not theirs.
        allowed = ", ".join(self.endpoints) or "none"
        return (
            f"{at}.base_url {base_url!r} is not a model endpoint this server lets its HTTP "
            f"clients use (besides OpenAI's and the server's default, those of "
            f"--allow-endpoints: {allowed}): leave `base_url` out for the server's default, "
            f"use one of those, or ask its operator to allow it with --allow-endpoints {base_url}"
        )

    def _key_refusal(self, at: str, name: str | None) -> str | None:
        # Never looks at the environment: whether the server sets `name` is not the client's
        # to learn, so a variable it does not set is refused as one it may not use.
        if self.key_names is None or name is None or name in self.key_names:
            return None
        allowed = ", ".join(sorted(self.key_names)) or "none"
        return (
            f"{at}.api_key_env {name!r} is not a variable this server lets its HTTP clients use "
            f'as an API key (those of --allow-env: {allowed}): give `"api_key_env": null` for '
            "an endpoint that needs no key, name one of those, or ask the server's operator to "
            f"allow it with --allow-env {name}"
        )

    def _passed_refusal(self, name: str) -> str | None:
        # As for keys: whether the server sets `name` is not the client's to learn.
        if self.key_names is None or name in self.key_names:
            return None
        allowed = ", ".join(sorted(self.key_names)) or "none"
        return (
            f"agent.pass_env {name!r} is not a variable this server lets its HTTP clients pass "
            f"to a program (those of --allow-env: {allowed}): give its value in `env`, name "
            f"one of those, or ask the server's operator to allow it with --allow-env {name}"
        )

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
                "its operator can allow directories with --allow-paths DIR..., or put it inline "
                "in the spec (tasks as a list: a task without `path` or `image` is answered as "
                "text, one with an `image` works in that image's container)"
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
        task = self._admit_build_context(task, base_dir)
        if (task.path is None and not task.paths) or self.path_roots is None:
            return task
        update: dict[str, Any] = {}
        if task.path is not None:
            update["path"] = self.host_path(task.path, f"task {task.id}: path", base_dir)
        if task.workdir is not None and task.path is not None:
            update["workdir"] = self.host_path(task.workdir, f"task {task.id}: workdir", base_dir)
        # What the view shows besides the instance (docs/design/isolation.md).
        if task.paths:
            update["paths"] = [
                entry.model_copy(
                    update={"path": self.host_path(entry.path, f"task {task.id}: paths", base_dir)}
                )
                for entry in task.paths
            ]
        return task.model_copy(update=update)

    def _admit_build_context(self, task: Task, base_dir: Path) -> Task:
        """A Harbor task's build context is a host directory sent to the engine (its files end
        up in the image the agent works in): named under an allowed root, like `path`."""
        harbor = harbor_of(task.metadata)
        if harbor is None or harbor.build_context is None or self.path_roots is None:
            return task
        where = f"task {task.id}: metadata.harbor.build_context"
        real = self.host_path(harbor.build_context, where, base_dir)
        kept = harbor.model_copy(update={"build_context": real}).model_dump()
        return task.model_copy(update={"metadata": {**task.metadata, "harbor": kept}})
