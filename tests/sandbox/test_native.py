"""The compiled holder's build (native.py): every source compiled, shipped, and in the cache key.

The holder is split into files with one job each (holder.c's top names them). A source the
build left out would fail to link; one the cache key left out would let a changed holder reuse
the binary of the old one, silently; one the package data left out would be missing wherever
the package is installed rather than checked out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

from mcp_evalserver.sandbox import native

PACKAGE = Path(native.__file__).resolve().parents[1]  # mcp_evalserver/
PYPROJECT = PACKAGE.parent / "pyproject.toml"
SPLIT = {"holder.c", "runner.c", "confine.c", "wire.c", "holder.h"}


def copy_of_sources(tmp_path: Path) -> Path:
    copy = tmp_path / "holder"
    shutil.copytree(native.HOLDER_DIR, copy)
    return copy


def compiler() -> str:
    found = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert found, "no C compiler here: install gcc (scripts/ensure-system.sh)"
    return found


def test_the_holder_is_its_split_sources_each_under_the_house_limit() -> None:
    sources = native.holder_sources()
    assert {path.name for path in sources} >= SPLIT
    for path in sources:
        lines = path.read_text().count("\n")
        assert lines <= 800, f"{path.name} has {lines} lines: split it along a seam"


def test_changing_any_one_source_changes_the_holders_cache_key(tmp_path: Path) -> None:
    copy = copy_of_sources(tmp_path)
    key = native.source_key(copy)
    assert key == native.source_key()  # the bytes name it, not where they are
    keys = {key}
    for path in native.holder_sources(copy):
        original = path.read_bytes()
        path.write_bytes(original + b"\n")
        changed = native.source_key(copy)
        assert changed not in keys, f"a change to {path.name} kept a key already seen"
        keys.add(changed)
        path.write_bytes(original)
        assert native.source_key(copy) == key
    assert len(keys) == len(native.holder_sources(copy)) + 1


def test_bytes_moved_from_one_source_to_the_next_change_the_key(tmp_path: Path) -> None:
    copy = copy_of_sources(tmp_path)
    key = native.source_key(copy)
    first, second = native.holder_sources(copy)[:2]
    head, tail = first.read_bytes(), second.read_bytes()
    first.write_bytes(head[:-1])
    second.write_bytes(head[-1:] + tail)  # the files' concatenation is unchanged
    assert native.source_key(copy) != key


def test_a_source_added_beside_the_others_changes_the_key(tmp_path: Path) -> None:
    copy = copy_of_sources(tmp_path)
    key = native.source_key(copy)
    (copy / "extra.c").write_text("/* a new part of the holder */\n")
    assert native.source_key(copy) != key
    assert str(copy / "extra.c") in native.compile_command("cc", tmp_path / "out", copy)


def test_the_build_compiles_every_c_source_warning_free(tmp_path: Path) -> None:
    built = tmp_path / "holder"
    command = native.compile_command(compiler(), built)
    compiled = {Path(arg).name for arg in command if arg.endswith(".c")}
    assert compiled == {p.name for p in native.holder_sources() if p.suffix == ".c"}
    done = subprocess.run([*command, "-Werror"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    usage = subprocess.run([str(built)], capture_output=True, text=True, timeout=10)
    assert usage.returncode == 2
    assert "usage: holder SETTINGS_FD" in usage.stderr


def test_the_cached_holder_is_named_by_the_key_of_its_sources() -> None:
    binary = native.holder_binary()
    assert binary is not None, "the holder did not build here: see the logged compiler error"
    assert binary.name == f"holder-{native.source_key()}"
    assert os.access(binary, os.X_OK)


def test_the_package_data_ships_every_holder_source() -> None:
    patterns = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["package-data"]
    shipped = {
        found.resolve() for glob in patterns["mcp_evalserver"] for found in PACKAGE.glob(glob)
    }
    for path in native.holder_sources():
        assert path.resolve() in shipped, f"{path.name} is not in pyproject.toml's package-data"
