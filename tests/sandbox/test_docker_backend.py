"""The docker backend on a real engine: exec stream, provisioning, leftovers, fallbacks, errors.

What every backend must do (isolation, limits, diffs) is proven by test_conformance*.py, which
run on docker too; this module covers what only the docker backend has.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import docker.errors
import pytest

from mcp_evalserver.errors import (
    Conflict,
    InfrastructureError,
    InvalidInput,
    SandboxUnavailable,
    Timeout,
)
from mcp_evalserver.sandbox import docker_fallback
from mcp_evalserver.sandbox.base import InstanceSpec
from mcp_evalserver.sandbox.docker import DockerBackend
from mcp_evalserver.sandbox.docker_engine import (
    LABEL_INSTANCE,
    ContainerLimits,
    DockerEngine,
    owner_id,
)
from mcp_evalserver.sandbox.docker_fallback import PerTrajectoryInstance
from mcp_evalserver.sandbox.docker_stream import open_exec_stream
from mcp_evalserver.sandbox.supervised import SupervisedInstance
from tests.sandbox.docker_support import require_docker

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


@pytest.fixture
def base_image() -> str:
    return require_docker()


@pytest.fixture
async def engine(base_image: str) -> AsyncIterator[DockerEngine]:
    engine = await DockerEngine.connect()
    yield engine
    await engine.remove_leftovers(everything_of_ours=True)
    await engine.aclose()


@pytest.fixture
async def container(engine: DockerEngine, base_image: str) -> str:
    return await engine.run_container(
        base_image,
        instance_key="test-exec-stream",
        role="test",
        limits=ContainerLimits(memory="512m", pids=256),
        network=False,
        sys_admin=False,
        store=None,
    )


async def read_all(stream: anyio.abc.ByteReceiveStream) -> bytes:
    data = bytearray()
    async for chunk in stream:
        data += chunk
    return bytes(data)


async def test_the_exec_stream_gives_stdout_alone_and_hands_stderr_aside(
    engine: DockerEngine, container: str
) -> None:
    stderr: list[bytes] = []
    script = "for i in 1 2 3; do echo out$i; echo err$i >&2; done; cat"
    payload = bytes(range(256)) * 4096  # 1 MiB: many frames, binary bytes included
    with anyio.fail_after(30):
        stream = await open_exec_stream(
            engine.api, container, ["sh", "-c", script], on_stderr=stderr.append
        )
        async with stream:
            async with anyio.create_task_group() as tg:

                async def feed() -> None:
                    await stream.send(payload)
                    await stream.send_eof()

                tg.start_soon(feed)
                received = await read_all(stream)
            assert received == b"out1\nout2\nout3\n" + payload
            assert b"".join(stderr) == b"err1\nerr2\nerr3\n"
            assert stream.stderr_tail == "err1\nerr2\nerr3\n"
            assert await stream.exit_code() == 0


async def test_many_requests_in_flight_share_one_exec_stream(
    engine: DockerEngine, container: str
) -> None:
    echo = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()"
    with anyio.fail_after(30):
        stream = await open_exec_stream(engine.api, container, ["python3", "-u", "-c", echo])
        async with stream:
            lines = [f"request {i}\n".encode() for i in range(500)]
            await stream.send(b"".join(lines))
            received = b""
            while received.count(b"\n") < len(lines):
                received += await stream.receive()
            assert received == b"".join(lines)


async def test_a_process_that_exits_ends_the_stream_and_reports_its_code(
    engine: DockerEngine, container: str
) -> None:
    with anyio.fail_after(30):
        stream = await open_exec_stream(engine.api, container, ["sh", "-c", "echo bye; exit 3"])
        async with stream:
            assert await read_all(stream) == b"bye\n"
            with pytest.raises(anyio.EndOfStream):
                await stream.receive()
            assert await stream.exit_code() == 3


async def test_an_exec_into_a_removed_container_is_sandbox_unavailable(
    engine: DockerEngine, container: str
) -> None:
    await engine.remove_container(container)
    with anyio.fail_after(30), pytest.raises(SandboxUnavailable, match="provisioned again"):
        await open_exec_stream(engine.api, container, ["true"])


async def test_leftovers_of_a_dead_run_are_removed_and_a_live_runs_are_kept(
    engine: DockerEngine, base_image: str
) -> None:
    finished = await anyio.run_process(["sh", "-c", "echo $$"])
    dead_pid = int(finished.stdout)
    host = owner_id().split(":")[0]
    dead = DockerEngine(engine.client, engine.url, engine.apparmor, owner=f"{host}:{dead_pid}:1")
    live = DockerEngine(engine.client, engine.url, engine.apparmor)  # this very process

    async def start(owner: DockerEngine) -> str:
        return await owner.run_container(
            base_image,
            instance_key="test-leftovers",
            role="instance",
            limits=ContainerLimits(memory="256m", pids=64),
            network=False,
            sys_admin=False,
            store=None,
        )

    with anyio.fail_after(60):
        dead_id = await start(dead)
        live_id = await start(live)
        # Another run on this engine may remove the dead container first: either way it goes.
        await DockerEngine(engine.client, engine.url, engine.apparmor).remove_leftovers()
        left = containers_of(engine, "test-leftovers")
        await live.remove_container(live_id)
    assert dead_id not in left
    assert live_id in left


async def test_an_untagged_leftover_image_of_a_dead_run_is_removed_by_its_id(
    engine: DockerEngine, base_image: str
) -> None:
    finished = await anyio.run_process(["sh", "-c", "echo $$"])
    host = owner_id().split(":")[0]
    dead = DockerEngine(
        engine.client, engine.url, engine.apparmor, owner=f"{host}:{int(finished.stdout)}:1"
    )
    repository = f"mcp-evalserver/test-untagged-{os.getpid()}"
    with anyio.fail_after(120):
        images: list[str] = []
        for _ in range(2):  # the second commit takes the tag: the first is left `<none>`
            container = await dead.run_container(
                base_image, instance_key="test-untagged", role="probe",
                limits=ContainerLimits(memory="256m", pids=64), network=False,
                sys_admin=False, store=None,
            )  # fmt: skip
            await dead.exec(container, ["sh", "-c", f"echo {len(images)} > /marker"])
            images.append(await dead.commit(container, repository, "test-untagged"))
            images[-1] = engine.client.images.get(images[-1]).id
            await dead.remove_container(container)
        await DockerEngine(engine.client, engine.url, engine.apparmor).remove_leftovers()
    for image in images:
        with pytest.raises(docker.errors.ImageNotFound):
            engine.client.images.get(image)


async def test_no_engine_is_reported_with_how_to_start_one(tmp_path: anyio.Path) -> None:
    with anyio.fail_after(30), pytest.raises(SandboxUnavailable) as caught:
        await DockerEngine.connect(f"unix://{tmp_path}/no-such-docker.sock")
    assert "no Docker engine at unix://" in str(caught.value)
    assert "scripts/ensure-docker.sh" in str(caught.value)


async def test_an_image_that_is_nowhere_is_invalid_input_pointing_at_the_recipe(
    engine: DockerEngine,
) -> None:
    with anyio.fail_after(60), pytest.raises(InvalidInput, match=r"sandbox_images/README\.md"):
        await engine.ensure_image("mcp-evalserver/no-such-image:never-built")


# The backend.

REPO = (
    "git init -q . && git config user.email t@t && git config user.name t",
    "printf 'hello\\n' > a.txt && git add -A && git commit -qm base",
)


@pytest.fixture
async def backend(base_image: str) -> AsyncIterator[DockerBackend]:
    async with DockerBackend() as backend:
        yield backend


@pytest.fixture
async def no_python_image(engine: DockerEngine, base_image: str) -> str:
    """The base image with python3 removed (built once per base image, then cached)."""
    tag = f"mcp-evalserver/test-no-python:{base_image.rpartition(':')[2]}"
    if engine.client.images.list(name=tag):
        return tag
    builder = engine.client.containers.run(
        base_image, ["sh", "-c", "rm -f /usr/bin/python3*"], detach=True, network_mode="none"
    )
    try:
        builder.wait(timeout=60)
        builder.commit(repository=tag.partition(":")[0], tag=tag.partition(":")[2])
    finally:
        builder.remove(force=True)
    return tag


def containers_of(engine: DockerEngine, key: str) -> set[str]:
    found = engine.api.containers(all=True, filters={"label": f"{LABEL_INSTANCE}={key}"})
    return {c["Id"] for c in found}


async def test_equal_specs_share_one_container_and_other_specs_get_their_own(
    backend: DockerBackend, engine: DockerEngine, base_image: str
) -> None:
    spec = InstanceSpec(image=base_image, setup=REPO, key=f"reuse-{os.getpid()}")
    other = InstanceSpec(image=base_image, setup=REPO, key=f"reuse-other-{os.getpid()}")
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for _ in range(3):  # concurrent asks for one key still provision once
                tg.start_soon(backend.instance, spec)
        first = await backend.instance(spec)
        second = await backend.instance(spec)
        third = await backend.instance(other)
        assert first is second
        assert third is not first
        assert len(containers_of(engine, spec.key)) == 1
        assert len(containers_of(engine, other.key)) == 1
        assert isinstance(first, SupervisedInstance)
        assert first.info["mode"] == "supervisor"
        await first.aclose()
        assert containers_of(engine, spec.key) == set()
        again = await backend.instance(spec)  # a closed instance is provisioned anew
        assert again is not first
        assert len(containers_of(engine, spec.key)) == 1


@pytest.mark.parametrize("side_door", [True, False])
async def test_requests_take_the_side_door_where_a_directory_is_shared_else_the_exec_stream(
    base_image: str, side_door: bool
) -> None:
    # The side door (a unix socket in a directory bind-mounted from here) skips dockerd and
    # the shim; without it, or with an engine that shares no directory, the exec stream serves.
    # Neither leaves a way in for a trajectory: the socket is gone once we connected, and the
    # bind is not part of any workspace's view.
    spec = InstanceSpec(image=base_image, setup=REPO, key=f"door-{side_door}-{os.getpid()}")
    async with DockerBackend(side_door=side_door) as backend:
        with anyio.fail_after(120):
            instance = await backend.instance(spec)
            assert isinstance(instance, SupervisedInstance)
            async with await instance.workspace("w") as ws:
                seen = await ws.exec("ls -A /run/mcp-evalserver-io 2>/dev/null; cat a.txt")
            engine = backend.engine
            inside = await engine.exec(
                str(instance.info["container"]), ["ls", "-A", "/run/mcp-evalserver-io"]
            )
            io_dir = instance.info.get("io_dir")
            shared = bool(io_dir) and os.path.isdir(str(io_dir))
            await instance.aclose()
    assert instance.info["transport"] == ("socket" if side_door else "exec stream")
    assert seen.stdout == "hello\n"  # nothing of the directory in the view
    if side_door:
        assert inside.output.split() == ["here"]  # the socket went once we were in
        assert shared
        assert not os.path.exists(str(io_dir))  # removed with the container
    else:
        assert io_dir is None
        assert inside.exit_code != 0  # no such directory in the container at all


async def test_starting_the_backend_removes_a_dead_runs_containers(
    engine: DockerEngine, base_image: str
) -> None:
    finished = await anyio.run_process(["sh", "-c", "echo $$"])
    host = owner_id().split(":")[0]
    owner = f"{host}:{int(finished.stdout)}:1:dead"
    dead = DockerEngine(engine.client, engine.url, engine.apparmor, owner=owner)
    with anyio.fail_after(60):
        leftover = await dead.run_container(
            base_image,
            instance_key="dead-run",
            role="instance",
            limits=ContainerLimits(memory="256m", pids=64),
            network=False,
            sys_admin=True,
            store="/trajs",
        )
        async with DockerBackend():
            assert leftover not in containers_of(engine, "dead-run")


async def test_a_spec_without_an_image_is_invalid_input_naming_the_base_image(
    backend: DockerBackend,
) -> None:
    with anyio.fail_after(30), pytest.raises(InvalidInput, match="mcp-evalserver/base:"):
        await backend.instance(InstanceSpec(path="/srv"))


async def test_a_failing_setup_says_so_and_leaves_no_container(
    backend: DockerBackend, engine: DockerEngine, base_image: str
) -> None:
    spec = InstanceSpec(image=base_image, setup=("echo broken build >&2; exit 4",))
    with anyio.fail_after(60), pytest.raises(InfrastructureError, match="broken build"):
        await backend.instance(spec)
    assert containers_of(engine, spec.key) == set()


async def test_an_image_without_python_gets_a_container_per_trajectory_and_says_so(
    backend: DockerBackend, engine: DockerEngine, no_python_image: str
) -> None:
    spec = InstanceSpec(image=no_python_image, setup=REPO, pids_limit=64)
    with anyio.fail_after(180):
        instance = await backend.instance(spec)
        assert isinstance(instance, PerTrajectoryInstance)
        assert instance.info["mode"] == "container-per-trajectory"
        assert "python3" in instance.info["note"]
        async with await instance.workspace("a") as a, await instance.workspace("b") as b:
            result = await a.exec("echo changed > a.txt; echo err >&2; exit 3")
            assert (result.exit_code, result.stderr) == (3, "err\n")
            # `docker exec` cannot hand a command a private socket: strict grading is refused.
            with pytest.raises(Conflict, match="report channel"):
                await a.exec("true", report=True)
            # Nothing in the image can search: said, with what to use instead.
            with pytest.raises(Conflict, match=r"needs python3 in the image.*grep -rn"):
                await a.search("hello")
            with pytest.raises(Conflict, match="needs python3 in the image"):
                await a.glob()
            assert await a.write_file("sub/new.bin", b"\x00\xff") is None  # created
            assert await a.read_file("sub/new.bin") == b"\x00\xff"
            assert await a.write_file("a.txt", "changed!\n") == len("changed\n")  # replaced
            assert (await b.exec(["cat", "a.txt"])).stdout == "hello\n"
            names = {e.name: e.kind for e in await a.list(".")}
            assert names["a.txt"] == "file"
            assert names["sub"] == "dir"
            patch = await a.diff()
            assert "+changed" in patch
            assert "GIT binary patch" in patch
            # A timeout kills the whole workspace, detached children included.
            slow = await a.exec("setsid sleep 301 & sleep 302", timeout=1)
            assert slow.timed_out
            assert "sleep 30" not in (await a.exec("ps -eo args")).stdout
        await instance.aclose()
    assert containers_of(engine, spec.key) == set()


async def test_an_image_without_a_shell_is_invalid_input_and_leaves_no_container(
    backend: DockerBackend, engine: DockerEngine
) -> None:
    tag = "mcp-evalserver/test-no-shell:1"
    if not engine.client.images.list(name=tag):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo("hello.txt")
            info.size = 3
            tar.addfile(info, io.BytesIO(b"hi\n"))
        engine.api.import_image_from_data(buffer.getvalue(), repository=tag.split(":")[0], tag="1")
    spec = InstanceSpec(image=tag)
    with anyio.fail_after(60), pytest.raises(InvalidInput, match="has no /bin/sh"):
        await backend.instance(spec)
    assert containers_of(engine, spec.key) == set()


async def test_a_malformed_image_name_is_invalid_input(backend: DockerBackend) -> None:
    with anyio.fail_after(30), pytest.raises(InvalidInput, match="not a valid image name"):
        await backend.instance(InstanceSpec(image="Not A Valid/Name::x"))


async def test_a_killed_container_fails_pending_calls_and_the_next_ask_provisions_anew(
    backend: DockerBackend, engine: DockerEngine, base_image: str
) -> None:
    spec = InstanceSpec(image=base_image, setup=REPO, key=f"killed-{os.getpid()}")
    outcome: dict[str, BaseException] = {}
    with anyio.fail_after(120):
        instance = await backend.instance(spec)
        assert isinstance(instance, SupervisedInstance)
        ws = await instance.workspace("doomed")

        async def doomed_exec() -> None:
            try:
                await ws.exec("touch /tmp/started; sleep 600")
            except SandboxUnavailable as e:
                outcome["pending"] = e

        async with anyio.create_task_group() as tg:
            tg.start_soon(doomed_exec)
            while b"started" not in b"".join(
                e.name.encode() for e in await ws.list("/tmp")
            ):  # bounded by fail_after; each round trip is a real request
                await anyio.lowlevel.checkpoint()
            await engine.call("kill", engine.api.kill, instance.info["container"])
        with pytest.raises(SandboxUnavailable):
            await ws.exec("true")
        again = await backend.instance(spec)
        assert again is not instance
        async with await again.workspace("after") as fresh:
            assert (await fresh.exec("cat a.txt")).stdout == "hello\n"
    assert isinstance(outcome.get("pending"), SandboxUnavailable)


async def test_provisioning_is_bounded_so_setups_do_not_overlap_at_one(base_image: str) -> None:
    # Setup is the work being bounded; its sleep is the workload, not a wait.
    setup = ("date +%s.%N > /setup-start", "sleep 0.5", "date +%s.%N > /setup-end")
    specs = [
        InstanceSpec(image=base_image, setup=setup, key=f"bounded-{os.getpid()}-{n}")
        for n in range(2)
    ]
    spans: list[tuple[float, float]] = []
    with anyio.fail_after(120):
        async with DockerBackend(provisioning=1) as backend:
            async with anyio.create_task_group() as tg:
                for spec in specs:
                    tg.start_soon(backend.instance, spec)
            for spec in specs:
                async with await (await backend.instance(spec)).workspace("stamp") as ws:
                    start = float(await ws.read_file("/setup-start"))
                    end = float(await ws.read_file("/setup-end"))
                    spans.append((start, end))
    first, second = sorted(spans)
    assert first[1] <= second[0]


async def test_a_plain_container_whose_image_has_python3_searches_with_the_supervisors_finder(
    engine: DockerEngine, container: str, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An image whose python3 is too old for the supervisor may still run finder.py: the same
    search, bounded by an alarm inside the container rather than a restart of it."""
    spec = InstanceSpec(image=base_image, setup=REPO, key=f"plain-finder-{os.getpid()}")
    monkeypatch.setattr(docker_fallback, "FIND_TIMEOUT_S", 2)
    with anyio.fail_after(120):
        instance = await PerTrajectoryInstance.provision(engine, spec, container)
        try:
            async with await instance.workspace("finder") as ws:
                await ws.write_file("pkg/mod.py", "x = 1\nhello = 2\n")
                await ws.exec("mkdir -p loop && ln -s .. loop/up && echo 'a' > .git/hello")
                found = await ws.search("hello")
                listed = await ws.glob("*.py")
                with pytest.raises(InvalidInput, match="at position 1"):
                    await ws.search("a(")
                await ws.write_file("trap.txt", "a" * 64 + "!\n")
                with pytest.raises(Timeout, match="backtracks"):
                    await ws.search("(a+)+$", path="trap.txt")
                survived = await ws.exec("cat trap.txt | wc -c")
        finally:
            await instance.aclose()
    assert [(hit.path, hit.line) for hit in found.hits] == [("a.txt", 1), ("pkg/mod.py", 2)]
    assert listed.paths == ["pkg/mod.py"]
    assert survived.stdout == "66\n"  # the workspace was not restarted: its files are there
