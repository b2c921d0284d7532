"""Shipping a `path` instance to a node without it: packed once, checked by sha256, unpacked whole.

These drive `materialize` as a node does, with the archive handed over already fetched; the ray
tests ship through a real object store to a node that cannot see the directory.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import anyio.lowlevel
import pytest

from mcp_evalserver import errors
from mcp_evalserver.sandbox.shipping import SHIPPED_DIR_ENV, Shipment, identity, materialize, pack

pytestmark = pytest.mark.anyio


class Fetched:
    """An already fetched archive: what awaiting the object reference gives a node."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.fetches = 0

    def __await__(self) -> Generator[Any, None, bytes]:
        self.fetches += 1
        yield from anyio.lowlevel.checkpoint().__await__()
        return self.data


def _tree(root: Path) -> Path:
    tree = root / "source" / "repo"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "mod.py").write_text("x = 1\n")
    (tree / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (tree / "run.sh").chmod(0o755)
    (tree / "link").symlink_to("pkg/mod.py")
    return tree


def _shipment(tree: Path, archive: object, destination: str) -> Shipment:
    data, digest = pack(str(tree))
    source = identity(str(tree))
    assert source is not None
    return Shipment(destination, digest, len(data), source, archive)


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(tmp_path / "registry"))
    return tmp_path / "registry"


async def test_a_node_without_the_directory_unpacks_it_once_with_modes_and_links(
    tmp_path: Path, registry: Path
) -> None:
    tree = _tree(tmp_path)
    fetched = Fetched(pack(str(tree))[0])
    destination = str(tmp_path / "node" / "repo")  # where the node lacks it
    shipment = _shipment(tree, fetched, destination)
    await materialize(destination, shipment)
    await materialize(destination, shipment)  # the second instance there reuses it
    assert fetched.fetches == 1
    assert Path(destination, "pkg", "mod.py").read_text() == "x = 1\n"
    assert os.access(Path(destination, "run.sh"), os.X_OK)
    assert os.readlink(Path(destination, "link")) == "pkg/mod.py"
    assert (registry / shipment.digest).read_text() == destination


async def test_the_drivers_own_directory_is_used_in_place_without_a_fetch(
    tmp_path: Path, registry: Path
) -> None:
    tree = _tree(tmp_path)
    fetched = Fetched(b"never read")
    await materialize(str(tree), _shipment(tree, fetched, str(tree)))
    assert fetched.fetches == 0


async def test_a_corrupt_archive_is_refused_and_leaves_nothing(
    tmp_path: Path, registry: Path
) -> None:
    tree = _tree(tmp_path)
    data = bytearray(pack(str(tree))[0])
    data[600] ^= 0xFF  # one flipped bit in transit
    destination = str(tmp_path / "node" / "repo")
    shipment = _shipment(tree, Fetched(bytes(data)), destination)
    with pytest.raises(errors.InfrastructureError, match="corrupt"):
        await materialize(destination, shipment)
    assert not os.path.exists(destination)
    assert (
        not list((tmp_path / "node").glob(".shipping-*")) if (tmp_path / "node").exists() else True
    )


async def test_a_different_directory_at_the_path_on_the_node_is_named_not_overwritten(
    tmp_path: Path, registry: Path
) -> None:
    tree = _tree(tmp_path)
    destination = tmp_path / "node" / "repo"
    destination.mkdir(parents=True)
    (destination / "theirs.txt").write_text("keep me\n")
    shipment = _shipment(tree, Fetched(pack(str(tree))[0]), str(destination))
    with pytest.raises(errors.InvalidInput, match="different directory"):
        await materialize(str(destination), shipment)
    assert (destination / "theirs.txt").read_text() == "keep me\n"
