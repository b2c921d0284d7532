"""Conformance of every sandbox backend: limits (timeouts, pids, memory, disk, output) and
failures (cancelled execs, replies too late, other connections, a dead supervisor), proven by
real attacks.

Each test runs against each param of the `backend` fixture (see conftest.py). Waits are
bounded with `anyio.fail_after`; nothing sleeps. Host-side checks read the host's /proc,
which sees every sandboxed process of a local or docker backend on this machine.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import ExecResult, Instance, Workspace
from mcp_evalserver.sandbox.client import BlockingConnection, SupervisorClient

from .conformance_support import started, wait_for_file
from .conftest import BackendUnderTest
from .faults import sigkill_supervisor
from .host_processes import host_pids, marker, wait_until_gone, wait_until_running

pytestmark = pytest.mark.anyio


def supervisor_client(instance: Instance) -> SupervisorClient:
    client = getattr(instance, "client", None)
    assert isinstance(client, SupervisorClient), f"{instance!r} has no SupervisorClient"
    return client


# --- limits ------------------------------------------------------------------------------------


async def test_a_command_that_ignores_sigterm_dies_at_its_timeout(instance: Instance) -> None:
    arg = marker()
    with anyio.fail_after(20):
        async with await instance.workspace("stubborn") as ws:
            result = await ws.exec(f"trap '' TERM INT; sleep {arg}", timeout=1)
        await wait_until_gone(arg)
    assert result.timed_out
    assert result.duration_s < 10


async def test_a_fork_bomb_hits_the_pids_limit_and_the_instance_survives(limited: Instance) -> None:
    # The bomb's shell dies of its first failed fork; the rest of the bomb lasts, as in a
    # container, filling that workspace's pids alone, until the workspace goes.
    arg = marker()
    with anyio.fail_after(60):
        async with await limited.workspace("calm") as calm:
            results: dict[str, ExecResult] = {}
            async with await limited.workspace("bomb") as bomb:

                async def detonate() -> None:
                    script = "touch /tmp/lit; b() { b | b; }; while :; do b; done"
                    results["bomb"] = await bomb.exec(["/bin/sh", "-c", script, arg], timeout=3)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(detonate)
                    await wait_for_file(bomb, "/tmp/lit")
                    results["calm"] = await calm.exec("echo alive")
            await wait_until_gone(arg)
            again = await calm.exec("echo still alive")
            async with await limited.workspace("after") as after:
                fresh = await after.exec("echo recovered")
    assert results["calm"].stdout == "alive\n"
    assert "fork" in results["bomb"].stderr.lower()  # it did run into the limit
    assert again.stdout == "still alive\n"
    assert fresh.stdout == "recovered\n"


async def test_a_memory_hog_is_killed_and_the_instance_survives(limited: Instance) -> None:
    hog = ["python3", "-c", "b = b'x' * (1 << 30); print('survived')"]
    with anyio.fail_after(60):
        async with await limited.workspace("hog") as ws:
            result = await ws.exec(hog, timeout=30)
            again = await ws.exec("echo recovered")
    assert result.exit_code != 0
    assert "survived" not in result.stdout
    assert again.stdout == "recovered\n"


async def test_filling_the_disk_stops_at_the_workspace_cap(limited: Instance) -> None:
    fill = "dd if=/dev/zero of=big bs=1M count=200 2>&1; dd if=/dev/zero of=/tmp/big bs=1M 2>&1"
    with anyio.fail_after(60):
        async with await limited.workspace("filler") as ws, await limited.workspace("n") as nb:
            result = await ws.exec(fill, timeout=30)
            size = await ws.exec("du -sm big | cut -f1")
            neighbour = await nb.exec("echo fine > a.txt && cat a.txt")
    assert "No space left on device" in result.stdout
    assert int(size.stdout) <= 32
    assert neighbour.stdout == "fine\n"


async def test_a_trajectory_cannot_see_or_signal_another_trajectorys_lasting_processes(
    instance: Instance,
) -> None:
    arg = marker()
    with anyio.fail_after(30):
        async with await instance.workspace("lasting-victim") as victim:
            await victim.exec(f"setsid sleep {arg} >/dev/null 2>&1 & echo left")
            await wait_until_running(arg)
            (victim_pid,) = host_pids(arg)
            async with await instance.workspace("lasting-attacker") as attacker:
                attack = await attacker.exec(
                    f"kill -9 {victim_pid}; kill -9 -1; pkill -9 sleep; "
                    f"ps -eo args= | grep -c 'sleep {arg}$'"
                )
            assert host_pids(arg) == [victim_pid]  # still alive after every attempt
            still = await victim.exec(f"ps -eo args= | grep -cx 'sleep {arg}'")
        await wait_until_gone(arg)
    assert attack.stdout == "0\n"
    assert still.stdout == "1\n"


async def test_megabytes_on_both_streams_at_once_come_back_whole_and_in_order(
    instance: Instance,
) -> None:
    # Both streams relayed as frames on one pipe, which grows once a command fills a frame:
    # every byte comes back on its own stream, in the order it was written, none twice.
    lines = 300_000  # about 2 MB a stream
    expected = "".join(f"{n}\n" for n in range(1, lines + 1))
    with anyio.fail_after(60):
        async with await instance.workspace("both-streams") as ws:
            result = await ws.exec(
                f"seq 1 {lines} >&2 & seq 1 {lines}; wait", output_cap=8 << 20, timeout=50
            )
    assert (result.exit_code, result.stdout_truncated, result.stderr_truncated) == (0, False, False)
    assert result.stdout == expected
    assert result.stderr == expected


async def test_an_output_flood_is_capped_keeping_head_and_tail(instance: Instance) -> None:
    flood = "echo HEAD; yes filler | head -n 5000000; echo TAIL; yes e | head -c 9000000 >&2"
    with anyio.fail_after(60):
        async with await instance.workspace("flood") as ws:
            result = await ws.exec(flood, output_cap=64 << 10, timeout=50)
    assert result.exit_code == 0
    assert result.stdout_truncated
    assert result.stderr_truncated
    assert result.stdout.startswith("HEAD\nfiller\n")
    assert result.stdout.endswith("filler\nTAIL\n")
    assert len(result.stdout) < (64 << 10) + 100


async def test_cancelling_an_exec_kills_its_processes(instance: Instance) -> None:
    arg = marker()
    with anyio.fail_after(20):
        async with await instance.workspace("cancelled") as ws:
            with anyio.move_on_after(1):
                await ws.exec(f"sleep {arg}")
            await wait_until_gone(arg)


@pytest.mark.backends("local", "docker")  # the backends that speak through a SupervisorClient
async def test_a_command_cancelled_right_behind_its_exec_never_runs_on(instance: Instance) -> None:
    """A cancel sent right behind its exec (a client that gave up as soon as it asked) may
    reach the workspace's holder before the runner it handed the exec to has taken it: the
    command is still killed (or never started), never left to run out its timeout. Each round
    sends exec, cancel and a second exec in one write, and waits for the second's answer."""
    client = supervisor_client(instance)
    if getattr(instance, "info", {}).get("transport") == "exec stream":
        return  # no socket passes dockerd: the cancel follows its exec on the one stream
    sock = await client.pass_connection()
    ids = iter(range(1, 1_000_000))
    markers = []

    def round_trip(ws_name: str, arg: str) -> None:
        sleeper, cancel, echo = next(ids), next(ids), next(ids)
        lines = [
            {"id": sleeper, "op": "exec",
             "args": {"ws": ws_name, "argv": ["sleep", arg], "timeout": 300}},
            {"id": cancel, "op": "cancel", "args": {"target": sleeper}},
            {"id": echo, "op": "exec", "args": {"ws": ws_name, "argv": ["true"], "timeout": 30}},
        ]  # fmt: skip
        sock.sendall(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
        buffer = b""
        while True:
            data = sock.recv(65536)
            assert data, "the supervisor closed the connection"
            buffer += data
            replies = [json.loads(line) for line in buffer.split(b"\n")[:-1]]
            if any(reply.get("id") == echo for reply in replies):
                assert all(reply.get("id") != sleeper for reply in replies)  # cancelled: no reply
                return

    with sock, anyio.fail_after(120):
        async with await instance.workspace("hasty") as ws:
            for _ in range(30):
                markers.append(marker())
                await anyio.to_thread.run_sync(round_trip, ws.name, markers[-1])
            with anyio.fail_after(20):  # a command that escaped its cancel would run for 300 s
                for arg in markers:
                    await wait_until_gone(arg)


@pytest.mark.backends("local", "docker")  # the backends that speak through a SupervisorClient
async def test_a_reply_that_takes_too_long_is_a_timeout_and_its_command_is_cancelled(
    instance: Instance,
) -> None:
    client = supervisor_client(instance)
    arg = marker()
    with anyio.fail_after(20):
        async with await instance.workspace("impatient") as ws:
            with pytest.raises(errors.Timeout):
                await client.request(
                    "exec", reply_timeout=0.5, ws=ws.name, argv=["sleep", arg], timeout=300
                )
            await wait_until_gone(arg)
            assert (await ws.exec("echo still usable")).stdout == "still usable\n"


async def other_connection(instance: Instance) -> BlockingConnection | None:
    """Another connection to the instance's supervisor; None where none can be had, which is
    only over docker's exec stream (a socket cannot pass dockerd), and said so."""
    client = supervisor_client(instance)
    if getattr(instance, "info", {}).get("transport") == "exec stream":
        with pytest.raises(errors.InvalidInput, match="takes no other connection"):
            await client.open_connection()
        return None
    return await client.open_connection()


@pytest.mark.backends("local", "docker")  # the backends that speak through a SupervisorClient
async def test_another_connection_runs_commands_beside_the_first_and_answers_on_itself(
    instance: Instance,
) -> None:
    """Both connections number their requests from 1 up: every reply still finds its asker."""
    connection = await other_connection(instance)
    if connection is None:
        return
    rounds = 40
    async with await instance.workspace("two-ways") as ws:

        def on_the_other() -> list[str]:
            out = []
            for number in range(rounds):
                reply = connection.request(
                    "exec", 30, ws=ws.name, argv=["echo", f"other-{number}"], timeout=20
                )
                out.append(reply["stdout"].decode())
            return out

        async def on_the_first() -> None:
            for number in range(rounds):
                first.append((await ws.exec(["echo", f"first-{number}"])).stdout)

        first: list[str] = []
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(on_the_first)
                other = await anyio.to_thread.run_sync(on_the_other)
    connection.close()
    assert other == [f"other-{n}\n" for n in range(rounds)]
    assert first == [f"first-{n}\n" for n in range(rounds)]


@pytest.mark.backends("local", "docker")
async def test_closing_a_connection_kills_the_command_it_asked_for(instance: Instance) -> None:
    connection = await other_connection(instance)
    if connection is None:
        return
    arg = marker()
    with anyio.fail_after(30):
        async with await instance.workspace("hung-up") as ws:

            def run() -> None:
                argv = ["/bin/sh", "-c", started(arg)]
                with pytest.raises(errors.SandboxUnavailable):
                    connection.request("exec", 60, ws=ws.name, argv=argv, timeout=50)

            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, run)
                await wait_for_file(ws, "/tmp/started")
                connection.close()
            await wait_until_gone(arg)
            assert (await ws.exec("echo still usable")).stdout == "still usable\n"


@pytest.mark.backends("local", "docker")
async def test_cancels_on_another_connection_reach_none_of_the_first_connections_requests(
    instance: Instance,
) -> None:
    """Ids repeat across connections: a client that cancels every id it can think of on its
    own connection cancels its own requests, never the first connection's."""
    connection = await other_connection(instance)
    if connection is None:
        return
    sock = connection._sock  # raw: a BlockingConnection asks one thing at a time
    mine, theirs = marker(), marker()
    asked = range(1, 21)
    tried = range(1, 3001)  # past any id the first connection has used in this module
    # Long beside the cancels sent in the same write, short beside fail_after: on docker a
    # command cancelled while its runner is handed the request can live until this timeout.
    mine_timeout = 10
    with anyio.fail_after(60):
        async with await instance.workspace("cancel-here") as ws:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ws.exec, started(theirs))  # on the first connection
                await wait_for_file(ws, "/tmp/started")
                requests = [
                    {
                        "id": n,
                        "op": "exec",
                        "args": {"ws": ws.name, "timeout": mine_timeout, "argv": ["sleep", mine]},
                    }
                    for n in asked
                ] + [{"id": 10_000 + n, "op": "cancel", "args": {"target": n}} for n in tried]
                payload = "".join(json.dumps(r) + "\n" for r in requests).encode()
                await anyio.to_thread.run_sync(sock.sendall, payload)
                replies: dict[int, Any] = {}
                buffer = b""
                while len(replies) < len(tried):
                    buffer += await anyio.to_thread.run_sync(sock.recv, 1 << 20)
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        reply = json.loads(line)
                        replies[reply["id"] - 10_000] = reply["result"]["cancelled"]
                assert host_pids(theirs)  # the first connection's command was not touched
                tg.cancel_scope.cancel()
            await wait_until_gone(theirs)
            await wait_until_gone(mine)
    connection.close()
    assert {n for n, cancelled in replies.items() if cancelled} == set(asked)


@pytest.mark.backends("local", "docker")
async def test_a_command_finds_no_socket_to_the_supervisor_among_its_files(
    instance: Instance,
) -> None:
    """An agent that wants the supervisor (to run in another workspace, or outside) looks for
    a way to talk to it: with other connections open, no socket is in reach."""
    connections = [c for _ in range(3) if (c := await other_connection(instance)) is not None]
    look = "for f in /proc/[0-9]*/fd/*; do readlink $f; done 2>/dev/null | sort | uniq -c"
    async with await instance.workspace("seeker") as ws:
        result = await ws.exec(look)
    for connection in connections:
        connection.close()
    assert result.exit_code == 0
    assert "pipe:" in result.stdout  # it did see its own files
    assert "socket:" not in result.stdout, result.stdout


# Only a local supervisor is a process of this host the test can kill.
@pytest.mark.backends("local", "ray-local")
async def test_a_dead_supervisor_fails_pending_and_later_calls_as_unavailable(
    backend: BackendUnderTest,
) -> None:
    arg = marker()
    outcome: dict[str, BaseException] = {}

    async def doomed_exec(ws: Workspace) -> None:
        try:
            await ws.exec(started(arg))
        except errors.SandboxUnavailable as e:
            outcome["pending"] = e

    spec = backend.spec()
    # Two provisionings (a container each, on a node's actor for ray): minutes under load.
    with anyio.fail_after(180):
        instance = await backend.backend.instance(spec)
        ws = await instance.workspace("doomed")
        async with anyio.create_task_group() as tg:
            tg.start_soon(doomed_exec, ws)
            await wait_for_file(ws, "/tmp/started")
            await sigkill_supervisor(instance)  # on the host or in its container
        with pytest.raises(errors.SandboxUnavailable):
            await ws.exec("true")
        await wait_until_gone(arg)  # the supervisor's death took its sandboxes with it
        fresh = await backend.backend.instance(spec)  # asked again, it comes back
        async with await fresh.workspace("reborn") as ws:
            again = await ws.exec("cat a.txt")
        await fresh.aclose()
    assert isinstance(outcome.get("pending"), errors.SandboxUnavailable)
    assert fresh is not instance
    assert again.stdout == "hello\n"
