"""A dead instance heals: what was in flight fails as an infrastructure error, and the next use
provisions it again, once, however many trajectories wait for it. Real supervisors, real
containers, killed the way an OOM kill, a crash or an operator would.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.errors import InfrastructureError, SandboxUnavailable
from mcp_evalserver.runtime.sandboxes import Reprovisioned, SandboxPool
from mcp_evalserver.sandbox.base import Instance
from mcp_evalserver.sandbox.supervised import SupervisedInstance, SupervisedWorkspace
from mcp_evalserver.spec.campaign import Task
from tests.root import require_root
from tests.sandbox.conftest import REPO_SETUP
from tests.sandbox.docker_support import require_docker
from tests.sandbox.faults import Fault, docker_kill, docker_rm_f, holder_of, sigkill_supervisor

pytestmark = pytest.mark.anyio

FAULTS = [
    pytest.param(
        "local", sigkill_supervisor, id="local-sigkill-supervisor", marks=pytest.mark.root
    ),
    pytest.param(
        "docker", sigkill_supervisor, id="docker-sigkill-supervisor", marks=pytest.mark.docker
    ),
    pytest.param("docker", docker_kill, id="docker-kill", marks=pytest.mark.docker),
    pytest.param("docker", docker_rm_f, id="docker-rm-f", marks=pytest.mark.docker),
]


def _task(kind: str, root: Path) -> Task:
    if kind == "local":
        require_root()
        root.mkdir()
        return Task(id="heal", path=str(root), setup=list(REPO_SETUP))
    return Task(id="heal", image=require_docker(), setup=list(REPO_SETUP))


@asynccontextmanager
async def _pool() -> AsyncIterator[SandboxPool]:
    async with SandboxPool() as pool:
        yield pool


#: The local and the docker backend, each where it can run.
EACH_KIND = pytest.mark.parametrize(
    "kind",
    [
        pytest.param("local", marks=pytest.mark.root),
        pytest.param("docker", marks=pytest.mark.docker),
    ],
)


async def _held_workspace(pool: SandboxPool, task: Task) -> tuple[Instance, SupervisedWorkspace]:
    """`task`'s instance and a workspace of it, "held"."""
    instance = await pool.instance(task, anyio.CapacityLimiter(1))
    workspace = await instance.workspace("held")
    assert isinstance(workspace, SupervisedWorkspace)
    return instance, workspace


async def _lose(instance: Instance, fault: Fault) -> SupervisedWorkspace:
    """Starts a command, injects the fault while it runs, and checks how that command ended."""
    assert isinstance(instance, SupervisedInstance)
    workspace = await instance.workspace("in-flight")
    failure: list[BaseException] = []

    async def run_long_command() -> None:
        try:
            await workspace.exec("sleep 600")
        except SandboxUnavailable as exc:
            failure.append(exc)

    with anyio.fail_after(90):
        async with anyio.create_task_group() as group:
            group.start_soon(run_long_command)
            # Every task blocked: the request is written and its reply awaited.
            await anyio.wait_all_tasks_blocked()
            await fault(instance)
    assert len(failure) == 1, "the command in flight failed as an infrastructure error"
    assert instance.dead is not None
    return workspace


@pytest.mark.parametrize(("kind", "fault"), FAULTS)
async def test_a_dead_instance_is_provisioned_again_once_for_all_who_wait(
    kind: str, fault: Fault, tmp_path: Path
) -> None:
    task = _task(kind, tmp_path / "instance")
    provisioning = anyio.CapacityLimiter(2)
    async with _pool() as pool:
        with anyio.fail_after(120):
            first = await pool.instance(task, provisioning)
        lost = await _lose(first, fault)

        heard: list[Reprovisioned] = []
        got: list[Instance] = []

        async def use() -> None:
            got.append(await pool.instance(task, provisioning, _collect(heard)))

        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                for _ in range(4):
                    group.start_soon(use)
        assert len({id(instance) for instance in got}) == 1, "one new instance for all four"
        fresh = got[0]
        assert fresh is not first
        assert fresh.dead is None
        assert len(heard) == 1
        assert pool.reprovisioned == heard
        assert heard[0].task_id == "heal"
        assert heard[0].reason

        with pytest.raises(SandboxUnavailable):
            await lost.exec("true")  # the lost workspace stays lost
        with anyio.fail_after(60):
            async with await fresh.workspace("after") as workspace:
                result = await workspace.exec("cat a.txt && git status --porcelain")
        assert (result.exit_code, result.stdout) == (0, "hello\n"), result


def _collect(into: list[Reprovisioned]) -> Callable[[Reprovisioned], Awaitable[None]]:
    async def collect(event: Reprovisioned) -> None:
        into.append(event)

    return collect


@EACH_KIND
async def test_a_command_whose_workspace_lost_its_holder_is_an_infrastructure_error(
    kind: str, tmp_path: Path
) -> None:
    async with _pool() as pool:
        with anyio.fail_after(120):
            instance, workspace = await _held_workspace(pool, _task(kind, tmp_path / "instance"))
            await workspace.exec("true")
        failure: list[BaseException] = []

        async def run_long_command() -> None:
            try:
                result = await workspace.exec("sleep 600")
            except InfrastructureError as exc:
                failure.append(exc)
            else:
                failure.append(AssertionError(f"a lost holder became a result: {result}"))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(run_long_command)
                await anyio.wait_all_tasks_blocked()
                os.kill(holder_of(workspace), signal.SIGKILL)
        assert len(failure) == 1
        assert isinstance(failure[0], InfrastructureError), failure[0]
        assert "holder" in str(failure[0])
        # The instance itself is fine: another workspace works.
        assert instance.dead is None
        async with await instance.workspace("next") as other:
            assert (await other.exec("cat a.txt")).stdout == "hello\n"


@EACH_KIND
async def test_file_tools_of_a_workspace_whose_holder_died_fail_and_never_serve_its_dead_view(
    kind: str, tmp_path: Path
) -> None:
    # The supervisor serves files through a dirfd of the view, which would outlive the holder
    # (and keep its mounts alive): the holder's death must be seen before every file operation.
    async with _pool() as pool:
        with anyio.fail_after(120):
            instance, workspace = await _held_workspace(pool, _task(kind, tmp_path / "instance"))
            await workspace.write_file("kept.txt", "kept\n")
            assert await workspace.read_file("kept.txt") == b"kept\n"  # the dirfd is open
            holder = os.pidfd_open(holder_of(workspace))
            try:
                os.kill(holder_of(workspace), signal.SIGKILL)
                await anyio.wait_readable(holder)  # readable once it has exited
            finally:
                os.close(holder)
            operations = {
                "read": workspace.read_file("kept.txt"),
                "write": workspace.write_file("new.txt", "new\n"),
                "list": workspace.list("."),
            }
            for name, operation in operations.items():
                with pytest.raises(InfrastructureError, match="holder") as failed:
                    await operation
                assert "view is gone" in str(failed.value), name
        # The instance itself is fine: another workspace works.
        assert instance.dead is None
        async with await instance.workspace("next") as other:
            assert await other.read_file("a.txt") == b"hello\n"
