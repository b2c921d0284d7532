"""The command line: `mcp-evalserver` and its subcommands, over the engine and the server."""

from mcp_evalserver.cli.main import main

__all__ = ["main"]
