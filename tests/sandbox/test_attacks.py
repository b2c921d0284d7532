"""Attacks on the host from inside a trajectory: terminal, keyring, kernel calls, device inodes.

Each test runs against each param of the `backend` fixture (see conftest.py), as a misbehaving
agent would attack: through its commands and through the file tools. Waits are bounded with
`anyio.fail_after`; nothing sleeps.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import Instance

pytestmark = pytest.mark.anyio

# Numbers from the kernel's syscall tables, written out here so that a wrong number in the
# supervisor's filter cannot make this test agree with it.
SYSCALLS = {
    "x86_64": {"keyctl": 250, "add_key": 248, "request_key": 249, "io_uring_setup": 425,
               "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": 323,
               "perf_event_open": 298, "bpf": 321, "open_by_handle_at": 304,
               "name_to_handle_at": 303, "kexec_load": 246, "init_module": 175,
               "personality": 135, "ioctl": 16, "migrate_pages": 256, "socket": 41},
    "aarch64": {"keyctl": 219, "add_key": 217, "request_key": 218, "io_uring_setup": 425,
                "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": 282,
                "perf_event_open": 241, "bpf": 280, "open_by_handle_at": 265,
                "name_to_handle_at": 264, "kexec_load": 104, "init_module": 105,
                "personality": 92, "ioctl": 29, "migrate_pages": 238, "socket": 198},
}  # fmt: skip

# Calls each refused one with arguments it would otherwise accept (or fail on for another
# reason than EPERM), and prints "name errno" per call.
SYSCALL_PROBE = """
import ctypes, json, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
nrs = json.loads(sys.argv[1])
buf = ctypes.create_string_buffer(4096)
calls = {
    "keyctl": (0, -4, 0),  # KEYCTL_GET_KEYRING_ID of the user keyring: the host user's
    "add_key": (b"user", b"evs-planted", b"secret", 6, -4),
    "request_key": (b"user", b"evs-planted", None, -4),
    "io_uring_setup": (4, buf),
    "io_uring_enter": (0, 0, 0, 0, None, 0),
    "io_uring_register": (0, 0, None, 0),
    "userfaultfd": (0,),
    "perf_event_open": (buf, 0, -1, -1, 0),
    "bpf": (0, buf, 64),
    "open_by_handle_at": (-100, buf, 0),
    "name_to_handle_at": (-100, b"/", buf, buf, 0),
    "kexec_load": (0, 0, None, 0),
    "init_module": (buf, 16, b""),
    "personality": (0x0040000,),  # ADDR_NO_RANDOMIZE: Docker allows only a few personas
    "migrate_pages": (0, 64, buf, buf),
    "socket": (40, 1, 0),  # AF_VSOCK, SOCK_STREAM: the hypervisor, past every namespace
}
for name, args in calls.items():
    ctypes.set_errno(0)
    ret = libc.syscall(ctypes.c_long(nrs[name]), *args)
    print(name, ctypes.get_errno() if ret == -1 else "ok")
ret = libc.syscall(ctypes.c_long(nrs["ioctl"]), 0, 0x5412, b"x")  # TIOCSTI on stdin
print("TIOCSTI", ctypes.get_errno() if ret == -1 else "ok")
ret = libc.syscall(ctypes.c_long(nrs["ioctl"]), 0, 0x541C, buf)  # TIOCLINUX
print("TIOCLINUX", ctypes.get_errno() if ret == -1 else "ok")
"""


async def test_a_command_runs_in_a_session_of_its_own_without_a_terminal(
    instance: Instance,
) -> None:
    probe = (
        "import os\n"
        "print(os.getsid(0) == os.getpid())\n"
        "try:\n"
        "    open('/dev/tty', 'wb')\n"
        "    print('tty-opened')\n"
        "except OSError as e:\n"
        "    print(e.errno)\n"
    )
    with anyio.fail_after(20):
        async with await instance.workspace("session") as ws:
            result = await ws.exec(["python3", "-c", probe])
    assert result.stdout.split() == ["True", str(errno.ENXIO)], result.stderr


async def test_calls_dockers_default_profile_refuses_are_refused(instance: Instance) -> None:
    nrs = SYSCALLS.get(platform.machine())
    if nrs is None:
        pytest.fail(f"no syscall numbers for {platform.machine()} in this test: add them")
    with anyio.fail_after(20):
        async with await instance.workspace("syscalls") as ws:
            result = await ws.exec(["python3", "-c", SYSCALL_PROBE, json.dumps(nrs)])
    outcome = dict(line.split() for line in result.stdout.splitlines())
    assert result.exit_code == 0, result.stderr
    assert outcome == {name: str(errno.EPERM) for name in outcome}
    assert len(outcome) == len(nrs) + 1  # every call was tried, ioctl twice (not as a name)


async def test_no_command_can_gain_privileges_through_execve_whoever_it_runs_as(
    instance: Instance,
) -> None:
    # A setuid-root program or one with file capabilities would lift a command above the
    # capabilities it was left with. Every mount of the view is nosuid, but a command must
    # also carry no_new_privs and the seccomp filter, as root or as another user, on every
    # command its workspace serves (the compiled holder's runner takes both once, and its
    # commands inherit them).
    probe = "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\t' | tr '\n' ' '"
    with anyio.fail_after(30):
        async with await instance.workspace("privileges") as ws:
            seen = [
                (await ws.exec(probe, user=user)).stdout
                for user in (None, "nobody", None, "nobody")
            ]
    assert seen == ["NoNewPrivs:1 Seccomp:2 "] * 4


async def test_device_nodes_cannot_be_changed_and_still_work(instance: Instance) -> None:
    vandal = (
        "chmod 000 /dev/null; chown 65534 /dev/null; chmod 000 /dev/zero; "
        "mknod /dev/evs-mem c 1 1; ln -s /proc/1/root /dev/evs-link; rm -f /dev/urandom; "
        "echo x > /dev/evs-file; stat -c '%a %u' /dev/null /dev/zero; ls /dev | sort"
    )
    host_before = {name: os.stat(f"/dev/{name}") for name in ("null", "zero", "urandom")}
    try:
        with anyio.fail_after(20):
            async with await instance.workspace("devices") as ws:
                vandalised = await ws.exec(vandal)
                works = await ws.exec("echo gone > /dev/null && head -c 4 /dev/zero | wc -c")
            async with await instance.workspace("devices-after") as ws:
                after = await ws.exec("stat -c '%a %u' /dev/null /dev/zero; ls /dev | sort")
    finally:
        for name, before in host_before.items():  # if the attack did get through, undo it
            os.chmod(f"/dev/{name}", stat.S_IMODE(before.st_mode))
            os.chown(f"/dev/{name}", before.st_uid, before.st_gid)
    for name, before in host_before.items():
        now = os.stat(f"/dev/{name}")
        assert (now.st_mode, now.st_uid) == (before.st_mode, before.st_uid), name
    expected = "666 0\n666 0\n"
    assert vandalised.stdout.startswith(expected), vandalised.stdout
    listing = vandalised.stdout.removeprefix(expected).split()
    assert not {"evs-mem", "evs-link", "evs-file"} & set(listing)
    assert "urandom" in listing
    assert works.stdout == "4\n"
    assert after.stdout == vandalised.stdout


async def test_file_tools_refuse_devices_fifos_and_sockets(instance: Instance) -> None:
    make = (
        'mkfifo /tmp/fifo && python3 -c "import socket; '
        "socket.socket(socket.AF_UNIX).bind('/tmp/sock')\" && ln -s /dev/zero /tmp/zero-link"
    )
    refusals: dict[str, str] = {}
    with anyio.fail_after(30):
        async with await instance.workspace("special") as ws:
            assert (await ws.exec(make)).exit_code == 0
            for path in ("/tmp/fifo", "/tmp/sock", "/dev/null", "/dev/tty", "/tmp/zero-link"):
                with pytest.raises(errors.InvalidInput) as read:
                    await ws.read_file(path)
                with pytest.raises(errors.InvalidInput) as written:
                    await ws.write_file(path, "attack\n")
                refusals[path] = f"{read.value} | {written.value}"
            still = await ws.exec("test -p /tmp/fifo && test -S /tmp/sock && echo intact")
    assert "is a FIFO" in refusals["/tmp/fifo"]
    assert "is a socket" in refusals["/tmp/sock"]
    assert "is a character device" in refusals["/dev/null"]
    assert "is a character device" in refusals["/tmp/zero-link"]
    assert all("regular files only" in text for text in refusals.values()), refusals
    assert still.stdout == "intact\n"


# Writes as much as it can (up to `limit` bytes) at every mount point of its view that is a
# directory, keeping what it wrote; prints the total.
FILL_EVERY_MOUNT = """
import os, sys
limit, chunk, total = int(sys.argv[1]), b"x" * (1 << 20), 0
points = {line.split()[4] for line in open("/proc/self/mountinfo")}
for number, point in enumerate(sorted(points)):
    if point.startswith("/proc") or not os.path.isdir(point):
        continue
    try:
        with open(os.path.join(point, f"evs-fill-{number}"), "wb", buffering=0) as f:
            while total < limit * 4:
                total += f.write(chunk)
    except OSError:
        pass
print(total)
"""


async def test_every_byte_written_counts_against_the_disk_cap_whatever_mount_it_lands_on(
    limited: Instance,
) -> None:
    """The old local view had RAM-backed masks (/run, /etc/ssh, ...) beside the capped upper."""
    cap = limited.spec.disk_bytes
    assert cap is not None
    with anyio.fail_after(60):
        async with await limited.workspace("fill-every-mount") as ws:
            filled = await ws.exec(["python3", "-c", FILL_EVERY_MOUNT, str(cap)])
    assert filled.exit_code == 0, filled.stderr
    assert cap // 2 < int(filled.stdout) <= cap


async def test_masks_over_proc_cannot_have_their_metadata_changed(instance: Instance) -> None:
    """/proc/keys and friends were masked by binding /dev/null, writable: chmod changed it."""
    null_before = os.stat("/dev/null")
    with anyio.fail_after(20):
        async with await instance.workspace("proc-masks") as ws:
            changed = await ws.exec(
                "for f in /proc/keys /proc/timer_list /proc/sched_debug /proc/latency_stats; do "
                "test -e $f || continue; echo $f; chmod 0666 $f && echo changed; wc -c < $f; done"
            )
    assert "changed" not in changed.stdout, changed.stdout
    assert "/proc/timer_list\n0\n" in changed.stdout  # there, masked, empty
    assert os.stat("/dev/null").st_ctime_ns == null_before.st_ctime_ns


@pytest.mark.root
async def test_the_operators_terminal_is_out_of_reach() -> None:
    """A local backend run from a terminal: nothing of a trajectory's reaches that terminal."""
    script = Path(__file__).with_name("terminal_attack.py")
    master, slave = os.openpty()
    try:
        with tempfile.TemporaryDirectory(prefix="evs-tty-") as instance_dir:
            with anyio.fail_after(60):
                done = await anyio.to_thread.run_sync(
                    lambda: subprocess.run(
                        [sys.executable, str(script), str(slave), instance_dir],
                        pass_fds=[slave],
                        capture_output=True,
                        text=True,
                        timeout=60,
                        check=False,
                    )
                )
        os.close(slave)
        slave = -1
        seen = b""
        os.set_blocking(master, False)
        while True:
            try:
                chunk = os.read(master, 4096)
            except (BlockingIOError, OSError):  # EIO: the terminal has no other end left
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.splitlines()[-1])
    assert b"PWNED" not in seen, (seen, outcome)
    assert outcome["write_file"].startswith("InvalidInput"), outcome


# --- the info pipe: the one pipe an exec's runner writes its output and status on ----------
# A status frame as the runner writes one (exec_init.FRAME): kind "j", length, a JSON line.
FORGED_STATUS = b'j\x00\x00\x00\x0e{"status": 0}\n'
# Run by the command's shell: looks for a pipe it may write to that is not its own stdio, in
# every fd /proc shows it (its own, the shell's, the shell's parent's, every process it can
# see), and writes a forged status to each; prints the shell's parent pid and what it hit.
INFO_PIPE_HUNT = f"""
import os
forged = {FORGED_STATUS!r}
mine = {{os.readlink(f"/proc/self/fd/{{fd}}") for fd in (0, 1, 2)}}
with open(f"/proc/{{os.getppid()}}/stat") as stat:
    grandparent = stat.read().rsplit(")", 1)[1].split()[1]
hits = []
for pid in ["self", str(os.getppid()), grandparent, *filter(str.isdigit, os.listdir("/proc"))]:
    try:
        fds = os.listdir(f"/proc/{{pid}}/fd")
    except OSError:
        continue
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{{pid}}/fd/{{fd}}")
            if target in mine or not target.startswith(("pipe:", "anon_inode:", "socket:")):
                continue
            writer = os.open(f"/proc/{{pid}}/fd/{{fd}}", os.O_WRONLY | os.O_NONBLOCK)
            os.write(writer, forged)
            hits.append(f"{{pid}}/{{fd}} {{target}}")
        except OSError:
            continue
print(grandparent, hits)
"""


async def test_a_command_finds_no_info_pipe_to_forge_its_status_on(instance: Instance) -> None:
    # The runner relays the command's output and status on one pipe: a command that could
    # write there could say it exited 0, or pass stderr off as stdout. It looks through its
    # own fds, its parent's (outside its pid namespace: 0) and every process it sees (the
    # workspace's init is not dumpable), with stdin given or not, and its real exit code and
    # output still come back.
    hunt = ["sh", "-c", 'python3 -c "$0"; exit 7', INFO_PIPE_HUNT]
    with anyio.fail_after(30):
        async with await instance.workspace("info-pipe-hunt") as ws:
            hunts = [await ws.exec(hunt, stdin=stdin) for stdin in (None, b"given")]
    assert [(h.exit_code, h.stdout) for h in hunts] == [(7, "0 []\n")] * 2, hunts


async def test_output_that_mimics_the_runners_frames_comes_back_as_it_was_printed(
    instance: Instance,
) -> None:
    # The runner frames the command's output (kind, length, bytes) on the pipe it reports
    # the status on: a command printing frames of its own, a status line, a length that
    # claims more than follows, gets those bytes back verbatim on the stream it wrote them
    # to, and its real exit code.
    mimic = (
        "import os, sys\n"
        f"forged = {FORGED_STATUS!r} + b'o\\x00\\x00\\x00\\x05hello' + b'{{\"status\": 0}}\\n'\n"
        "os.write(1, forged + b'j\\x00\\x00\\x7f\\x7f')\n"
        "os.write(2, b'e\\x00\\x00\\x00\\x03err' + forged)\n"
        "sys.exit(5)\n"
    )
    forged = FORGED_STATUS.decode() + 'o\x00\x00\x00\x05hello{"status": 0}\n'
    with anyio.fail_after(30):
        async with await instance.workspace("frame-mimic") as ws:
            result = await ws.exec(["python3", "-c", mimic])
            after = await ws.exec("echo next")
    assert (result.exit_code, result.stdout, result.stderr) == (
        5,
        forged + "j\x00\x00\x7f\x7f",
        "e\x00\x00\x00\x03err" + forged,
    )
    assert (after.exit_code, after.stdout) == (0, "next\n")


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
async def test_a_writer_left_flooding_the_commands_output_neither_stalls_the_next_calls_nor_dies(
    instance: Instance, stream: str
) -> None:
    # A command leaves `yes` writing to its stdout (or stderr) as fast as it can. The call
    # returns when the command exits, with at most its cap; the calls after it run as if
    # nothing wrote (none of the flood reaches them), and the writer lives on: what it
    # writes is read and dropped, never left to fill the pipe or break it under it.
    redirect = "" if stream == "stdout" else " >&2"
    with anyio.fail_after(60):
        async with await instance.workspace(f"flood-{stream}") as ws:
            first = await ws.exec(f"yes{redirect} & echo $! > /tmp/writer", output_cap=4096)
            nexts = [await ws.exec("echo next", output_cap=4096) for _ in range(20)]
            alive = await ws.exec("kill -0 $(cat /tmp/writer) && echo alive")
    assert first.exit_code == 0
    assert [(n.exit_code, n.stdout, n.stderr) for n in nexts] == [(0, "next\n", "")] * 20
    assert (alive.exit_code, alive.stdout) == (0, "alive\n"), alive
