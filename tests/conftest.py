"""Shared test configuration: every async test runs on asyncio through anyio's pytest plugin."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

# Tests marked with LITELLM_SOCKETS use this fixture to close litellm's cached clients.
from tests.litellm_sockets import close_litellm_clients  # noqa: F401

# Tests marked `ray` run in a child pytest inside a loopback-only network namespace.
from tests.ray.rerun import pytest_collection_modifyitems  # noqa: F401
from tests.root import require_root
from testsupport.memory_dirs import memory_dir
from testsupport.ray_cluster import LoopbackCluster, loopback_cluster


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def memory_path(tmp_path: Path) -> Iterator[Path]:
    """`tmp_path` on tmpfs, for tests that append thousands of ledger records: their fsyncs
    wait for no disk (see testsupport/memory_dirs.py). Never an instance's path."""
    with memory_dir(tmp_path) as directory:
        yield directory


@pytest.fixture(autouse=True)
def _enforce_root_marker(request: pytest.FixtureRequest) -> None:
    """A test marked `root` skips without root, and fails so under CI."""
    if request.node.get_closest_marker("root") is not None:
        require_root()


@pytest.fixture(autouse=True)
def _asyncio_left_unpatched() -> Iterator[None]:
    """No test may leave asyncio patched by nest_asyncio (Inspect applies it to a process that
    calls its sync API on a running loop): every later test would run on pure-Python tasks, and
    each thread that asks for a loop would get one that nobody closes (an unclosed-loop warning
    then fails whatever test the collector happens to run in)."""
    yield
    if getattr(asyncio, "_nest_patched", False):
        pytest.fail(
            "this test left asyncio patched by nest_asyncio: call Inspect's sync API "
            "(write_eval_log, read_eval_log, eval) off the event loop's thread"
        )


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[LoopbackCluster]:
    """Two worker nodes of 4 sandbox slots each (tests may add and kill more)."""
    with loopback_cluster(workers=2, slots=4) as cluster:
        yield cluster
