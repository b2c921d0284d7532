"""Serving a stdlib HTTP server from a thread for the length of a block (test fakes)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer


@contextmanager
def serving_in_thread(server: ThreadingHTTPServer) -> Iterator[str]:
    """Serves `server` until the block ends; yields its `http://host:port` address."""
    # Handler threads of kept-alive connections must not hold up the test at close.
    server.block_on_close = False
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
