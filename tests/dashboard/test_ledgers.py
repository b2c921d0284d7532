"""The dashboard follows a ledger as it grows: only complete lines count, a cut file is reread."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from mcp_evalserver.engine.ledger import LEDGER_FILE
from mcp_evalserver.engine.records import parse_record
from mcp_evalserver.engine.replay import replay
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import LedgerCorrupt, NotFound
from mcp_evalserver.server.dashboard import views
from mcp_evalserver.server.dashboard.ledgers import CampaignLedger, LedgerCache
from mcp_evalserver.spec.campaign import CampaignSpec

pytestmark = pytest.mark.anyio


async def _store(tmp_path: Path) -> tuple[CampaignStore, list[bytes]]:
    tasks = [{"id": f"t{n}", "prompt": "?", "answer": str(n)} for n in range(3)]
    spec = CampaignSpec.model_validate({"name": "f", "tasks": tasks, "agent": {"type": "oracle"}})
    store = CampaignStore(tmp_path)
    await store.create(spec, "done")
    await CampaignRunner(store, "done").run()
    lines = (store.directory("done") / LEDGER_FILE).read_bytes().splitlines(keepends=True)
    return store, lines


async def _follower(tmp_path: Path) -> tuple[list[bytes], Path, CampaignLedger]:
    """A finished campaign's ledger lines, and a copy of its first line followed as it grows."""
    _, lines = await _store(tmp_path)
    follower = CampaignStore(tmp_path / "copy")
    path = follower.directory("done") / LEDGER_FILE
    path.parent.mkdir(parents=True)
    path.write_bytes(lines[0])
    return lines, path, LedgerCache(follower).get("done")


async def test_appended_records_are_applied_and_a_torn_line_waits_for_its_end(
    tmp_path: Path,
) -> None:
    lines, path, ledger = await _follower(tmp_path)
    assert ledger.refresh().done_count == 0
    for line in lines[1:]:
        # Half a line is what a writer in the middle of an append leaves: not a record yet.
        with path.open("ab") as handle:
            handle.write(line[: len(line) // 2])
        before = ledger.refresh().last_seq
        with path.open("ab") as handle:
            handle.write(line[len(line) // 2 :])
        assert ledger.refresh().last_seq == json.loads(line)["seq"] != before
    expected = replay(parse_record(json.loads(line)) for line in lines)
    state = ledger.refresh()
    assert state.done_count == expected.done_count == 3
    assert {t.id: t.outcome for t in state.trajectories.values()} == {
        t.id: t.outcome for t in expected.trajectories.values()
    }
    kinds = [r.kind for r in ledger.records_of("t1@0")]
    assert kinds[-1] == "scored"
    assert all(r.trajectory == "t1@0" for r in ledger.records_of("t1@0"))


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


async def test_a_figure_is_computed_while_no_record_can_be_applied(tmp_path: Path) -> None:
    store, lines = await _store(tmp_path)
    ledger = LedgerCache(store).get("done")

    def compute(state: CampaignState) -> tuple[int, bool]:
        # Another request (another thread) wanting to apply a record must wait: had it the
        # lock, it could change the state halfway through this computation.
        taken: list[bool] = []
        thread = threading.Thread(target=lambda: taken.append(ledger.lock.acquire(False)))
        thread.start()
        thread.join()
        return state.last_seq, taken[0]

    seq, other_could_apply = ledger.cached("probe", compute)
    assert not other_could_apply
    assert seq == json.loads(lines[-1])["seq"] == ledger.derived["probe"][0]


@pytest.mark.parametrize(
    "bad", [b"{not json}\n", b'{"seq": 99},{"seq": 100}\n', b"[1, 2]\n", b'"text"\n']
)
async def test_a_line_that_is_not_one_record_is_corruption_named_by_its_byte(
    tmp_path: Path, bad: bytes
) -> None:
    store, lines = await _store(tmp_path)
    path = store.directory("done") / LEDGER_FILE
    path.write_bytes(b"".join(lines[:3]) + bad + b"".join(lines[3:]))
    at = len(b"".join(lines[:3]))
    with pytest.raises(LedgerCorrupt, match=f"at byte {at} is unreadable"):
        LedgerCache(store).get("done").refresh()
    row = views.campaign_rows(LedgerCache(store))[0]
    assert row["id"] == "done"
    assert f"at byte {at}" in row["error"]


async def test_a_refresh_stopped_by_a_bad_record_applies_nothing_twice(tmp_path: Path) -> None:
    store, lines = await _store(tmp_path)
    path = store.directory("done") / LEDGER_FILE
    bad = json.loads(lines[-1])
    del bad["seq"]
    path.write_bytes(b"".join(lines[:-1]) + json.dumps(bad).encode() + b"\n")
    ledger = LedgerCache(store).get("done")
    for _ in range(2):  # each refresh meets the same record, after the same good ones
        with pytest.raises(LedgerCorrupt, match="lacks or garbles a field"):
            ledger.refresh()
    path.write_bytes(b"".join(lines[:-1]))  # what an operator's repair leaves
    expected = replay(parse_record(json.loads(line)) for line in lines[:-1])
    state = ledger.refresh()
    assert state.last_seq == expected.last_seq
    assert {t.id: (t.outcome, t.attempts) for t in state.trajectories.values()} == {
        t.id: (t.outcome, t.attempts) for t in expected.trajectories.values()
    }
