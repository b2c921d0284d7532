"""Benchmark of the `search` and `list_files` workspace tools against grep and find.

Run `python bench/search.py` (root: the local backend's workspaces use namespaces and
overlayfs). One instance holds the Python standard library's sources (this interpreter's, about
a thousand modules, committed as a git repository); every figure is measured in this one run,
side by side, through the same workspace:

- search_p50_ms: `Workspace.search` of PATTERNS (a rare word, a common regular expression, one
  that matches nothing); grep_p50_ms: `grep -rnIE` of the same through `Workspace.exec` (a
  native program, `.git` excluded), the floor a search could reach through the sandbox;
  search_vs_grep = their ratio, per pattern and over all (target <= 3).
- glob_p50_ms: `Workspace.glob("**/*.py")`; find_p50_ms: `find -name '*.py'` through exec;
  glob_vs_find = their ratio (target <= 3).
Prints a table and writes bench/results/search.json, the load average beside the figures.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.search` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import argparse
import functools
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from bench.common import LoadRecord, describe_load, p50, write_results
from mcp_evalserver.sandbox.base import InstanceSpec, Workspace
from mcp_evalserver.sandbox.local import LocalBackend

PATTERNS = {"rare": "def getpreferredencoding", "common": r"^class \w+Error\(", "none": "zq9xj"}
ROUNDS = 15
TARGET_RATIO = 3.0


def stdlib_tree(into: Path) -> int:
    """The standard library's sources as a committed repository at `into`; its file count."""
    shutil.copytree(
        sysconfig.get_paths()["stdlib"],
        into,
        ignore=shutil.ignore_patterns("__pycache__", "site-packages", "*.so"),
        symlinks=True,
    )
    git = ["git", "-c", "user.email=b@b", "-c", "user.name=b"]
    for step in (["init", "-q", "."], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *step], cwd=into, check=True, capture_output=True)
    return sum(len(files) for _, _, files in os.walk(into))


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    """The p50 in milliseconds of ROUNDS calls (after one to warm up), and the last answer."""
    answer = await call()
    samples = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        answer = await call()
        samples.append((time.perf_counter() - started) * 1000)
    return p50(samples), answer


async def measure(ws: Workspace) -> dict[str, Any]:
    figures: dict[str, Any] = {"patterns": {}}
    for name, pattern in PATTERNS.items():
        search_ms, found = await timed(functools.partial(ws.search, pattern, max_hits=200))
        grep = ["grep", "-rnIE", "--exclude-dir=.git", pattern.replace(r"\w", "[[:alnum:]_]"), "."]
        grep_ms, grepped = await timed(functools.partial(ws.exec, grep))
        grep_lines = len(grepped.stdout.splitlines())
        assert found.total == grep_lines, (name, found.total, grep_lines)  # the same work
        figures["patterns"][name] = {
            "search_p50_ms": search_ms,
            "grep_p50_ms": grep_ms,
            "search_vs_grep": search_ms / grep_ms,
            "hits": found.total,
        }
    runs = figures["patterns"].values()
    figures["search_vs_grep"] = sum(r["search_p50_ms"] for r in runs) / sum(
        r["grep_p50_ms"] for r in runs
    )
    glob_ms, listed = await timed(lambda: ws.glob("**/*.py", max_entries=100_000))
    find = ["find", ".", "-path", "./.git", "-prune", "-o", "-name", "*.py", "-print"]
    find_ms, found_files = await timed(lambda: ws.exec(find))
    assert listed.total == len(found_files.stdout.splitlines())
    figures |= {
        "glob_p50_ms": glob_ms,
        "find_p50_ms": find_ms,
        "glob_vs_find": glob_ms / find_ms,
        "python_files": listed.total,
    }
    return figures


async def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="evs-bench-search-") as tmp:
        tree = Path(tmp) / "stdlib"
        files = await anyio.to_thread.run_sync(stdlib_tree, tree)
        async with LocalBackend() as backend:
            instance = await backend.instance(InstanceSpec(path=str(tree)))
            async with await instance.workspace("bench") as ws:
                figures = await measure(ws)
            await instance.aclose()
    return {**figures, "files": files}


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("bench/search.py needs root (workspaces use namespaces and overlayfs)")
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    load = LoadRecord()
    results = load.finish(anyio.run(main))
    written = write_results("search", results)
    print(f"{results['files']} files, {results['python_files']} of them Python")
    for name, row in results["patterns"].items():
        print(
            f"  search {name:7} {row['search_p50_ms']:8.1f} ms  grep {row['grep_p50_ms']:8.1f} "
            f"ms  {row['search_vs_grep']:.2f}x  ({row['hits']} hits)"
        )
    print(
        f"  glob **/*.py   {results['glob_p50_ms']:8.1f} ms  find {results['find_p50_ms']:8.1f} "
        f"ms  {results['glob_vs_find']:.2f}x"
    )
    for ratio in ("search_vs_grep", "glob_vs_find"):
        met = "met" if results[ratio] <= TARGET_RATIO else "MISSED"
        print(f"{ratio} {results[ratio]:.2f}x, target <= {TARGET_RATIO:g}: {met}")
    print(describe_load(results))
    print(f"wrote {written}")
