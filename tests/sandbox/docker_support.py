"""Makes sure a Docker engine and the base image exist before docker tests run.

Under CI (`CI=true`) a missing engine fails the test with the reason: a suite that silently
skips its Docker half would pass while proving nothing. Elsewhere it skips with the reason.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _under_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _engine_answers() -> bool:
    try:
        return (
            subprocess.run(
                ["docker", "info"], capture_output=True, timeout=20, check=False
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def _prepare() -> tuple[str | None, str]:
    """Returns (base image tag, "") or (None, why not). Runs once per test session."""
    said = ""
    if not _engine_answers() and os.geteuid() == 0:
        # As root we can start the engine ourselves (what `make system` does anyway).
        ensure = subprocess.run(
            ["bash", str(REPO / "scripts/ensure-docker.sh")],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        said = f"; scripts/ensure-docker.sh said: {ensure.stderr.strip()[-1500:]}"
    if not _engine_answers():
        return None, (
            "no Docker engine answers `docker info`; run `sudo bash scripts/ensure-docker.sh`"
            + said
        )
    build = subprocess.run(
        ["bash", str(REPO / "sandbox_images/build-base.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if build.returncode != 0:
        return None, f"the base image could not be built: {build.stderr.strip()[-2000:]}"
    return build.stdout.strip().splitlines()[-1], ""


def require_docker() -> str:
    """The base image tag; fails (CI) or skips (elsewhere) when Docker cannot be had."""
    tag, why = _prepare()
    if tag is None:
        if _under_ci():
            pytest.fail(f"docker tests cannot run under CI: {why}")
        pytest.skip(why)
    return tag
