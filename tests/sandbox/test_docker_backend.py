"""The docker backend on a real engine: exec stream, provisioning, leftovers, fallbacks, errors.

What every backend must do (isolation, limits, diffs) is proven by test_conformance.py, which
runs on docker too; this module covers what only the docker backend has.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from mcp_evalserver.errors import InvalidInput, SandboxUnavailable
from mcp_evalserver.sandbox.docker_engine import (
    LABEL_INSTANCE,
    ContainerLimits,
    DockerEngine,
    owner_id,
)
from mcp_evalserver.sandbox.docker_stream import open_exec_stream
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
        removed = await DockerEngine(engine.client, engine.url, engine.apparmor).remove_leftovers()
        left = {
            c["Id"]
            for c in engine.api.containers(
                all=True, filters={"label": f"{LABEL_INSTANCE}=test-leftovers"}
            )
        }
    await live.remove_container(live_id)
    assert dead_id in removed
    assert left == {live_id}


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
