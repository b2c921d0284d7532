"""The compiled holder (`holder/`): built from this package on the machine that runs it.

A workspace's holder keeps its namespaces alive and starts its execs. supervisor/holders.py has one
in Python; `holder/` is the same program in C (holder.c's top comment says what it does and
names its files, one job each), compiled: a few pages where a forked interpreter keeps about
2 MB, and an exec that costs system calls rather than an interpreter's page faults. It is
built here with the machine's C compiler, statically, so the one binary runs in
any image (the docker backend copies it into each instance container beside the supervisor);
no binary is ever downloaded. Without a compiler, or with `MCP_EVALSERVER_HOLDER=python`,
workspaces keep the Python holder, which every sandbox test also covers.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import anyio.to_thread

from mcp_evalserver.sandbox.agent_paths import cache_root

log = logging.getLogger(__name__)

HOLDER_DIR = Path(__file__).with_name("holder")  # holder.c, its other .c files and holder.h
CHOICE_ENV = "MCP_EVALSERVER_HOLDER"  # "python": never the compiled holder
CONTAINER_PATH = "/opt/mcp-evalserver/holder"  # where the docker backend puts it


def cache_dir() -> Path:
    return cache_root()


def holder_sources(directory: Path = HOLDER_DIR) -> list[Path]:
    """The holder's sources: every .c file and the header they share, in a fixed order."""
    return sorted(directory.glob("*.[ch]"))


def source_key(directory: Path = HOLDER_DIR) -> str:
    """The build's name: a hash of every source's name and bytes, so that a change to any one
    of them (or a file added, removed or renamed) is another holder, built anew."""
    digest = hashlib.sha256()
    for path in holder_sources(directory):
        data = path.read_bytes()
        # Name and length first: bytes moved from one file to the next are a change too.
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def compile_command(compiler: str, output: Path, directory: Path = HOLDER_DIR) -> list[str]:
    """The one command that builds the holder from `directory`'s sources into `output`."""
    sources = [str(path) for path in holder_sources(directory) if path.suffix == ".c"]
    # Static: the same file runs in every image, whatever its C library.
    return [compiler, "-O2", "-static", "-Wall", f"-I{directory}", "-o", str(output), *sources]


def wanted() -> bool:
    """False when the operator asked for the Python holder (holder_binary still builds)."""
    return os.environ.get(CHOICE_ENV, "").strip().lower() != "python"


@functools.cache
def holder_binary() -> Path | None:
    """The compiled holder, built once per version of its sources (cached by content hash);
    None when it cannot be built here (the reason is logged) or the Python one is asked for.

    Blocking (a compile takes about a second): call it from a worker thread.
    """
    target = cache_dir() / f"holder-{source_key()}"
    if os.access(target, os.X_OK):
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.warning("no C compiler here: workspaces keep the Python holder (install gcc)")
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / "holder"
        command = compile_command(compiler, built)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log.warning(
                "the compiled holder did not build (%s); workspaces keep the Python holder: %s",
                " ".join(command),
                done.stderr.strip()[-2000:],
            )
            return None
        os.replace(built, target)  # atomic: a concurrent build of the same source is the same
    return target


async def native_holder(python_holder: bool = False) -> Path | None:
    """The compiled holder for a backend's instances (built from a worker thread: the first
    call may compile), or None for the Python one: asked for by the backend
    (`python_holder`) or the operator (`MCP_EVALSERVER_HOLDER=python`), or not buildable."""
    if python_holder or not wanted():
        return None
    return await anyio.to_thread.run_sync(holder_binary)
