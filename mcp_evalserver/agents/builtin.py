"""Agents that need no model: the floor (noop) and the ceiling (oracle)."""

from __future__ import annotations

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.spec.submission import Submission


class NoopAgent(Agent):
    """Submits nothing: what a campaign scores when the agent does nothing at all."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        return Submission()


class OracleAgent(Agent):
    """Submits the task's gold answer and gold patch: every task should then pass."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        task = context.task
        if task.answer is None and task.patch is None:
            raise InvalidInput(f"task {task.id} has no gold `answer` or `patch` for the oracle")
        return Submission(answer=task.answer, patch=task.patch)
