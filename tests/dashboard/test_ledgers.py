"""The dashboard follows a ledger as it grows: only complete lines count, a cut file is reread."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_evalserver.campaigns import CampaignRunner, CampaignStore
from mcp_evalserver.errors import NotFound
from mcp_evalserver.ledger import LEDGER_FILE
from mcp_evalserver.server.dashboard.ledgers import LedgerCache
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
