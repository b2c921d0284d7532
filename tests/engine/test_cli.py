"""The command line as a user runs it: run, status, resume, report, schema, clear errors."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.store import CampaignStore


def _spec(tmp_path: Path, agent: str) -> Path:
    spec = {
        "name": agent,
        "tasks": [{"id": "sum", "answer": "4"}, {"id": "capital", "answer": "Paris"}],
        "samples": 3,
        "agent": {"type": agent},
    }
    path = tmp_path / f"{agent}.json"
    path.write_text(json.dumps(spec))
    return path


def test_run_executes_a_campaign_and_prints_its_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "state")
    assert main(["--state-dir", state, "run", str(_spec(tmp_path, "oracle")), "--id", "o"]) == 0
    out, err = capsys.readouterr()
    assert "pass rate: **100.0%** (6/6" in out
    assert "6/6  pass 6 (100.0%)" in err, "the progress line reports the final count"
    assert "ledger.jsonl" in err

    assert main(["--state-dir", state, "run", str(_spec(tmp_path, "noop")), "--id", "n"]) == 0
    assert "pass rate: **0.0%** (0/6" in capsys.readouterr().out

    assert main(["--state-dir", state, "status"]) == 0
    listing = capsys.readouterr().out
    assert "o  finished  6/6  resolved 6" in listing
    assert "n  finished  6/6  resolved 0" in listing

    assert main(["--state-dir", state, "report", "o", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pass_rate"] == 1.0
    assert report["tasks"]["capital"]["resolved"] == 3


def test_resuming_a_finished_campaign_runs_nothing_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    main(["--state-dir", str(state), "run", str(_spec(tmp_path, "oracle")), "--id", "o"])
    ledger = state / "campaigns" / "o" / "ledger.jsonl"
    before = ledger.read_text().splitlines()
    assert main(["--state-dir", str(state), "resume", "o", "--no-progress"]) == 0
    after = ledger.read_text().splitlines()
    assert after[: len(before)] == before
    assert [json.loads(line)["kind"] for line in after[len(before) :]] == ["run_started"]


def test_an_unknown_campaign_lists_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "state")
    main(["--state-dir", state, "run", str(_spec(tmp_path, "noop")), "--id", "known"])
    capsys.readouterr()
    assert main(["--state-dir", state, "status", "unknown"]) == 2
    assert "no campaign 'unknown'" in capsys.readouterr().err
    assert main(["--state-dir", state, "resume", "unknown"]) == 2
    assert "known: known" in capsys.readouterr().err


def test_an_invalid_spec_is_a_clear_error_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"tasks": [{"id": "a"}], "agent": {"type": "gpt"}}))
    assert main(["--state-dir", str(tmp_path), "run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "agent.type: unknown 'gpt' (known: claude-code, codex, command, external," in err


def test_the_http_server_refuses_to_bind_beyond_loopback_without_a_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MCP_EVALSERVER_TOKEN", raising=False)
    assert main(["--http", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "refusing to serve on 0.0.0.0 without a token" in capsys.readouterr().err


def test_the_state_dir_comes_from_the_environment_when_no_flag_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MCP_EVALSERVER_STATE_DIR", str(tmp_path / "from-env"))
    assert main(["run", str(_spec(tmp_path, "noop")), "--id", "e", "--no-progress"]) == 0
    assert (tmp_path / "from-env" / "campaigns" / "e" / "ledger.jsonl").is_file()


def test_schema_prints_the_spec_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "CampaignSpec"


def test_the_answer_task_examples_resolve_with_the_oracle_and_not_with_noop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    state = str(tmp_path / "state")
    assert main(["--state-dir", state, "run", str(examples / "answers-oracle.json")]) == 0
    assert "pass rate: **100.0%** (18/18" in capsys.readouterr().out
    assert main(["--state-dir", state, "run", str(examples / "answers-noop.json")]) == 0
    assert "pass rate: **0.0%** (0/18" in capsys.readouterr().out


@pytest.mark.parametrize("left", [b"", b'{"v":1,"seq":0,"ts":1,"kind":"campaign_created","sp'])
def test_a_ledger_an_interrupted_creation_left_is_refused_by_resume_and_recreated_by_run_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], left: bytes
) -> None:
    # An empty file or a torn first line: what a kill during creation left before creation
    # was atomic. Neither may stay a campaign that nothing can finish.
    state = tmp_path / "state"
    (state / "campaigns" / "o").mkdir(parents=True)
    (state / "campaigns" / "o" / "ledger.jsonl").write_bytes(left)
    for _ in range(2):  # resuming twice: a refused resume changes nothing
        assert main(["--state-dir", str(state), "resume", "o", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("mcp-evalserver: campaign 'o' was never created"), err
        assert err.count("\n") == 1
        assert "`run SPEC --id o`" in err
    spec = _spec(tmp_path, "oracle")
    assert main(["--state-dir", str(state), "run", str(spec), "--id", "o", "--no-progress"]) == 0
    assert "pass rate: **100.0%** (6/6" in capsys.readouterr().out
    assert main(["--state-dir", str(state), "run", str(spec), "--id", "o", "--no-progress"]) == 2
    assert "campaign 'o' exists; resume it instead" in capsys.readouterr().err


def _hold_lock(directory: Path) -> int:
    fd = os.open(directory / "ledger.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@pytest.mark.parametrize("cause", ["held by another process", "corrupt"])
def test_an_error_inside_a_run_prints_one_line_that_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cause: str
) -> None:
    state = tmp_path / "state"
    main(["--state-dir", str(state), "run", str(_spec(tmp_path, "noop")), "--id", "n"])
    capsys.readouterr()
    directory = state / "campaigns" / "n"
    if cause == "corrupt":
        ledger = directory / "ledger.jsonl"
        lines = ledger.read_bytes().splitlines(keepends=True)
        ledger.write_bytes(b"".join([lines[0], b"not json\n", *lines[1:]]))
        expected = "line 2 is unreadable"
        advice = "Move the file aside and inspect it"
    else:
        held = _hold_lock(directory)
        expected = "campaign n is being run by another process"
        advice = "wait for it or stop it, then resume"
    try:
        assert main(["--state-dir", str(state), "resume", "n", "--no-progress"]) == 1
    finally:
        if cause != "corrupt":
            os.close(held)
    err = capsys.readouterr().err
    assert err.startswith("mcp-evalserver: "), err
    assert err.count("\n") == 1, err
    assert expected in err
    assert advice in err
    assert "Traceback" not in err


_INSTANCE = {
    "instance_id": "owner__project-1",
    "repo": "owner/project",
    "base_commit": "0" * 40,
    "patch": "",
    "test_patch": "",
    "problem_statement": "fix it",
    "FAIL_TO_PASS": "[]",
    "PASS_TO_PASS": "[]",
    # Columns a published dataset adds that a task does not know.
    "repo_language": "Python",
    "difficulty_band": 3,
}


def test_run_and_import_predictions_keep_a_task_files_extra_fields_as_metadata_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instances = tmp_path / "instances.jsonl"
    instances.write_text(json.dumps(_INSTANCE) + "\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"tasks": "instances.jsonl", "agent": {"type": "noop"}}))
    state = str(tmp_path / "state")

    assert main(["--state-dir", state, "run", str(spec), "--id", "r", "--no-progress"]) == 0
    run_err = capsys.readouterr().err
    assert main(
        ["--state-dir", state, "import-predictions", "gold", "--instances", str(instances),
         "--id", "i", "--no-run"]
    ) == 0  # fmt: skip
    import_err = capsys.readouterr().err

    for err in (run_err, import_err):
        assert "difficulty_band, repo_language are not task field(s)" in err
        assert "kept in each task's `metadata`" in err
    store = CampaignStore(Path(state))
    for campaign_id in ("r", "i"):
        (task,) = store.load(campaign_id).spec.task_list()
        assert task.id == "owner__project-1"
        assert task.metadata == {"repo_language": "Python", "difficulty_band": 3}
