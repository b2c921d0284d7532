"""Inspect's own sandbox conformance suite, run against the `evalserver` provider.

The `test_*` coroutines of `inspect_ai.util._sandbox.self_check` (pinned inspect-ai) are
collected here and driven by the `sandbox_env` fixture, once per backend, the way Inspect
runs them against its own providers. A check the provider cannot pass is listed in
KNOWN_FAILURES with the reason and marked strict xfail: it must fail, and a listed check
that starts passing fails the run, so the list stays exact.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator

import inspect_ai.util._sandbox.self_check as inspect_self_check
import pytest
from inspect_ai.util import SandboxEnvironment
from inspect_ai.util._sandbox.self_check import *  # noqa: F403 (the checks themselves)

from mcp_evalserver.integrations.inspect.config import EvalServerSandboxConfig
from mcp_evalserver.integrations.inspect.provider import EvalServerSandboxEnvironment
from tests.root import require_root
from tests.sandbox.docker_support import require_docker

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NO_CAPABILITIES = (
    "a command keeps no capability (docs/design/isolation.md), so root cannot chown: adduser's "
    "groupadd cannot give its new /etc/gshadow back to group shadow"
)
KNOWN_FAILURES: dict[str, dict[str, str]] = {
    "local": {
        "test_exec_as_user": "the local backend shows the host's /etc read-only: a sample "
        "cannot add a user (running as an existing one works: see test_inspect_provider.py)",
    },
    "docker": {"test_exec_as_user": NO_CAPABILITIES},
}


def test_the_suite_has_the_checks_of_the_pinned_inspect_and_the_known_failures_name_real_ones() -> (
    None
):
    checks = set(inspect_self_check.__all__)
    assert len(checks) == 44  # inspect-ai 0.3.285; a new version's checks must be looked at
    for backend, failures in KNOWN_FAILURES.items():
        assert set(failures) <= checks, (backend, set(failures) - checks)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", params=["local", "docker"])
async def _environment(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[str, SandboxEnvironment]]:
    with tempfile.TemporaryDirectory(prefix="evs-inspect-") as tmp:
        if request.param == "local":
            require_root()
            config = EvalServerSandboxConfig(path=os.path.realpath(tmp))
        else:
            config = EvalServerSandboxConfig(image=require_docker())
        task = f"self-check-{request.param}"
        await EvalServerSandboxEnvironment.task_init(task, config)
        envs = await EvalServerSandboxEnvironment.sample_init(task, config, {})
        try:
            yield request.param, envs["default"]
        finally:
            await EvalServerSandboxEnvironment.sample_cleanup(task, config, envs, False)
            await EvalServerSandboxEnvironment.task_cleanup(task, config, True)


@pytest.fixture
def sandbox_env(
    request: pytest.FixtureRequest, _environment: tuple[str, SandboxEnvironment]
) -> SandboxEnvironment:
    backend, env = _environment
    reason = KNOWN_FAILURES[backend].get(request.node.originalname)
    if reason is not None:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    return env
