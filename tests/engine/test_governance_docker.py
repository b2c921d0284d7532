"""Provisioning governance on the docker backend: the instance budget, eviction and release of
finished tasks' instances, and instances shared by content, counted from the Docker engine
itself (containers labelled as ours) rather than from the pool's own bookkeeping."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import docker
import pytest

from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.runtime.sandboxes import BackendName, SandboxPool
from mcp_evalserver.sandbox.base import Backend, Instance, InstanceSpec
from mcp_evalserver.sandbox.docker import DockerBackend
from mcp_evalserver.sandbox.docker_engine import LABEL_INSTANCE, LABEL_OWNER, LABEL_ROLE
from mcp_evalserver.spec.campaign import Task
from tests.engine.helpers import ledger_ran_each_once, run_campaign, spec_of
from tests.engine.test_sandboxed_campaign import ApplyAndTest, FixingAgent
from tests.sandbox.docker_support import require_docker
from testsupport.repos import BUGGY

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.slow]


def _setup(number: int) -> list[str]:
    """A committed repository holding the buggy calc.py, and a file of its own per `number`
    (distinct setups: distinct instances)."""
    buggy = BUGGY.replace("\n", "\\n")
    return [
        "git init -q . && git config user.email t@t && git config user.name t",
        f"printf '{buggy}' > calc.py && echo {number} > .instance",
        "git add -A && git commit -qm base",
    ]


def _tasks(count: int, *, same_environment: bool = False) -> list[Task]:
    image = require_docker()
    return [
        Task(id=f"calc{n}", image=image, setup=_setup(0 if same_environment else n))
        for n in range(count)
    ]


class Counting(Backend):
    """A real docker backend that counts, each time it hands out an instance, the instance
    containers of ours the engine is running (instances only become more when one is
    provisioned, so this sees the peak)."""

    def __init__(self) -> None:
        self.inner = DockerBackend()
        self.api = docker.APIClient()
        self.peak = 0
        self.since = 0

    @property
    def owner(self) -> str:
        return self.inner.engine.owner

    async def __aenter__(self) -> Counting:
        self.since = int(time.time()) - 1
        await self.inner.__aenter__()
        return self

    def running(self) -> list[str]:
        """Instance keys of our instance containers the engine runs now."""
        labels = [f"{LABEL_OWNER}={self.owner}", f"{LABEL_ROLE}=instance"]
        containers = self.api.containers(filters={"label": labels})
        return [c["Labels"][LABEL_INSTANCE] for c in containers]

    def events(self) -> list[dict[str, Any]]:
        """The engine's own record of our instance containers' lives since we started."""
        labels = [f"{LABEL_OWNER}={self.owner}", f"{LABEL_ROLE}=instance"]
        stream = self.api.events(
            since=self.since,
            until=int(time.time()) + 1,
            filters={"type": "container", "label": labels},
            decode=True,
        )
        return sorted(stream, key=lambda event: int(event["timeNano"]))

    async def instance(self, spec: InstanceSpec) -> Instance:
        instance = await self.inner.instance(spec)
        keys = await anyio.to_thread.run_sync(self.running)
        self.peak = max(self.peak, len(keys))
        return instance

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            self.api.close()


def _pool(backend: Counting) -> SandboxPool:
    def make(name: BackendName, address: str) -> Backend:
        assert name == "docker"
        return backend

    return SandboxPool(backends=make)


def _peak(events: list[dict[str, Any]]) -> int:
    """Containers running at once at most, by the engine's start and die events."""
    alive = peak = 0
    for event in events:
        if event["Action"] == "start":
            alive += 1
            peak = max(peak, alive)
        elif event["Action"] == "die":
            alive -= 1
    return peak


async def _run(
    tmp_path: Path, tasks: list[Task], counting: Counting, **limits: Any
) -> tuple[CampaignRunner, CampaignState, list[dict[str, Any]], list[str], SandboxPool]:
    """Runs a campaign of `tasks` (two samples each) on `counting`; returns the engine's events
    and the instance containers still running once it ended, both taken before the backend
    closes (when it would remove whatever is left)."""
    spec = spec_of(tasks, samples=2, **limits)
    with anyio.fail_after(300):
        async with _pool(counting) as pool:
            runner, state = await run_campaign(
                tmp_path / "state", spec, FixingAgent(), ApplyAndTest(), sandboxes=pool
            )
            left = await anyio.to_thread.run_sync(counting.running)
            events = await anyio.to_thread.run_sync(counting.events)
    return runner, state, events, left, pool


async def test_a_budget_of_two_containers_holds_over_five_tasks_and_finished_ones_are_removed(
    tmp_path: Path,
) -> None:
    counting = Counting()
    runner, state, events, left, pool = await _run(
        tmp_path, _tasks(5), counting, instances=2, concurrency=4, per_instance=2
    )
    assert {t.outcome for t in state.trajectories.values()} == {"resolved"}
    records = ledger_ran_each_once(runner, state)
    # Never more than the budget, and the budget was used: sampled at every handout and from
    # the engine's whole timeline of starts and deaths.
    assert counting.peak == 2
    assert _peak(events) == 2
    started = Counter(
        e["Actor"]["Attributes"][LABEL_INSTANCE] for e in events if e["Action"] == "start"
    )
    assert len(started) == 5, "each task had its own container"
    # Every container the campaign started, the engine removed while the backend was still
    # open: evicted (idle, to make room) or released as its task's last trajectory finished,
    # the first release while other trajectories were still being scored.
    assert left == []
    destroyed = Counter(
        e["Actor"]["Attributes"][LABEL_INSTANCE] for e in events if e["Action"] == "destroy"
    )
    assert destroyed == started
    assert {c.why for c in pool.closed} == {"evicted", "released"}
    released = {c.instance_key: c.ts for c in pool.closed if c.why == "released"}
    last_scored = max(r["ts"] for r in records if r["kind"] == "scored")
    gone = {
        e["Actor"]["Attributes"][LABEL_INSTANCE]: int(e["timeNano"]) / 1e9
        for e in events
        if e["Action"] == "destroy"
    }
    assert min(gone[key] for key in released) < last_scored
    # A released container is never started again, by the engine's own start events (a
    # listing taken after a release still shows a container whose removal is under way).
    started_again = {
        key
        for e in events
        if e["Action"] == "start"
        and (key := e["Actor"]["Attributes"][LABEL_INSTANCE]) in released
        and int(e["timeNano"]) / 1e9 > released[key]
    }
    assert started_again == set()


async def test_tasks_of_the_same_image_and_setup_share_one_container_set_up_once(
    tmp_path: Path,
) -> None:
    # Content here is the instance key (image, setup, workdir, ...). A Harbor task's image is
    # built under a tag naming its task and its context's hash: one build per task, and two
    # tasks with the same environment are two builds (the engine's layer cache shares layers).
    counting = Counting()
    runner, state, events, left, _ = await _run(
        tmp_path, _tasks(2, same_environment=True), counting, instances=2, concurrency=4
    )
    assert {t.outcome for t in state.trajectories.values()} == {"resolved"}
    ledger_ran_each_once(runner, state)
    created = [e for e in events if e["Action"] == "create"]
    assert len(created) == 1, "one container (one setup) for both tasks' four trajectories"
    assert left == []
