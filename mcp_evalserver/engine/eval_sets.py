"""Evaluation sets: one campaign per agent under a set id, run together on shared instances.

A set is a manifest (`sets/<id>.json` in the state directory: its name and, per agent, the id
of its campaign) beside ordinary campaigns, each with its own ledger, report and resume. The
set's campaigns run in one process on one sandbox pool: each task's instance is provisioned
once for every agent and released when the last agent's last trajectory of it is scored; the
set's limits (trajectories, scoring, provisioning, per instance) are shared, so the scheduler
interleaves the agents rather than running them one after another. Extending a set adds
campaigns for new agents on the same tasks, samples and scorer; only theirs run then.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from mcp_evalserver.agents.command import EndpointFactory
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput, NotFound
from mcp_evalserver.runtime.atomic_files import write_atomically
from mcp_evalserver.runtime.limits import Limiters
from mcp_evalserver.runtime.sandboxes import SandboxPool
from mcp_evalserver.spec.campaign import CampaignSpec, parse_spec
from mcp_evalserver.spec.eval_set import comparable, parse_eval_set

SETS_DIR = "sets"


@dataclass
class EvalSet:
    """A set's manifest: its id, name, and each agent's campaign id, in the order added."""

    id: str
    name: str
    campaigns: dict[str, str] = field(default_factory=dict)
    created_ts: float = field(default_factory=time.time)


class EvalSetStore:
    """The sets of one state directory, beside its campaigns."""

    def __init__(self, campaigns: CampaignStore) -> None:
        self.campaigns = campaigns
        self.directory = campaigns.state_dir / SETS_DIR

    def path(self, set_id: str) -> Path:
        return self.directory / f"{set_id}.json"

    def exists(self, set_id: str) -> bool:
        return self.path(set_id).is_file()

    def list_ids(self) -> list[str]:
        """Set ids, oldest first."""
        if not self.directory.is_dir():
            return []
        found = sorted(self.directory.glob("*.json"), key=lambda p: p.stat().st_mtime)
        return [p.stem for p in found]

    def load(self, set_id: str) -> EvalSet:
        """A set's manifest.

        Raises:
            NotFound: no such set (the message lists those there are).
        """
        try:
            data = json.loads(self.path(set_id).read_text(encoding="utf-8"))
        except FileNotFoundError:
            known = ", ".join(self.list_ids()[-10:]) or "none"
            raise NotFound(
                f"no evaluation set {set_id!r} in {self.directory}; known: {known}; "
                "start one with `run SET.json` (a spec with `agents`)"
            ) from None
        return EvalSet(**data)

    def save(self, evalset: EvalSet) -> None:
        data = {"id": evalset.id, "name": evalset.name, "campaigns": evalset.campaigns,
                "created_ts": evalset.created_ts}  # fmt: skip
        write_atomically(self.path(evalset.id), (json.dumps(data, indent=2) + "\n").encode())

    def states(self, evalset: EvalSet) -> dict[str, CampaignState]:
        """Each agent's campaign, replayed from its ledger."""
        return {agent: self.campaigns.load(cid) for agent, cid in evalset.campaigns.items()}

    async def create(
        self,
        data: Mapping[str, Any],
        base_dir: Path | None,
        set_id: str | None = None,
        *,
        admit: Callable[[CampaignSpec], CampaignSpec] | None = None,
    ) -> EvalSet:
        """Creates a set from spec data, or extends set `set_id` with the agents it lacks.

        Every agent's campaign spec is checked before anything is recorded: an invalid agent,
        an agent of an existing name with another config, or agents that would need other
        tasks, samples or a scorer than the set's are refused with the field named. `admit`
        checks (and may resolve) each new agent's campaign spec too: a server's privileges.

        Raises:
            InvalidInput: as said above, or the set id is malformed; what `admit` raises.
        """
        spec, per_agent = parse_eval_set(dict(data))
        existing = self.load(set_id) if set_id is not None and self.exists(set_id) else None
        if set_id is None:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
            set_id = f"{spec.name}-{stamp}-{secrets.token_hex(2)}"
        elif not set_id.replace("-", "").replace("_", "").isalnum():
            raise InvalidInput(f"set id {set_id!r}: use letters, digits, '-' and '_'")
        evalset = existing or EvalSet(id=set_id, name=spec.name)
        reference: CampaignSpec | None = None
        if evalset.campaigns:
            reference = self.campaigns.load(next(iter(evalset.campaigns.values()))).spec
        new: dict[str, CampaignSpec] = {}
        for agent, campaign_data in per_agent.items():
            try:
                campaign = parse_spec(campaign_data, base_dir)
                campaign = campaign if admit is None else admit(campaign)
            except InvalidInput as exc:
                raise InvalidInput(f"set: agent {agent!r}: {exc}") from exc
            if agent in evalset.campaigns:
                recorded = self.campaigns.load(evalset.campaigns[agent]).spec
                if recorded.agent != campaign.agent:
                    raise InvalidInput(
                        f"set {evalset.id}: agent {agent!r} exists with another config; give "
                        "the new one another name"
                    )
                continue
            reference = reference or campaign
            comparable(reference, campaign, agent)
            new[agent] = campaign
        for agent, campaign in new.items():
            evalset.campaigns[agent] = await self._create_campaign(campaign, f"{set_id}.{agent}")
            self.save(evalset)
        if not evalset.campaigns:
            raise InvalidInput("set: no agents")
        self.save(evalset)
        return evalset

    async def _create_campaign(self, spec: CampaignSpec, campaign_id: str) -> str:
        # A crash between creating a campaign and saving the manifest leaves the campaign: the
        # next create of the same set adopts it.
        try:
            self.campaigns.load(campaign_id)
        except NotFound:
            return await self.campaigns.create(spec, campaign_id)
        return campaign_id


RunnerHook = Callable[[str, CampaignRunner], None]


async def run_set(
    sets: EvalSetStore,
    evalset: EvalSet,
    *,
    ray_address: str | None = None,
    trajectory_endpoints: EndpointFactory | None = None,
    on_runner: RunnerHook | None = None,
    pool: SandboxPool | None = None,
) -> dict[str, CampaignState]:
    """Runs (or resumes) every unfinished campaign of the set at once, on one sandbox pool and
    the set's shared limits, until each is done or cancelled; returns every agent's state.

    `on_runner` hears of each runner before it starts (the CLI cancels them on a signal);
    `pool`: a pool to run on (a test's; it must count the set's unfinished campaigns as its
    sharers), else one of its own.

    Raises:
        EvalServerError: a campaign cannot run (the first error; the others are cancelled).
    """
    states = sets.states(evalset)
    unfinished = [agent for agent, state in states.items() if state.status != "finished"]
    if not unfinished:
        return states
    capacity = Limiters(states[unfinished[0]].spec.limits)

    async def run_all(shared: SandboxPool) -> None:
        async with anyio.create_task_group() as group:
            for agent in unfinished:
                runner = CampaignRunner(
                    sets.campaigns,
                    evalset.campaigns[agent],
                    sandboxes=shared,
                    trajectory_endpoints=trajectory_endpoints,
                    capacity=capacity,
                )
                if on_runner is not None:
                    on_runner(agent, runner)
                group.start_soon(runner.run)

    if pool is not None:
        await run_all(pool)
    else:
        async with SandboxPool(ray_address, sharers=len(unfinished)) as shared:
            await run_all(shared)
    return sets.states(evalset)
