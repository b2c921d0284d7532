"""The summary beside a ledger: a fresh server's pages come from it only while the ledger holds
exactly the bytes it was made from, and they are the pages the ledger gives."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from mcp_evalserver.engine.ledger import LEDGER_FILE, LedgerWriter, read_ledger
from mcp_evalserver.engine.records import RescoreRequested
from mcp_evalserver.engine.replay import replay
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.server.dashboard import views
from mcp_evalserver.server.dashboard.ledgers import CampaignLedger, LedgerCache
from mcp_evalserver.server.dashboard.render import render
from mcp_evalserver.server.dashboard.summaries import SUMMARY_FILE
from mcp_evalserver.server.dashboard.web import start_summarising
from tests.engine.helpers import campaign_of_every_kind

pytestmark = pytest.mark.anyio


def _pages(ledger: CampaignLedger, trajectory_ids: list[str]) -> dict[str, str]:
    """Every page of the campaign as served (the nonce fixed): the campaign page, filtered by
    each outcome, and each trajectory's page."""
    fixed: dict[str, Any] = {"nonce": "n", "poll_ms": 1000, "live": True, "static": False}
    context = views.campaign_page(ledger, views.TableQuery())
    link = {"link": lambda **_: "#", "poll_url": "#"}
    pages = {"campaign": render("campaign.html", **fixed, **link, **context)}
    for label in context["outcome_labels"]:
        filtered = views.campaign_page(ledger, views.TableQuery(outcome=label))
        pages[label] = render("campaign.html", **fixed, **link, **filtered)
    for tid in trajectory_ids:
        pages[tid] = render("trajectory.html", **fixed, **views.trajectory_page(ledger, tid))
    return pages


async def _summarised(tmp_path: Path) -> tuple[CampaignStore, str, Path, dict[str, str]]:
    """A campaign of every kind of record, its pages as read from the ledger (which leaves
    the summary beside it)."""
    runner = await campaign_of_every_kind(tmp_path)
    ledger = LedgerCache(runner.store).get(runner.campaign_id)
    assert ledger.persisted() is None
    ids = list(replay(read_ledger(ledger.path).records).trajectories)
    pages = _pages(ledger, ids)
    assert (runner.directory / SUMMARY_FILE).is_file()
    return runner.store, runner.campaign_id, ledger.path, pages


async def test_a_fresh_server_shows_from_the_summary_the_pages_the_ledger_gives(
    tmp_path: Path,
) -> None:
    store, campaign_id, _, expected = await _summarised(tmp_path)
    assert {"t1@0.1.1", "t3@0", "generated"} <= set(expected)
    fresh = LedgerCache(store).get(campaign_id)
    assert fresh.persisted() is not None
    ids = [key for key in expected if "@" in key]
    assert _pages(fresh, ids) == expected
    # The whole ledger was never replayed: each trajectory page replayed its own records.
    assert fresh.state is None
    assert views.report_of(fresh) == views.report_of(LedgerCache(store).get(campaign_id))


async def test_an_appended_record_makes_the_summary_stale_until_a_new_one_is_written(
    tmp_path: Path,
) -> None:
    store, campaign_id, path, _ = await _summarised(tmp_path)
    async with await LedgerWriter.open(path.parent, campaign_id) as ledger:
        await ledger.append(RescoreRequested(trajectories=["t2@0"]))
    fresh = LedgerCache(store).get(campaign_id)
    assert fresh.persisted() is None
    page = views.campaign_page(fresh, views.TableQuery(outcome="generated"))
    assert "t2@0" in [row["id"] for row in page["trajectories"]["items"]]
    # The page read the ledger and wrote the summary of what it holds now.
    again = LedgerCache(store).get(campaign_id)
    assert again.persisted() is not None
    assert views.trajectory_page(again, "t2@0")["trajectory"].phase == "generated"


async def test_a_summary_is_used_only_for_the_very_bytes_it_was_made_from(
    tmp_path: Path,
) -> None:
    store, campaign_id, path, _ = await _summarised(tmp_path)
    original = path.read_bytes()
    summary = (path.parent / SUMMARY_FILE).read_bytes()
    last = original.rstrip(b"\n").rsplit(b"\n", 1)[1]
    # Same length, one figure changed (as a hand "repair" would): the hash tells.
    changed = last.replace(b'"ts":1', b'"ts":2', 1)
    assert changed != last
    path.write_bytes(original[: -len(last) - 1] + changed + b"\n")
    assert LedgerCache(store).get(campaign_id).persisted() is None
    # Cut short (a repaired tail, a restored backup): stale too.
    path.write_bytes(original[: original.rindex(b"\n", 0, len(original) - 1) + 1])
    (path.parent / SUMMARY_FILE).write_bytes(summary)
    assert LedgerCache(store).get(campaign_id).persisted() is None
    # The very bytes again: the summary counts again.
    path.write_bytes(original)
    (path.parent / SUMMARY_FILE).write_bytes(summary)
    assert LedgerCache(store).get(campaign_id).persisted() is not None
    # Made by other code (the figures may be computed otherwise now): stale.
    other = json.loads(summary) | {"code": "0" * 64}
    (path.parent / SUMMARY_FILE).write_text(json.dumps(other))
    assert LedgerCache(store).get(campaign_id).persisted() is None


async def test_an_unreadable_summary_is_ignored_and_replaced(tmp_path: Path) -> None:
    store, campaign_id, path, expected = await _summarised(tmp_path)
    for garbage in (b"", b"{not json", b"[]", b'{"code": 1}', b"\x00" * 100):
        (path.parent / SUMMARY_FILE).write_bytes(garbage)
        fresh = LedgerCache(store).get(campaign_id)
        assert fresh.persisted() is None
        assert _pages(fresh, ["t1@0"])["t1@0"] == expected["t1@0"]
        assert LedgerCache(store).get(campaign_id).persisted() is not None


async def test_a_summary_that_cannot_be_written_leaves_the_last_one_and_no_debris(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, campaign_id, path, _ = await _summarised(tmp_path)
    before = (path.parent / SUMMARY_FILE).read_bytes()
    async with await LedgerWriter.open(path.parent, campaign_id) as ledger:
        await ledger.append(RescoreRequested(trajectories=["t2@0"]))

    def full_disk(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    fresh = LedgerCache(store).get(campaign_id)
    page = views.campaign_page(fresh, views.TableQuery(outcome="generated"))
    assert "t2@0" in [row["id"] for row in page["trajectories"]["items"]]
    monkeypatch.undo()
    assert (path.parent / SUMMARY_FILE).read_bytes() == before
    assert sorted(os.listdir(path.parent)) == sorted(
        ["artifacts", LEDGER_FILE, "ledger.lock", SUMMARY_FILE]
    )


async def test_a_starting_server_summarises_the_campaigns_nobody_viewed_and_keeps_no_state(
    tmp_path: Path,
) -> None:
    store, campaign_id, path, expected = await _summarised(tmp_path)
    summary = path.parent / SUMMARY_FILE
    summary.unlink()  # as a campaign run by the CLI leaves it
    broken = store.directory("broken")
    broken.mkdir()
    (broken / LEDGER_FILE).write_bytes(b"garbage\n" + path.read_bytes())
    cache = LedgerCache(store)
    thread = start_summarising(cache)
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert summary.is_file()
    assert not (broken / SUMMARY_FILE).exists()  # its page says why it cannot be read
    assert cache.get(campaign_id).state is None  # nobody viewed it: nothing kept in memory
    fresh = LedgerCache(store).get(campaign_id)
    assert fresh.persisted() is not None
    assert _pages(fresh, [key for key in expected if "@" in key]) == expected
    written = summary.stat().st_mtime_ns
    assert views.summarise_unsummarised(LedgerCache(store)) == []  # nothing left to do
    assert summary.stat().st_mtime_ns == written
