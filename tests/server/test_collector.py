"""A serving process settles its garbage collector once its app has loaded (server/collector.py):
what it loaded is frozen, and young collections wait for `YOUNG_THRESHOLD` objects.

These tests change this process's collector and put it back after.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.server import http_server
from mcp_evalserver.server.collector import YOUNG_THRESHOLD, settle_for_serving
from mcp_evalserver.server.http_options import HttpOptions
from mcp_evalserver.server.transport.http import listening_socket
from testsupport.rawmcp import RawSession
from testsupport.servers import TOKEN


@pytest.fixture
def collector_put_back() -> Iterator[None]:
    threshold = gc.get_threshold()
    assert gc.get_freeze_count() == 0, "this process's collector was settled before the test"
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_settling_freezes_what_is_alive_and_raises_only_the_young_threshold(
    collector_put_back: None,
) -> None:
    _, middle, oldest = gc.get_threshold()
    loaded = {"a module's": ["container"]}
    settle_for_serving()
    made_after = {"a call's": ["container"]}
    tracked = {id(o) for o in gc.get_objects()}  # the frozen generation is not listed
    assert id(loaded) not in tracked
    assert id(made_after) in tracked
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, oldest)


@pytest.mark.anyio
async def test_an_http_server_settles_its_collector_once_its_app_is_ready(
    tmp_path: Path, collector_put_back: None
) -> None:
    server, _ = http_server._server(tmp_path, HttpOptions(host="127.0.0.1", token=TOKEN))
    sock = listening_socket("127.0.0.1", 0)
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(server.serve, sockets=[sock]))
        with anyio.fail_after(60):
            session = RawSession("127.0.0.1", sock.getsockname()[1], TOKEN)
            await session.open()  # answered once the app is ready: it waits for it
            await session.close()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        server.should_exit = True
