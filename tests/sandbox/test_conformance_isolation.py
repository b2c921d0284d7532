"""Conformance of every sandbox backend: isolation, proven by real attacks (one trajectory
against another, the frozen tree, the network, the host, the process that reports a
status), and the local backend's unprivileged supervisor.

Each test runs against each param of the `backend` fixture (see conftest.py). Waits are
bounded with `anyio.fail_after`; nothing sleeps. Host-side checks read the host's /proc,
which sees every sandboxed process of a local or docker backend on this machine.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import subprocess
import sys
import tempfile
import uuid

import anyio
import pytest

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import REPORT_FD, Instance
from mcp_evalserver.sandbox.client import SupervisorClient
from mcp_evalserver.sandbox.supervised import SupervisedWorkspace

from .conformance_support import started, wait_for_file
from .conftest import REPO_SETUP, BackendUnderTest
from .faults import holder_of
from .host_processes import host_pids, marker, wait_until_gone, wait_until_running

pytestmark = pytest.mark.anyio


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
    # It returns once all four really run (exec'd: their own command lines), as `started`
    # does: a child forked but not yet exec'd is not one the next call's `ps` could count.
    running = f"[ \"$(ps -eo args= | grep -cx 'sleep {left}')\" = 4 ]"
    script = (
        f"sleep {left} & nohup sleep {left} >/dev/null 2>&1 & setsid sleep {left} & "
        f"(sleep {left} &); (echo '{{\"status\": 0}}' > /proc/1/fd/3) 2>/dev/null; "
        f"until {running}; do :; done; echo left"
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
            # Counted by the shell's own glob: `ls /proc | grep` could list /proc before the
            # shell had forked grep (seen once in CI: 3 where 4 were meant).
            after = await ws.exec("cat kept.txt; set -- /proc/[0-9]*; echo $#")
    assert after.stdout == "kept\n2\n"  # pid 1 and the shell


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
