"""Harbor task directories (the Terminal-Bench 2 format), read into task records.

A task directory holds `instruction.md` (the prompt), `task.toml`, `environment/Dockerfile`
(or `[environment] docker_image`), `tests/test.sh` (the verifier) and `solution/solve.sh`
(what the oracle runs). A spec's `tasks` may name one such directory or a folder of them.

The verifier's and the solution's files are read now and kept in the task (so the ledger says
what graded it, and an edit to the directory after the campaign started changes nothing); the
build context stays on disk, named with the hash of its contents, which is the image's tag.
Everything the harness needs is in `HarborTask`, kept in the task's `metadata["harbor"]`.

This module returns plain records, not `Task`s: `campaign.py` validates them (importing it
here would make a cycle).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.spec.harbor_config import parse_size_mb, read_task_config, task_network

TASK_TOML = "task.toml"
#: Where the verifier's files arrive and where it writes its reward (Harbor's paths).
TESTS_DIR = "/tests"
VERIFIER_LOGS = "/logs/verifier"
#: The workdir when the Dockerfile sets none (Terminal-Bench's images use /app).
DEFAULT_WORKDIR = "/app"
#: Tags of images built from a task's Dockerfile: `harbor-task/<id>:<context hash>`.
IMAGE_REPOSITORY = "mcp-evalserver-harbor"
#: Files kept per directory (tests/, solution/): beyond this, keep data in the image.
MAX_FILES_BYTES = 8 << 20


class HarborTask(BaseModel):
    """What the harness keeps of a Harbor task directory (in `Task.metadata["harbor"]`)."""

    model_config = ConfigDict(extra="forbid")

    directory: str = Field(description="The task directory, as read.")
    verifier_timeout_s: float = Field(600.0, gt=0)
    verifier_env: dict[str, str] = Field(default_factory=dict)
    agent_timeout_s: float | None = Field(None, gt=0)
    solution_env: dict[str, str] = Field(default_factory=dict)
    build_context: str | None = Field(None, description="environment/, when it has a Dockerfile.")
    context_hash: str | None = Field(None, description="`tree_hash` of it when read.")
    build_timeout_s: float = Field(600.0, gt=0)
    cpus: float | None = Field(None, gt=0)
    memory_mb: int | None = Field(None, gt=0)
    storage_mb: int | None = Field(None, gt=0)
    tests: dict[str, str] = Field(description="tests/: relative path -> base64 content.")
    solution: dict[str, str] = Field(default_factory=dict, description="solution/, the same.")
    executable: list[str] = Field(default_factory=list, description="Files with an x bit.")
    verifier_environment_mode: Literal["shared", "separate"] | None = Field(
        None, description="[verifier] environment_mode: the verify mode the task needs."
    )


def harbor_of(metadata: dict[str, Any]) -> HarborTask | None:
    """The Harbor part of a task's metadata, or None for a task of another kind."""
    raw = metadata.get("harbor")
    return HarborTask.model_validate(raw) if isinstance(raw, dict) else None


def is_harbor_source(path: Path) -> bool:
    """Whether `path` is a Harbor task directory or a folder holding one (a task.toml in it
    or in one of its directories), not another format's folder."""
    if not path.is_dir():
        return False
    if (path / TASK_TOML).is_file():
        return True
    return any((child / TASK_TOML).is_file() for child in path.iterdir() if child.is_dir())


def harbor_task_rows(path: Path) -> list[dict[str, Any]]:
    """Task records for the task directory `path`, or for every task directory in it.

    Raises:
        InvalidInput: naming the file and the field (an unknown task.toml key, a missing
            tests/test.sh, ...), or a folder without task directories.
    """
    path = path.resolve()  # kept in each task: builds and messages name it wherever they run
    if (path / TASK_TOML).is_file():
        return [_row(path)]
    directories = sorted(p for p in path.iterdir() if (p / TASK_TOML).is_file())
    if not directories:
        raise InvalidInput(
            f"{path} is neither a Harbor task directory (no {TASK_TOML}) nor a folder of them"
        )
    return [_row(directory) for directory in directories]


def _row(directory: Path) -> dict[str, Any]:
    toml_path = directory / TASK_TOML
    try:
        config = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read {toml_path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{toml_path} is not TOML: {exc}") from exc
    harbor_config = read_task_config(str(toml_path), config)
    env = harbor_config.environment
    instruction = _required(directory, "instruction.md", "the prompt")
    _required(directory, "tests/test.sh", "the verifier")
    dockerfile = directory / "environment" / "Dockerfile"
    # Both, as in Terminal-Bench 2.1 (docker_image names the Dockerfile's build, published):
    # built here from the Dockerfile, which needs no registry.
    docker_image = None if dockerfile.is_file() else env.docker_image
    if docker_image is None and not dockerfile.is_file():
        raise InvalidInput(
            f"{directory}: give environment/Dockerfile or {TASK_TOML} [environment] "
            "docker_image (the task's image)"
        )
    for name in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"):
        if (directory / "environment" / name).is_file():
            # Harbor starts such a task's services with Docker Compose; built here from its
            # Dockerfile alone, its other services would be silently missing.
            raise InvalidInput(
                f"{directory / 'environment' / name}: a task of several containers (Docker "
                "Compose) cannot run here: each task is one container; remove the compose "
                "file if the Dockerfile's container is all the task needs"
            )
    task_id = directory.name
    try:
        memory_mb = parse_size_mb(env.memory) if env.memory is not None else env.memory_mb
        storage_mb = parse_size_mb(env.storage) if env.storage is not None else env.storage_mb
    except ValueError as exc:
        raise InvalidInput(f"{toml_path}: [environment] {exc}") from exc
    harbor: dict[str, Any] = {
        "directory": str(directory),
        "tests": _files(directory / "tests"),
        "solution": _files(directory / "solution") if (directory / "solution").is_dir() else {},
        "executable": _executables(directory),
        "verifier_env": harbor_config.verifier.env,
        "solution_env": harbor_config.solution.env,
        "verifier_timeout_s": harbor_config.verifier.timeout_sec or 600.0,
        "agent_timeout_s": harbor_config.agent.timeout_sec,
        "build_timeout_s": env.build_timeout_sec,
        "cpus": env.cpus,
        "memory_mb": memory_mb,
        "storage_mb": storage_mb,
        "verifier_environment_mode": harbor_config.verifier.environment_mode,
    }
    workdir = env.workdir or DEFAULT_WORKDIR
    if docker_image is None:
        context_hash = tree_hash(directory / "environment")
        harbor.update(build_context=str(directory / "environment"), context_hash=context_hash)
        image = f"{IMAGE_REPOSITORY}/{_slug(task_id)}:{context_hash[:16]}"
        workdir = env.workdir or _workdir(dockerfile) or DEFAULT_WORKDIR
    else:
        image = docker_image
    if workdir == "/" or any(
        workdir == place or workdir.startswith(place + "/") for place in ("/tests", "/logs")
    ):
        raise InvalidInput(
            f"{dockerfile}: WORKDIR {workdir} would let the agent's diff reach "
            f"{TESTS_DIR} or {VERIFIER_LOGS}: use a directory of its own, such as /app"
        )
    metadata = dict(harbor_config.metadata)
    if harbor_config.task is not None:
        metadata["package"] = harbor_config.task.model_dump(exclude_defaults=True)
    if harbor_config.source is not None:
        metadata["source"] = harbor_config.source
    if env.docker_image is not None and docker_image is None:
        metadata["published_image"] = env.docker_image
    return {
        "id": task_id,
        "prompt": instruction,
        "image": image,
        "workdir": workdir,
        # The workspace's diff is taken against a commit of the workdir as the image has it;
        # a repository the image already has there is the task's own (its history may be
        # what the task is about): left as it is, the diff is taken against its HEAD.
        "setup": [
            "[ -e .git ] || { git init -q . && "
            "git -c user.email=harbor@evalserver -c user.name=harbor add -A && "
            "git -c user.email=harbor@evalserver -c user.name=harbor "
            "commit -q --allow-empty -m 'the image as built'; }"
        ],
        # Harbor's default: a task may reach the network unless it says otherwise.
        "network": task_network(harbor_config, str(toml_path)),
        "metadata": {**metadata, "harbor": harbor},
    }


def _required(directory: Path, name: str, what: str) -> str:
    path = directory / name
    if not path.is_file():
        raise InvalidInput(f"{path} is missing: a Harbor task needs {name} ({what})")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from exc


def _walk(root: Path) -> list[Path]:
    """The regular files under `root`, sorted; a symlink is refused (it could name any host
    file, and the verifier's files are copied into the sandbox)."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            raise InvalidInput(f"{path} is a symlink: copy the file into the task instead")
        if path.is_file():
            found.append(path)
    return found


def _files(root: Path) -> dict[str, str]:
    files, total = {}, 0
    for path in _walk(root):
        data = path.read_bytes()
        total += len(data)
        if total > MAX_FILES_BYTES:
            raise InvalidInput(
                f"{root} holds more than {MAX_FILES_BYTES >> 20} MiB: put data in the image"
            )
        files[path.relative_to(root).as_posix()] = base64.b64encode(data).decode()
    return files


def _executables(directory: Path) -> list[str]:
    names = []
    for sub in ("tests", "solution"):
        if (directory / sub).is_dir():
            for path in _walk(directory / sub):
                if os.access(path, os.X_OK):
                    names.append(path.relative_to(directory).as_posix())
    return names


def tree_hash(root: Path) -> str:
    """A hash of a build context's names, modes and contents (the built image's tag names it).

    Raises:
        InvalidInput: the context holds a symlink.
    """
    digest = hashlib.sha256()
    for path in _walk(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _workdir(dockerfile: Path) -> str | None:
    """The last absolute WORKDIR of the Dockerfile (where its commands start)."""
    found = None
    for line in dockerfile.read_text(encoding="utf-8", errors="replace").splitlines():
        match = re.match(r"\s*WORKDIR\s+(/\S*)\s*$", line, re.IGNORECASE)
        if match:
            found = match.group(1)
    return found


def _slug(task_id: str) -> str:
    return re.sub(r"[^a-z0-9._-]", "-", task_id.lower()).strip(".-_") or "task"


def decoded(files: dict[str, str]) -> dict[str, bytes]:
    """The files of `HarborTask.tests` or `.solution`, decoded."""
    return {name: base64.b64decode(data) for name, data in files.items()}
