"""A plugin module that leaves a file behind when it is imported (a test fixture).

Tells whether a server imported a module a client named: the file named by
`$MCP_EVALSERVER_TEST_IMPORT_MARKER` exists once it did. Its agent and scorer are the scripted
ones (`tests/plugins/scripted.py`).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.plugins.scripted import agent, scorer

__all__ = ["agent", "scorer"]

if marker := os.environ.get("MCP_EVALSERVER_TEST_IMPORT_MARKER"):
    Path(marker).touch()
