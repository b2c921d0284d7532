"""Host directories the local backend shows read-only in every workspace, for CLI agents.

`agents_dir()` holds the CLI agents' Node runtime and packages (public npm packages, nothing
secret); `bridges_dir()` holds each running trajectory's model-bridge socket, in a directory
named by 128 random bits, answering only that trajectory's token. Both are shown at their own
host paths (read-only binds: a socket there can be connected to, nothing written). Here, below
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


def view_paths() -> list[dict[str, object]]:
    """The two directories as declared read-only paths of a view, made if missing."""
    found = []
    for path in (agents_dir(), bridges_dir()):
        path.mkdir(parents=True, exist_ok=True)
        found.append({"path": os.path.realpath(path), "writable": False})
    return found
