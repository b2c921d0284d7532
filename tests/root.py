"""Root: sandboxes need it for mount namespaces, overlayfs and cgroups.

A test marked `root` gets `require_root()` from tests/conftest.py; a test that needs root only
for some of its parameters calls it itself.
"""

from __future__ import annotations

import os

import pytest


def require_root() -> None:
    """Root-only tests fail under CI when not root (never silently skipped), else skip."""
    if os.geteuid() != 0:
        reason = "needs root for mount namespaces, overlayfs and cgroups"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
