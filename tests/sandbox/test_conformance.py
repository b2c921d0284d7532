"""Conformance of every sandbox backend: behaviour, isolation and limits, proven by real attacks.

Each test runs against each param of the `backend` fixture (see conftest.py). Waits are
bounded with `anyio.fail_after`; nothing sleeps. Host-side checks read the host's /proc,
which sees every sandboxed process of a local or docker backend on this machine.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import hashlib
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import uuid
from typing import Any

import anyio
import pytest

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import REPORT_FD, ExecResult, Instance, Workspace
from mcp_evalserver.sandbox.client import BlockingConnection, SupervisorClient
from mcp_evalserver.sandbox.supervised import SupervisedWorkspace

from .conftest import REPO_SETUP, BackendUnderTest
from .faults import holder_of, sigkill_supervisor
from .host_processes import host_pids, marker, wait_until_gone, wait_until_running

pytestmark = pytest.mark.anyio


def started(argument: str) -> str:
    """Shell that starts `sleep <argument>` and marks /tmp/started once it really runs."""
    return (
        f"sleep {argument} & while ! grep -qs {argument} /proc/$!/cmdline; do :; done; "
        "touch /tmp/started; wait"
    )


async def wait_for_file(ws: Workspace, path: str) -> None:
    """Polls a workspace file through the sandbox API (each try is a real round trip)."""
    while True:
        try:
            await ws.read_file(path)
            return
        except errors.NotFound:
            await anyio.lowlevel.checkpoint()


def supervisor_client(instance: Instance) -> SupervisorClient:
    client = getattr(instance, "client", None)
    assert isinstance(client, SupervisorClient), f"{instance!r} has no SupervisorClient"
    return client


# --- behaviour ---------------------------------------------------------------------------------


async def test_a_command_runs_in_the_workdir_and_a_nonzero_exit_is_data(instance: Instance) -> None:
    with anyio.fail_after(20):
        async with await instance.workspace("basic") as ws:
            result = await ws.exec("cat a.txt; echo oops >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "hello\n", "oops\n")
    assert not result.timed_out
    assert not result.stdout_truncated


async def test_the_instance_runs_the_holder_and_transport_it_was_built_for(
    backend: BackendUnderTest, instance: Instance
) -> None:
    # The compiled holder wherever it builds and the docker side door wherever the engine is
    # here (both always, here: their absence is a failure), the fallbacks where the backend
    # asks for them: each backend param tests the path it names.
    fallback = backend.name.endswith("-python")
    info = getattr(instance, "info", {})
    assert info.get("holder") == ("python" if fallback else "native")
    if backend.name.startswith("docker"):
        assert info.get("transport") == ("exec stream" if fallback else "socket")


@pytest.mark.backends("local", "docker")
async def test_the_supervisor_refuses_a_nul_byte_itself_as_bad_input(instance: Instance) -> None:
    # The client refuses NUL before it sends; the supervisor must too, on its own: holders read
    # an exec's request as NUL-terminated fields, and a NUL that got through would shift them.
    # Before, it failed as an infrastructure error, which is retried and left out of the rate.
    from mcp_evalserver.sandbox.supervised import SupervisedInstance

    assert isinstance(instance, SupervisedInstance)
    with anyio.fail_after(20):
        async with await instance.workspace("nul") as ws:
            for args in ({"argv": ["echo", "a\0b"]}, {"argv": ["true"], "env": {"A": "x\0y"}},
                         {"argv": ["true"], "cwd": "a\0b"}):  # fmt: skip
                with pytest.raises(errors.InvalidInput, match="NUL"):
                    await instance.client.request("exec", ws="nul", timeout=10, **args)
            after = await ws.exec(["echo", "fine"])
    assert after.stdout == "fine\n"


@pytest.mark.backends("local", "docker")
async def test_a_workspace_built_ahead_is_never_handed_out_with_other_limits(
    instance: Instance,
) -> None:
    # Workspaces are built ahead with the limits of the last plain create. A create that asks
    # for a smaller disk, while one built without that cap waits, must get the cap.
    from mcp_evalserver.sandbox.supervised import SupervisedInstance
    from mcp_evalserver.sandbox.supervisor.workspaces import IDLE_S

    assert isinstance(instance, SupervisedInstance)
    client = instance.client
    with anyio.fail_after(60):
        made_ahead = False
        for i in range(1000):  # until one was built ahead, and another one waits
            info = await client.request("ws_create", ws=f"ahead-{i}", limits={})
            await client.request("ws_destroy", ws=f"ahead-{i}")
            if info["made_ahead"] and info["ready_left"] >= 1:
                made_ahead = True
                break
            # The supervisor builds ahead only once it had nothing to do for IDLE_S: the one
            # thing that gives it that is time without a request.
            await anyio.sleep(IDLE_S * 5)
        capped = await client.request("ws_create", ws="capped", limits={"disk_bytes": 1 << 20})
        big = await client.request(
            "exec", ws="capped", argv=["sh", "-c", "head -c 4000000 /dev/zero > big"], timeout=30
        )
        await client.request("ws_destroy", ws="capped")
    assert made_ahead
    assert capped["made_ahead"] is False
    assert big["exit_code"] != 0  # the 1 MiB cap held


async def test_stdin_env_and_cwd_reach_the_command(instance: Instance) -> None:
    with anyio.fail_after(20):
        async with await instance.workspace("io") as ws:
            result = await ws.exec(["sh", "-c", "pwd; echo $GREETING; cat"], stdin="piped\n",
                                   env={"GREETING": "hi"}, cwd="pkg")  # fmt: skip
            missing = await ws.exec(["definitely-not-a-command"])
            with pytest.raises(errors.InvalidInput):
                await ws.exec("true", cwd="no/such/dir")
            with pytest.raises(errors.InvalidInput):
                await ws.exec("true", env={"A=B": "x"})
    assert result.stdout == f"{instance.spec.workdir}/pkg\nhi\npiped\n"
    assert missing.exit_code == 127


async def test_a_request_in_its_message_or_past_it_in_a_memfd_reaches_the_command_whole(
    instance: Instance,
) -> None:
    # A request up to INLINE_REQUEST_MAX bytes travels in the "exec" message, a larger one in
    # a memfd: arguments and variables on both sides of that line (and one past a pipe's
    # buffer) arrive byte for byte, newlines and the header's words included.
    count = "import sys, os; print(*map(len, sys.argv[1:]), len(os.environ['BIG']))"
    sizes = [100, (32 << 10) - 700, (32 << 10) + 1, 120 << 10]  # an arg: 128 KiB at most
    with anyio.fail_after(30):
        async with await instance.workspace("big-request") as ws:
            results = [
                await ws.exec(
                    ["python3", "-c", count, "exec 1 memfd\n" + "a" * size, "\n"],
                    env={"BIG": "b" * size},
                )
                for size in sizes
            ]
    assert [r.stdout for r in results] == [f"{size + 13} 1 {size}\n" for size in sizes], [
        r.stderr for r in results
    ]


async def test_commands_of_one_workspace_run_concurrently_and_large_stdin_arrives_whole(
    instance: Instance,
) -> None:
    big = os.urandom(8 << 20)
    with anyio.fail_after(30):
        async with await instance.workspace("fifo") as ws:
            await ws.exec("mkfifo /tmp/pipe")
            results: dict[str, ExecResult] = {}

            async def run(name: str, cmd: str, stdin: bytes | None = None) -> None:
                results[name] = await ws.exec(cmd, stdin=stdin)

            # Each side of a FIFO blocks until the other opens it: served one at a time, they
            # would deadlock (and fail_after would say so).
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "reader", "cat /tmp/pipe")
                tg.start_soon(run, "writer", "echo through > /tmp/pipe")
                tg.start_soon(run, "digest", "sha256sum", big)
    assert results["reader"].stdout == "through\n"
    assert results["digest"].stdout.split()[0] == hashlib.sha256(big).hexdigest()


async def test_twenty_overlapping_commands_of_one_workspace_each_run_and_report_their_own(
    instance: Instance,
) -> None:
    # More at once than a holder keeps in its first table of exec inits. Each command waits
    # until all twenty have started (one blocking on another's init would never get there),
    # then exits with its own number: a status crossed between inits would show.
    count = 20
    script = (
        f"touch /tmp/at-$N; while [ $(ls /tmp | grep -c '^at-') -lt {count} ]; do :; done; "
        "echo $N; exit $N"
    )
    with anyio.fail_after(60):
        async with await instance.workspace("crowd") as ws:
            results: dict[int, ExecResult] = {}

            async def run(n: int) -> None:
                results[n] = await ws.exec(script, env={"N": str(n)})

            async with anyio.create_task_group() as tg:
                for n in range(1, count + 1):
                    tg.start_soon(run, n)
            after = await ws.exec("ps -eo comm= | wc -l")
    assert {n: (r.exit_code, r.stdout) for n, r in results.items()} == {
        n: (n, f"{n}\n") for n in range(1, count + 1)
    }
    assert int(after.stdout) <= 4  # pid 1, sh, ps, wc: the crowd is gone


async def test_files_are_read_written_and_listed_as_the_trajectory_sees_them(
    instance: Instance,
) -> None:
    with anyio.fail_after(20):
        async with await instance.workspace("files") as ws:
            await ws.write_file("new/deep/file.txt", "content\n")
            seen = await ws.exec("cat new/deep/file.txt")
            names = [(e.name, e.kind) for e in await ws.list(".")]
            with pytest.raises(errors.NotFound):
                await ws.read_file("absent.txt")
            with pytest.raises(errors.LimitExceeded):
                await ws.read_file("blob.bin", max_bytes=4)
            assert await ws.read_file("blob.bin") == b"\x00\x01\x02binary\xff"
            # The workspace's own /proc: its init alone, no process of the host's or others'
            pids = [e.name for e in await ws.list("/proc") if e.name.isdigit()]
            assert pids == ["1"]
            host_files = await ws.exec("cat /etc/shadow; ls -A /etc/ssh /root; true")
    if instance.spec.path is not None:  # the host's secrets are not part of a local view
        assert host_files.stdout == "/etc/ssh:\n\n/root:\n"
    assert seen.stdout == "content\n"
    assert ("a.txt", "file") in names
    assert ("new", "dir") in names


async def test_a_write_says_the_size_of_the_file_it_replaced(instance: Instance) -> None:
    with anyio.fail_after(20):
        async with await instance.workspace("replaced") as ws:
            created = await ws.write_file("fresh.txt", "twelve bytes")
            replaced = await ws.write_file("fresh.txt", "x")
            over_the_repo_file = await ws.write_file("a.txt", "")
    assert (created, replaced, over_the_repo_file) == (None, 12, len("hello\n"))


async def test_reset_discards_every_change(instance: Instance) -> None:
    with anyio.fail_after(20):
        async with await instance.workspace("reset") as ws:
            await ws.exec("echo changed > a.txt; rm blob.bin; touch /tmp/left-behind")
            await ws.reset()
            after = await ws.exec("cat a.txt; test -e blob.bin && test ! -e /tmp/left-behind")
    assert (after.exit_code, after.stdout) == (0, "hello\n")


async def test_a_diff_applies_cleanly_to_a_fresh_checkout_of_the_base(instance: Instance) -> None:
    script = (
        "printf 'changed\\n' > a.txt && git rm -q pkg/mod.py && mkdir -p new && "
        "printf 'n\\n' > new/file.txt && printf '\\377\\000\\376more' > blob.bin && "
        "head -c 3000 /dev/urandom > new/random.bin && git mv -f a.txt renamed.txt && "
        "git config diff.noprefix true"  # a hostile config must not break the patch
    )
    fingerprint = "find . -path ./.git -prune -o -type f -print | sort | xargs sha256sum"
    with anyio.fail_after(30):
        async with await instance.workspace("edit") as ws:
            assert (await ws.exec(script)).exit_code == 0
            patch = await ws.diff()
            expected = (await ws.exec(fingerprint)).stdout
        async with await instance.workspace("fresh") as fresh:
            await fresh.write_file("/tmp/change.patch", patch.encode("utf-8", "surrogateescape"))
            applied = await fresh.exec("git apply --index /tmp/change.patch")
            got = (await fresh.exec(fingerprint)).stdout
    assert "GIT binary patch" in patch
    assert applied.exit_code == 0, applied.stderr
    assert got == expected
    if instance.spec.path is not None:  # and to a plain clone on the host, outside any sandbox
        with tempfile.TemporaryDirectory() as clone:
            await anyio.run_process(["git", "clone", "-q", instance.spec.path, clone])
            await anyio.run_process(["git", "checkout", "-q", str(instance.base_commit)], cwd=clone)
            check = await anyio.run_process(["git", "apply", "--check", "-"], cwd=clone,
                input=patch.encode("utf-8", "surrogateescape"), check=False)  # fmt: skip
            assert check.returncode == 0, check.stderr


async def test_fifty_concurrent_workspaces_writing_the_same_file_stay_independent(
    instance: Instance,
) -> None:
    seen: dict[int, str] = {}
    patches: dict[int, str] = {}

    async def trajectory(i: int) -> None:
        async with await instance.workspace(f"many-{i}") as ws:
            await ws.exec(f"echo writer-{i} > a.txt")
            seen[i] = (await ws.exec("cat a.txt")).stdout
            patches[i] = await ws.diff()

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(trajectory, i)
    assert seen == {i: f"writer-{i}\n" for i in range(50)}
    for i in range(50):
        assert f"+writer-{i}\n" in patches[i]
        assert patches[i].count("writer-") == 1


# --- isolation ---------------------------------------------------------------------------------


async def test_a_trajectory_cannot_see_or_signal_another_trajectorys_processes(
    instance: Instance,
) -> None:
    arg = marker()
    with anyio.fail_after(30):
        async with await instance.workspace("victim") as victim, anyio.create_task_group() as tg:
            tg.start_soon(victim.exec, started(arg))
            await wait_for_file(victim, "/tmp/started")
            (victim_pid,) = host_pids(arg)
            async with await instance.workspace("attacker") as attacker:
                attack = await attacker.exec(
                    f"ls /proc | grep -c '^[0-9]'; kill -9 {victim_pid}; kill -9 -1; "
                    "pkill -9 sleep; ps -eo comm | grep -cx sleep"
                )
            assert host_pids(arg) == [victim_pid]  # still alive after every attempt
            tg.cancel_scope.cancel()
        await wait_until_gone(arg)  # cancelling the exec killed the victim's sleep
    visible_pids, matches = attack.stdout.split()
    assert int(visible_pids) <= 4  # only the attacker's own shell and helpers
    assert int(matches) == 0  # no sleep of the victim in sight


async def test_a_trajectory_cannot_read_or_write_another_trajectorys_files(
    instance: Instance,
) -> None:
    secret = uuid.uuid4().hex
    places = "a.txt /tmp/secret /var/tmp/secret $HOME/secret /dev/shm/secret"
    with anyio.fail_after(30):
        async with await instance.workspace("owner") as owner:
            await owner.exec(f"for f in {places}; do echo {secret} > $f; done")
            async with await instance.workspace("thief") as thief:
                stolen = await thief.exec(
                    f"cat {places} 2>/dev/null; grep -rs {secret} /tmp /var/tmp /run /root "
                    f"/home /dev/shm . 2>/dev/null; for f in {places}; do echo x > $f; done"
                )
            kept = await owner.exec(f"cat {places}")
    assert secret not in stolen.stdout
    assert kept.stdout == f"{secret}\n" * 5


async def test_the_frozen_filesystem_cannot_be_changed(
    backend: BackendUnderTest, instance: Instance
) -> None:
    vandal = "rm -rf ./* .git; echo x > /etc/evs-evil; echo x > /usr/lib/evs-evil; true"
    with anyio.fail_after(30):
        async with await instance.workspace("vandal") as ws:
            await ws.exec(vandal)
            assert (await ws.exec("test -e a.txt")).exit_code == 1  # it did delete its copy
        async with await instance.workspace("after") as ws:
            after = await ws.exec("git status --porcelain; cat a.txt; ls /etc/evs-evil")
    assert after.stdout == "hello\n"
    assert after.exit_code != 0  # /etc/evs-evil does not exist
    if instance.spec.path is not None:  # the host directory itself is untouched
        with open(os.path.join(instance.spec.path, "a.txt")) as f:
            assert f.read() == "hello\n"
        assert not os.path.exists("/etc/evs-evil")


async def test_a_trajectory_cannot_reach_the_network_or_the_host_loopback(
    instance: Instance,
) -> None:
    probe = (
        "import socket, sys\n"
        "for addr in sys.argv[1:]:\n"
        "    host, port = addr.rsplit(':', 1)\n"
        "    try:\n"
        "        socket.create_connection((host, int(port)), timeout=2).close(); print('open')\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__)\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "socket.create_connection(s.getsockname(), timeout=2); print('own-loopback')\n"
    )
    with anyio.fail_after(30):
        async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            async with await instance.workspace("net") as ws:
                await ws.write_file("/tmp/probe.py", probe)
                result = await ws.exec(
                    ["python3", "/tmp/probe.py", f"127.0.0.1:{port}", "1.1.1.1:53"]
                )
    expected = ["ConnectionRefusedError", "OSError", "own-loopback"]
    assert result.stdout.split() == expected, result.stderr


async def test_host_unix_sockets_are_out_of_reach(instance: Instance) -> None:
    name = f"evs-{uuid.uuid4().hex[:12]}"
    paths = [f"/run/{name}.sock", f"/tmp/{name}.sock"]
    listeners = []
    for target in [*paths, f"\0{name}"]:  # the last one is an abstract socket
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(target)
        listener.listen()
        listeners.append(listener)
    probe = (
        "import socket, sys\n"
        "for target in sys.argv[1:]:\n"
        "    try:\n"
        "        socket.socket(socket.AF_UNIX).connect(target.replace('@', '\\0')); print('open')\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__)\n"
    )
    try:
        with anyio.fail_after(30):
            async with await instance.workspace("unix") as ws:
                result = await ws.exec(["python3", "-c", probe, *paths, f"@{name}"])
    finally:
        for listener in listeners:
            listener.close()
        for path in paths:
            os.unlink(path)
    assert result.stdout.split() == ["FileNotFoundError"] * 2 + ["ConnectionRefusedError"]


async def test_a_trajectory_cannot_mount_unmount_or_unshare(instance: Instance) -> None:
    attempts = [
        "mount -t tmpfs none /mnt",
        "umount -l /proc",
        "umount -l /tmp",
        "unshare -U true",
        "unshare -r true",
        "unshare -m true",
        "unshare -n true",
        "chroot / true",
        "python3 -c 'import ctypes,sys; sys.exit(ctypes.CDLL(None).unshare(0x10000000) != 0)'",
    ]
    with anyio.fail_after(30):
        async with await instance.workspace("mounter") as ws:
            results = [await ws.exec(cmd) for cmd in attempts]
            still = await ws.exec("cat /proc/self/status >/dev/null && ls /tmp >/dev/null")
    refused = [r.exit_code != 0 for r in results]
    assert refused == [True] * len(attempts), [r.stderr for r in results]
    assert still.exit_code == 0


async def test_a_command_cannot_write_the_sandboxs_report_of_its_own_exit(
    instance: Instance,
) -> None:
    # The exec's runner (same uid as the command) reports the command's status on its fd 3.
    # Were that reachable through /proc or ptrace, a test run could say it exited 0, or turn
    # its own failure into the harness's (an infrastructure error, retried). The runner is
    # outside the command's pid namespace (its parent pid reads 0), and pid 1 of that
    # namespace, the workspace's init, is not dumpable.
    forgeries = [
        "printf '{\"status\": 0}\\n' > /proc/1/fd/3",
        'printf \'{"error": "x", "kind": "InfrastructureError"}\\n\' > /proc/1/fd/3',
        "python3 -c 'import ctypes; print(ctypes.CDLL(None).ptrace(16, 1, 0, 0))'",  # ATTACH
        "echo $PPID; ls /proc/$PPID/fd 2>/dev/null",
    ]
    with anyio.fail_after(30):
        async with await instance.workspace("status-forger") as ws:
            results = [await ws.exec(f"{forgery}; exit 7") for forgery in forgeries]
    assert [r.exit_code for r in results] == [7, 7, 7, 7], [r.stderr for r in results]
    assert results[2].stdout == "-1\n"
    assert results[3].stdout == "0\n"


async def test_a_commands_stdio_blocks_though_the_sandboxs_ends_of_its_pipes_do_not(
    instance: Instance,
) -> None:
    # The supervisor reads and writes its ends of an exec's pipes without blocking; the
    # command's ends must still block, or a program writing more than a pipe holds (a test
    # suite's output) would fail with EAGAIN, and a status line forged on its own stdout
    # must stay output. The command reports its ends' flags, floods both streams past a pipe's
    # 64 KiB, reads a stdin larger than a pipe holds, and prints a status line of its own.
    script = (
        "import fcntl, os, sys\n"
        "flags = [fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK for fd in (0, 1, 2)]\n"
        "data = sys.stdin.buffer.read()\n"
        "os.write(2, b'e' * (1 << 18))\n"
        "sys.stdout.write(repr((flags, len(data))) + '\\n' + 'o' * (1 << 18) + '\\n')\n"
        "sys.stdout.write('{\"status\": 0}\\n')\n"
        "sys.exit(3)\n"
    )
    with anyio.fail_after(30):
        async with await instance.workspace("blocking-stdio") as ws:
            result = await ws.exec(["python3", "-c", script], stdin=b"i" * (1 << 18))
    assert result.exit_code == 3, result.stderr[-500:]
    first, flood, forged, rest = result.stdout.split("\n")
    assert (first, len(flood), forged, rest) == (
        f"([0, 0, 0], {1 << 18})",
        1 << 18,
        '{"status": 0}',
        "",
    )
    assert result.stderr == "e" * (1 << 18)


async def test_what_a_command_leaves_running_lasts_across_calls_until_the_workspace_goes(
    instance: Instance,
) -> None:
    # As in a container: `cmd &`, nohup, setsid and a double fork outlive their call, the
    # call still returns when its own command exits (they hold its stdout), and none of them
    # can forge the next command's status through the workspace's pid 1.
    left = marker()
    script = (
        f"sleep {left} & nohup sleep {left} >/dev/null 2>&1 & setsid sleep {left} & "
        f"(sleep {left} &); (echo '{{\"status\": 0}}' > /proc/1/fd/3) 2>/dev/null; echo left"
    )
    with anyio.fail_after(30):
        async with await instance.workspace("leaver") as ws:
            first = await ws.exec(script)
            after = await ws.exec(f"ps -eo args= | grep -cx 'sleep {left}'; exit 5")
            assert len(host_pids(left)) == 4
        await wait_until_gone(left)  # destroyed: every one of them, nothing left behind
    assert first.stdout == "left\n"
    assert first.duration_s < 10
    assert (after.exit_code, after.stdout) == (5, "4\n")  # its own status, not a forged one


async def test_a_server_started_by_one_call_answers_the_next_on_the_workspaces_loopback(
    instance: Instance,
) -> None:
    serve = (
        "import http.server, socketserver, sys\n"
        "class Hello(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'hello')\n"
        "    def log_message(self, *args):\n"
        "        sys.stderr.write('served\\n')\n"  # to the first call's stderr, long closed
        "server = socketserver.TCPServer(('127.0.0.1', 8000), Hello)\n"
        "open('/tmp/listening', 'w').close()\n"
        "server.serve_forever()\n"
    )
    fetch = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/').read())"
    with anyio.fail_after(30):
        async with (
            await instance.workspace("server") as ws,
            await instance.workspace("neighbour") as neighbour,
        ):
            await ws.write_file("/tmp/serve.py", serve)
            started_it = await ws.exec("python3 /tmp/serve.py & echo started")
            await wait_for_file(ws, "/tmp/listening")
            answers = [await ws.exec(["python3", "-c", fetch]) for _ in range(2)]
            interfaces = await ws.exec(
                ["python3", "-c", "import socket; print(*[n for _, n in socket.if_nameindex()])"]
            )
            elsewhere = await neighbour.exec(["python3", "-c", fetch])
    assert started_it.stdout == "started\n"
    assert [a.stdout for a in answers] == ["b'hello'\n"] * 2, answers  # a 2nd log line too
    assert interfaces.stdout.split() == ["lo"]
    assert elsewhere.exit_code != 0  # another workspace's loopback is its own


async def test_ending_a_workspaces_processes_keeps_its_files_and_its_next_commands(
    instance: Instance,
) -> None:
    # What a grader does before it runs the tests: nothing a step before left running lasts.
    arg = marker()
    with anyio.fail_after(30):
        async with await instance.workspace("ended") as ws:
            await ws.exec(f"echo kept > kept.txt; setsid sleep {arg} >/dev/null 2>&1 &")
            await wait_until_running(arg)
            await ws.end_processes()
            await wait_until_gone(arg)
            after = await ws.exec("cat kept.txt; ls /proc | grep -c '^[0-9]'")
    assert after.stdout == "kept\n4\n"  # pid 1, the shell, ls and grep


async def test_a_timeout_kills_the_commands_process_group_and_what_left_it_lasts(
    instance: Instance,
) -> None:
    in_group, away = [marker(), marker()], marker()
    script = (
        f"nohup sleep {in_group[0]} >/dev/null 2>&1 & (sleep {in_group[1]} &); "
        f"setsid sleep {away} >/dev/null 2>&1 & sleep {marker()}"
    )
    with anyio.fail_after(30):
        async with await instance.workspace("timed-out") as ws:
            result = await ws.exec(script, timeout=1)
            for arg in in_group:
                await wait_until_gone(arg)
            assert host_pids(away)  # a new session: lasting, as a daemon would be
        await wait_until_gone(away)
    assert result.timed_out


async def test_a_command_cannot_kill_stop_or_take_over_the_pid_1_that_reports_its_status(
    instance: Instance,
) -> None:
    attack = (
        "kill -STOP 1; kill -9 1; kill -TERM 1; kill -9 -1; "
        "cat /proc/1/environ /proc/1/mem; ls /proc/1/root/ /proc/1/fd/; exit 3"
    )
    with anyio.fail_after(30):
        async with await instance.workspace("pid1") as ws:
            attacked = await ws.exec(attack)
            next_one = await ws.exec("echo still here")
    assert attacked.exit_code == 3, attacked.stderr
    assert "Permission denied" in attacked.stderr
    assert next_one.stdout == "still here\n"


async def test_root_in_a_workspace_cannot_open_or_take_over_another_users_private_file(
    backend: BackendUnderTest,
) -> None:
    """A command is uid 0 without the capabilities that pass file modes (DAC_OVERRIDE,
    DAC_READ_SEARCH) or take a file over to pass them (CHOWN, FOWNER)."""
    private = "printf secret > other.key && chown 4242:4242 other.key && chmod 0600 other.key"
    with anyio.fail_after(120):
        instance = await backend.backend.instance(backend.spec(setup=(*REPO_SETUP, private)))
        try:
            async with await instance.workspace("modes") as ws:
                status = await ws.exec("grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status")
                tries = [
                    await ws.exec(command)
                    for command in (
                        "cat other.key",
                        "echo more >> other.key",
                        "chmod 0644 other.key",
                        "chown 0:0 other.key",
                    )
                ]
                owner = await ws.exec("stat -c '%u %a' other.key")
        finally:
            await instance.aclose()
    caps = {line.split(":")[0]: int(line.split()[1], 16) for line in status.stdout.splitlines()}
    assert sorted(caps) == ["CapBnd", "CapEff", "CapPrm"], status
    assert caps["CapBnd"] == caps["CapEff"] == caps["CapPrm"] == 0, {
        k: hex(v) for k, v in caps.items()
    }
    assert [t.exit_code != 0 for t in tries] == [True] * 4, tries
    assert "secret" not in tries[0].stdout
    assert owner.stdout == "4242 600\n"


async def test_each_command_gets_its_own_user_and_limits_not_the_last_ones(
    instance: Instance,
) -> None:
    with anyio.fail_after(30):
        async with await instance.workspace("users") as ws:
            seen = [
                await ws.exec("id -u; ulimit -n 7; ulimit -n", user="nobody"),
                await ws.exec("id -u; ulimit -n"),
                await ws.exec("id -u", user="nobody"),
            ]
    assert [r.stdout.split() for r in seen] == [["65534", "7"], ["0", seen[1].stdout.split()[1]],
                                                ["65534"]]  # fmt: skip
    assert seen[1].stdout.split()[1] != "7"


async def test_a_report_channel_returns_what_was_written_and_counts_its_writers(
    instance: Instance,
) -> None:
    # The shell writes, then a subshell (another process); opening the channel by a path of
    # the view fails (a socket cannot be opened through /proc); a command asked without a
    # channel has nothing at that descriptor.
    script = (
        f"printf one >&{REPORT_FD}; (printf two >&{REPORT_FD}); "
        f"printf forged 2>/dev/null > /proc/self/fd/{REPORT_FD} && echo reopened; true"
    )
    with anyio.fail_after(30):
        async with await instance.workspace("reporter") as ws:
            reported = await ws.exec(script, report=True)
            plain = await ws.exec(f"[ -e /proc/self/fd/{REPORT_FD} ] || echo none")
    assert (reported.exit_code, reported.stdout) == (0, ""), reported.stderr
    assert (reported.report, reported.report_writers) == (b"onetwo", 2)
    assert not reported.report_truncated
    assert (plain.stdout, plain.report) == ("none\n", None)


async def test_each_command_holds_its_own_stdio_and_nothing_of_the_sandbox_or_the_last_exec(
    instance: Instance,
) -> None:
    """An agent looks among its descriptors for what the sandbox handed over with its command
    (the request, the status pipe) or what the command before left: one runner takes exec
    after exec, so each command must start with fresh stdio pipes (and its report channel
    when asked) and nothing else, whichever way its descriptors reached it."""
    look = "ls -l /proc/$$/fd"  # the shell's, listed by a child: no pipe or file between them
    with anyio.fail_after(30):
        async with await instance.workspace("descriptors") as ws:
            seen = [await ws.exec(look), await ws.exec(look)]
            seen += [await ws.exec(look, report=True), await ws.exec(look)]
    held = [
        dict(line.split()[-3::2] for line in result.stdout.splitlines() if " -> " in line)
        for result in seen
    ]
    assert [sorted(fds) for fds in held] == [["0", "1", "2"]] * 2 + [["0", "1", "2", "4"]] + [
        ["0", "1", "2"]
    ], [r.stdout for r in seen]
    assert held[2]["4"].startswith("socket:")
    stdio = [[fds[fd] for fd in "012"] for fds in held]
    assert all(target.startswith("pipe:") for pipes in stdio for target in pipes), stdio
    for before, after in itertools.pairwise(stdio):  # no pipe of one reaches the next
        assert not set(before) & set(after), stdio


def live_children(pid: int) -> dict[int, bool]:
    """The live (not zombie) children of host process `pid`: whether each is pid 1 of a pid
    namespace of its own (a workspace's init)."""
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            with open(f"/proc/{entry}/status") as f:
                nspid = next(line for line in f if line.startswith("NSpid:")).split()
        except (OSError, StopIteration):
            continue
        if int(ppid) == pid and state != "Z":
            found[int(entry)] = nspid[-1] == "1"
    return found


@pytest.mark.backends("local")
async def test_a_workspace_idle_after_its_commands_keeps_no_process_but_its_init(
    instance: Instance,
) -> None:
    """What ran an exec beside the workspace's init (the compiled holder keeps a runner for
    the next exec a while) goes once the workspace is idle: ten thousand idle workspaces
    must not hold twice as many processes. A runner's word that its exec ended no longer
    wakes the holder; it must still be heard."""
    with anyio.fail_after(30):
        async with await instance.workspace("idle") as ws:
            for _ in range(3):
                assert (await ws.exec("true")).exit_code == 0
            assert isinstance(ws, SupervisedWorkspace)
            holder = holder_of(ws)
            while others := [pid for pid, init in live_children(holder).items() if not init]:
                for pid in others:
                    with contextlib.suppress(ProcessLookupError):
                        fd = os.pidfd_open(pid)
                        try:
                            await anyio.wait_readable(fd)
                        finally:
                            os.close(fd)
            assert list(live_children(holder).values()) == [True]
            assert (await ws.exec("true")).exit_code == 0  # and the next exec gets a runner


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
                out.append(base64.b64decode(reply["stdout_b64"]).decode())
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


def test_the_supervisor_source_is_stdlib_only_python_38() -> None:
    from mcp_evalserver.sandbox.client import SUPERVISOR_FILES

    # Its own files find one another relatively: a package here, a folder in an instance.
    assert {f.name for f in SUPERVISOR_FILES} >= {"__init__.py", "__main__.py", "protocol.py"}
    for source in SUPERVISOR_FILES:
        tree = ast.parse(source.read_text(), feature_version=(3, 8))
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for alias in node.names}  # fmt: skip
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and not node.level
                     and node.module}  # fmt: skip
        assert imported <= sys.stdlib_module_names, source.name


def test_the_supervisor_serves_every_operation_of_its_protocol_and_no_other() -> None:
    from mcp_evalserver.sandbox.client import _ERROR_TYPES
    from mcp_evalserver.sandbox.supervisor import protocol
    from mcp_evalserver.sandbox.supervisor.loop import OPERATIONS

    assert set(OPERATIONS) == set(protocol.OPS) == set(protocol.MESSAGES)
    assert set(_ERROR_TYPES) == set(protocol.ERROR_TYPES)


# --- local backend only ------------------------------------------------------------------------


def python_for(uid: int) -> str | None:
    """An interpreter that user `uid` may run (the venv's may live under /root)."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        probe = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", candidate]
        if subprocess.run([*probe, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.mark.root
@pytest.mark.parametrize("holder", ["native", "python"])
async def test_an_unprivileged_supervisor_isolates_through_a_user_namespace(holder: str) -> None:
    """The local backend's supervisor run as `nobody`, with either holder: either it isolates,
    or it says why not."""
    import shutil

    from anyio.streams.stapled import StapledByteStream

    from mcp_evalserver.sandbox.base import InstanceSpec
    from mcp_evalserver.sandbox.client import SUPERVISOR_SOURCE
    from mcp_evalserver.sandbox.native import holder_binary
    from mcp_evalserver.sandbox.supervised import SupervisedInstance

    from .conftest import REPO_SETUP

    nobody = 65534
    python = python_for(nobody)
    if python is None:
        pytest.skip("no python3 here that uid 65534 may run")
    with tempfile.TemporaryDirectory(prefix="evs-nobody-") as tmp:
        os.chmod(tmp, 0o755)
        repo, store = os.path.join(tmp, "repo"), os.path.join(tmp, "store")
        for path in (repo, store):
            os.mkdir(path)
            os.chown(path, nobody, nobody)
        binary = None
        if holder == "native":  # where nobody may run it (the build cache is root's)
            built = holder_binary()
            assert built is not None
            binary = shutil.copy(built, os.path.join(tmp, "holder"))
            os.chmod(binary, 0o755)
        command = ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups",
                   python, "-I", "-S", str(SUPERVISOR_SOURCE)]  # fmt: skip
        process = await anyio.open_process(command)
        assert process.stdin is not None
        assert process.stdout is not None
        async with process, anyio.create_task_group() as tg:
            client = SupervisorClient(StapledByteStream(process.stdin, process.stdout))
            await client.start(tg)
            with pytest.raises(errors.InvalidInput, match="takes no other connection"):
                await client.open_connection()  # pipes, no channel: nothing can be passed
            with anyio.fail_after(60):
                try:
                    instance = await SupervisedInstance.open(
                        client, InstanceSpec(path=repo, setup=REPO_SETUP),
                        mode="host", store=store, store_tmpfs=True, holder=binary,
                    )  # fmt: skip
                except errors.SandboxUnavailable as e:  # user namespaces refused here
                    refusal = str(e)
                    await client.aclose()
                else:
                    refusal = ""
                    async with (
                        instance,
                        await instance.workspace("a") as a,
                        await instance.workspace("b") as b,
                    ):
                        wrote = await a.exec("echo mine > a.txt; touch /etc/evs-x; unshare -U true")
                        other = await b.exec("cat a.txt; ps -e | wc -l")
                        patch = await a.diff()
        if refusal:
            assert "user namespaces" in refusal
            return
        with open(os.path.join(repo, "a.txt")) as f:
            assert f.read() == "hello\n"  # the host directory is the frozen lower
    assert instance.info["holder"] == holder
    assert "Read-only file system" in wrote.stderr
    assert "Operation not permitted" in wrote.stderr
    assert other.stdout.split()[0] == "hello"
    assert int(other.stdout.split()[1]) <= 5  # header, init, sh, ps, wc: nothing of a's
    assert "+mine" in patch
