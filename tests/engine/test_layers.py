"""Layers only point down: agents, scoring, the sandbox and the engine never import the server
(the protocol layer) or the MCP SDK; only `server/mcp_app.py` imports `mcp`."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "mcp_evalserver"
#: Modules above the engine: the CLI and the server assemble everything else.
TOP = ("cli", "server")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules() -> dict[str, set[str]]:
    return {
        str(path.relative_to(PACKAGE)): _imports(path)
        for path in sorted(PACKAGE.rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def test_no_module_below_the_server_imports_the_server_or_the_mcp_sdk() -> None:
    below = {name: imports for name, imports in _modules().items() if not name.startswith(TOP)}
    assert "agents/command.py" in below
    offenders = {
        name: sorted(
            i
            for i in imports
            if i.startswith(("mcp_evalserver.server", "mcp_evalserver.cli"))
            or i == "mcp"
            or i.startswith("mcp.")
        )
        for name, imports in below.items()
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_only_mcp_app_imports_the_mcp_sdk() -> None:
    users = sorted(
        name
        for name, imports in _modules().items()
        if any(i == "mcp" or i.startswith("mcp.") for i in imports)
    )
    assert users == ["server/mcp_app.py"]
