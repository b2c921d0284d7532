"""The package root names what a plugin author needs, and only that, loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import mcp_evalserver
from mcp_evalserver.agents.base import Agent
from mcp_evalserver.scoring.base import Scorer
from mcp_evalserver.spec.submission import Submission


def test_every_public_name_resolves_to_the_class_the_engine_uses() -> None:
    for name in mcp_evalserver.__all__:
        assert getattr(mcp_evalserver, name) is not None, name
    assert mcp_evalserver.Agent is Agent
    assert mcp_evalserver.Scorer is Scorer
    assert mcp_evalserver.Submission is Submission


def test_a_name_the_root_does_not_export_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="CampaignRunner"):
        getattr(mcp_evalserver, "CampaignRunner")  # noqa: B009 (a name mypy rightly rejects)


def test_importing_errors_loads_neither_the_engine_nor_pydantic_models_of_the_spec() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, mcp_evalserver.errors; "
            "print(sorted(m for m in sys.modules if m.startswith('mcp_evalserver')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert loaded.strip() == "['mcp_evalserver', 'mcp_evalserver.errors']"
