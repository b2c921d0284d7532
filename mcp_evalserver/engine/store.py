"""Where campaigns live on disk: `<state_dir>/campaigns/<id>/`, one ledger each."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from typing import Any

from mcp_evalserver.engine.ledger import LEDGER_FILE, create_ledger, live_writer_pid, read_ledger
from mcp_evalserver.engine.parts import check_spec
from mcp_evalserver.engine.records import CampaignCreated
from mcp_evalserver.engine.replay import replay
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.errors import InvalidInput, NotFound
from mcp_evalserver.runtime.governance import governed
from mcp_evalserver.scoring.base import Scorer
from mcp_evalserver.spec.campaign import CampaignSpec

#: Where a run on a cluster keeps the nodes its sandbox work runs on now (for `status`).
NODES_FILE = "nodes.json"


class CampaignStore:
    """The campaigns under one state directory: `<state_dir>/campaigns/<id>/`."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.campaigns_dir = state_dir / "campaigns"

    def directory(self, campaign_id: str) -> Path:
        return self.campaigns_dir / campaign_id

    def exists(self, campaign_id: str) -> bool:
        """Whether the campaign has a ledger here (cheap: nothing is read)."""
        return (self.directory(campaign_id) / LEDGER_FILE).is_file()

    def list_ids(self) -> list[str]:
        """Campaign ids, oldest first."""
        if not self.campaigns_dir.is_dir():
            return []
        found = [p for p in self.campaigns_dir.iterdir() if (p / LEDGER_FILE).is_file()]
        return [p.name for p in sorted(found, key=lambda p: (p / LEDGER_FILE).stat().st_mtime)]

    def load(self, campaign_id: str) -> CampaignState:
        """Replays a campaign's ledger (read-only: safe while another process runs it).

        Raises:
            NotFound: no such campaign (the message lists the known ones), or its creation
                was interrupted before its first record (the message says how to start it).
            LedgerCorrupt: the ledger is corrupt before its end.
        """
        path = self.directory(campaign_id) / LEDGER_FILE
        if not path.is_file():
            if path.parent.is_dir():
                raise self.never_created(campaign_id)
            known = self.list_ids()
            hint = ", ".join(known[-10:]) if known else "none yet: start one with `run SPEC`"
            raise NotFound(f"no campaign {campaign_id!r} in {self.state_dir}; known: {hint}")
        contents = read_ledger(path)
        if not contents.records:
            raise self.never_created(campaign_id)
        state = replay(contents.records)
        state.extra["torn_tail_bytes"] = contents.torn_tail_bytes
        return state

    async def create(
        self,
        spec: CampaignSpec,
        campaign_id: str | None = None,
        *,
        scorer: Scorer | None = None,
    ) -> str:
        """Records a new campaign (its resolved spec is the ledger's first record).

        The spec is checked first (`check_spec`), unless `scorer` is the one that check (or
        `CampaignParts.build`) returned for it: the run then uses it. Creation is atomic:
        killed at any point, it leaves either a campaign or none, and an id whose creation was
        interrupted can be created again.

        Raises:
            InvalidInput: the id is taken or malformed, the spec has no tasks loaded, its
                scorer cannot be built or refuses its tasks (`Scorer.check_tasks`), or it
                places instances on Ray and Ray is not installed.
            Conflict: another process holds that campaign's lock (creating or running it).
            LimitExceeded: its estimated disk for images and instances exceeds the free space.
        """
        if scorer is None:
            # The scorer refuses tasks it cannot grade at all before anything is recorded.
            check_spec(spec)
        spec = governed(spec, self.state_dir)  # its instance budget, and a disk that holds it
        if campaign_id is None:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
            campaign_id = f"{spec.name}-{stamp}-{secrets.token_hex(2)}"
        elif not campaign_id.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise InvalidInput(f"campaign id {campaign_id!r}: use letters, digits, '-', '_', '.'")
        first = CampaignCreated(spec=spec.model_dump(mode="json"))
        created = await create_ledger(self.directory(campaign_id), campaign_id, first)
        if created is None:
            raise InvalidInput(f"campaign {campaign_id!r} exists; resume it instead")
        return campaign_id

    def running_elsewhere(self, campaign_id: str) -> bool:
        """Whether another live process seems to run the campaign (a hint: see its lock)."""
        return live_writer_pid(self.directory(campaign_id)) is not None

    def never_created(self, campaign_id: str) -> NotFound:
        """The error for a ledger without a first record: its creation was interrupted."""
        return NotFound(
            f"campaign {campaign_id!r} was never created: its creation was interrupted before "
            f"its first record reached {self.directory(campaign_id) / LEDGER_FILE}. Start it "
            f"again with `run SPEC --id {campaign_id}` (or start_campaign with that id)"
        )


def read_nodes(directory: Path) -> dict[str, Any] | None:
    """The last `nodes.json` snapshot of a campaign run on a cluster, if there is one."""
    try:
        loaded: dict[str, Any] = json.loads((directory / NODES_FILE).read_text())
    except (OSError, ValueError):
        return None
    return loaded
