"""Workspaces whose commands keep the capabilities Docker gives a container (Harbor tasks:
`InstanceSpec.capabilities="container"`): what a task written for a container does works, and
every isolation attack still fails, with the new ones those capabilities invite.

Each test runs on every param of the `backend` fixture (see conftest.py). Waits are bounded
with `anyio.fail_after`; nothing sleeps.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import anyio
import pytest

from mcp_evalserver.sandbox.base import Instance

from . import conformance_support
from . import test_attacks as attacks
from . import test_conformance_isolation as conformance_isolation
from .conftest import LIMITED, BackendUnderTest
from .host_processes import host_pids, marker, wait_until_gone, wait_until_running
from .test_forks import ATTACKS, LIMIT_ATTACKS, Attack

pytestmark = pytest.mark.anyio

# Docker's default set (moby's oci/caps/defaults.go), as /proc/PID/status prints it.
DOCKER_DEFAULT_CAPS = "00000000a80425fb"


@pytest.fixture(scope="module")
async def capable(backend: BackendUnderTest) -> AsyncIterator[Instance]:
    with anyio.fail_after(60):
        instance = await backend.backend.instance(backend.spec(capabilities="container"))
    yield instance
    await instance.aclose()


@pytest.fixture(scope="module")
async def capable_limited(backend: BackendUnderTest) -> AsyncIterator[Instance]:
    with anyio.fail_after(60):
        instance = await backend.backend.instance(backend.spec(capabilities="container", **LIMITED))
    yield instance
    await instance.aclose()


# --- what a container's task does ---------------------------------------------------------------


async def test_a_container_tasks_commands_chown_su_and_serve_on_port_80(capable: Instance) -> None:
    # What nginx and apt need: chown to a service user, switch to it (setgroups, setuid),
    # bind a privileged port; as in `docker run`.
    serve = (
        "import os, socket\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', 80)); s.listen()\n"
        "os.setgroups([]); os.setgid(33); os.setuid(33)\n"  # nginx's worker, as www-data
        "open('/tmp/up', 'w').close()\n"
        "while True:\n"
        "    c, _ = s.accept(); c.sendall(b'uid %d' % os.getuid()); c.close()\n"
    )
    fetch = "import socket; print(socket.create_connection(('127.0.0.1', 80)).recv(64))"
    with anyio.fail_after(30):
        async with await capable.workspace("container-task") as ws:
            caps = await ws.exec("grep CapEff /proc/self/status")
            owned = await ws.exec(
                "mkdir -p svc/body && chown 33:33 svc/body && stat -c %u:%g svc/body"
            )
            switched = await ws.exec("su -s /bin/sh nobody -c 'id -u; id -g'")
            await ws.write_file("/tmp/serve.py", serve)
            await ws.exec("python3 /tmp/serve.py >/dev/null 2>&1 &")
            await conformance_support.wait_for_file(ws, "/tmp/up")
            served = await ws.exec(["python3", "-c", fetch])
    assert caps.stdout.split() == ["CapEff:", DOCKER_DEFAULT_CAPS]
    assert owned.stdout == "33:33\n"
    assert switched.stdout == "65534\n65534\n"
    assert served.stdout == "b'uid 33'\n"


@pytest.mark.backends("docker")  # an image's own apt (the local view has no /var)
async def test_apt_drops_to_its_own_user_as_in_a_container_and_not_without_the_option(
    capable: Instance, instance: Instance
) -> None:
    # Terminal-Bench's failure (issue 40): without capabilities apt's download methods cannot
    # become `_apt` ("setgroups 65534 failed"). With them apt gets as far as the network,
    # which a workspace does not have: the rest of `apt-get install` is the engine's mirror.
    # No retry: each waits a backoff (7 s in all) for a network that never comes, and the
    # first download method drops to `_apt` (or fails to) as any later one would.
    update = "apt-get update -o Acquire::Retries=0 2>&1 | grep -cE 'set(e?uid|groups).*failed'"
    with anyio.fail_after(120):
        async with await capable.workspace("apt") as ws:
            with_caps = await ws.exec(update, timeout=100)
        async with await instance.workspace("apt-plain") as ws:
            without = await ws.exec(update, timeout=100)
    assert with_caps.stdout == "0\n"
    assert int(without.stdout) > 0


async def test_a_task_without_the_option_keeps_no_capability(instance: Instance) -> None:
    with anyio.fail_after(30):
        async with await instance.workspace("plain") as ws:
            caps = await ws.exec("grep -E '^Cap(Eff|Bnd)' /proc/self/status")
            chown = await ws.exec("chown 33 a.txt")
    assert caps.stdout.split() == ["CapEff:", "0" * 16, "CapBnd:", "0" * 16]
    assert chown.exit_code != 0


# --- the attacks the added capabilities invite --------------------------------------------------


async def test_chown_and_chmod_of_a_shared_file_reach_neither_the_instance_nor_a_neighbour(
    capable: Instance,
) -> None:
    vandal = (
        "chown 4242:4242 a.txt .git/config /etc/passwd; chmod 0600 a.txt; chmod 4777 /bin/sh; "
        "chown 4242 /usr/bin/env; stat -c '%u %a' a.txt"
    )
    probe = "stat -c '%u %a' a.txt .git/config /etc/passwd /bin/sh /usr/bin/env"
    with anyio.fail_after(30):
        async with await capable.workspace("owner") as attacker:
            done = await attacker.exec(vandal)
            async with await capable.workspace("bystander") as bystander:
                seen = await bystander.exec(probe)
        async with await capable.workspace("later") as later:
            after = await later.exec(probe)
    assert done.stdout == "4242 600\n"  # its own copy changed
    assert "4242" not in seen.stdout
    assert "600" not in seen.stdout.split()
    assert after.stdout == seen.stdout
    if capable.spec.path is not None:  # the host's files themselves
        st = os.stat(os.path.join(capable.spec.path, "a.txt"))
        assert (st.st_uid, st.st_mode & 0o777) == (0, 0o644)
        assert os.stat("/usr/bin/env").st_uid == 0


async def test_setuid_binaries_grant_nothing_even_made_by_root_with_every_added_capability(
    capable: Instance,
) -> None:
    make = "cp $(command -v python3) /tmp/py && chown 0:0 /tmp/py && chmod 4755 /tmp/py"
    probe = "/tmp/py -c 'import os; print(os.geteuid())'"
    with anyio.fail_after(30):
        async with await capable.workspace("setuid") as ws:
            made = await ws.exec(f"{make} && stat -c %a /tmp/py")
            as_nobody = await ws.exec(probe, user="nobody")
            through_su = await ws.exec(f'su -s /bin/sh nobody -c "{probe}"')
    assert made.stdout == "4755\n"
    assert as_nobody.stdout == "65534\n"  # nosuid mounts and no_new_privs: still nobody
    assert through_su.stdout == "65534\n"


async def test_a_device_node_made_with_mknod_cannot_be_opened(capable: Instance) -> None:
    # The host's disks (SCSI/SATA, virtio, NVMe, device-mapper, loop) and memory: nodes can
    # be made in the workspace's own files, as in a container, but every mount is nodev.
    nodes = {"sd": "b 8 0", "vd": "b 254 0", "nvme": "b 259 0", "dm": "b 253 0",
             "loop": "b 7 0", "mem": "c 1 1", "kmsg": "c 1 11", "port": "c 1 4"}  # fmt: skip
    script = "".join(
        f"mknod {where}/{name} {spec} && (head -c 1 {where}/{name} >/dev/null 2>&1 && echo "
        f"opened {where}/{name}); "
        for where in ("/tmp", ".", "/root")
        for name, spec in nodes.items()
    )
    with anyio.fail_after(30):
        async with await capable.workspace("mknod") as ws:
            made = "".join(f"test -b /tmp/{n} -o -c /tmp/{n} && echo {n}; " for n in nodes)
            result = await ws.exec(script + f"({made}) | wc -l")
    assert "opened" not in result.stdout
    assert result.stdout.split()[-1] == str(len(nodes))  # they were made: mknod is kept


async def test_raw_sockets_reach_nothing_beyond_the_workspaces_loopback(capable: Instance) -> None:
    probe = (
        "import socket\n"
        "print(*[n for _, n in socket.if_nameindex()])\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)\n"
        "for host in ('1.1.1.1', '10.0.0.1', '172.17.0.1', '192.168.0.1'):\n"
        "    try:\n"
        "        s.sendto(b'\\x08\\x00\\xf7\\xff\\x00\\x00\\x00\\x00', (host, 0)); print('sent')\n"
        "    except OSError as e:\n"
        "        print(e.errno)\n"
        "p = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))\n"
        "p.bind(('lo', 0)); print('packet on lo')\n"
        "try:\n"
        "    p.bind(('eth0', 0)); print('packet on eth0')\n"
        "except OSError as e:\n"
        "    print(e.errno)\n"
    )
    with anyio.fail_after(30):
        async with await capable.workspace("raw") as ws:
            result = await ws.exec(["python3", "-c", probe])
    lines = result.stdout.splitlines()
    assert lines[0] == "lo", result.stderr
    assert "sent" not in lines[1:5]  # ENETUNREACH: no route but loopback
    assert lines[5] == "packet on lo"
    assert lines[6] == "19"  # ENODEV: no eth0 here


async def test_kill_and_ptrace_reach_no_other_workspaces_process_whatever_uid_it_takes(
    capable: Instance,
) -> None:
    arg = marker()
    attack = (
        "import ctypes, os, signal, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "pid = int(sys.argv[1])\n"
        "for uid in (0, 65534):\n"
        "    if uid:\n"
        "        os.setgid(uid); os.setuid(uid)\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL); print('killed')\n"
        "    except OSError as e:\n"
        "        print(e.errno)\n"
        "    print(libc.ptrace(16, pid, 0, 0), ctypes.get_errno())\n"
    )
    with anyio.fail_after(30):
        async with await capable.workspace("capable-victim") as victim:
            await victim.exec(f"setsid sleep {arg} >/dev/null 2>&1 &")
            await wait_until_running(arg)
            (pid,) = host_pids(arg)
            async with await capable.workspace("capable-attacker") as attacker:
                tried = await attacker.exec(["python3", "-c", attack, str(pid)])
                everyone = await attacker.exec("kill -9 -1; pkill -9 sleep; true")
            assert host_pids(arg) == [pid], (tried.stdout, everyone.stdout)
        await wait_until_gone(arg)
    assert tried.stdout.split() == ["3", "-1", "3"] * 2  # ESRCH: not in its namespace


async def test_the_workspaces_init_is_out_of_reach_of_kill_and_ptrace(capable: Instance) -> None:
    attack = (
        "kill -9 1; kill -STOP 1; cat /proc/1/environ; ls /proc/1/fd /proc/1/root/; "
        "python3 -c 'import ctypes; print(ctypes.CDLL(None).ptrace(16, 1, 0, 0))'; exit 3"
    )
    with anyio.fail_after(30):
        async with await capable.workspace("init-attack") as ws:
            await ws.exec("sleep 1000 >/dev/null 2>&1 &")
            attacked = await ws.exec(attack)
            after = await ws.exec("ps -eo pid=,args= | grep -c 'sleep 1000$'")
    assert attacked.exit_code == 3
    assert "-1" in attacked.stdout.split()
    assert after.stdout == "1\n"  # pid 1 lives, and so do the workspace's processes


async def test_mount_chroot_and_namespaces_stay_refused_with_every_added_capability(
    capable: Instance,
) -> None:
    # SYS_CHROOT is Docker's, but a view is entered by chroot, not pivot_root: chroot(2) would
    # lead out of it (chroot into a subdirectory, then `..` past the view), so the filter
    # refuses it whatever the capabilities.
    escape = (
        "import os\n"
        "os.makedirs('/tmp/jail', exist_ok=True)\n"
        "try:\n"
        "    os.chroot('/tmp/jail')\n"
        "    for _ in range(64): os.chdir('..')\n"
        "    os.chroot('.'); print(sorted(os.listdir('/')))\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    attempts = [
        "mkdir -p /tmp/m && mount -t tmpfs x /tmp/m",
        "mount --bind /tmp /mnt",
        "mount -o remount,rw /",
        "umount -l /proc",
        "unshare -m true",
        "unshare -U -r true",
        "chroot / true",
        "mknod /tmp/evs-null c 1 3 && mount --bind /tmp/evs-null /dev/null",
    ]
    with anyio.fail_after(30):
        async with await capable.workspace("mounter") as ws:
            results = [await ws.exec(cmd) for cmd in attempts]
            chrooted = await ws.exec(["python3", "-c", escape])
    assert [r.exit_code != 0 for r in results] == [True] * len(attempts), [
        r.stderr for r in results
    ]
    assert chrooted.stdout == "refused 1\n"


# --- every earlier attack, with the capabilities -----------------------------------------------

CAPABLE_ATTACKS: tuple[Attack, ...] = (
    *ATTACKS,
    conformance_isolation.test_a_command_cannot_write_the_sandboxs_report_of_its_own_exit,
    conformance_isolation.test_a_command_cannot_kill_stop_or_take_over_the_pid_1_that_reports_its_status,
    attacks.test_no_command_can_gain_privileges_through_execve_whoever_it_runs_as,
    attacks.test_masks_over_proc_cannot_have_their_metadata_changed,
)


@pytest.mark.parametrize("attack", CAPABLE_ATTACKS, ids=lambda a: a.__name__.removeprefix("test_"))
async def test_every_isolation_attack_fails_with_a_containers_capabilities_too(
    capable: Instance, attack: Attack
) -> None:
    await attack(capable)


@pytest.mark.parametrize("attack", LIMIT_ATTACKS, ids=lambda a: a.__name__.removeprefix("test_"))
async def test_every_limit_holds_with_a_containers_capabilities_too(
    capable_limited: Instance, attack: Attack
) -> None:
    await attack(capable_limited)


async def test_the_frozen_filesystem_cannot_be_changed_with_a_containers_capabilities(
    backend: BackendUnderTest, capable: Instance
) -> None:
    await conformance_isolation.test_the_frozen_filesystem_cannot_be_changed(backend, capable)
