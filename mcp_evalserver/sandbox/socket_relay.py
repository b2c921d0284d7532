"""A unix socket on a node that relays each connection to an address over TCP.

What lets a CLI agent's workspace on a Ray node reach its model bridge, which the driver
serves: the node's actor opens one of these in the node's bridges directory (a directory of its
own, named by 128 random bits, which every view of the node shows read-only), and the
workspace's forwarder connects to it as it would to a bridge on its own machine. Each
connection is relayed byte for byte to the bridge's TCP listener on the driver, which answers
only the trajectory's token. The workspace itself still has no network.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
from pathlib import Path

from mcp_evalserver.sandbox.agent_paths import bridges_dir, in_view


class SocketRelay:
    """One relay: `open` it on the node's event loop, `close` it when the run is over."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.directory = Path(os.path.realpath(bridges_dir())) / secrets.token_hex(16)
        self.path = self.directory / "model.sock"
        self._server: asyncio.AbstractServer | None = None

    async def open(self) -> str:
        """Listens; returns where the workspace's views show the socket.

        Raises:
            OSError: the socket cannot be made.
        """
        self.directory.parent.mkdir(parents=True, exist_ok=True)
        self.directory.mkdir(mode=0o755)
        self._server = await asyncio.start_unix_server(self._relay, path=str(self.path))
        os.chmod(self.path, 0o666)  # sandboxed processes are uid 0 without capabilities
        return in_view(self.path)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        finally:
            writer.close()
            upstream_writer.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copies until the source ends, then ends the sink's writing side (HTTP half-closes)."""
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            sink.write_eof()
