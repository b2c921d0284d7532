"""A campaign's results in the formats other tools read: Inspect AI logs and ATIF trajectories.

`write_export` writes files (the CLI's `export`); `export_text` returns the same content as text,
and `export_page` a page of it (the MCP tool `export_results`: a few trajectories' export is
~100 KB, too much for one answer). They read the ledger only, so they are safe while a campaign
runs: what is not finished yet is exported as far as it went.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, Field

from mcp_evalserver.engine.exports.atif import atif_trajectory, write_atif
from mcp_evalserver.engine.exports.inspect_log import inspect_log_json, write_inspect_log
from mcp_evalserver.engine.exports.transcripts import exported_trajectories
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.atomic_files import write_atomically

ExportFormat = Literal["inspect", "atif"]
FORMATS: tuple[str, ...] = get_args(ExportFormat)
#: Where `export_page` keeps a campaign's export between its pages (in its directory).
EXPORTS_DIR = "exports"

__all__ = ["FORMATS", "ExportFormat", "ExportPage", "export_page", "export_text", "write_export"]


class ExportPage(BaseModel):
    """A page of a campaign's export (the MCP tool's answer)."""

    text: str = Field(description="Characters offset .. offset + len(text) of the export.")
    offset: int
    next_offset: int | None = Field(
        description="Call again with this offset for the next page; null: this is the last."
    )
    total_chars: int
    path: str = Field(description="The whole export as a file, on the server's machine.")


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


def export_page(
    store: CampaignStore, campaign_id: str, fmt: str, offset: int, max_chars: int
) -> ExportPage:
    """A page of `export_text`: at offset 0 the campaign is exported afresh and written whole
    to `<campaign>/exports/<format>.json`; later offsets page that file, so the pages of one
    reading fit together while the campaign runs on.

    Raises:
        NotFound: no such campaign.
        InvalidInput: an unknown format, Inspect missing, an offset past the end, or an
            offset without an export to page (start at 0).
        OSError: the export cannot be written.
    """
    _known(fmt)
    path = store.directory(campaign_id) / EXPORTS_DIR / f"{fmt}.json"
    if offset == 0:
        text = export_text(store, campaign_id, fmt)
        write_atomically(path, text.encode())
    else:
        if not store.exists(campaign_id):
            store.load(campaign_id)  # NotFound, as at offset 0
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InvalidInput(
                f"no {fmt} export of {campaign_id} to page yet: ask for offset 0 first"
            ) from None
    if offset > len(text):
        raise InvalidInput(
            f"offset {offset} is past the end of the export ({len(text)} characters)"
        )
    end = min(offset + max_chars, len(text))
    return ExportPage(
        text=text[offset:end],
        offset=offset,
        next_offset=end if end < len(text) else None,
        total_chars=len(text),
        path=str(path),
    )


def _known(fmt: str) -> None:
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown export format {fmt!r}; choose one of: {', '.join(FORMATS)}")
