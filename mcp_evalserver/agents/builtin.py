"""Agents that need no model: the floor (noop), the ceiling (oracle), and Python plugins."""

from __future__ import annotations

from mcp_evalserver.agents.base import Agent, Submission, TrajectoryContext
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.plugins import load_factory
from mcp_evalserver.spec import AgentConfig, NoopAgentConfig, OracleAgentConfig


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


def build_agent(config: AgentConfig) -> Agent:
    """Makes the agent a config describes.

    Raises:
        InvalidInput: a plugin factory cannot be loaded or returns something not an Agent.
    """
    if isinstance(config, NoopAgentConfig):
        return NoopAgent()
    if isinstance(config, OracleAgentConfig):
        return OracleAgent()
    agent = load_factory(config.factory)(config.options)
    if not isinstance(agent, Agent):
        raise InvalidInput(f"factory {config.factory!r} returned {type(agent).__name__}, not Agent")
    return agent
