"""Shared by the server tests: specs over answers and over calc repositories, a diff scorer.

Server processes, clients, checked tool calls and the repositories themselves are in
testsupport/, which the benchmarks share.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp import Client

from testsupport.repos import git_repo
from testsupport.servers import call

#: Both protocol eras a client can speak: the initialize handshake and 2026-07-28.
MODES = ["legacy", "2026-07-28"]


def answer_spec(count: int, agent: str = "oracle", **fields: Any) -> dict[str, Any]:
    """Answer-only tasks t1..tN (gold answer N squared), graded by exact match."""
    tasks = [
        {"id": f"t{n}", "prompt": f"{n} squared?", "answer": str(n * n)}
        for n in range(1, count + 1)
    ]
    spec: dict[str, Any] = {"name": "answers", "tasks": tasks, "agent": {"type": agent}}
    spec["limits"] = {"retry_base_delay_s": 0.0}
    spec.update(fields)
    return spec


def repo_spec(root: Path, count: int, lease_s: float = 300.0, **limits: Any) -> dict[str, Any]:
    """External trajectories over `count` repository tasks (one instance each)."""
    tasks = [
        {"id": f"calc{n}", "prompt": "make add() add", "path": str(git_repo(root / f"repo{n}"))}
        for n in range(count)
    ]
    limits.setdefault("concurrency", max(count, 1))
    limits.setdefault("per_instance", 4)
    return {
        "name": "external",
        "tasks": tasks,
        "agent": {"type": "external", "lease_s": lease_s},
        "scorer": {"type": "python", "factory": "tests.server.helpers:diff_scorer"},
        "limits": limits,
    }


def diff_scorer(options: dict[str, Any]) -> Any:
    """A scorer that resolves a trajectory when its patch turns `a - b` into `a + b`."""
    from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext

    class DiffScorer(Scorer):
        async def score(self, context: ScoringContext) -> ScoreResult:
            patch = context.submission.patch or ""
            fixed = "+    return a + b" in patch
            return ScoreResult(
                resolved=fixed, score=float(fixed), status="resolved" if fixed else "failed"
            )

    return DiffScorer()


async def attempt(client: Client, tool: str, **arguments: Any) -> str | None:
    """The tool's error text; or None when the server accepted the call, after letting what it
    started run to its end (so whatever it would send has been sent)."""
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        return " ".join(getattr(block, "text", "") for block in result.content)
    started = result.structured_content or {}
    if "sweep_id" in started:
        await call(client, "sweep_status", sweep_id=started["sweep_id"], wait_s=60)
    elif "campaign_id" in started:
        await call(client, "campaign_status", campaign_id=started["campaign_id"], wait_s=60)
    return None
