"""Agents that need no model: the floor (noop), the ceiling (oracle), and both by turns
(validation)."""

from __future__ import annotations

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.spec.harbor import HarborTask, decoded, harbor_of
from mcp_evalserver.spec.submission import Submission

#: Where the oracle puts a Harbor task's solution/ (outside the workdir: not in the diff).
SOLUTION_DIR = "/solution"


class NoopAgent(Agent):
    """Submits nothing: what a campaign scores when the agent does nothing at all."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        return Submission()


class OracleAgent(Agent):
    """Submits the task's gold answer and gold patch: every task should then pass."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        task = context.task
        harbor = harbor_of(task.metadata)
        if harbor is not None:
            return await _solve(context, harbor)
        if task.answer is None and task.patch is None:
            raise InvalidInput(f"task {task.id} has no gold `answer` or `patch` for the oracle")
        return Submission(answer=task.answer, patch=task.patch)


class ValidationAgent(Agent):
    """The gold submission for the first `runs` samples of a task, nothing for the next
    `runs`: what `mcp-evalserver validate` runs to find broken, trivial and flaky tasks."""

    def __init__(self, runs: int) -> None:
        self.runs = runs

    async def generate(self, context: TrajectoryContext) -> Submission:
        if context.sample < self.runs:
            return await OracleAgent().generate(context)
        return Submission()


async def _solve(context: TrajectoryContext, harbor: HarborTask) -> Submission:
    """Runs a Harbor task's solution/solve.sh in the trajectory's workspace, from the workdir
    (with `[solution] env`, within `[agent] timeout_sec`); submits the workdir's diff."""
    files = decoded(harbor.solution)
    if "solve.sh" not in files:
        raise InvalidInput(f"{harbor.directory}/solution/solve.sh is missing: the oracle runs it")
    workspace = await context.sandbox.workspace()
    for name, data in files.items():
        mode = 0o755 if f"solution/{name}" in harbor.executable else 0o644
        await workspace.write_file(f"{SOLUTION_DIR}/{name}", data, mode=mode)
    result = await workspace.exec(
        f"bash {SOLUTION_DIR}/solve.sh",
        timeout=harbor.agent_timeout_s or 600.0,
        env=harbor.solution_env,
    )
    if not result.ok:
        why = "timed out" if result.timed_out else f"exited {result.exit_code}"
        raise InvalidInput(
            f"{harbor.directory}/solution/solve.sh {why}: {(result.stderr or result.stdout)[-500:]}"
        )
    return Submission(patch=await workspace.diff() or None)
