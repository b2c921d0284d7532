"""mcp-evalserver: crash-safe, isolated evaluation campaigns for AI agents, driven over MCP.

The names a plugin author needs (a `python` agent or scorer, a spec built in code) are here;
every other module is the package's own and may move. They load on first use, so importing
`mcp_evalserver.errors` (as the sandbox's host side does) does not load the engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Each public name and the module that defines it.
_PUBLIC = {
    "Agent": "mcp_evalserver.agents.base",
    "TrajectoryContext": "mcp_evalserver.agents.base",
    "Scorer": "mcp_evalserver.scoring.base",
    "ScoreResult": "mcp_evalserver.scoring.base",
    "ScoringContext": "mcp_evalserver.scoring.base",
    "Submission": "mcp_evalserver.spec.submission",
    "Usage": "mcp_evalserver.spec.submission",
    "CampaignSpec": "mcp_evalserver.spec.campaign",
    "Limits": "mcp_evalserver.spec.campaign",
    "Task": "mcp_evalserver.spec.campaign",
    "load_spec": "mcp_evalserver.spec.campaign",
    "parse_spec": "mcp_evalserver.spec.campaign",
    "AgentConfig": "mcp_evalserver.spec.agents",
    "ScorerConfig": "mcp_evalserver.spec.scorers",
    "EvalServerError": "mcp_evalserver.errors",
    "InfrastructureError": "mcp_evalserver.errors",
}

__all__ = [
    "Agent",
    "AgentConfig",
    "CampaignSpec",
    "EvalServerError",
    "InfrastructureError",
    "Limits",
    "ScoreResult",
    "Scorer",
    "ScorerConfig",
    "ScoringContext",
    "Submission",
    "Task",
    "TrajectoryContext",
    "Usage",
    "__version__",
    "load_spec",
    "parse_spec",
]

if TYPE_CHECKING:
    from mcp_evalserver.agents.base import Agent, TrajectoryContext
    from mcp_evalserver.errors import EvalServerError, InfrastructureError
    from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
    from mcp_evalserver.spec.agents import AgentConfig
    from mcp_evalserver.spec.campaign import CampaignSpec, Limits, Task, load_spec, parse_spec
    from mcp_evalserver.spec.scorers import ScorerConfig
    from mcp_evalserver.spec.submission import Submission, Usage


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'mcp_evalserver' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
