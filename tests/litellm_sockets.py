"""A mark for tests that run litellm's real model client: their litellm clients are closed.

litellm keeps the HTTP clients it makes (an `openai.OpenAI` per endpoint and key, httpx
handlers, its `module_level_client`) in a process-wide cache and never closes one it still
holds. In a server that is bounded (at most 200 clients, evicted ones closed, an endpoint's
client reused across campaigns), but each test serves a fake endpoint on a new port, so its
clients and their loopback connections would outlive it and be finalized by the garbage
collector in whichever later test it runs in (`unclosed <socket.socket ...>`), failing that test.

Worse, litellm drops clients unclosed itself: concurrent first calls to one endpoint each make a
client, and its cache's `set_cache` overwrites the key without closing the one it replaces. That
client's socket can be finalized during the test, so the marked tests ignore that warning (only
it); after each, the held clients are closed and the dropped ones finalized, so nothing of
litellm's is left for a later test, which keeps `filterwarnings = error` in full.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

#: The marks, for a module's `pytestmark` (`[..., *LITELLM_SOCKETS]`).
LITELLM_SOCKETS = [
    pytest.mark.usefixtures("close_litellm_clients"),
    pytest.mark.filterwarnings(
        "ignore:unclosed <socket.socket:ResourceWarning",
        "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning",
    ),
]

_Test = TypeVar("_Test", bound=Callable[..., Any])


def litellm_sockets(test: _Test) -> _Test:
    """The marks, as a decorator for one test."""
    for mark in LITELLM_SOCKETS:
        test = mark(test)
    return test


@pytest.fixture
def close_litellm_clients() -> Iterator[None]:
    """After the test, closes every client litellm holds and finalizes those it dropped."""
    yield
    litellm = sys.modules.get("litellm")
    if litellm is None:
        return  # never imported: it made nothing
    # Its cache and module-level clients are made on first access: only made ones are read.
    made = vars(litellm)
    cache = made.get("in_memory_llm_clients_cache")
    held: list[Any] = list(cache.cache_dict.values()) if cache is not None else []
    held += [made[name] for name in ("module_level_client", "module_level_aclient") if name in made]
    for client in held:
        _close(client)
    if cache is not None:
        cache.flush_cache()
    with warnings.catch_warnings():
        # The clients litellm dropped are reference cycles: finalized here, not in a later test.
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def _close(client: Any) -> None:
    """Closes one of litellm's clients: sync ones in place, async ones on a loop of their own
    (the test's loop is gone by teardown)."""
    close = getattr(client, "close", None) or getattr(client, "aclose", None)
    if close is None:
        return
    if inspect.iscoroutinefunction(close):
        asyncio.run(close())
    else:
        close()
