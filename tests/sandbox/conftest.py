"""Fixtures for the sandbox conformance suite: one `backend` fixture, one param per backend.

Adding a backend = one entry in BACKENDS (a factory yielding a `BackendUnderTest`) and one
`pytest.param` in BACKEND_PARAMS. Task environments are described by setup commands, so the
same repository is built in a host directory (local) or in a container's /testbed (docker).
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from mcp_evalserver.sandbox.base import Backend, Instance, InstanceSpec
from mcp_evalserver.sandbox.docker import DockerBackend
from mcp_evalserver.sandbox.local import LocalBackend
from tests.root import require_root
from tests.sandbox.docker_support import require_docker

# A small repository with text, binary and nested files, committed as the base.
REPO_SETUP = (
    "git init -q . && git config user.email t@t && git config user.name t",
    "printf 'hello\\n' > a.txt && mkdir -p pkg && printf 'x = 1\\n' > pkg/mod.py",
    "printf '\\000\\001\\002binary\\377' > blob.bin",
    "git add -A && git commit -qm base",
)


@dataclass
class BackendUnderTest:
    """A live backend plus how to describe a task environment for it."""

    name: str
    backend: Backend
    spec: Callable[..., InstanceSpec]  # spec(setup=[...], **InstanceSpec fields)


@asynccontextmanager
async def local_backend(
    name: str = "local", python_holder: bool = False
) -> AsyncIterator[BackendUnderTest]:
    with tempfile.TemporaryDirectory(prefix="evs-local-") as tmp:
        counter = iter(range(1_000_000))

        def spec(setup: tuple[str, ...] = REPO_SETUP, **fields: Any) -> InstanceSpec:
            path = os.path.join(tmp, f"task{next(counter)}")
            os.makedirs(path)
            return InstanceSpec(path=path, setup=tuple(setup), **fields)

        async with LocalBackend(python_holder=python_holder) as backend:
            yield BackendUnderTest(name, backend, spec)


@asynccontextmanager
async def docker_backend(
    name: str = "docker", python_holder: bool = False, side_door: bool = True
) -> AsyncIterator[BackendUnderTest]:
    image = require_docker()  # fails under CI, skips elsewhere, when no engine can be had
    counter = iter(range(1_000_000))

    def spec(setup: tuple[str, ...] = REPO_SETUP, **fields: Any) -> InstanceSpec:
        # A key of its own per call, as local gets a fresh directory per call.
        fields.setdefault("key", f"conformance-{os.getpid()}-{next(counter)}")
        return InstanceSpec(image=image, setup=tuple(setup), **fields)

    async with DockerBackend(python_holder=python_holder, side_door=side_door) as backend:
        yield BackendUnderTest(name, backend, spec)


@asynccontextmanager
async def ray_backend(address: str, inner: str) -> AsyncIterator[BackendUnderTest]:
    """Instances hosted on the worker nodes of a loopback Ray cluster at `address`, by the
    nodes' own `inner` backend (`local` directories or `docker` images)."""
    from mcp_evalserver.sandbox.ray import RayBackend

    # The inner backend gives the spec factory (a fresh directory or key per spec); the
    # instances themselves are the nodes'.
    async with BACKENDS[inner]() as here, RayBackend(address) as backend:
        yield BackendUnderTest(f"ray-{inner}", backend, here.spec)


BACKENDS: dict[str, Callable[[], AbstractAsyncContextManager[BackendUnderTest]]] = {
    "local": local_backend,
    "docker": docker_backend,
    # The same backends with their fallbacks: the supervisor's Python holder instead of the
    # compiled one (native.py), and on docker the exec stream instead of the side door
    # (docker_side_door.py), as with an engine on another machine. Every sandbox test runs on
    # both.
    "local-python": functools.partial(local_backend, "local-python", python_holder=True),
    "docker-python": functools.partial(
        docker_backend, "docker-python", python_holder=True, side_door=False
    ),
}
BACKEND_PARAMS = [
    pytest.param("local", marks=pytest.mark.root),
    pytest.param("docker", marks=pytest.mark.docker),
    pytest.param("local-python", marks=pytest.mark.root),
    pytest.param("docker-python", marks=pytest.mark.docker),
    pytest.param("ray-local", marks=[pytest.mark.root, pytest.mark.ray]),
    pytest.param("ray-docker", marks=[pytest.mark.root, pytest.mark.ray, pytest.mark.docker]),
]
ROOT_BACKENDS = {"local", "local-python", "ray-local", "ray-docker"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselects a test's backends that `@pytest.mark.backends(...)` does not name (the
    name of a backend covers it with either holder: "local" covers "local-python").

    A check that cannot apply to a backend is not collected for it, rather than skipped: under
    CI a skip must mean something is missing, never "does not apply here".
    """
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("backends")
        callspec = getattr(item, "callspec", None)
        param = callspec.params.get("backend") if callspec is not None else None
        kind = param.removesuffix("-python") if isinstance(param, str) else param
        if marker is None or param is None or kind in marker.args:
            kept.append(item)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[BackendUnderTest]:
    # Module scope sees no marks of the param, so the root check is repeated here.
    if request.param in ROOT_BACKENDS:
        require_root()
    context: AbstractAsyncContextManager[BackendUnderTest]
    if request.param.startswith("ray-"):  # on the session's cluster
        address = request.getfixturevalue("ray_cluster").address
        context = ray_backend(address, request.param.removeprefix("ray-"))
    else:
        context = BACKENDS[request.param]()
    async with context as under_test:
        yield under_test


LIMITED = {"pids_limit": 64, "memory_bytes": 128 << 20, "disk_bytes": 32 << 20}


@pytest.fixture(scope="module")
async def instance(backend: BackendUnderTest) -> AsyncIterator[Instance]:
    """One shared instance (per test module) with default limits; tests make workspaces."""
    with anyio.fail_after(60):
        instance = await backend.backend.instance(backend.spec())
    yield instance
    await instance.aclose()


@pytest.fixture(scope="module")
async def limited(backend: BackendUnderTest) -> AsyncIterator[Instance]:
    """An instance with small pids, memory and disk limits, for the exhaustion attacks."""
    with anyio.fail_after(60):
        instance = await backend.backend.instance(backend.spec(**LIMITED))
    yield instance
    await instance.aclose()
