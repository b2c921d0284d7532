"""A ledger written before records had models (commit 09c052b, `fixtures/ledger/`) replays
today to the same state and the same report (every figure and field it had, unchanged; fields
added since may join them), and today's writer writes the same lines.

The fixture is remade by `fixtures/make_ledger_fixture.py` (see its docstring).
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from mcp_evalserver.engine.ledger import LEDGER_FILE, LedgerWriter, read_ledger
from mcp_evalserver.engine.records import OtherRecord, RetryRequested, encode, parse_record
from mcp_evalserver.engine.store import CampaignStore
from tests.engine.fixtures.make_ledger_fixture import (
    CAMPAIGN,
    report_json,
    run_scenario,
    state_json,
)
from tests.root import require_root

pytestmark = pytest.mark.anyio

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "ledger"


def _old_lines(name: str) -> list[bytes]:
    return (FIXTURE / name).read_bytes().splitlines(keepends=True)


def _differences(old: Any, new: Any, where: str = "") -> list[str]:
    """Where `new` does not say what `old` said: a value changed or gone. Keys `new` adds
    (figures and spec fields added since 09c052b, such as a report's `retries`) are no
    difference: what was there must stay exactly as it was."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            d
            for key, value in old.items()
            for d in (
                _differences(value, new[key], f"{where}/{key}")
                if key in new
                else [f"{where}/{key} is gone"]
            )
        ]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            d
            for n, (a, b) in enumerate(zip(old, new, strict=True))
            for d in _differences(a, b, f"{where}/{n}")
        ]
    return [] if old == new else [f"{where}: {old!r} became {new!r}"]


def _keys_by_kind(lines: list[bytes]) -> dict[str, set[tuple[str, ...]]]:
    shapes: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for line in lines:
        record = json.loads(line)
        shapes[record["kind"]].add(tuple(record))
    return shapes


def test_a_ledger_written_before_records_had_models_replays_to_the_same_state_and_report(
    tmp_path: Path,
) -> None:
    store = CampaignStore(tmp_path)
    store.directory(CAMPAIGN).mkdir(parents=True)
    shutil.copyfile(FIXTURE / LEDGER_FILE, store.directory(CAMPAIGN) / LEDGER_FILE)
    state = store.load(CAMPAIGN)
    old_state = json.loads((FIXTURE / "state.json").read_text())
    assert _differences(old_state, state_json(state)) == []
    old_report = json.loads((FIXTURE / "report.json").read_text())
    assert _differences(old_report, json.loads(report_json(state))) == []


def test_fields_a_newer_version_added_are_ignored_as_replay_always_ignored_them(
    tmp_path: Path,
) -> None:
    store = CampaignStore(tmp_path)
    store.directory(CAMPAIGN).mkdir(parents=True)
    lines = [json.loads(line) | {"added_later": {"x": 1}} for line in _old_lines(LEDGER_FILE)]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    (store.directory(CAMPAIGN) / LEDGER_FILE).write_text(text)
    plain = CampaignStore(tmp_path / "plain")
    plain.directory(CAMPAIGN).mkdir(parents=True)
    shutil.copyfile(FIXTURE / LEDGER_FILE, plain.directory(CAMPAIGN) / LEDGER_FILE)
    state, expected = store.load(CAMPAIGN), plain.load(CAMPAIGN)
    assert state_json(state) == state_json(expected)
    assert report_json(state) == report_json(expected)


@pytest.mark.parametrize("name", [LEDGER_FILE, "kinds.jsonl"])
def test_every_old_line_reads_as_its_model_and_is_written_back_byte_for_byte(name: str) -> None:
    lines = _old_lines(name)
    records = [parse_record(json.loads(line)) for line in lines]
    # Every kind is a model of its own, but the one a newer version wrote.
    assert [type(r).__name__ for r in records if isinstance(r, OtherRecord)] == (
        ["OtherRecord"] if name == "kinds.jsonl" else []
    )
    assert [encode(record) for record in records] == lines


def test_a_ledger_read_whole_gives_each_record_as_its_line_read_alone_gives_it() -> None:
    # Read whole, a ledger of known kinds takes a faster path than `parse_record`.
    lines = _old_lines(LEDGER_FILE)
    whole = read_ledger(FIXTURE / LEDGER_FILE).records
    alone = [parse_record(json.loads(line)) for line in lines]
    assert whole == alone
    assert [r.model_fields_set for r in whole] == [r.model_fields_set for r in alone]
    assert [encode(record) for record in whole] == lines


def test_records_read_whole_share_no_default_and_copy_apart(tmp_path: Path) -> None:
    spec = {"name": "c", "tasks": [{"id": "a"}]}
    lines = [
        {"seq": 0, "ts": 1.0, "kind": "campaign_created", "campaign": "c", "spec": spec},
        {"seq": 1, "ts": 2.0, "kind": "retry_requested", "campaign": "c"},
        {"seq": 2, "ts": 3.0, "kind": "retry_requested", "campaign": "c"},
    ]
    (tmp_path / LEDGER_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    _, first, second = read_ledger(tmp_path / LEDGER_FILE).records
    assert isinstance(first, RetryRequested)
    assert isinstance(second, RetryRequested)
    assert first.trajectories == []
    assert first.trajectories is not second.trajectories
    changed = first.model_copy(update={"trajectories": ["a@0"]})
    assert "trajectories" in changed.model_fields_set
    assert "trajectories" not in first.model_fields_set | second.model_fields_set


@pytest.mark.parametrize("name", [LEDGER_FILE, "kinds.jsonl"])
async def test_the_writer_writes_the_old_lines_but_for_their_time(
    tmp_path: Path, name: str
) -> None:
    lines = _old_lines(name)
    async with await LedgerWriter.open(tmp_path, CAMPAIGN) as ledger:
        for line in lines:
            await ledger.append(parse_record(json.loads(line)))
    written = (tmp_path / LEDGER_FILE).read_bytes().splitlines(keepends=True)
    assert len(written) == len(lines)
    for old, new in zip(lines, written, strict=True):
        old_record, new_record = json.loads(old), json.loads(new)
        assert list(new_record) == list(old_record), "same keys, in the same order"
        assert new_record.pop("ts") != 0
        old_record.pop("ts")
        assert new_record == old_record
    assert read_ledger(tmp_path / LEDGER_FILE).records == [
        parse_record(json.loads(line)) for line in written
    ]


@pytest.mark.slow
async def test_the_same_campaign_run_today_writes_lines_shaped_as_the_old_ones(
    tmp_path: Path,
) -> None:
    require_root()
    # The timed-out generation waits out the timeout: 8 s, not the fixture's 20 (the value is
    # in no line's shape; the other generations end in ~2 s).
    directory = await run_scenario(tmp_path, generation_timeout_s=8)
    new = _keys_by_kind((directory / LEDGER_FILE).read_bytes().splitlines())
    old = _keys_by_kind(_old_lines(LEDGER_FILE))
    assert set(new) == set(old)
    for kind, shapes in new.items():
        assert shapes <= old[kind], kind
    state = CampaignStore(tmp_path / "state").load(CAMPAIGN)
    expected = json.loads((FIXTURE / "state.json").read_text())
    assert {t: v["outcome"] for t, v in state_json(state)["trajectories"].items()} == {
        t: v["outcome"] for t, v in expected["trajectories"].items()
    }
