"""The benchmarks stand on their own: they import `testsupport`, never the tests."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def imported_modules(source: Path) -> set[str]:
    """Every module `source` imports, at its top or inside a function alike."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            modules.add(node.module)
    return modules


def test_no_benchmark_imports_anything_from_the_tests() -> None:
    sources = sorted((REPO / "bench").rglob("*.py"))
    assert sources
    offending = {
        str(source.relative_to(REPO)): sorted(
            name for name in imported_modules(source) if name.split(".")[0] == "tests"
        )
        for source in sources
    }
    assert {path: names for path, names in offending.items() if names} == {}


def test_a_benchmark_starts_as_a_file_from_anywhere_and_as_a_module_from_the_root(
    tmp_path: Path,
) -> None:
    # bench/mcp.py would shadow the `mcp` SDK on a script's sys.path: the file form re-runs
    # itself as the module form (bench/_as_module.py).
    as_file = [sys.executable, str(REPO / "bench" / "density.py"), "--help"]
    as_module = [sys.executable, "-m", "bench.density", "--help"]
    for command, cwd in ((as_file, tmp_path), (as_module, REPO)):
        run = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert "usage:" in run.stdout
