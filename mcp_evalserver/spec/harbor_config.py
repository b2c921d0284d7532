"""task.toml as Harbor reads it: its `TaskConfig`, key for key, and what this project does with
each key.

The models follow Harbor's `src/harbor/models/task/config.py` (read at LegoX/harbor, a fork of
laude-institute/harbor, commit 73fd120e731217b38f31667932ea26a28cdd4fff: `schema_version` 1.1,
`[task]`, `[environment]` gpus/network_mode/healthcheck/..., `[verifier]` and `[agent]`
user/network_mode) and the keys of Harbor's later schemas (up to 1.4: top-level `artifacts`,
`steps`, `multi_step_reward_strategy`; `[environment]` `os`, `tpu`, `workdir`; `[verifier]`
`environment_mode`, `environment`, `collect`) that Terminal-Bench 2.1's task.toml files carry
(`artifacts = []` in each). docs/guides/harbor.md has the table.

Harbor's models ignore a key they do not know (pydantic's default); here such a key is refused,
naming it, so that a misspelt limit is never silently dropped. A key Harbor knows and this
project cannot honour is refused only when set to something other than its default (an empty
list, zero GPUs, Linux), naming the key and what to do.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mcp_evalserver.errors import InvalidInput

NetworkMode = Literal["public", "no-network", "allowlist"]
#: Harbor's package names: `org/name`.
_PACKAGE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class Author(_Table):
    name: str
    email: str | None = None


class PackageInfo(_Table):
    """`[task]`: the task's name in Harbor's registry; kept in the task's metadata."""

    name: str
    version: str | None = None
    description: str = ""
    authors: list[Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _org_slash_name(cls, value: str) -> str:
        if not _PACKAGE_NAME.match(value) or ".." in value:
            raise ValueError(f"must be 'org/name' (letters, digits, '.', '_', '-'), got {value!r}")
        return value


class _Phase(_Table):
    """What [agent] and [verifier] share: a user to run as, and a network policy."""

    timeout_sec: float | None = Field(None, gt=0)
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)


class VerifierConfig(_Phase):
    timeout_sec: float | None = Field(600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    environment_mode: Literal["shared", "separate"] | None = None
    environment: dict[str, Any] | None = None
    collect: list[dict[str, Any]] = Field(default_factory=list)


class AgentConfig(_Phase):
    pass


class SolutionConfig(_Table):
    env: dict[str, str] = Field(default_factory=dict)


class EnvironmentConfig(_Table):
    build_timeout_sec: float = Field(600.0, gt=0)
    docker_image: str | None = None
    os: Literal["linux", "windows"] = "linux"
    cpus: float | None = Field(None, gt=0)
    memory_mb: int | None = Field(None, gt=0)
    storage_mb: int | None = Field(None, gt=0)
    gpus: int | None = Field(None, ge=0)
    gpu_types: list[str] | None = None
    tpu: dict[str, Any] | None = None
    allow_internet: bool | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    skills_dir: str | None = None
    healthcheck: dict[str, Any] | None = None
    workdir: str | None = None
    #: Harbor's deprecated sizes ("2G", "512M"): read as memory_mb and storage_mb.
    memory: str | None = None
    storage: str | None = None

    @field_validator("os", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class TaskConfig(_Table):
    """A task.toml: Harbor's keys; unknown ones are refused."""

    schema_version: str = "1.1"
    version: str | None = Field(None, description="schema_version's old name.")
    task: PackageInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    source: str | None = None
    artifacts: list[Any] = Field(default_factory=list)
    steps: list[Any] | None = None
    multi_step_reward_strategy: str | None = None


def parse_size_mb(size: str) -> int:
    """Harbor's deprecated size strings: "2G", "512M", "1024K" in MiB.

    Raises:
        ValueError: another form.
    """
    text = size.strip().upper()
    factor = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}.get(text[-1:])
    if factor is None:
        raise ValueError(f"size {size!r} is not like '2G' or '512M'")
    return int(float(text[:-1]) * factor)


def read_task_config(toml_path: str, raw: dict[str, Any]) -> TaskConfig:
    """`raw` (task.toml's tables) as Harbor's TaskConfig, refusing what cannot run here.

    Raises:
        InvalidInput: naming the file, the key and what to do (an unknown key, a wrong type,
            a key Harbor has that this project cannot honour).
    """
    try:
        config = TaskConfig.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors()[:5]:
            loc = [str(part) for part in error["loc"]]
            where = f"[{loc[0]}] {'.'.join(loc[1:])}" if len(loc) > 1 else loc[0]
            if error["type"] == "extra_forbidden":
                problems.append(
                    f"unknown key {where!r} (Harbor's task.toml has no such key; "
                    "see docs/guides/harbor.md for the keys read here)"
                )
            else:
                problems.append(f"{where}: {error['msg']}")
        raise InvalidInput(f"{toml_path}: " + "; ".join(problems)) from exc
    unsupported = _unsupported(config)
    if unsupported:
        raise InvalidInput(
            f"{toml_path}: this project cannot honour "
            + "; ".join(unsupported)
            + ". Remove the key or set it to its default to run the task here"
        )
    return config


def _unsupported(config: TaskConfig) -> list[str]:
    """Keys Harbor honours and this project does not, set to something but their default."""
    env, verifier = config.environment, config.verifier
    found = [
        f"{key} ({why})"
        for key, present, why in (
            ("artifacts", bool(config.artifacts), "files Harbor copies out after a trial"),
            ("steps", config.steps is not None, "multi-step tasks"),
            (
                "multi_step_reward_strategy",
                config.multi_step_reward_strategy is not None,
                "multi-step tasks",
            ),
            ("[environment] gpus", bool(env.gpus), "no GPU reaches a workspace"),
            ("[environment] tpu", env.tpu is not None, "no TPU reaches a workspace"),
            ("[environment] os", env.os != "linux", "Linux containers only"),
            ("[environment] mcp_servers", bool(env.mcp_servers), "agents get this server's tools"),
            ("[environment] env", bool(env.env), "host variables are never passed in"),
            ("[environment] skills_dir", env.skills_dir is not None, "no agent skills"),
            ("[environment] healthcheck", env.healthcheck is not None, "no readiness checks"),
            (
                "[verifier] environment",
                verifier.environment is not None,
                "the verifier runs in the task's own image",
            ),
            ("[verifier] collect", bool(verifier.collect), "no collect hooks"),
            ("[verifier] user", verifier.user is not None, "commands run as the image's root"),
            ("[agent] user", config.agent.user is not None, "commands run as the image's root"),
        )
        if present
    ]
    for table, phase in (("environment", env), ("agent", config.agent), ("verifier", verifier)):
        if phase.network_mode == "allowlist" or phase.allowed_hosts:
            found.append(f"[{table}] allowed_hosts (no per-host network policy: use "
                         "network_mode = 'public' or 'no-network')")  # fmt: skip
    return found


def task_network(config: TaskConfig, toml_path: str) -> bool:
    """Whether the task's workspaces reach the network: `network_mode` where set ([agent]
    over [environment]), else `allow_internet` (Harbor's default: true).

    The agent and the verifier share an instance's network here, so a verifier policy that
    differs from the agent's cannot be honoured.

    Raises:
        InvalidInput: [verifier] network_mode differs from the agent's.
    """
    env = config.environment
    legacy: NetworkMode = "no-network" if env.allow_internet is False else "public"
    agent = config.agent.network_mode or env.network_mode or legacy
    verifier = config.verifier.network_mode or env.network_mode or legacy
    if verifier != agent:
        raise InvalidInput(
            f"{toml_path}: [verifier] network_mode {verifier!r} differs from the agent's "
            f"{agent!r}; here both run on one instance's network: give them the same policy"
        )
    return agent == "public"
