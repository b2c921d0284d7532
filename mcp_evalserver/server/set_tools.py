"""Evaluation sets over MCP (issue 42): `start_eval_set` starts, resumes or extends a set,
`cancel_eval_set` stops it, and the resource `set://{set_id}/leaderboard` reads its leaderboard
with each agent's status. Declared here over the service; `server.mcp_app` (the one module that
speaks MCP) registers them.

Two tools and a resource, not a tool per verb: the tool list is read by models every turn.
Each agent's campaign is an ordinary campaign of the server (`EvalService.launch_together`
runs them on one pool and shared limits), so campaign_status, its report and export work on
each as they do on any other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, Field

from mcp_evalserver.engine.eval_sets import EvalSet, EvalSetStore
from mcp_evalserver.engine.leaderboard import build_leaderboard, render_leaderboard_markdown
from mcp_evalserver.errors import Conflict, InvalidInput
from mcp_evalserver.server.front.service import FrontService
from mcp_evalserver.server.service import EvalService
from mcp_evalserver.server.surface import SPEC_SCHEMA_URI
from mcp_evalserver.spec.eval_set import is_eval_set, parse_eval_set

LEADERBOARD_URI = "set://{set_id}/leaderboard"

SetSpecArgument = Annotated[
    dict[str, Any] | None,
    Field(
        description="A campaign spec (schema: "
        f'{SPEC_SCHEMA_URI}) with "agents": {{"name": {{"type": ...}}, ...}} (or a "matrix" '
        'of "models" x "agents") instead of "agent". Omit it to resume set_id.'
    ),
]
SetId = Annotated[
    str | None,
    Field(description="Default `<name>-<time>-<random>`; an existing set's id resumes/extends it."),
]


class SetAgent(BaseModel):
    """One agent of a set: its campaign and where it stands."""

    campaign_id: str
    status: str = Field(description="running, finished or cancelled (from its ledger).")
    active: bool = Field(description="Whether this server is running it right now.")
    done: int
    trajectories: int
    pass_rate: float | None


class EvalSetStatus(BaseModel):
    """Where an evaluation set stands, agent by agent."""

    set_id: str
    name: str
    agents: dict[str, SetAgent]
    next: str = Field(description="What to do next.")


def set_status(service: EvalService, evalset: EvalSet) -> EvalSetStatus:
    """Each agent's campaign as the server sees it now (live where it runs here).

    Raises:
        NotFound: a campaign of the set is missing from the state directory.
    """
    agents: dict[str, SetAgent] = {}
    for agent, campaign_id in evalset.campaigns.items():
        status = service.status(campaign_id)
        agents[agent] = SetAgent(
            campaign_id=campaign_id, status=status.status, active=status.active,
            done=status.done, trajectories=status.trajectories, pass_rate=status.pass_rate,
        )  # fmt: skip
    board = LEADERBOARD_URI.format(set_id=evalset.id)
    if any(a.active for a in agents.values()):
        next_step = (
            f"follow a campaign with campaign_status (wait_s > 0); read {board}; stop all "
            "with cancel_eval_set"
        )
    elif all(a.status == "finished" for a in agents.values()):
        next_step = f"read {board}; add an agent with start_eval_set(set_id, spec)"
    else:
        next_step = f"resume with start_eval_set(set_id={evalset.id!r}); read {board}"
    return EvalSetStatus(set_id=evalset.id, name=evalset.name, agents=agents, next=next_step)


async def start_set(
    service: EvalService, spec: dict[str, Any] | None, set_id: str | None
) -> EvalSetStatus:
    """Creates, resumes or extends a set, and runs its unfinished campaigns together.

    Raises:
        InvalidInput: no spec and no set to resume, a spec that is not a set, or a set spec
            refused (the field named); nothing is recorded then.
        NotFound: `set_id` without `spec` names no set.
        Conflict: the set runs here and the spec adds agents, or this worker of `--workers N`
            does not drive campaigns.
    """
    if isinstance(service, FrontService) and not service.driving:
        raise Conflict(
            "evaluation sets run in the process that drives campaigns, and this worker of "
            "--workers N does not; use a server without --workers, or `mcp-evalserver run SET`"
        )
    sets = EvalSetStore(service.store)
    if spec is None:
        if set_id is None:
            raise InvalidInput("spec: give a set spec (with `agents`), or a set_id to resume")
        evalset = sets.load(set_id)
    else:
        if not is_eval_set(spec):
            raise InvalidInput(
                'spec: a set names "agents" ({"name": {"type": ...}}) or a "matrix" instead '
                'of "agent"; for one agent call start_campaign'
            )
        if set_id is not None and sets.exists(set_id):
            _refuse_extending_while_running(service, sets.load(set_id), spec)
        evalset = await sets.create(spec, service.base_dir, set_id, admit=service.admit)
    statuses = {cid: service.status(cid) for cid in evalset.campaigns.values()}
    if not any(s.active for s in statuses.values()):
        unfinished = [cid for cid, s in statuses.items() if s.status != "finished"]
        if unfinished:
            await service.launch_together(unfinished)
    return set_status(service, evalset)


def _refuse_extending_while_running(
    service: EvalService, evalset: EvalSet, spec: dict[str, Any]
) -> None:
    """A set's new agents join its shared pool only when it starts: refuses them while it runs.

    Raises:
        Conflict: the spec adds agents and a campaign of the set runs here.
    """
    _, per_agent = parse_eval_set(spec)
    added = sorted(set(per_agent) - set(evalset.campaigns))
    running = [a for a, cid in evalset.campaigns.items() if service.status(cid).active]
    if added and running:
        raise Conflict(
            f"set {evalset.id} is running ({', '.join(running)}): agents "
            f"{', '.join(added)} can join it once it stops; call cancel_eval_set, then "
            "start_eval_set again with this spec (nothing finished runs twice)"
        )


async def cancel_set(service: EvalService, set_id: str) -> EvalSetStatus:
    """Stops every campaign of the set that runs here; what they recorded stays.

    Raises:
        NotFound: no such set.
        Conflict: none of its campaigns runs here.
    """
    evalset = EvalSetStore(service.store).load(set_id)
    running = [cid for cid in evalset.campaigns.values() if service.status(cid).active]
    if not running:
        raise Conflict(
            f"set {set_id} is not running in this server; nothing to cancel. Resume it with "
            f"start_eval_set(set_id={set_id!r})"
        )
    for campaign_id in running:
        await service.cancel(campaign_id)
    return set_status(service, evalset)


def leaderboard(service: EvalService, set_id: str) -> str:
    """The set's leaderboard in Markdown, from its campaigns' ledgers.

    Raises:
        NotFound: no such set.
    """
    sets = EvalSetStore(service.store)
    evalset = sets.load(set_id)
    return render_leaderboard_markdown(build_leaderboard(evalset, sets.states(evalset)))


@dataclass(frozen=True)
class ServiceTool:
    """A tool that is a function over the server's `EvalService` (its first parameter), whose
    other parameters are the tool's arguments and whose docstring's first paragraph is its
    description; `idempotent`: calling it again with the same arguments changes nothing more.
    `server.mcp_app` registers each (only it speaks MCP)."""

    run: Callable[..., Awaitable[BaseModel]]
    idempotent: bool


async def start_eval_set(
    service: EvalService, spec: SetSpecArgument = None, set_id: SetId = None
) -> EvalSetStatus:
    """Evaluate several agents on one task set: one campaign per agent, each task's instance
    provisioned once for all, the limits shared. Returns at once. With an existing set_id:
    resumes it, and adds the spec's new agents (same tasks, samples, scorer).

    Raises:
        EvalServerError: as `start_set`.
    """
    return await start_set(service, spec, set_id)


async def cancel_eval_set(
    service: EvalService,
    set_id: Annotated[str, Field(description="From start_eval_set.")],
) -> EvalSetStatus:
    """Stop every campaign of a set; what they recorded stays (start_eval_set resumes).

    Raises:
        EvalServerError: as `cancel_set`.
    """
    return await cancel_set(service, set_id)


SET_TOOLS = (ServiceTool(start_eval_set, idempotent=False), ServiceTool(cancel_eval_set, True))
