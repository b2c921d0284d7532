"""The `evalserver` sandbox's configuration, in the forms Inspect users write.

`sandbox=("evalserver", "evalserver.yaml")` names a YAML (or JSON) file; `sandbox=
SandboxEnvironmentSpec("evalserver", EvalServerSandboxConfig(image=...))` passes the object.
Both describe one instance: an `image` runs on the docker backend, a `path` on the local one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.sandbox.base import InstanceSpec

BackendName = Literal["local", "docker"]
EXAMPLE = "image: mcp-evalserver/base:bookworm   # or  path: /abs/dir  (local backend)"


class EvalServerSandboxConfig(InstanceSpec):
    """One instance shared by every sample of a task; each sample gets a workspace of it.

    The fields are the instance's (`InstanceSpec`): exactly one of `image` (docker backend)
    or `path` (local backend, an absolute directory; in a file, relative to the file), and
    optionally `workdir`, `setup`, `network` and the per-sample limits.
    """

    @property
    def backend(self) -> BackendName:
        """An image runs on docker, a directory on the local backend."""
        return "docker" if self.image is not None else "local"


def load_config(config: BaseModel | str | None) -> EvalServerSandboxConfig:
    """The config from what Inspect hands a provider: a model, a file name or nothing.

    Raises:
        InvalidInput: no config, an unreadable or invalid file, or another provider's model.
    """
    if isinstance(config, EvalServerSandboxConfig):
        return config
    if isinstance(config, InstanceSpec):
        return EvalServerSandboxConfig.model_validate(config.model_dump())
    if config is None:
        raise InvalidInput(
            'the evalserver sandbox needs a config: sandbox=("evalserver", "evalserver.yaml") '
            f"with a file holding e.g. `{EXAMPLE}`, or an EvalServerSandboxConfig object"
        )
    if isinstance(config, BaseModel):
        raise InvalidInput(
            f"the evalserver sandbox takes an EvalServerSandboxConfig or a file name, "
            f"not a {type(config).__name__}"
        )
    file = Path(config).expanduser()
    try:
        data: Any = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInput(f"evalserver sandbox config {config!r} cannot be read: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidInput(f"evalserver sandbox config {config!r} must be a mapping: `{EXAMPLE}`")
    if isinstance(data.get("path"), str):  # a path relative to the file, as compose files do
        data["path"] = str((file.parent / data["path"]).resolve())
    try:
        return EvalServerSandboxConfig.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(f"evalserver sandbox config {config!r}: {_first_error(exc)}") from exc


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where + ': ' if where else ''}{error['msg']}"
