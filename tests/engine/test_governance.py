"""Provisioning governance: an instance budget, eviction of idle instances (LRU), release of
finished tasks' instances, and a disk preflight, on real local instances."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import LimitExceeded
from mcp_evalserver.runtime.sandboxes import BackendName, SandboxPool, TrajectorySandbox
from mcp_evalserver.sandbox.base import Backend, Instance, InstanceSpec
from mcp_evalserver.sandbox.client import SUPERVISOR_SOURCE
from mcp_evalserver.sandbox.local import LocalBackend
from mcp_evalserver.spec.campaign import Task
from tests.engine.helpers import ledger_ran_each_once, run_campaign, spec_of
from tests.engine.test_sandboxed_campaign import ApplyAndTest, FixingAgent, _tasks

pytestmark = [pytest.mark.anyio, pytest.mark.root]


def supervisors() -> int:
    """Supervisor processes this process started that are alive now: the instances the local
    backend has, counted from the system rather than from our own bookkeeping."""
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and str(SUPERVISOR_SOURCE).encode() in argv:
            count += 1
    return count


class Counting(Backend):
    """A real local backend that counts the live supervisors each time it hands out an
    instance (instances only become more when one is provisioned, so this sees the peak)."""

    def __init__(self) -> None:
        self.inner = LocalBackend()
        self.peak = 0

    async def __aenter__(self) -> Counting:
        await self.inner.__aenter__()
        return self

    async def instance(self, spec: InstanceSpec) -> Instance:
        instance = await self.inner.instance(spec)
        self.peak = max(self.peak, supervisors())
        return instance

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
def counting() -> Counting:
    return Counting()


def _pool(backend: Counting) -> SandboxPool:
    def make(name: BackendName, address: str) -> Backend:
        assert name == "local"
        return backend

    return SandboxPool(backends=make)


@pytest.mark.slow
async def test_a_budget_of_two_instances_holds_over_five_tasks_and_releases_finished_ones(
    tmp_path: Path, counting: Counting
) -> None:
    tasks = _tasks(tmp_path, 5)
    spec = spec_of(tasks, samples=2, instances=2, concurrency=4, per_instance=2)
    with anyio.fail_after(180):
        async with _pool(counting) as pool:
            runner, state = await run_campaign(
                tmp_path / "state", spec, FixingAgent(), ApplyAndTest(), sandboxes=pool
            )
            alive_after = supervisors()
            closed = list(pool.closed)
    assert counting.peak == 2, "never more than the budget, and the budget was used"
    assert {t.outcome for t in state.trajectories.values()} == {"resolved"}
    records = ledger_ran_each_once(runner, state)
    # Nothing outlived its tasks: each instance was evicted (idle, to make room) or released
    # as its task's last trajectory finished, the first while others were still being scored.
    assert alive_after == 0
    assert {c.why for c in closed} == {"evicted", "released"}
    released = [c for c in closed if c.why == "released"]
    last_scored = max(r["ts"] for r in records if r["kind"] == "scored")
    assert min(c.ts for c in released) < last_scored


async def test_the_least_recently_used_idle_instance_makes_room_and_a_leased_one_never_does(
    tmp_path: Path, counting: Counting
) -> None:
    a, b, c = _tasks(tmp_path, 3)
    limiter = anyio.CapacityLimiter(2)

    def sandbox(task: Task, name: str) -> TrajectorySandbox:
        return TrajectorySandbox(pool, task, name, limiter, budget=2)

    with anyio.fail_after(60):
        async with _pool(counting) as pool:
            for task, name in ((a, "a1"), (b, "b1"), (a, "a2")):  # b is now least recent
                step = sandbox(task, name)
                await (await step.workspace()).exec("true")
                await step.aclose()
            step_c = sandbox(c, "c1")
            await step_c.workspace()
            assert [(cl.why, cl.instance_key) for cl in pool.closed] == [("evicted", json_key(b))]
            assert supervisors() == 2
            # Both remaining instances leased: a new one waits until one is idle.
            step_a = sandbox(a, "a3")
            await step_a.workspace()
            got_b = anyio.Event()

            async def use_b() -> None:
                step_b = sandbox(b, "b2")
                await step_b.workspace()
                got_b.set()
                await step_b.aclose()

            async with anyio.create_task_group() as group:
                group.start_soon(use_b)
                await anyio.wait_all_tasks_blocked()
                assert not got_b.is_set()
                assert supervisors() == 2
                await step_c.aclose()  # c idle: it makes the room, a (leased) stays
            await step_a.aclose()
            assert [cl.why for cl in pool.closed] == ["evicted", "evicted"]
            assert pool.closed[-1].instance_key == json_key(c)
            assert counting.peak == 2


def json_key(task: Task) -> str:
    from mcp_evalserver.runtime.sandboxes import instance_spec

    return instance_spec(task).key


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A filesystem of known size: 64 MiB."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


async def test_the_preflight_refuses_a_campaign_its_disk_cannot_hold_and_says_by_how_much(
    tmp_path: Path, tmpfs: Path
) -> None:
    tasks = [Task(id=f"img{n}", image=f"example/img{n % 2}") for n in range(4)]
    tasks += [Task(id="dir", path=str(tmp_path))]
    spec = spec_of(tasks, instances=3, instance_disk_mb=10, image_disk_mb=20)
    store = CampaignStore(tmpfs / "state")
    with pytest.raises(LimitExceeded) as refused:
        await store.create(spec)
    message = str(refused.value)
    # Two distinct images (four tasks share them) and three instances alive at once.
    assert "needs about 70 MB (2 image(s) × 20 MB + 3 instance(s) alive at once × 10 MB)" in (
        message
    )
    assert "64 MB free" in message
    assert "limits.instances" in message
    assert not (tmpfs / "state" / "campaigns").exists() or not any(
        (tmpfs / "state" / "campaigns").iterdir()
    )
    # One instance alive at a time fits: 2 × 20 + 1 × 10 = 50 MB.
    campaign_id = await store.create(spec.model_copy(update={"limits": spec.limits.model_copy(
        update={"instances": 1})}))  # fmt: skip
    assert store.load(campaign_id).spec.limits.instances == 1


async def test_a_campaign_without_a_budget_gets_what_the_machine_holds(
    tmp_path: Path, tmpfs: Path
) -> None:
    spec = spec_of(_dirs(tmp_path, 8), instance_disk_mb=16)
    store = CampaignStore(tmpfs / "state")
    campaign_id = await store.create(spec)
    # 64 MiB free at 16 MB per instance: four (memory allows more here).
    assert store.load(campaign_id).spec.limits.instances == 4


def _dirs(root: Path, count: int) -> list[Task]:
    tasks = []
    for n in range(count):
        (root / f"d{n}").mkdir()
        tasks.append(Task(id=f"d{n}", path=str(root / f"d{n}")))
    return tasks
