"""Builds the agent a config describes."""

from __future__ import annotations

from mcp_evalserver.agents.base import Agent
from mcp_evalserver.agents.builtin import NoopAgent, OracleAgent, ValidationAgent
from mcp_evalserver.agents.command import EndpointFactory
from mcp_evalserver.agents.external import ClaimBoard, ExternalAgent
from mcp_evalserver.agents.predictions import PredictionsAgent
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.plugins import load_factory
from mcp_evalserver.spec.agents import (
    AgentConfig,
    CliAgentConfig,
    CommandAgentConfig,
    ExternalAgentConfig,
    MiniSweAgentConfig,
    NoopAgentConfig,
    OpenAIAgentConfig,
    OracleAgentConfig,
    PredictionsAgentConfig,
    ValidationAgentConfig,
)


def build_agent(
    config: AgentConfig,
    *,
    claims: ClaimBoard | None = None,
    trajectory_endpoints: EndpointFactory | None = None,
) -> Agent:
    """Makes the agent a config describes; external agents publish on `claims`, `command`
    agents have their programs' MCP endpoints served by `trajectory_endpoints` (both come from
    where the server is assembled: agents never import it).

    Raises:
        InvalidInput: a plugin factory cannot be loaded or returns something not an Agent, or
            an external agent has no claim board (only the MCP server has one), or a command
            agent no endpoint factory.
    """
    if isinstance(config, ExternalAgentConfig):
        if claims is None:
            raise InvalidInput(
                "agent type 'external' is driven by MCP clients: start this campaign through "
                "the server (`mcp-evalserver --stdio` or `--http`, tool start_campaign or resume)"
            )
        return ExternalAgent(config, claims)
    if isinstance(config, NoopAgentConfig):
        return NoopAgent()
    if isinstance(config, OracleAgentConfig):
        return OracleAgent()
    if isinstance(config, ValidationAgentConfig):
        return ValidationAgent(config.runs)
    if isinstance(config, OpenAIAgentConfig):
        # Imported here: importing the openai client takes seconds, which every CLI call
        # and every campaign without this agent would pay.
        from mcp_evalserver.agents.openai_agent import OpenAIAgent

        return OpenAIAgent(config)
    if isinstance(config, PredictionsAgentConfig):
        return PredictionsAgent(config)
    if isinstance(config, CommandAgentConfig):
        if trajectory_endpoints is None:
            raise InvalidInput(
                "agent type 'command' serves its program an MCP endpoint, which this caller "
                "cannot: run the campaign with `mcp-evalserver run`/`resume` or through the server"
            )
        from mcp_evalserver.agents.command import CommandAgent

        return CommandAgent(config, trajectory_endpoints)
    if isinstance(config, CliAgentConfig):
        from mcp_evalserver.agents.cli.agent import CliAgent

        return CliAgent(config)
    if isinstance(config, MiniSweAgentConfig):
        # Imported here: mini-swe-agent is an optional extra, and brings litellm.
        from mcp_evalserver.agents.minisweagent.agent import MiniSweAgent

        return MiniSweAgent(config)
    agent = load_factory(config.factory)(config.options)
    if not isinstance(agent, Agent):
        raise InvalidInput(f"factory {config.factory!r} returned {type(agent).__name__}, not Agent")
    return agent
