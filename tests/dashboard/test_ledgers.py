"""The dashboard follows a ledger as it grows: only complete lines count, a cut file is reread."""

from __future__ import annotations

import gc
import json
import threading
from pathlib import Path

import pytest

from mcp_evalserver.campaigns import CampaignRunner, CampaignStore
from mcp_evalserver.errors import NotFound
from mcp_evalserver.ledger import LEDGER_FILE
from mcp_evalserver.server.dashboard.ledgers import LedgerCache, collector_paused
from mcp_evalserver.spec import CampaignSpec
from mcp_evalserver.state import replay

pytestmark = pytest.mark.anyio


async def _store(tmp_path: Path) -> tuple[CampaignStore, list[bytes]]:
    tasks = [{"id": f"t{n}", "prompt": "?", "answer": str(n)} for n in range(3)]
    spec = CampaignSpec.model_validate({"name": "f", "tasks": tasks, "agent": {"type": "oracle"}})
    store = CampaignStore(tmp_path)
    await store.create(spec, "done")
    await CampaignRunner(store, "done").run()
    lines = (store.directory("done") / LEDGER_FILE).read_bytes().splitlines(keepends=True)
    return store, lines


async def test_appended_records_are_applied_and_a_torn_line_waits_for_its_end(
    tmp_path: Path,
) -> None:
    _, lines = await _store(tmp_path)
    follower = CampaignStore(tmp_path / "copy")
    path = follower.directory("done") / LEDGER_FILE
    path.parent.mkdir(parents=True)
    path.write_bytes(lines[0])
    ledger = LedgerCache(follower).get("done")
    assert ledger.refresh().done_count == 0
    for line in lines[1:]:
        # Half a line is what a writer in the middle of an append leaves: not a record yet.
        with path.open("ab") as handle:
            handle.write(line[: len(line) // 2])
        before = ledger.refresh().last_seq
        with path.open("ab") as handle:
            handle.write(line[len(line) // 2 :])
        assert ledger.refresh().last_seq == json.loads(line)["seq"] != before
    expected = replay(json.loads(line) for line in lines)
    state = ledger.refresh()
    assert state.done_count == expected.done_count == 3
    assert {t.id: t.outcome for t in state.trajectories.values()} == {
        t.id: t.outcome for t in expected.trajectories.values()
    }
    kinds = [r["kind"] for r in ledger.records_of("t1@0")]
    assert kinds[-1] == "scored"
    assert all(r["trajectory"] == "t1@0" for r in ledger.records_of("t1@0"))


async def test_a_ledger_cut_shorter_is_read_again_from_its_start(tmp_path: Path) -> None:
    store, lines = await _store(tmp_path)
    ledger = LedgerCache(store).get("done")
    assert ledger.refresh().done_count == 3
    path = store.directory("done") / LEDGER_FILE
    path.write_bytes(b"".join(lines[:1]))
    assert ledger.refresh().done_count == 0
    assert ledger.records_of("t1@0") == []


async def test_only_campaigns_of_the_state_directory_can_be_named(tmp_path: Path) -> None:
    store, lines = await _store(tmp_path)
    outside = tmp_path / "campaigns" / ".." / ".." / "elsewhere"
    outside.mkdir(parents=True)
    (outside / LEDGER_FILE).write_bytes(b"".join(lines))
    cache = LedgerCache(store)
    for name in ("..", ".", "../elsewhere", "../../elsewhere", "", "missing"):
        with pytest.raises(NotFound, match="known \\(newest first\\): done"):
            cache.get(name)


async def test_figures_are_computed_with_thecollector_paused_and_it_comes_back_after(
    tmp_path: Path,
) -> None:
    await _store(tmp_path)
    ledger = LedgerCache(CampaignStore(tmp_path)).get("done")
    assert gc.isenabled()
    seen: list[bool] = []
    ledger.cached("probe", lambda state: seen.append(gc.isenabled()))
    assert seen == [False]
    assert gc.isenabled()

    def broken(state: object) -> None:
        raise RuntimeError("a figure failed")

    with pytest.raises(RuntimeError, match="a figure failed"):
        ledger.cached("broken", broken)
    assert gc.isenabled()
    # An application that turned the collector off keeps it off.
    gc.disable()
    try:
        ledger.cached("again", lambda state: None)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_pauses_turn_the_collector_back_on_only_when_the_last_one_ends() -> None:
    first_in, first_may_end, first_done = (threading.Event() for _ in range(3))
    during: dict[str, bool] = {}

    def first() -> None:
        with collector_paused():
            first_in.set()
            assert first_may_end.wait(10)
        first_done.set()

    thread = threading.Thread(target=first)
    thread.start()
    assert first_in.wait(10)
    with collector_paused():
        first_may_end.set()
        assert first_done.wait(10)
        during["after the first ended"] = gc.isenabled()
    thread.join(10)
    assert during == {"after the first ended": False}
    assert gc.isenabled()
