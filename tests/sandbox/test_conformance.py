"""Conformance of every sandbox backend: behaviour (commands, files, diffs, the supervisor's
own contract). Isolation is proven by real attacks in test_conformance_isolation.py, limits
and failures in test_conformance_limits.py.

Each test runs against each param of the `backend` fixture (see conftest.py). Waits are
bounded with `anyio.fail_after`; nothing sleeps. Host-side checks read the host's /proc,
which sees every sandboxed process of a local or docker backend on this machine.
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
import tempfile

import anyio
import pytest

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import ExecResult, Instance

from .conftest import BackendUnderTest

pytestmark = pytest.mark.anyio


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


async def test_a_workspaces_first_command_finds_its_proc_mounted(instance: Instance) -> None:
    # The workspace's init mounts its /proc after the holder starts it: the holder waits for
    # that before it serves an exec, so the very first command of a fresh workspace, of a
    # reset one and of a restored one (each gets a new init) reads /proc (seen missing once
    # under load before: "/proc/self/status: No such file"). A race: ten of each per backend.
    first = "grep -c '^Pid:' /proc/self/status"
    with anyio.fail_after(60):
        for i in range(10):
            async with await instance.workspace(f"proc-first-{i}") as ws:
                fresh = await ws.exec(first)
                await ws.restore(await ws.checkpoint())
                after_restore = await ws.exec(first)
                await ws.reset()
                after_reset = await ws.exec(first)
            for result in (fresh, after_reset, after_restore):
                assert (result.exit_code, result.stdout) == (0, "1\n"), result


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
