"""Host directories the local backend shows read-only in every workspace, for CLI agents.

`agents_dir()` holds the CLI agents' Node runtime and packages (public npm packages, nothing
secret); `bridges_dir()` holds each running trajectory's model-bridge socket, in a directory
named by 128 random bits, answering only that trajectory's token. Every view shows them at
`VIEW_AGENTS` and `VIEW_BRIDGES` (read-only binds: a socket there can be connected to, nothing
written); the docker backend binds them into the instance container there first. Here, below
the agents, so that the sandbox layer names them without importing the agents.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/mcp-evalserver` (default `~/.cache/mcp-evalserver`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mcp-evalserver"


def agents_dir() -> Path:
    """Where the CLI agents' runtime and packages are installed."""
    return cache_root() / "agents"


def bridges_dir() -> Path:
    """Where running trajectories' model-bridge sockets are (one random directory each)."""
    return cache_root() / "bridges"


NOBODY = 65534

#: Where every view shows them: outside the private /root and /tmp, and under /var, which
#: every host-mode view already has (a new top-level directory would look like the host's).
VIEW_AGENTS = "/var/lib/mcp-evalserver/agents"
VIEW_BRIDGES = "/var/lib/mcp-evalserver/bridges"


def view_paths() -> list[dict[str, object]]:
    """The two directories as declared read-only paths of a view (host path, where the view
    shows it), made if missing."""
    found: list[dict[str, object]] = []
    for path, target in ((agents_dir(), VIEW_AGENTS), (bridges_dir(), VIEW_BRIDGES)):
        path.mkdir(parents=True, exist_ok=True)
        found.append({"path": os.path.realpath(path), "writable": False, "target": target})
    if os.geteuid() == 0:
        # Sandboxed processes are uid 0 without capabilities: owned by nobody, mode 0711, the
        # bridges' directory can be passed through to one's own socket but not listed, so a
        # trajectory cannot even learn where the others' bridges are.
        os.chown(bridges_dir(), NOBODY, NOBODY)
        os.chmod(bridges_dir(), 0o711)
    return found


def in_view(host_path: Path) -> str:
    """Where a view shows `host_path`, a path under `agents_dir()` or `bridges_dir()`.

    Raises:
        ValueError: it is under neither.
    """
    real = Path(os.path.realpath(host_path))
    for root, target in ((agents_dir(), VIEW_AGENTS), (bridges_dir(), VIEW_BRIDGES)):
        base = Path(os.path.realpath(root))
        if real == base or base in real.parents:
            return str(Path(target) / real.relative_to(base))
    raise ValueError(f"{host_path} is not under {agents_dir()} or {bridges_dir()}")
