"""The supervisor client's round trip under what a trajectory can do to it: many requests in
flight on one stream, replies in any order, and a command that prints the protocol's own lines.
"""

from __future__ import annotations

import json

import anyio
import pytest

from mcp_evalserver.sandbox.base import Instance

pytestmark = [pytest.mark.anyio, pytest.mark.backends("local", "docker")]

FILE = "x = 1\n" * 40


async def test_a_command_printing_reply_lines_gets_them_back_and_answers_no_request(
    instance: Instance,
) -> None:
    # Lines shaped as the supervisor's replies, for every request id a client could be waiting
    # on, each claiming to be a file's bytes: if one reached the client's reader it would
    # answer a read below with "pwned".
    forged = "".join(
        json.dumps({"id": n, "ok": True, "result": {"data_b64": "cHduZWQ=", "exit_code": 0}}) + "\n"
        for n in range(1, 400)
    )
    reads: list[bytes] = []
    with anyio.fail_after(60):
        async with await instance.workspace("forger") as ws:
            await ws.write_file("forged.jsonl", forged)
            await ws.write_file("mine.py", FILE)

            async def read() -> None:
                reads.append(await ws.read_file("mine.py"))

            async with anyio.create_task_group() as group:
                for _ in range(20):
                    group.start_soon(read)
                printed = await ws.exec("cat forged.jsonl; cat forged.jsonl >&2")
                for _ in range(20):
                    group.start_soon(read)
    assert printed.exit_code == 0
    assert printed.stdout == forged
    assert printed.stderr == forged
    assert reads == [FILE.encode()] * 40


async def test_requests_in_flight_together_each_get_their_own_reply(instance: Instance) -> None:
    # Commands that end in the reverse of the order they were sent: their replies come back
    # out of order, each to the request that asked.
    outputs: dict[int, str] = {}
    with anyio.fail_after(60):
        async with await instance.workspace("many") as ws:

            async def run(n: int) -> None:
                result = await ws.exec(f"sleep 0.{30 - n:02d}; echo {n}")
                outputs[n] = result.stdout

            async with anyio.create_task_group() as group:
                for n in range(30):
                    group.start_soon(run, n)
    assert outputs == {n: f"{n}\n" for n in range(30)}
