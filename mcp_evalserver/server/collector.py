"""The garbage collector's settings in a process that serves MCP (stdio, HTTP, each worker).

CPython collects its youngest generation once 700 more container objects are alive than after
the last collection. A server with 32 calls in flight holds more than that between two
answers, so a young collection ran every few calls, walked every in-flight call's objects and
promoted them; the promoted ones made full collections, each a walk through everything the
imports made (~130,000 objects: modules, classes, pydantic schemas). Measured on a `--workers
1` server (the collector's own thread time, gc.callbacks): 0.11-0.28 ms of CPU per tool call,
10-20% of the worker's, more for a `sandbox_exec` (its objects live longer, so more survive)
than for a `read_file` or a trivial call.
"""

from __future__ import annotations

import gc

#: Container objects alive beyond those after the last young collection before the next one.
#: 32 calls in flight stay under it (at most two young collections per 1,280 calls, measured),
#: and the garbage it lets wait (cycles only: the rest is freed at once) is a few megabytes.
YOUNG_THRESHOLD = 10_000


def settle_for_serving() -> None:
    """Called once what a server keeps until it ends has loaded (modules, schemas, the app, its
    service): all of it becomes permanent for the collector (`gc.freeze`: later collections
    never walk it), and the young generation is collected at `YOUNG_THRESHOLD`."""
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, oldest)
