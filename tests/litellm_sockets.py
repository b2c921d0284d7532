"""A mark for tests that run litellm's real model client.

litellm keeps the HTTP clients it makes in a cache of its own and never closes them: their
sockets are closed when the garbage collector finalizes them, which warns (`ResourceWarning:
unclosed <socket.socket ...>`, turned into a test error by `filterwarnings = error`) in whichever
test the collector happens to run. Where that lands depends on allocation, not on the code under
test, so these tests ignore that one warning, and only it.
"""

from __future__ import annotations

import pytest

LITELLM_SOCKETS = pytest.mark.filterwarnings(
    "ignore:unclosed <socket.socket:ResourceWarning",
    "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning",
)
