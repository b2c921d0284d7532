"""A same-size edit made within the second of the base commit must still show in the diff.

Git trusts an index entry whose stat data matches unless it is "racily clean" against the index
file's mtime; a throwaway index with a fresh mtime once hid such edits about one time in ten.
"""

from __future__ import annotations

import anyio
import pytest

from mcp_evalserver.sandbox.base import Instance
from tests.sandbox.conftest import BackendUnderTest

pytestmark = pytest.mark.anyio

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
SETUP = (
    "git init -q . && git config user.email t@t && git config user.name t",
    f"printf '{BUGGY}' > calc.py && git add -A && git commit -qm base",
)


async def _edit_and_diff(instance: Instance, name: str, empty: list[str]) -> None:
    workspace = await instance.workspace(name)
    try:
        await workspace.write_file("calc.py", FIXED)
        if not await workspace.diff():
            empty.append(name)
    finally:
        await workspace.destroy()


async def test_a_same_size_edit_right_after_the_base_commit_is_in_the_diff(
    backend: BackendUnderTest,
) -> None:
    empty: list[str] = []
    instances: list[Instance] = []

    async def provision() -> None:
        instances.append(await backend.backend.instance(backend.spec(SETUP)))

    with anyio.fail_after(240):
        for round_number in range(8):
            # The round's instances at once: each base commit is as fresh as the last one's
            # when the edits start (one after another, the first waited for the others).
            async with anyio.create_task_group() as group:
                for _ in range(3):
                    group.start_soon(provision)
            async with anyio.create_task_group() as group:
                for number, instance in enumerate(instances):
                    for sample in ("a", "b"):
                        group.start_soon(
                            _edit_and_diff, instance, f"r{round_number}i{number}{sample}", empty
                        )
            async with anyio.create_task_group() as group:
                for instance in instances:
                    group.start_soon(instance.aclose)
            instances.clear()
    assert empty == []
