"""Server tests that take `workers` run against `--workers 1` (one process) and `--workers 4`
(four processes on one port, one of them driving campaigns): the representative set that
proves the front door of many processes keeps what one process does (auth, DNS-rebinding
protection, 50 concurrent clients of both protocol eras, logging and its GET stream)."""

from __future__ import annotations

import pytest


@pytest.fixture(params=[1, 4], ids=["workers1", "workers4"])
def workers(request: pytest.FixtureRequest) -> int:
    number: int = request.param
    return number
