"""The ray backend on a real multi-node cluster on loopback: placement, faults, shipping.

Each test places its instances by a slots resource of its own, offered only by the nodes it
adds, so it knows exactly which nodes can hold them (the session's nodes cannot); those nodes
are stopped when it ends.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
import ray

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import InstanceSpec
from mcp_evalserver.sandbox.ray import RayBackend, RayInstance, connect
from mcp_evalserver.sandbox.ray_node import Hosted, NodeHost
from tests.sandbox.host_processes import host_pids, marker, wait_until_gone, wait_until_running
from testsupport.ray_cluster import LoopbackCluster, worker_without

pytestmark = [pytest.mark.anyio, pytest.mark.ray, pytest.mark.root]


def _repo(root: Path) -> InstanceSpec:
    path = root / f"repo-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    (path / "a.txt").write_text("hello\n")
    return InstanceSpec(path=str(path))


@pytest.fixture
def own_resource(ray_cluster: LoopbackCluster) -> Iterator[str]:
    """A resource name no node offers yet; the nodes the test adds to offer it stop after it
    (from the main thread: Ray's rule for starting and stopping nodes)."""
    resource = f"slots_{uuid.uuid4().hex[:8]}"
    yield resource
    ray_cluster.stop_workers_offering(resource)


@pytest.fixture
async def own_slots(
    ray_cluster: LoopbackCluster, own_resource: str
) -> AsyncIterator[tuple[str, RayBackend]]:
    """A backend that places instances by the test's own resource; it closes while the nodes
    are still up, so its actors answer their shutdown."""
    async with RayBackend(ray_cluster.address, slots_resource=own_resource) as backend:
        yield own_resource, backend


async def test_instances_spread_and_a_node_that_joins_takes_the_instance_that_waited(
    ray_cluster: LoopbackCluster, own_slots: tuple[str, RayBackend], tmp_path: Path
) -> None:
    resource, backend = own_slots
    first = ray_cluster.add_worker(1, resource)  # Ray starts nodes from the main thread only
    placed: dict[str, str] = {}

    async def place(name: str) -> None:
        instance = await backend.instance(_repo(tmp_path))
        workspace = await instance.workspace(name)  # held: the instance stays busy
        placed[name] = workspace.node or ""
        assert (await workspace.exec("cat a.txt")).stdout == "hello\n"

    with anyio.fail_after(180):
        await place("a")
        assert placed["a"] == first.node_id
        async with anyio.create_task_group() as group:
            group.start_soon(place, "b")  # no free slot: it waits, it does not overfill `first`
            await anyio.wait_all_tasks_blocked()
            assert "b" not in placed
            second = ray_cluster.add_worker(
                1, resource
            )  # Ray starts nodes from the main thread only
    assert placed["b"] == second.node_id
    rows = {row["node"]: row for row in backend.nodes()}
    assert rows[first.node_id]["instances"]
    assert rows[second.node_id]["instances"]
    assert rows[first.node_id]["workspaces"] == rows[second.node_id]["workspaces"] == 1


async def test_a_dead_node_fails_its_calls_as_unavailable_and_the_instance_moves(
    ray_cluster: LoopbackCluster, own_slots: tuple[str, RayBackend], tmp_path: Path
) -> None:
    resource, backend = own_slots
    doomed = ray_cluster.add_worker(1, resource)  # Ray starts nodes from the main thread only
    outcome: dict[str, BaseException] = {}
    spec = _repo(tmp_path)
    with anyio.fail_after(180):
        instance = await backend.instance(spec)
        workspace = await instance.workspace("doomed")
        assert workspace.node == doomed.node_id

        async def sleeper() -> None:
            try:
                await workspace.exec("sleep 600")
            except errors.SandboxUnavailable as exc:
                outcome["in_flight"] = exc

        async with anyio.create_task_group() as group:
            group.start_soon(sleeper)
            await anyio.wait_all_tasks_blocked()
            assert backend.nodes()
            assert any(r["commands_in_flight"] for r in backend.nodes())
            await anyio.to_thread.run_sync(ray_cluster.kill_worker, doomed)
        with pytest.raises(errors.SandboxUnavailable, match="retried"):
            await workspace.exec("true")
        await workspace.destroy()  # a no-op on a dead node, not an error
        survivor = ray_cluster.add_worker(1, resource)  # Ray starts nodes from the main thread only
        with pytest.raises(errors.SandboxUnavailable):  # a dead instance stays dead
            await instance.workspace("again")
        assert instance.dead is not None
        fresh = await backend.instance(spec)  # asked again, it comes back on a live node
        again = await fresh.workspace("again")
        moved = await again.exec("cat a.txt")
        await again.destroy()
    assert isinstance(outcome.get("in_flight"), errors.SandboxUnavailable)
    assert fresh is not instance
    assert again.node == survivor.node_id
    assert moved.stdout == "hello\n"


def _offered(resource: str) -> bool:
    nodes = ray.nodes()  # type: ignore[no-untyped-call]
    return any(node["Alive"] and resource in node["Resources"] for node in nodes)


async def test_a_path_the_node_lacks_is_shipped_through_the_object_store(
    ray_cluster: LoopbackCluster, own_slots: tuple[str, RayBackend], tmp_path: Path
) -> None:
    resource, backend = own_slots
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    spec = _repo(hidden)
    await anyio.run_process(["git", "init", "-q", "."], cwd=spec.path)
    with worker_without(ray_cluster, hidden, resource), anyio.fail_after(180):
        # Ray has no event for a node that joins: look until it offers the resource.
        while not _offered(resource):  # noqa: ASYNC110
            await anyio.sleep(0.2)
        instance = await backend.instance(spec)
        async with await instance.workspace("shipped") as workspace:
            seen = await workspace.exec("cat a.txt; ls -a; git status --porcelain")
            await workspace.write_file("a.txt", "changed on the node\n")
        await instance.aclose()
    assert seen.stdout.startswith("hello\n")
    assert ".git" in seen.stdout.split()
    assert Path(spec.path or "", "a.txt").read_text() == "hello\n"  # the driver's copy


async def test_a_cluster_without_slots_is_a_clear_error(
    own_slots: tuple[str, RayBackend], tmp_path: Path
) -> None:
    resource, backend = own_slots
    with anyio.fail_after(60), pytest.raises(errors.SandboxUnavailable, match=resource):
        await backend.instance(_repo(tmp_path))


async def test_a_cancelled_command_dies_even_while_every_thread_of_its_actor_is_busy(
    ray_cluster: LoopbackCluster, own_resource: str, tmp_path: Path
) -> None:
    """Ray does not interrupt a threaded actor's running call: the driver's cancel is a call
    of its own, and it must not wait behind the commands it is there to stop."""
    resource = own_resource
    ray_cluster.add_worker(1, resource)
    busy, cancelled = marker(), marker()
    async with RayBackend(ray_cluster.address, slots_resource=resource, calls_at_once=2) as backend:
        with anyio.fail_after(180):
            instance = await backend.instance(_repo(tmp_path))
            async with await instance.workspace("full") as ws, anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def given_up_on() -> None:
                    with scope:
                        await ws.exec(f"sleep {cancelled}")

                tg.start_soon(ws.exec, f"sleep {busy}")
                tg.start_soon(given_up_on)
                # Every thread of the actor runs a command: nothing else can ask it.
                await wait_until_running(busy, cancelled)
                scope.cancel()
                with anyio.fail_after(10):
                    await wait_until_gone(cancelled)
                assert host_pids(busy)  # the other command runs on
                tg.cancel_scope.cancel()
            await wait_until_gone(busy)
            await instance.aclose()


async def test_where_no_connection_can_be_had_execs_run_on_the_actors_loop_and_still_cancel(
    ray_cluster: LoopbackCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over docker's exec stream no socket reaches the supervisor: the actor's execs fall back
    to its event loop, where a cancel must kill the command too. The actor's class is driven
    here in this process, as Ray would drive it, one thread per call."""
    connect(ray_cluster.address)  # its start names the node it runs on
    spec = _repo(tmp_path)
    key = spec.key
    host = NodeHost(slots=1)

    async def refused(self: Hosted) -> None:
        raise errors.InvalidInput("this supervisor takes no other connection")

    monkeypatch.setattr(Hosted, "connect", refused)
    arg = marker()
    with anyio.fail_after(120):
        start = functools.partial(host.start, key, spec.model_dump(mode="json"), "local")
        assert (await anyio.to_thread.run_sync(start))[0] == "ok"
        hosted = host._hosted[key]
        assert await anyio.to_thread.run_sync(host.create, key, "w") == ("ok", None)
        status, result = await anyio.to_thread.run_sync(
            host.call, key, "w", "exec", {"cmd": "cat a.txt"}, "t1"
        )
        assert (status, result["stdout"]) == ("ok", "hello\n")
        async with anyio.create_task_group() as tg:
            outcome: list[object] = []

            async def hung() -> None:
                sleep = {"cmd": f"sleep {arg}", "timeout": 30}  # the sandbox's bound if no cancel
                call = functools.partial(host.call, key, "w", "exec", sleep, "t2")
                outcome.append(await anyio.to_thread.run_sync(call, abandon_on_cancel=True))

            tg.start_soon(hung)
            await wait_until_running(arg)
            assert await anyio.to_thread.run_sync(host.cancel, "t2") == ("ok", None)
        await wait_until_gone(arg)
        # A cancel that comes before its call: the call never starts.
        assert await anyio.to_thread.run_sync(host.cancel, "t3") == ("ok", None)
        sleep = {"cmd": f"sleep {arg}", "timeout": 30}
        call = functools.partial(host.call, key, "w", "exec", sleep, "t3")
        early = await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        assert await anyio.to_thread.run_sync(host.stop, key) == ("ok", None)
        assert await anyio.to_thread.run_sync(host.shutdown) == ("ok", None)
    assert outcome == [("error", ("InfrastructureError", "the call was cancelled"))]
    assert early == ("error", ("InfrastructureError", "the call was cancelled"))
    assert not host_pids(arg)
    assert hosted.direct is False


def _pid(instance: RayInstance) -> int | None:
    """The pid of the actor hosting `instance`, None while it is not placed."""
    return instance.placed.pid if instance.placed is not None else None


async def test_a_node_hosts_its_instances_in_one_actor_and_evicts_its_least_recent_idle_one(
    ray_cluster: LoopbackCluster, own_slots: tuple[str, RayBackend], tmp_path: Path
) -> None:
    resource, backend = own_slots
    node = ray_cluster.add_worker(3, resource)  # Ray starts nodes from the main thread only
    with anyio.fail_after(180):
        specs = [_repo(tmp_path) for _ in range(4)]
        first, second, third = [await backend.instance(spec) for spec in specs[:3]]
        actor = _pid(first)
        assert actor is not None
        assert _pid(second) == _pid(third) == actor
        async with await second.workspace("busy") as busy:
            await (await third.workspace("used")).destroy()  # `third` used after `first`
            fourth = await backend.instance(specs[3])  # the node is full: `first` makes room
            assert _pid(first) is None
            assert _pid(second) == _pid(third) == _pid(fourth) == actor
            assert (await busy.exec("cat a.txt")).stdout == "hello\n"
            async with await first.workspace("back") as back:  # placed again: `third` goes
                assert (await back.exec("cat a.txt")).stdout == "hello\n"
            assert _pid(third) is None
        assert backend.placed_on() == {
            node.node_id: sorted(i.spec.key for i in (first, second, fourth))
        }


async def test_an_instance_goes_to_the_node_with_most_room_and_none_without_memory(
    ray_cluster: LoopbackCluster, own_slots: tuple[str, RayBackend], tmp_path: Path
) -> None:
    resource, backend = own_slots
    big = ray_cluster.add_worker(3, resource)  # Ray starts nodes from the main thread only
    ray_cluster.add_worker(1, resource)  # less room: not chosen while `big` has more
    with anyio.fail_after(180):
        first, second = [await backend.instance(_repo(tmp_path)) for _ in range(2)]
        assert first.placed is not None
        assert second.placed is not None
        assert first.placed.node_id == second.placed.node_id == big.node_id  # 3, then 2 free
        # More memory per instance than any node has available: no room anywhere.
        async with RayBackend(
            ray_cluster.address,
            slots_resource=resource,
            instance_memory_mb=1 << 40,
            placement_timeout_s=3,
        ) as starved:
            with pytest.raises(errors.SandboxUnavailable, match="memory available"):
                await starved.instance(_repo(tmp_path))
