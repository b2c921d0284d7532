"""Ray clusters for tests and benchmarks, only ever inside a loopback-only network namespace.

Outside such a namespace Ray binds to (and advertises) the machine's non-loopback address, and
tests may send traffic only to loopback. So every program that starts a cluster first calls
`ensure_loopback_namespace()`: it re-executes the program under `unshare -n` with `lo` up, and
inside it checks that `lo` is the only interface before any node starts.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

MARKER_ENV = "MCP_EVALSERVER_LOOPBACK_NETNS"


def interfaces() -> list[str]:
    """The network interfaces of this process's namespace (asked of the kernel, not /sys,
    which shows the namespace of whoever mounted it)."""
    return sorted(name for _, name in socket.if_nameindex())


def in_loopback_namespace() -> bool:
    """Whether this process sees no network interface but `lo` (so Ray can bind only there)."""
    return interfaces() == ["lo"]


def loopback_command(argv: Sequence[str]) -> list[str]:
    """`argv` run in a new network namespace with only `lo`, brought up first.

    Raises:
        RuntimeError: this process cannot create network namespaces (needs root and util-linux).
    """
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        raise RuntimeError(
            "a Ray cluster here must run in a loopback-only network namespace, which needs root, "
            "`unshare` (util-linux) and `ip` (iproute2); run as root on a machine with both"
        )
    script = 'ip link set lo up && exec "$@"'
    return ["unshare", "--net", "--", "sh", "-c", script, "loopback", *argv]


def ensure_loopback_namespace() -> None:
    """Re-executes this program in a loopback-only namespace unless it is in one.

    The command line is the interpreter's own (`sys.orig_argv`), so `python -P -m bench.scale`
    comes back as itself, not as the path of its file.

    Raises:
        RuntimeError: the namespace cannot be made, or it still shows other interfaces.
    """
    if in_loopback_namespace():
        return
    if os.environ.get(MARKER_ENV):
        raise RuntimeError(f"expected only `lo` in this network namespace, found {interfaces()}")
    env = {**os.environ, MARKER_ENV: "1"}
    argv = [sys.executable, *sys.orig_argv[1:]]
    os.execvpe("unshare", loopback_command(argv), env)


def run_in_loopback_namespace(
    argv: Sequence[str], *, cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Runs `argv` to completion in a fresh loopback-only namespace, output captured."""
    env = {**os.environ, MARKER_ENV: "1"}
    return subprocess.run(
        loopback_command(argv),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
