"""What a campaign's spec builds, checked in one place: where its instances go, its scorer
(which refuses the tasks it cannot grade) and its agent.

A new campaign is checked before anything is recorded (`check_spec`, or `CampaignParts.build`
where the caller can build its agent too), `CampaignStore.create(spec, scorer=...)` is told so,
and its run uses what was built. A resumed one is built by its runner from the spec its ledger
holds (a rescore may have changed the scorer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mcp_evalserver.agents.base import Agent
from mcp_evalserver.agents.command import EndpointFactory
from mcp_evalserver.agents.external import ClaimBoard
from mcp_evalserver.agents.factory import build_agent
from mcp_evalserver.engine.costs import check_budget_prices, price_table
from mcp_evalserver.runtime.sandboxes import require_placement
from mcp_evalserver.scoring.base import Scorer
from mcp_evalserver.scoring.factory import build_scorer
from mcp_evalserver.spec.campaign import CampaignSpec, Task
from mcp_evalserver.spec.scorers import ScorerConfig


def checked_scorer(config: ScorerConfig, tasks: Sequence[Task]) -> Scorer:
    """The scorer a config describes, once it has accepted `tasks` (`Scorer.check_tasks`).

    Raises:
        InvalidInput: it cannot be built, or refuses a task it cannot grade at all.
    """
    scorer = build_scorer(config)
    scorer.check_tasks(tasks)
    return scorer


def check_spec(spec: CampaignSpec, *, ray_address: str | None = None) -> Scorer:
    """Checks what a spec asks of this process, whoever drives its agent: that its instances
    can be placed where it says (else on `ray_address`), and its scorer. Returns the scorer.

    Raises:
        InvalidInput: it places instances on Ray and Ray is not installed, its scorer
            cannot be built or refuses its tasks, or it has a budget and a model it names
            has no price.
    """
    require_placement(spec.sandbox, ray_address)
    check_budget_prices(spec, price_table(spec))
    return checked_scorer(spec.scorer, spec.task_list())


@dataclass(frozen=True)
class CampaignParts:
    """A spec's agent and scorer, built and checked together."""

    agent: Agent
    scorer: Scorer

    @classmethod
    def build(
        cls,
        spec: CampaignSpec,
        *,
        agent: Agent | None = None,
        scorer: Scorer | None = None,
        claims: ClaimBoard | None = None,
        trajectory_endpoints: EndpointFactory | None = None,
        ray_address: str | None = None,
    ) -> CampaignParts:
        """Checks `spec` and builds its parts; an `agent` or `scorer` given (built before, or
        a test's) is used as it is. `claims` and `trajectory_endpoints` are what external and
        `command` agents need from the layers that know MCP.

        Raises:
            InvalidInput: see `check_spec`; or the agent cannot be built (a plugin that does
                not load, an agent that needs what this caller does not have).
        """
        if agent is None:
            agent = build_agent(
                spec.agent, claims=claims, trajectory_endpoints=trajectory_endpoints
            )
        if scorer is None:
            scorer = check_spec(spec, ray_address=ray_address)
        else:
            require_placement(spec.sandbox, ray_address)
            check_budget_prices(spec, price_table(spec))
        return cls(agent, scorer)
