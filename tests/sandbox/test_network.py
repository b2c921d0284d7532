"""A task with `network: true` never gets the host's network namespace.

Attacked the way a trajectory would: look at the interfaces it sees, and connect to a service
listening on the host's loopback. On an engine without an isolated network to give (the local
backend; a Docker engine started with `--bridge=none`, as ours is) the task is refused with an
error that names what is missing. On a bridge network the trajectory has a namespace of its own
with a way out (to the bridge's gateway here: this machine has no route beyond it), and the
host's loopback stays out of reach.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import docker
import pytest

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.sandbox.base import Backend, InstanceSpec
from mcp_evalserver.sandbox.docker import DockerBackend
from mcp_evalserver.sandbox.docker_engine import BUILD_NETWORK_ENV, NETWORK_ENV, DockerEngine
from mcp_evalserver.sandbox.local import LocalBackend
from tests.root import require_root
from tests.sandbox.docker_support import require_docker

pytestmark = pytest.mark.anyio

# What a trajectory learns of its network: its namespace, its interfaces, what it can reach.
PROBE = (
    "import os, socket, sys\n"
    "print('netns', os.readlink('/proc/self/ns/net'))\n"
    "names = [line.split(':')[0].strip() for line in open('/proc/net/dev').readlines()[2:]]\n"
    "print('interfaces', ','.join(sorted(names)))\n"
    "for addr in sys.argv[1:]:\n"
    "    host, port = addr.rsplit(':', 1)\n"
    "    try:\n"
    "        socket.create_connection((host, int(port)), timeout=5).close()\n"
    "        print('reach', addr, 'open')\n"
    "    except OSError as e:\n"
    "        print('reach', addr, type(e).__name__)\n"
)


@contextmanager
def listening(host: str) -> Iterator[str]:
    """A TCP listener on `host`; the kernel completes connections without an accept."""
    with socket.socket() as listener:
        listener.bind((host, 0))
        listener.listen(8)
        yield f"{host}:{listener.getsockname()[1]}"


async def probe(backend: Backend, spec: InstanceSpec, *targets: str) -> dict[str, str]:
    """Runs PROBE in a workspace of `spec`; returns {'netns': .., 'interfaces': .., addr: ..}."""
    instance = await backend.instance(spec)
    async with await instance.workspace("net") as ws:
        await ws.write_file("/tmp/probe.py", PROBE)
        result = await ws.exec(["python3", "/tmp/probe.py", *targets], timeout=60)
    assert result.exit_code == 0, result.stderr
    seen: dict[str, str] = {}
    for line in result.stdout.splitlines():
        kind, _, rest = line.partition(" ")
        key, _, value = rest.rpartition(" ") if kind == "reach" else (kind, "", rest)
        seen[key] = value
    return seen


def host_only_interfaces() -> set[str]:
    """This host's interfaces but the names every namespace may have of its own."""
    return set(os.listdir("/sys/class/net")) - {"lo", "eth0"}


@asynccontextmanager
async def local_network_task() -> AsyncIterator[tuple[Backend, InstanceSpec]]:
    require_root()
    with tempfile.TemporaryDirectory(prefix="evs-net-") as tmp:
        async with LocalBackend() as backend:
            yield backend, InstanceSpec(path=tmp, network=True)


@asynccontextmanager
async def docker_network_task() -> AsyncIterator[tuple[Backend, InstanceSpec]]:
    """On the engine's default network for such tasks (`bridge`; this engine has none)."""
    image = require_docker()
    async with DockerBackend(network="bridge") as backend:
        key = f"net-default-{os.getpid()}-{os.urandom(3).hex()}"
        yield backend, InstanceSpec(image=image, network=True, key=key)


@pytest.mark.parametrize(
    "network_task",
    [
        pytest.param(local_network_task, marks=pytest.mark.root, id="local"),
        pytest.param(docker_network_task, marks=pytest.mark.docker, id="docker"),
    ],
)
async def test_a_network_task_never_sees_the_hosts_interfaces_nor_reaches_its_loopback(
    network_task: Callable[[], AbstractAsyncContextManager[tuple[Backend, InstanceSpec]]],
) -> None:
    refusal = ""
    with anyio.fail_after(120), listening("127.0.0.1") as host_loopback:
        try:
            async with network_task() as (backend, spec):
                seen = await probe(backend, spec, host_loopback)
        except InvalidInput as refused:
            refusal = str(refused)
    if refusal:  # where no isolated namespace can be had, the error says what is needed
        assert "asks for network" in refusal
        assert "bridge network" in refusal, refusal
        return
    assert seen["netns"] != os.readlink("/proc/self/ns/net")
    assert not host_only_interfaces() & set(seen["interfaces"].split(","))
    assert seen[host_loopback] == "ConnectionRefusedError"


@pytest.mark.docker
async def test_the_docker_refusal_names_the_missing_network_and_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    image = require_docker()
    missing = f"evs-no-such-network-{os.urandom(4).hex()}"
    monkeypatch.setenv(NETWORK_ENV, missing)
    async with DockerBackend() as backend:
        with anyio.fail_after(60), pytest.raises(InvalidInput) as refused:
            await backend.instance(InstanceSpec(image=image, network=True, key=missing))
    message = str(refused.value)
    assert f"has no network {missing!r}" in message
    assert "docker network create --driver bridge" in message
    assert NETWORK_ENV in message


@pytest.mark.docker
async def test_the_hosts_own_network_is_refused_even_when_named() -> None:
    image = require_docker()
    async with DockerBackend(network="host") as backend:
        with anyio.fail_after(60), pytest.raises(InvalidInput, match="isolates nothing"):
            await backend.instance(InstanceSpec(image=image, network=True, key="net-host"))


@pytest.fixture
def bridge_network() -> Iterator[tuple[str, str]]:
    """A user-defined bridge network of this test (name, gateway address), removed after."""
    require_docker()
    client = docker.from_env()
    name = f"evs-test-bridge-{os.getpid()}-{os.urandom(3).hex()}"
    network = client.networks.create(
        name, driver="bridge", labels={"mcp-evalserver.test": "network"}
    )
    try:
        network.reload()
        gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]
        yield name, gateway
    finally:
        network.remove()
        client.close()


@pytest.mark.docker
async def test_a_network_task_on_a_bridge_network_reaches_out_but_not_the_hosts_loopback(
    bridge_network: tuple[str, str],
) -> None:
    name, gateway = bridge_network
    image = require_docker()
    with (
        anyio.fail_after(120),
        listening("127.0.0.1") as host_loopback,
        listening(gateway) as beyond_its_namespace,
    ):
        async with DockerBackend(network=name) as backend:
            key = f"net-bridge-{os.getpid()}-{os.urandom(3).hex()}"
            spec = InstanceSpec(image=image, network=True, key=key)
            seen = await probe(backend, spec, host_loopback, beyond_its_namespace)
    assert seen["netns"] != os.readlink("/proc/self/ns/net")
    assert seen["interfaces"] == "eth0,lo"
    assert seen[host_loopback] == "ConnectionRefusedError"
    assert seen[beyond_its_namespace] == "open"


@pytest.mark.docker
async def test_the_operator_may_run_tasks_that_ask_for_network_offline_and_is_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    image = require_docker()
    key = f"net-offline-{os.getpid()}-{os.urandom(3).hex()}"
    with anyio.fail_after(120), listening("127.0.0.1") as host_loopback:
        async with DockerBackend(network="none") as backend:
            seen = await probe(
                backend, InstanceSpec(image=image, network=True, key=key), host_loopback
            )
    assert seen["interfaces"] == "lo"
    assert seen[host_loopback] == "ConnectionRefusedError"
    assert any(
        "runs offline" in r.getMessage() and NETWORK_ENV in r.getMessage() for r in caplog.records
    )


@pytest.mark.docker
@pytest.mark.parametrize("build_network", ["none", "host"])
async def test_an_image_build_gets_the_network_the_operator_chose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build_network: str
) -> None:
    """The RUN sees more than `lo` only where the operator said `host`; its refusal says how."""
    base = require_docker()
    token = os.urandom(4).hex()  # a RUN of its own: never a cached layer of another network
    (tmp_path / "Dockerfile").write_text(
        f'FROM {base}\nRUN echo {token} && test "$(ls /sys/class/net | wc -l)" -gt 1\n'
    )
    monkeypatch.setenv(BUILD_NETWORK_ENV, build_network)
    engine = await DockerEngine.connect()
    tag = f"evs-build-network-test:{token}"
    try:
        with anyio.fail_after(300):
            if build_network == "host":
                await engine.build_image(str(tmp_path), tag)
            else:
                with pytest.raises(InvalidInput) as refused:
                    await engine.build_image(str(tmp_path), tag)
                assert "build network 'none'" in str(refused.value)
                assert "--build-network host" in str(refused.value)
    finally:
        await engine.remove_image(tag)
        await engine.aclose()


def test_an_unknown_build_network_is_refused_naming_the_choices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(BUILD_NETWORK_ENV, "bridge2")
    with pytest.raises(InvalidInput, match="give one of default, host, none"):
        DockerEngine(client=None, url="unix:///nowhere", apparmor=False)


def test_ensure_docker_refuses_a_bridge_setting_it_does_not_know() -> None:
    """Checked before anything is started: the engine here is left as it is."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "ensure-docker.sh"
    env = {**os.environ, "MCP_EVALSERVER_DOCKERD_BRIDGE": "bogus"}
    done = subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "MCP_EVALSERVER_DOCKERD_BRIDGE is 'bogus'; give none or default" in done.stderr
