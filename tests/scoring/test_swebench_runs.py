"""SWE-bench predictions evaluated as campaigns through the CLI, and reports in its layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_evalserver.cli.main import main
from mcp_evalserver.spec.predictions import load_predictions
from tests.scoring.sandboxed import diff_of, git_repo
from tests.scoring.swebench_reference import SwebenchTestSpec, make_run_report, swe_grading
from tests.scoring.test_tests_scorer import (
    BUGGY,
    FIXED,
    HALF_FIXED,
    HANGS,
    NEW_TESTS,
    OLD_TESTS,
    PYTEST,
)

pytestmark = [pytest.mark.root, pytest.mark.slow]

MODEL = "org/model-x"


def _instances(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """Three instances of the calc repository; returns the file and a patch per kind."""
    rows = []
    patches: dict[str, str] = {}
    for name in ("calc-1", "calc-2", "calc-3"):
        repo = git_repo(tmp_path / f"owner__{name}", {"calc.py": BUGGY, "test_calc.py": OLD_TESTS})
        patches = {
            "gold": diff_of(repo, {"calc.py": FIXED}),
            "half": diff_of(repo, {"calc.py": HALF_FIXED}),
        }
        rows.append(
            {
                "instance_id": f"owner__{name}",
                "repo": "owner/calc",
                "base_commit": "HEAD",
                "patch": patches["gold"],
                "test_patch": diff_of(repo, {"test_calc.py": NEW_TESTS}),
                "problem_statement": "add and mul are wrong",
                "FAIL_TO_PASS": json.dumps(["test_calc.py::test_add", "test_calc.py::test_mul"]),
                "PASS_TO_PASS": json.dumps(["test_calc.py::test_zero"]),
                "eval_script": PYTEST,
                "repo_language": "Python",
            }
        )
    path = tmp_path / "instances.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path, patches


def _cli(state: Path, *args: str) -> int:
    return main(["--state-dir", str(state), *args])


def test_predictions_are_evaluated_and_reported_in_swebench_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instances, patches = _instances(tmp_path)
    predictions = tmp_path / "preds.jsonl"
    rows: list[dict[str, Any]] = [
        {"instance_id": f"owner__calc-{n}", "model_name_or_path": MODEL, "model_patch": patch}
        for n, patch in ((1, patches["gold"]), (2, patches["half"]), (3, ""))
    ]
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    state = tmp_path / "state"
    assert _cli(
        state, "import-predictions", str(predictions), "--instances", str(instances),
        "--path", str(tmp_path / "{instance_id}"), "--id", "p",
        "--no-progress",
    ) == 0  # fmt: skip
    assert "pass rate: **33.3%** (1/3" in capsys.readouterr().out, "an empty patch fails"

    out = tmp_path / "swebench"
    assert _cli(state, "report", "p", "--swebench", str(out), "--format", "json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["score_statuses"] == {"empty": 1, "failed": 1, "resolved": 1}
    assert report["grading_modes"] == {"swebench": 2}, "the empty patch was not graded"
    assert report["partially_resolved"] == 1
    summary = json.loads((out / "model-x.p.json").read_text())
    assert summary["failure_reasons"] == {}
    assert {k: summary[k] for k in ("resolved_ids", "unresolved_ids", "empty_patch_ids")} == {
        "resolved_ids": ["owner__calc-1"],
        "unresolved_ids": ["owner__calc-2"],
        "empty_patch_ids": ["owner__calc-3"],
    }
    assert (summary["total_instances"], summary["completed_instances"]) == (3, 2)
    instance_dir = out / "logs/run_evaluation/p/model-x/owner__calc-2"
    entry = json.loads((instance_dir / "report.json").read_text())["owner__calc-2"]
    assert entry["patch_successfully_applied"] is True
    assert entry["resolved"] is False
    assert entry["tests_status"]["FAIL_TO_PASS"]["failure"] == ["test_calc.py::test_mul"]
    assert "FAILED test_calc.py::test_mul" in (instance_dir / "test_output.txt").read_text()
    assert (instance_dir / "patch.diff").read_text() == patches["half"]
    assert not (out / "logs/run_evaluation/p/model-x/owner__calc-3").exists(), "empty: not run"
    # SWE-bench's own grader reads the logs we wrote and reports exactly what we reported.
    for row in rows[:2]:
        directory = out / "logs/run_evaluation/p/model-x" / row["instance_id"]
        spec = SwebenchTestSpec(
            instance_id=row["instance_id"],
            image="none",
            eval_script_list=[],
            repo="owner/calc",
            version="1",
            FAIL_TO_PASS=["test_calc.py::test_add", "test_calc.py::test_mul"],
            PASS_TO_PASS=["test_calc.py::test_zero"],
            log_parser="parse_log_pytest",
            eval_type="pass_and_fail",
        )
        theirs = swe_grading.get_eval_report(
            spec, row, str(directory / "test_output.txt"), include_tests_status=True
        )
        assert json.loads((directory / "report.json").read_text()) == theirs

    exported = tmp_path / "exported.jsonl"
    assert _cli(state, "export-predictions", "p", str(exported), "--model", MODEL) == 0
    assert [p.model_dump() for p in load_predictions(exported)] == rows


def test_gold_predictions_resolve_every_instance_and_compare_with_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instances, _ = _instances(tmp_path)
    state = tmp_path / "state"
    environment = ["--path", str(tmp_path / "{instance_id}")]
    assert _cli(
        state, "import-predictions", "gold", "--instances", str(instances), *environment,
        "--id", "gold", "--no-progress", "--scorer", '{"type": "tests", "strict": true}',
    ) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "pass rate: **100.0%** (3/3" in out
    assert "scorer `tests`, 3 graded in mode `strict`)" in out
    predictions = tmp_path / "preds.json"
    predictions.write_text(
        json.dumps(
            [{"instance_id": "owner__calc-1", "model_name_or_path": MODEL, "model_patch": ""}]
        )
    )
    assert _cli(
        state, "import-predictions", str(predictions), "--instances", str(instances),
        *environment, "--id", "model", "--no-progress",
    ) == 0  # fmt: skip
    capsys.readouterr()
    assert _cli(state, "compare", "gold", "model", "--format", "json") == 0
    comparison = json.loads(capsys.readouterr().out)
    assert comparison["shared_tasks"] == 1
    assert comparison["mean_difference"] == -1.0
    assert comparison["only_in_a"] == ["owner__calc-2", "owner__calc-3"]


def test_predictions_for_unknown_instances_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instances, _ = _instances(tmp_path)
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(
        json.dumps({"instance_id": "nope", "model_name_or_path": MODEL, "model_patch": "x"})
    )
    assert _cli(
        tmp_path / "s", "import-predictions", str(predictions), "--instances", str(instances)
    ) == 2  # fmt: skip
    assert "name instances not in" in capsys.readouterr().err


def test_apply_failures_and_timeouts_get_no_report_json_and_bucket_as_swebench_buckets_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    instances, patches = _instances(tmp_path)
    broken = patches["gold"].replace("-    return a - b", "-    return a / b")
    hangs = diff_of(tmp_path / "owner__calc-2", {"calc.py": HANGS})
    rows: list[dict[str, Any]] = [
        {"instance_id": f"owner__calc-{n}", "model_name_or_path": MODEL, "model_patch": patch}
        for n, patch in ((1, broken), (2, hangs), (3, patches["half"]))
    ]
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    state = tmp_path / "state"
    assert _cli(
        state, "import-predictions", str(predictions), "--instances", str(instances),
        "--path", str(tmp_path / "{instance_id}"), "--id", "p", "--no-progress",
        "--scorer", '{"type": "tests", "timeout_s": 5}',  # waited out by the hanging tests
    ) == 0  # fmt: skip
    # The campaign's own report: all three are the submission's misses, in the denominator.
    assert "pass rate: **0.0%** (0/3" in capsys.readouterr().out
    out = tmp_path / "swebench"
    assert _cli(
        state, "report", "p", "--swebench", str(out), "--model", MODEL, "--format", "json"
    ) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["score_statuses"] == {
        "failed": 1,
        "patch_apply_failed": 1,
        "timeout": 1,
    }
    ours = json.loads((out / "org__model-x.p.json").read_text())
    assert ours["error_ids"] == ["owner__calc-1", "owner__calc-2"]
    assert ours["unresolved_ids"] == ["owner__calc-3"]
    assert ours["failure_reasons"] == {"owner__calc-2": "tests_timed_out"}
    runs = out / "logs/run_evaluation/p/org__model-x"
    assert not (runs / "owner__calc-1/report.json").exists()
    assert not (runs / "owner__calc-2/report.json").exists()
    assert not (runs / "owner__calc-1/test_output.txt").exists(), "the tests never ran"
    timed_out = (runs / "owner__calc-2/test_output.txt").read_text()
    assert timed_out.endswith("\n\nTimeout error: 5 seconds exceeded."), timed_out[-200:]
    # SWE-bench's own summary of the directory we wrote is ours, field for field.
    monkeypatch.chdir(out)
    theirs_path = make_run_report(
        {r["instance_id"]: r for r in rows},
        [{"instance_id": r["instance_id"]} for r in rows],
        "p",
        client=None,
        report_dir=str(tmp_path / "theirs"),
    )
    assert json.loads(Path(theirs_path).read_text()) == ours
