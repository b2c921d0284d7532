"""A test plugin agent: makes its workspace, says so, then runs a command that does not end."""

from __future__ import annotations

from typing import Any

import anyio

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.spec.submission import Submission

#: One event per test (`options["key"]`), set once the command is on its way to the node.
HOLDING: dict[str, anyio.Event] = {}


class HoldingAgent(Agent):
    def __init__(self, key: str) -> None:
        self.key = key

    async def generate(self, context: TrajectoryContext) -> Submission:
        workspace = await context.sandbox.workspace()
        HOLDING[self.key].set()
        await workspace.exec("sleep 600")
        return Submission(answer="never reached: the test cancels the campaign")


def agent(options: dict[str, Any]) -> Agent:
    return HoldingAgent(str(options["key"]))
