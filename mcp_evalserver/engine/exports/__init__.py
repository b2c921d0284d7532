"""A campaign's results in the formats other tools read: Inspect AI logs and ATIF trajectories.

`write_export` writes files (the CLI's `export`); `export_text` returns the same content as text
(the MCP tool `export_results`). Both read the ledger only, so they are safe while a campaign
runs: what is not finished yet is exported as far as it went.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, get_args

from mcp_evalserver.engine.exports.atif import atif_trajectory, write_atif
from mcp_evalserver.engine.exports.inspect_log import inspect_log_json, write_inspect_log
from mcp_evalserver.engine.exports.transcripts import exported_trajectories
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput

ExportFormat = Literal["inspect", "atif"]
FORMATS: tuple[str, ...] = get_args(ExportFormat)

__all__ = ["FORMATS", "ExportFormat", "export_text", "write_export"]


def write_export(store: CampaignStore, campaign_id: str, fmt: str, out: Path) -> list[Path]:
    """Writes a campaign's results to `out`: for `inspect` one log file (FILE.eval or
    FILE.json), for `atif` a directory with `<trajectory id>/trajectory.json` each. Returns
    the files written.

    Raises:
        NotFound: no such campaign.
        InvalidInput: an unknown format, a log name Inspect does not read, Inspect missing.
        OSError: `out` cannot be written.
    """
    _known(fmt)
    state = store.load(campaign_id)
    items = exported_trajectories(state, store.directory(campaign_id))
    if fmt == "inspect":
        write_inspect_log(state, items, out)
        return [out]
    return write_atif(state, items, out)


def export_text(store: CampaignStore, campaign_id: str, fmt: str) -> str:
    """A campaign's results as one JSON text: for `inspect` Inspect's JSON log (save it as
    NAME.json), for `atif` `{"trajectories": [...]}` with one ATIF document each.

    Raises:
        NotFound: no such campaign.
        InvalidInput: an unknown format, or Inspect missing.
    """
    _known(fmt)
    state = store.load(campaign_id)
    items = exported_trajectories(state, store.directory(campaign_id))
    if fmt == "inspect":
        return inspect_log_json(state, items)
    documents = [atif_trajectory(state, item) for item in items]
    return json.dumps({"trajectories": documents}, indent=2, ensure_ascii=False)


def _known(fmt: str) -> None:
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown export format {fmt!r}; choose one of: {', '.join(FORMATS)}")
