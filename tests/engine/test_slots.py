"""A step hands its trajectory or scoring slot back while its instance is being provisioned
(`runtime.sandboxes.Slot`), on real local instances: a step whose instance is ready runs
meanwhile instead of queueing behind it, and a step cancelled or ended while it waits leaves no
token behind.

Found by bench/eval_set.py: an evaluation set's scoring slots went to oracle's scorings of tasks
whose containers were not made yet, and a fixer's scorings of provisioned tasks waited 9 s.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mcp_evalserver.runtime.sandboxes import SandboxPool, Slot, TrajectorySandbox
from tests.engine.test_sandboxed_campaign import _tasks

pytestmark = [pytest.mark.anyio, pytest.mark.root]


class Blocked:
    """Provisioning held by the test: every step that needs an instance made waits for it."""

    def __init__(self) -> None:
        self.provisioning = anyio.CapacityLimiter(1)

    async def __aenter__(self) -> Blocked:
        await self.provisioning.acquire_on_behalf_of(self)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self in self.provisioning.statistics().borrowers:
            self.provisioning.release_on_behalf_of(self)


async def test_a_step_waiting_for_its_instance_lets_a_step_whose_instance_is_ready_run(
    tmp_path: Path,
) -> None:
    waiting_task, ready_task = _tasks(tmp_path, 2)
    slots = anyio.CapacityLimiter(1)  # one slot for both steps
    order: list[str] = []
    with anyio.fail_after(60):
        async with SandboxPool() as pool:
            unblocked = anyio.CapacityLimiter(1)
            ready = TrajectorySandbox(pool, ready_task, "ready-0", unblocked)
            await ready.workspace()  # this task's instance exists now
            async with Blocked() as blocked, anyio.create_task_group() as group:

                async def step(task_sandbox: str) -> None:
                    async with Slot(slots) as slot:
                        task = waiting_task if task_sandbox == "waiting" else ready_task
                        sandbox = TrajectorySandbox(
                            pool, task, task_sandbox, blocked.provisioning, slot=slot
                        )
                        workspace = await sandbox.workspace()
                        # Held again once it has its workspace: the step's work runs in it.
                        assert slots.borrowed_tokens == 1
                        await workspace.exec("true")
                        order.append(task_sandbox)
                        await sandbox.aclose()

                group.start_soon(step, "waiting")
                await anyio.wait_all_tasks_blocked()
                assert slots.borrowed_tokens == 0  # given back while its instance is made
                with anyio.fail_after(20):  # held through provisioning, this would hang
                    await step("ready")
                assert order == ["ready"]
                blocked.provisioning.release_on_behalf_of(blocked)
            await ready.aclose()
    assert order == ["ready", "waiting"]
    assert slots.borrowed_tokens == 0


async def test_a_step_cancelled_while_its_instance_is_made_leaves_no_slot_taken(
    tmp_path: Path,
) -> None:
    (task,) = _tasks(tmp_path, 1)
    slots = anyio.CapacityLimiter(1)
    with anyio.fail_after(60):
        async with SandboxPool() as pool, Blocked() as blocked:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as group:

                    async def step() -> None:
                        async with Slot(slots) as slot:
                            sandbox = TrajectorySandbox(
                                pool, task, "cancelled", blocked.provisioning, slot=slot
                            )
                            await sandbox.workspace()

                    group.start_soon(step)
                    await anyio.wait_all_tasks_blocked()
                    assert slots.borrowed_tokens == 0
                    scope.cancel()
            assert slots.borrowed_tokens == 0
            # The slot is free for the next step, which gets it at once.
            async with Slot(slots):
                assert slots.borrowed_tokens == 1
    assert slots.borrowed_tokens == 0


async def test_a_slot_given_back_twice_at_once_is_taken_back_once() -> None:
    # Parts of one step (a combined scorer's) may wait for instances at the same time: the
    # step must not end up holding two tokens, nor release one it does not hold.
    slots = anyio.CapacityLimiter(2)
    with anyio.fail_after(10):
        async with Slot(slots) as slot:
            first, second = anyio.Event(), anyio.Event()

            async def wait_in(released: anyio.Event) -> None:
                async with slot.given_back():
                    await released.wait()

            async with anyio.create_task_group() as group:
                group.start_soon(wait_in, first)
                group.start_soon(wait_in, second)
                await anyio.wait_all_tasks_blocked()
                assert slots.borrowed_tokens == 0
                first.set()
                await anyio.wait_all_tasks_blocked()
                assert slots.borrowed_tokens == 1
                second.set()
            assert slots.borrowed_tokens == 1
    assert slots.borrowed_tokens == 0
