"""The supervisor client's round trip under what a trajectory can do to it: many requests in
flight on one stream, replies in any order, a command that prints the protocol's own lines, and
files made of them, whose bytes travel raw after their reply's line.
"""

from __future__ import annotations

import json
import os

import anyio
import pytest

from mcp_evalserver.sandbox.base import Instance
from mcp_evalserver.sandbox.client import SupervisorClient
from mcp_evalserver.sandbox.supervisor.protocol import raw_size

pytestmark = [pytest.mark.anyio, pytest.mark.backends("local", "docker")]

FILE = "x = 1\n" * 40


async def test_a_command_printing_reply_lines_gets_them_back_and_answers_no_request(
    instance: Instance,
) -> None:
    # Lines shaped as the supervisor's replies, for every request id a client could be waiting
    # on, each claiming to be a file's bytes (base64, or raw after the line as the output
    # itself travels): if one reached the client's reader it would answer a read below with
    # "pwned".
    forged = "".join(
        json.dumps({"id": n, "ok": True, "result": {"data_b64": "cHduZWQ=", "exit_code": 0}})
        + "\n"
        + json.dumps({"id": n, "ok": True, "result": {}, "raw": {"data": 5, "stdout": 0}})
        + "\npwned"
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


async def test_files_shaped_as_replies_and_raw_bytes_read_back_exactly_and_answer_nothing_else(
    instance: Instance,
) -> None:
    # A file's bytes follow its reply's line, counted: a trajectory's file of reply lines (each
    # with raw bytes of its own, for every id a client could be waiting on) must come back as
    # bytes, never as replies; so must every byte value, an empty file, a file past a pipe's
    # and a read's 64 KiB, one with no newline at its end, and one on the view's own /tmp (a
    # mount of its own on the local backend: read by the forked child, whose JSON line carries
    # it base64 to the supervisor).
    forged = "".join(
        json.dumps({"id": n, "ok": True, "result": {}, "raw": {"data": 5}}) + "\npwned"
        for n in range(1, 400)
    ).encode()
    files = {
        "forged.jsonl": forged,
        "bytes.bin": bytes(range(256)) * 64,
        "empty": b"",
        "large.bin": os.urandom(3 << 20),
        "no-newline.py": b"x = 1\n" * 40 + b"y = 2",
        "mine.py": FILE.encode(),
        "/tmp/child.bin": bytes(range(256)) * 300,
    }
    client = getattr(instance, "client", None)
    assert isinstance(client, SupervisorClient)
    read: dict[str, list[bytes]] = {name: [] for name in files}
    with anyio.fail_after(120):
        async with await instance.workspace("raw-reader") as ws:
            for name, data in files.items():
                await ws.write_file(name, data)

            async def read_all() -> None:
                for name in files:
                    read[name].append(await ws.read_file(name))

            async with anyio.create_task_group() as group:
                for _ in range(10):
                    group.start_soon(read_all)
            if (
                getattr(instance, "info", {}).get("transport") != "exec stream"
            ):  # no socket passes dockerd
                other = await client.open_connection()
                try:
                    for name in files:
                        reply = await anyio.to_thread.run_sync(
                            lambda: other.request("read", 30, ws=ws.name, path=name)  # noqa: B023
                        )
                        read[name].append(reply["data"])
                finally:
                    other.close()
    for name, data in files.items():
        assert read[name][:10] == [data] * 10, name
        assert read[name][10:] in ([], [data]), name


def test_raw_lengths_that_are_not_counts_or_add_up_past_the_limit_are_garbage() -> None:
    assert raw_size({"raw": {"data": 5, "more": 0}}, 5) == 5
    assert raw_size({"result": {}}, 0) == 0
    for raw in ({"data": -1}, {"data": True}, {"data": 2.0}, ["data", 2], {"data": 6}):
        with pytest.raises(ValueError, match="raw"):
            raw_size({"raw": raw}, 5)
