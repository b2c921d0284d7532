"""The MCP SDK's own bare server: the floor bench/front.py measures ours against.

`python -m bench.bare_sdk [--json]` serves one tool, `trivial` (no arguments, returns at once),
over streamable HTTP with uvicorn (httptools, as ours), answering with SSE (the SDK's default)
or, with `--json`, `json_response=True`; prints its port on stdout, then serves until killed.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.bare_sdk` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import argparse
import logging
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer


def serve(json_response: bool) -> None:
    logging.basicConfig(level=logging.WARNING)  # the SDK logs each session it opens at INFO
    server: MCPServer = MCPServer("bare")

    @server.tool()
    def trivial() -> dict[str, int]:
        """Returns at once."""
        return {"total": 0}

    app = server.streamable_http_app(json_response=json_response, max_sessions=None)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(app, http="httptools", log_level="warning", timeout_keep_alive=3600)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="json_response=True")
    serve(parser.parse_args(sys.argv[1:]).json)
