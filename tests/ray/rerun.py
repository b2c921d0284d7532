"""A pytest plugin: tests marked `ray` run in a child pytest inside a loopback-only namespace.

Ray clusters may bind only to loopback here (see testsupport/loopback.py), and the driver must
share the cluster's namespace, so the whole ray group runs in one child pytest under
`unshare -n`. In the parent they are replaced by one item that runs the child and fails with
its output when any of them failed. Inside the namespace (the child) nothing is replaced.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from testsupport.loopback import in_loopback_namespace, run_in_loopback_namespace

CHILD_TIMEOUT_S = 1500.0


class RayGroupFailed(Exception):
    """The child pytest failed; the message is its output."""


class RayGroupInLoopbackNamespace(pytest.Item):
    """Runs the selected ray tests in a child pytest inside a loopback-only namespace."""

    def __init__(self, *, nodeids: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nodeids = nodeids

    def runtest(self) -> None:
        try:
            prepare_outside_namespace(self.nodeids)
            child = run_in_loopback_namespace(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *self.nodeids],
                cwd=self.config.rootpath,
                timeout=CHILD_TIMEOUT_S,
            )
        except RuntimeError as exc:  # no namespaces here (not root): fail under CI, else skip
            if os.environ.get("CI") == "true":
                raise RayGroupFailed(str(exc)) from exc
            pytest.skip(str(exc))
        summary = child.stdout.strip().splitlines()[-1:] or ["(no output)"]
        sys.stdout.write(child.stdout)
        if child.returncode != 0:
            raise RayGroupFailed(
                f"the ray group failed in its namespace ({summary[0]}):\n"
                f"{child.stdout[-30_000:]}\n{child.stderr[-8_000:]}"
            )

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, RayGroupFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"{self.name} ({len(self.nodeids)} tests)"


def prepare_outside_namespace(nodeids: list[str]) -> None:
    """Downloads what the demo-suite tests build from: the namespace has no network."""
    if not any(nodeid.startswith("tests/ray/test_ray_campaigns.py") for nodeid in nodeids):
        return
    from demo.build_suite import DEFAULT_CACHE, ensure_testenv, fetch_sdist, load_projects
    from tests.demo.test_demo_campaign import SUBSET

    for project in load_projects():
        if project.name in SUBSET:
            fetch_sdist(project, DEFAULT_CACHE)
    ensure_testenv(DEFAULT_CACHE, lambda _: None)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    if in_loopback_namespace():
        return
    ray_items = [item for item in items if item.get_closest_marker("ray") is not None]
    if not ray_items:
        return
    items[:] = [item for item in items if item.get_closest_marker("ray") is None]
    items.append(
        RayGroupInLoopbackNamespace.from_parent(
            session,
            name="ray_tests_in_a_loopback_only_network_namespace",
            nodeids=[item.nodeid for item in ray_items],
        )
    )
