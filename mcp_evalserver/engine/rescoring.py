"""Re-scoring: grade a campaign's submissions again without generating them again.

A `rescore_requested` record names the trajectories to grade again (and, optionally, the scorer
to grade them with from now on). Replay moves each named trajectory that has a generation back
to `generated`, so the next run scores exactly those and nothing else: the runner needs no new
code path, and a run killed in the middle of re-scoring resumes by scoring only the trajectories
the ledger does not show scored since the request. Earlier `scored` records stay in the ledger
(history); the state keeps the latest.

Use `request_rescore`, then run the campaign (`CampaignRunner.run`; the CLI's `rescore` does
both). The request needs the ledger's lock, so it fails while another process runs the campaign.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from typing import Any

from pydantic import ValidationError

from mcp_evalserver.engine.ledger import LedgerWriter
from mcp_evalserver.engine.parts import checked_scorer
from mcp_evalserver.engine.records import RescoreRequested
from mcp_evalserver.engine.replay import SCORER_ADAPTER, replay, rescorable
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput, NotFound
from mcp_evalserver.spec.campaign import describe_validation_error
from mcp_evalserver.spec.scorers import ScorerConfig


def parse_scorer(data: Any) -> ScorerConfig:
    """Validates a scorer config (a dict, as in a spec's `scorer` field).

    Raises:
        InvalidInput: naming the field and the reason.
    """
    try:
        return SCORER_ADAPTER.validate_python(data)
    except ValidationError as exc:
        described = describe_validation_error(exc, scorer_json_schema())
        raise InvalidInput(f"invalid scorer: {described}") from exc


@functools.cache
def scorer_json_schema() -> dict[str, Any]:
    """The JSON schema of a scorer config (cached: do not change what it returns)."""
    return SCORER_ADAPTER.json_schema()


async def request_rescore(
    store: CampaignStore,
    campaign_id: str,
    *,
    scorer: Any = None,
    outcomes: Collection[str] | None = None,
    trajectories: Collection[str] | None = None,
) -> list[str]:
    """Records that finished trajectories are to be scored again; returns their ids.

    Selects the finished, generated trajectories, narrowed to those with one of `outcomes`
    and/or named in `trajectories`. With `scorer`, the campaign is scored with it from now on
    (the scorer is built once here, so a bad config fails before anything is recorded).

    Raises:
        NotFound: no such campaign, or a named trajectory is not in it.
        InvalidInput: the scorer config is invalid, cannot be built or refuses the
            campaign's tasks (`Scorer.check_tasks`).
        Conflict: another process is running the campaign.
        LedgerCorrupt: the ledger is corrupt before its end.
    """
    config = parse_scorer(scorer) if scorer is not None else None
    campaign = store.load(campaign_id)  # NotFound with the list of campaigns
    if config is not None:
        checked_scorer(config, campaign.spec.task_list())
    directory = store.directory(campaign_id)
    async with await LedgerWriter.open(directory, campaign_id) as ledger:
        state = replay(ledger.recovered)
        unknown = sorted(set(trajectories or ()) - state.trajectories.keys())
        if unknown:
            raise NotFound(f"campaign {campaign_id} has no trajectory {', '.join(unknown[:5])}")
        chosen = [
            t.id
            for t in state.trajectories.values()
            if rescorable(t)
            and (outcomes is None or t.outcome in outcomes)
            and (trajectories is None or t.id in trajectories)
        ]
        scorer_json = config.model_dump(mode="json") if config is not None else None
        await ledger.append(RescoreRequested(trajectories=chosen, scorer=scorer_json))
    return chosen
