"""A campaign's dashboard figures kept beside its ledger, so a fresh server's first page is quick.

Reading a 10,000-trajectory ledger (10 MB) and computing its report costs about a second of
CPU; a server that just started would pay it on its first page of every campaign. The summary
holds what the campaign page shows (the report, the plots, a row per trajectory) and where
each trajectory's records sit in the ledger, so the trajectory page reads only those.

It is derived data, never a source. It names the bytes it was made from (their length and
sha256, plus a fingerprint of the code that computed it) and is used only while the ledger
holds exactly those bytes: an appended, repaired or replaced ledger, or another version of the
figures' code, makes it stale, and the page is computed from the ledger again (and a new
summary written). It is written to a temporary file, fsync'd and renamed, so a crash leaves the
old summary or the new one; one that cannot be read is ignored. Hashing the ledger costs ~7 ms
per 10 MB, which is what makes "the same bytes" a proof rather than a guess.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pydantic_core
from pydantic import TypeAdapter, ValidationError

from mcp_evalserver.runtime.atomic_files import write_atomically

#: Beside `ledger.jsonl` in the campaign's directory (gitignored like ledgers).
SUMMARY_FILE = "dashboard-summary.json"
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class LedgerKey:
    """The exact bytes a summary was made from: the ledger's first `size` bytes."""

    size: int
    sha256: str


@dataclass
class Summary:
    """What the campaign page shows and where each trajectory's records are.

    `trajectories` holds a row per trajectory (values in the order of `columns`), `spans` the
    byte ranges of each trajectory's records as text (see `spans_of`: one string decodes in
    a blink where 10,000 lists of pairs take tens of ms), `campaign_spans` those of the
    records that name no trajectory or create one (what a replay of a single trajectory
    needs besides its own records: rescore and retry requests, branches).
    """

    key: LedgerKey
    code: str
    last_seq: int
    row: dict[str, Any]
    report: dict[str, Any]
    plots: dict[str, str | None]
    columns: list[str]
    trajectories: list[list[Any]]
    spans: str
    campaign_spans: list[tuple[int, int]]

    def spans_of(self, trajectory_id: str) -> list[tuple[int, int]]:
        """The byte ranges of the trajectory's records, in ledger order."""
        needle = f"\n{json.dumps(trajectory_id)} "
        start = self.spans.find(needle) + 1
        if start == 0:
            return []
        end = self.spans.find("\n", start)
        ranges = self.spans[start + len(needle) - 1 : end].split()
        return [(int(a), int(b)) for a, b in (r.split(":") for r in ranges)]


def encode_spans(spans: dict[str, list[tuple[int, int]]]) -> str:
    """`Summary.spans`: a line per trajectory, its id as JSON (ids cannot hold a break then)
    and its ranges as `start:end`; the text begins with a line break so each id follows one."""
    lines = (f"{json.dumps(t)} {' '.join(f'{a}:{b}' for a, b in r)}" for t, r in spans.items())
    return "\n" + "\n".join(lines) + "\n"


_ADAPTER = TypeAdapter(Summary)


@cache
def code_fingerprint() -> str:
    """A hash of the sources that compute the figures: a summary made by other code is stale."""
    from mcp_evalserver.engine import comparison, replay, report, state
    from mcp_evalserver.scoring.stats import resampling, summary

    # The pages' modules by path, not by import: they import this module's callers.
    here = Path(__file__).parent
    modules = (report, comparison, state, replay, resampling, summary)
    sources = [Path(str(module.__file__)) for module in modules]
    digest = hashlib.sha256()
    for source in [*sources, here / "plots.py", here / "views.py", Path(__file__)]:
        digest.update(source.read_bytes())
    return digest.hexdigest()


def load(ledger_path: Path, ledger: bytes) -> Summary | None:
    """The summary beside the ledger if it was made from exactly `ledger` (its whole content),
    by this code; None when there is none, it is stale or it cannot be read."""
    path = ledger_path.parent / SUMMARY_FILE
    try:
        raw = pydantic_core.from_json(path.read_bytes())
        # Made by other code or from other bytes: stale, whatever else it holds.
        # Only complete lines are ever summarised: a torn tail (a write in progress) is not.
        complete = ledger.rfind(b"\n") + 1
        if raw.get("code") != code_fingerprint() or raw["key"]["size"] != complete:
            return None
        if hashlib.sha256(memoryview(ledger)[:complete]).hexdigest() != raw["key"]["sha256"]:
            return None
        return _ADAPTER.validate_python(raw)
    except FileNotFoundError:
        return None
    except ValidationError as exc:
        _LOG.warning(
            "ignoring the dashboard summary %s: %d fields invalid", path, exc.error_count()
        )
    except (OSError, ValueError, AttributeError, KeyError, TypeError) as exc:
        _LOG.warning("ignoring the unreadable dashboard summary %s: %s", path, exc)
    return None


def store(ledger_path: Path, summary: Summary) -> None:
    """Writes the summary beside the ledger (temporary file, fsync, rename).

    A summary that cannot be written (a read-only state directory, a full disk) is logged and
    skipped: it only makes a later first page quicker.
    """
    try:
        write_atomically(ledger_path.parent / SUMMARY_FILE, _ADAPTER.dump_json(summary))
    except OSError as exc:
        _LOG.warning("could not write the dashboard summary in %s: %s", ledger_path.parent, exc)
