"""A token holder names a Harbor task's build context only under the allowed directories."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.server.privileges import Privileges
from mcp_evalserver.spec.campaign import CampaignSpec, load_tasks
from mcp_evalserver.spec.harbor import harbor_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "harbor"


def test_an_inline_harbor_task_cannot_build_from_a_directory_outside_the_allowed_ones(
    tmp_path: Path,
) -> None:
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    task = load_tasks(shutil.copytree(EXAMPLES / "fractional", outside / "fractional"))[0]
    spec = CampaignSpec(tasks=[task])  # inline: the metadata names the context itself
    with pytest.raises(InvalidInput, match=r"task fractional: metadata.harbor.build_context"):
        Privileges.for_http(allow_paths=[allowed]).admit(spec, tmp_path)


def test_a_harbor_folder_under_an_allowed_directory_is_admitted_with_its_real_paths(
    tmp_path: Path,
) -> None:
    allowed = tmp_path / "allowed"
    shutil.copytree(EXAMPLES / "fractional", allowed / "fractional")
    (tmp_path / "link").symlink_to(allowed)
    spec = CampaignSpec(tasks=str(tmp_path / "link" / "fractional"))
    admitted = Privileges.for_http(allow_paths=[allowed]).admit(spec, tmp_path)
    harbor = harbor_of(admitted.task_list()[0].metadata)
    assert harbor is not None
    assert harbor.build_context == str(allowed / "fractional" / "environment")
