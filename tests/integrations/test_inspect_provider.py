"""The `evalserver` Inspect provider beyond Inspect's self-check: lifecycle, sharing, users,
config forms, limits and the operator's connection, on the local backend (real namespaces)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from inspect_ai._util.entrypoints import ensure_entry_points
from inspect_ai.util import (
    OutputLimitExceededError,
    SandboxUnavailableError,
)
from inspect_ai.util._sandbox.limits import (
    override_max_exec_output_size,
    override_max_read_file_size,
)
from inspect_ai.util._sandbox.registry import registry_find_sandboxenv

from mcp_evalserver import errors
from mcp_evalserver.integrations.inspect.config import EvalServerSandboxConfig, load_config
from mcp_evalserver.integrations.inspect.provider import EvalServerSandboxEnvironment as Provider
from tests.root import require_root

pytestmark = pytest.mark.anyio


@pytest.fixture
def config() -> Iterator[EvalServerSandboxConfig]:
    require_root()
    with tempfile.TemporaryDirectory(prefix="evs-inspect-") as tmp:
        yield EvalServerSandboxConfig(path=os.path.realpath(tmp), setup=("echo base > base.txt",))


@pytest.fixture
async def task(
    config: EvalServerSandboxConfig, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    name = f"provider-{request.node.name}"
    with anyio.fail_after(60):
        await Provider.task_init(name, config)
    yield name
    await Provider.task_cleanup(name, config, True)


def test_inspect_finds_the_provider_through_the_package_entry_point() -> None:
    ensure_entry_points()
    assert registry_find_sandboxenv("evalserver") is Provider


async def test_samples_of_a_task_share_its_instance_in_private_workspaces_until_cleanup(
    config: EvalServerSandboxConfig, task: str
) -> None:
    first = await Provider.sample_init(task, config, {})
    second = await Provider.sample_init(task, config, {})
    a, b = first["default"], second["default"]
    assert isinstance(a, Provider)
    assert isinstance(b, Provider)
    assert a.workspace.instance is b.workspace.instance  # type: ignore[attr-defined]
    await a.write_file("mine.txt", "a's")
    await a.exec(["sh", "-c", "echo changed > base.txt"])
    assert (await b.exec(["sh", "-c", "cat base.txt; ls"])).stdout == "base\nbase.txt\n"
    assert (Path(config.path or "") / "base.txt").read_text() == "base\n"
    await Provider.sample_cleanup(task, config, first, False)
    with pytest.raises(SandboxUnavailableError):
        await a.exec(["true"])
    assert (await b.exec(["cat", "base.txt"])).stdout == "base\n"
    await Provider.task_cleanup(task, config, True)
    with pytest.raises(SandboxUnavailableError):
        await b.exec(["true"])


async def test_exec_runs_as_a_user_of_the_view_without_root_powers(
    config: EvalServerSandboxConfig, task: str
) -> None:
    env = (await Provider.sample_init(task, config, {}))["default"]
    nobody = await env.exec(["sh", "-c", "id -u; echo x > owned.txt"], user="nobody")
    assert nobody.stdout == "65534\n"
    assert "Permission denied" in nobody.stderr  # the instance's files are root's
    by_uid = await env.exec(["id", "-u"], user="4242")
    assert by_uid.stdout == "4242\n"
    root = await env.exec(["sh", "-c", "id -u; echo x > owned.txt"], user="root")
    assert root.success
    assert root.stdout == "0\n"
    unknown = await env.exec(["true"], user="no-such-user")
    assert not unknown.success
    assert "no-such-user" in unknown.stderr


async def test_exit_codes_signals_and_limits_follow_inspect(
    config: EvalServerSandboxConfig, task: str
) -> None:
    env = (await Provider.sample_init(task, config, {}))["default"]
    assert (await env.exec(["sh", "-c", "kill -KILL $$"])).returncode == 137
    with override_max_exec_output_size(1024), pytest.raises(OutputLimitExceededError):
        await env.exec(["head", "-c", "5000", "/dev/zero"])
    await env.write_file("big.bin", b"\0" * 2048)
    with override_max_read_file_size(1024), pytest.raises(OutputLimitExceededError):
        await env.read_file("big.bin", text=False)
    await env.write_file("crlf.txt", b"a\r\nb")
    assert await env.read_file("crlf.txt") == "a\r\nb"
    await env.write_file("latin1.txt", b"\xe9")
    with pytest.raises(UnicodeDecodeError):
        await env.read_file("latin1.txt")
    with pytest.raises(TimeoutError):
        await env.exec(["sleep", "30"], timeout=1)


async def test_the_connection_command_opens_a_shell_in_the_sample_s_own_view(
    config: EvalServerSandboxConfig, task: str
) -> None:
    env = (await Provider.sample_init(task, config, {}))["default"]
    await env.write_file("only-here.txt", "this sample's file\n")
    connection = await env.connection()
    with anyio.fail_after(60):
        shell = await anyio.run_process(
            ["sh", "-c", connection.command], input=b"cat only-here.txt\n", check=False
        )
    assert b"this sample's file" in shell.stdout, shell.stderr


def test_a_config_file_resolves_its_path_and_bad_configs_say_what_to_write(
    tmp_path: Path,
) -> None:
    (tmp_path / "repo").mkdir()
    good = tmp_path / "evalserver.yaml"
    good.write_text("path: repo\nnetwork: false\n")
    assert load_config(str(good)).path == str(tmp_path / "repo")
    assert load_config(str(good)).backend == "local"
    with pytest.raises(errors.InvalidInput, match="needs a config"):
        load_config(None)
    bad = tmp_path / "bad.yaml"
    bad.write_text("image: x\npath: /y\n")
    with pytest.raises(errors.InvalidInput, match="exactly one of"):
        load_config(str(bad))
    bad.write_text("imgae: x\n")
    with pytest.raises(errors.InvalidInput, match="imgae"):
        load_config(str(bad))
    with pytest.raises(errors.InvalidInput, match="cannot be read"):
        load_config(str(tmp_path / "missing.yaml"))


def test_a_config_object_and_its_serialized_form_are_the_same_config() -> None:
    config = EvalServerSandboxConfig(image="mcp-evalserver/base:bookworm", setup=("true",))
    assert config.backend == "docker"
    assert Provider.config_deserialize(config.model_dump()) == config
