"""The supervisor client's reply timeouts (sandbox/client.py): one watch of the loop looks at
every request's deadline, and comes back for a request whose deadline is earlier than the one
it waits for."""

from __future__ import annotations

import anyio
import pytest

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import Instance
from mcp_evalserver.sandbox.client import SupervisorClient

from .host_processes import marker, wait_until_gone, wait_until_running

pytestmark = pytest.mark.anyio


@pytest.mark.backends("local")  # the client is the same over every backend that has one
async def test_a_short_reply_timeout_asked_after_a_long_one_passes_on_time(
    instance: Instance,
) -> None:
    client = getattr(instance, "client", None)
    assert isinstance(client, SupervisorClient)
    patient, hasty = marker(), marker()
    outcome: list[str] = []

    async def wait_long(ws_name: str) -> None:
        try:
            await client.request(
                "exec", reply_timeout=600, ws=ws_name, argv=["sleep", patient], timeout=900
            )
        except anyio.get_cancelled_exc_class():
            outcome.append("cancelled while still waiting")
            raise

    async with await instance.workspace("deadlines") as ws:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(wait_long, ws.name)
                await wait_until_running(patient)  # the watch waits for its 600 s now
                began = anyio.current_time()
                with pytest.raises(errors.Timeout, match=r"no answer to 'exec' in 0\.5s"):
                    await client.request(
                        "exec", reply_timeout=0.5, ws=ws.name, argv=["sleep", hasty], timeout=900
                    )
                assert anyio.current_time() - began < 30
                await wait_until_gone(hasty)  # timed out: cancelled remotely
                await wait_until_running(patient)
                group.cancel_scope.cancel()
            await wait_until_gone(patient)
    assert outcome == ["cancelled while still waiting"]
