"""`make demo` installs the package only: the test extra (SWE-bench, Ray, ...) is for tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _planned(target: str, venv: Path) -> list[str]:
    # `make -n`: what the target would run on a machine with no venv, without running it.
    done = subprocess.run(
        ["make", "-n", "-C", str(REPO), target, f"VENV={venv}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [line for line in done.stdout.splitlines() if "pip install" in line]


def test_make_demo_installs_the_package_without_the_test_extra(tmp_path: Path) -> None:
    installs = _planned("demo", tmp_path / "venv")
    assert any(line.endswith("pip install --quiet -e .") for line in installs), installs
    assert not any("[test]" in line for line in installs), installs


def test_make_venv_still_installs_the_test_extra(tmp_path: Path) -> None:
    installs = _planned("venv", tmp_path / "venv")
    assert any("-e '.[test]'" in line for line in installs), installs
