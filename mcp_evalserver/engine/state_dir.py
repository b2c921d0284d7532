"""Where the state directory is by default: its own module, so that the command line finds it
without importing the engine (a server's first answer waits for every import)."""

from __future__ import annotations

import os
from pathlib import Path

STATE_DIR_ENV = "MCP_EVALSERVER_STATE_DIR"


def default_state_dir() -> Path:
    """`$MCP_EVALSERVER_STATE_DIR`, else `$XDG_DATA_HOME/mcp-evalserver`, else ~/.local/share."""
    if configured := os.environ.get(STATE_DIR_ENV):
        return Path(configured)
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "mcp-evalserver"
