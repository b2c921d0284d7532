"""The ledger: durable appends, group commit, artifacts first, torn tails, corruption."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from mcp_evalserver.engine.ledger import LEDGER_FILE, LedgerWriter, create_ledger, read_ledger
from mcp_evalserver.engine.records import (
    AttemptStarted,
    CampaignCreated,
    LedgerRepaired,
    RunStarted,
)
from mcp_evalserver.engine.replay import replay
from mcp_evalserver.errors import Conflict, LedgerCorrupt, NotFound
from mcp_evalserver.runtime.artifacts import read_artifact

pytestmark = pytest.mark.anyio


async def _write(directory: Path, count: int) -> None:
    async with await LedgerWriter.open(directory, "c1") as ledger:
        for number in range(count):
            await ledger.append(AttemptStarted(trajectory=f"t{number}@0", attempt=number))


async def test_records_carry_version_seq_time_kind_campaign_and_trajectory(tmp_path: Path) -> None:
    await _write(tmp_path, 2)
    records = read_ledger(tmp_path / LEDGER_FILE).records
    assert [r.seq for r in records] == [0, 1]
    line = json.loads((tmp_path / LEDGER_FILE).read_bytes().splitlines()[0])
    assert list(line)[:6] == ["v", "seq", "ts", "kind", "campaign", "trajectory"]
    assert records[1].trajectory == "t1@0"
    assert isinstance(records[1], AttemptStarted)
    assert records[1].attempt == 1


async def test_concurrent_appends_from_many_tasks_are_all_durable_in_seq_order(
    tmp_path: Path,
) -> None:
    returned: list[int] = []
    async with await LedgerWriter.open(tmp_path, "c1") as ledger:

        async def writer(task_number: int) -> None:
            for index in range(25):
                record = await ledger.append(
                    AttemptStarted(trajectory=f"t{task_number}@0", attempt=index)
                )
                returned.append(record.seq)

        async with anyio.create_task_group() as group:
            for task_number in range(40):
                group.start_soon(writer, task_number)
    records = read_ledger(tmp_path / LEDGER_FILE).records
    assert len(records) == 1000
    assert [r.seq for r in records] == list(range(1000))
    assert sorted(returned) == list(range(1000))
    # Every task's own records kept their order.
    for task_number in range(40):
        mine = [
            r.attempt
            for r in records
            if isinstance(r, AttemptStarted) and r.trajectory == f"t{task_number}@0"
        ]
        assert mine == list(range(25))


async def test_a_torn_final_line_is_dropped_and_reported(tmp_path: Path) -> None:
    await _write(tmp_path, 3)
    path = tmp_path / LEDGER_FILE
    with open(path, "ab") as handle:
        handle.write(b'{"v":1,"seq":3,"kind":"no')
    contents = read_ledger(path)
    assert [r.seq for r in contents.records] == [0, 1, 2]
    assert contents.torn_tail
    assert contents.torn_tail_bytes == len(b'{"v":1,"seq":3,"kind":"no')


async def test_reopening_a_torn_ledger_cuts_the_tail_and_records_the_repair(
    tmp_path: Path,
) -> None:
    await _write(tmp_path, 3)
    path = tmp_path / LEDGER_FILE
    with open(path, "ab") as handle:
        handle.write(b'{"v":1,"seq":3')
    async with await LedgerWriter.open(tmp_path, "c1") as ledger:
        assert [r.kind for r in ledger.recovered][-1] == "ledger_repaired"
        await ledger.append(RunStarted())
    contents = read_ledger(path)
    assert not contents.torn_tail
    assert [r.seq for r in contents.records] == [0, 1, 2, 3, 4]
    repaired = contents.records[3]
    assert isinstance(repaired, LedgerRepaired)
    assert repaired.dropped_bytes == len(b'{"v":1,"seq":3')


async def test_reopening_a_ledger_whose_only_line_is_torn_records_no_repair_as_its_first_record(
    tmp_path: Path,
) -> None:
    # What a crash in the middle of writing a campaign's first record left, before creation
    # was atomic: a `ledger_repaired` first record would make it corrupt for good.
    path = tmp_path / LEDGER_FILE
    path.write_bytes(b'{"v":1,"seq":0,"kind":"campaign_cr')
    async with await LedgerWriter.open(tmp_path, "c1") as ledger:
        assert ledger.recovered == []
    assert read_ledger(path).records == []


async def test_creating_a_ledger_writes_its_first_record_whole_or_not_at_all(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "c1"
    record = await create_ledger(directory, "c1", CampaignCreated(spec={"name": "x"}))
    assert record is not None
    assert read_ledger(directory / LEDGER_FILE).records == [record]
    assert record.seq == 0
    assert record.spec == {"name": "x"}
    assert await create_ledger(directory, "c1", CampaignCreated(spec={})) is None, (
        "a ledger with records is never replaced"
    )
    assert read_ledger(directory / LEDGER_FILE).records == [record]
    async with await LedgerWriter.open(directory, "c1") as ledger:
        with pytest.raises(Conflict, match="another process"):
            await create_ledger(directory, "c1", CampaignCreated(spec={}))
        assert (await ledger.append(RunStarted())).seq == 1


@pytest.mark.parametrize("left", [b"", b'{"v":1,"seq":0,"kind":"campaign_cr'])
async def test_a_ledger_without_a_whole_record_counts_as_never_created_and_is_replaced(
    tmp_path: Path, left: bytes
) -> None:
    (tmp_path / LEDGER_FILE).write_bytes(left)
    (tmp_path / f".{LEDGER_FILE}.stale").write_bytes(b"{")
    record = await create_ledger(tmp_path, "c1", CampaignCreated(spec={}))
    assert read_ledger(tmp_path / LEDGER_FILE).records == [record]
    assert not (tmp_path / f".{LEDGER_FILE}.stale").exists()


async def test_a_corrupt_line_before_the_end_is_an_error_that_names_the_line(
    tmp_path: Path,
) -> None:
    await _write(tmp_path, 4)
    path = tmp_path / LEDGER_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = b"garbage that is not json\n"
    path.write_bytes(b"".join(lines))
    with pytest.raises(LedgerCorrupt, match="line 2"):
        read_ledger(path)
    with pytest.raises(LedgerCorrupt, match="line 2"):
        await LedgerWriter.open(tmp_path, "c1")
    assert path.read_bytes() == b"".join(lines), "a corrupt ledger is never rewritten"


async def test_a_second_writer_is_refused_while_the_first_holds_the_ledger(
    tmp_path: Path,
) -> None:
    async with await LedgerWriter.open(tmp_path, "c1"):
        with pytest.raises(Conflict, match="another process"):
            await LedgerWriter.open(tmp_path, "c1")
    async with await LedgerWriter.open(tmp_path, "c1") as again:
        await again.append(RunStarted())


async def test_artifacts_are_content_addressed_and_checked_when_read(tmp_path: Path) -> None:
    async with await LedgerWriter.open(tmp_path, "c1") as ledger:
        ref = await ledger.put_artifact(b"diff --git a/x b/x\n", ".diff")
        same = await ledger.put_artifact(b"diff --git a/x b/x\n", ".diff")
    assert ref == same
    assert read_artifact(tmp_path, ref.as_json()) == b"diff --git a/x b/x\n"
    (tmp_path / ref.path).write_bytes(b"tampered")
    with pytest.raises(LedgerCorrupt, match="sha256"):
        read_artifact(tmp_path, ref.as_json())
    (tmp_path / ref.path).unlink()
    with pytest.raises(NotFound, match="missing"):
        read_artifact(tmp_path, ref.as_json())


async def test_an_append_after_close_is_refused(tmp_path: Path) -> None:
    ledger = await LedgerWriter.open(tmp_path, "c1")
    await ledger.aclose()
    with pytest.raises(Conflict, match="closed"):
        await ledger.append(RunStarted())


def test_a_missing_ledger_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        read_ledger(tmp_path / LEDGER_FILE)


async def test_a_cancelled_appender_still_leaves_whole_lines(tmp_path: Path) -> None:
    async with await LedgerWriter.open(tmp_path, "c1") as ledger:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                for number in range(50):
                    group.start_soon(
                        ledger.append, AttemptStarted(trajectory=f"t{number}@0", attempt=1)
                    )
                await anyio.lowlevel.checkpoint()
                scope.cancel()
    data = (tmp_path / LEDGER_FILE).read_bytes()
    assert data.endswith(b"\n") or data == b""
    for line in data.splitlines():
        json.loads(line)


async def test_many_tasks_storing_the_same_artifact_at_once_all_succeed(tmp_path: Path) -> None:
    refs = []
    async with await LedgerWriter.open(tmp_path, "c1") as ledger:

        async def store() -> None:
            refs.append(await ledger.put_artifact(b"the same patch\n", ".diff"))

        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(store)
    assert len(set(refs)) == 1
    assert read_artifact(tmp_path, refs[0].as_json()) == b"the same patch\n"
    assert [p.name for p in (tmp_path / "artifacts").iterdir()] == [Path(refs[0].path).name]


async def test_after_a_failed_write_every_later_append_is_refused(tmp_path: Path) -> None:
    ledger = await LedgerWriter.open(tmp_path, "c1")
    await ledger.append(RunStarted())
    # The disk refuses the next write (here: the descriptor is gone underneath the writer).
    os.close(ledger._fd)
    with pytest.raises(OSError, match="Bad file descriptor"):
        await ledger.append(RunStarted())
    # Nothing may be written after a possibly partial line: the writer stays refused.
    with pytest.raises(OSError, match="Bad file descriptor"):
        await ledger.append(RunStarted(), durable=False)
    ledger._fd = os.open(os.devnull, os.O_WRONLY)
    await ledger.aclose()
    assert [r.seq for r in read_ledger(tmp_path / LEDGER_FILE).records] == [0]


async def test_a_line_holding_two_records_is_corruption_not_two_records(tmp_path: Path) -> None:
    await _write(tmp_path, 3)
    path = tmp_path / LEDGER_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].rstrip(b"\n") + b"," + lines[2]
    path.write_bytes(b"".join(lines))
    with pytest.raises(LedgerCorrupt, match="line 2"):
        read_ledger(path)


@pytest.mark.parametrize(
    ("field", "said"),
    [
        ("kind", "lacks or garbles a field"),
        ("seq", "lacks or garbles a field"),
        ("ts", "lacks or garbles a field"),
        ("trajectory", "names unknown trajectory None"),
    ],
)
async def test_a_record_without_a_field_of_its_kind_is_corruption_named_by_its_seq(
    tmp_path: Path, field: str, said: str
) -> None:
    async with await LedgerWriter.open(tmp_path, "c1") as ledger:
        await ledger.append(CampaignCreated(spec={"tasks": [{"id": "a"}]}))
        await ledger.append(RunStarted())
        await ledger.append(AttemptStarted(trajectory="a@0", attempt=1))
    path = tmp_path / LEDGER_FILE
    records = [json.loads(line) for line in path.read_bytes().splitlines()]
    del records[2][field]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(LedgerCorrupt, match=said):
        replay(read_ledger(path).records)


async def test_a_first_record_without_its_spec_is_corruption_that_says_so(tmp_path: Path) -> None:
    path = tmp_path / LEDGER_FILE
    path.write_text(json.dumps({"v": 1, "seq": 0, "ts": 1.0, "kind": "campaign_created"}) + "\n")
    with pytest.raises(LedgerCorrupt, match="lacks spec, campaign"):
        replay(read_ledger(path).records)
