"""SWE-bench files: loading instances and predictions, and reports in SWE-bench's own shape.

Where swebench has a function for the same job, the test runs it on the same input and
requires the same output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_evalserver.errors import InvalidInput, NotFound
from mcp_evalserver.scoring.swebench.compat import (
    dump_predictions,
    instance_report,
    instance_report_path,
    load_instances,
    run_summary,
    run_summary_filename,
    write_instance_report,
)
from mcp_evalserver.scoring.swebench.grading import grade_log
from mcp_evalserver.scoring.swebench.logparsers import parse_pytest
from mcp_evalserver.spec.predictions import Prediction, load_predictions
from tests.scoring.swebench_reference import (
    SwebenchTestSpec,
    get_predictions_from_file,
    make_run_report,
    swe_grading,
)


def instance(instance_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "repo": "psf/requests",
        "instance_id": instance_id,
        "base_commit": "0" * 40,
        "patch": f"diff --git a/{instance_id} b/{instance_id}\n",
        "test_patch": "diff --git a/tests/t.py b/tests/t.py\n",
        "problem_statement": "It breaks.",
        "hints_text": "",
        "created_at": "2024-01-01T00:00:00Z",
        "version": "2.0",
        "FAIL_TO_PASS": json.dumps(["tests/t.py::test_fix"]),
        "PASS_TO_PASS": json.dumps(["tests/t.py::test_old"]),
        "environment_setup_commit": "1" * 40,
        **extra,
    }


def test_instances_load_from_jsonl_and_json_with_test_lists_parsed(tmp_path: Path) -> None:
    rows = [instance("psf__requests-1", difficulty="easy"), instance("psf__requests-2")]
    jsonl = tmp_path / "instances.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    as_json = tmp_path / "instances.json"
    as_json.write_text(json.dumps(rows))
    for path in (jsonl, as_json):
        loaded = load_instances(path)
        assert [i.instance_id for i in loaded] == ["psf__requests-1", "psf__requests-2"]
        assert loaded[0].FAIL_TO_PASS == ["tests/t.py::test_fix"]
        assert loaded[0].model_extra == {"difficulty": "easy"}
        assert loaded[0].log_parser == "pytest_options"


def test_bad_instance_files_are_rejected_with_the_place_named(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        load_instances(tmp_path / "missing.jsonl")
    bad_line = tmp_path / "bad.jsonl"
    bad_line.write_text(json.dumps(instance("a")) + "\n{oops\n")
    with pytest.raises(InvalidInput, match=r"bad.jsonl:2"):
        load_instances(bad_line)
    no_patch = tmp_path / "no_patch.json"
    no_patch.write_text(json.dumps([{k: v for k, v in instance("a").items() if k != "patch"}]))
    with pytest.raises(InvalidInput, match="record 1: patch"):
        load_instances(no_patch)
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps([instance("a"), instance("a")]))
    with pytest.raises(InvalidInput, match="duplicate"):
        load_instances(twice)
    bad_list = tmp_path / "bad_list.json"
    bad_list.write_text(json.dumps([instance("a", FAIL_TO_PASS="not json")]))
    with pytest.raises(InvalidInput, match="FAIL_TO_PASS"):
        load_instances(bad_list)


def test_gold_predictions_are_the_instances_patches_as_swebench_makes_them(tmp_path: Path) -> None:
    dataset = tmp_path / "instances.jsonl"
    dataset.write_text("".join(json.dumps(instance(f"psf__requests-{i}")) + "\n" for i in range(3)))
    ours = load_predictions("gold", load_instances(dataset))
    theirs = get_predictions_from_file("gold", str(dataset), "test")
    assert [p.model_dump() for p in ours] == theirs


@pytest.mark.parametrize("shape", ["list.json", "keyed.json", "lines.jsonl"])
def test_prediction_files_load_as_swebench_loads_them(tmp_path: Path, shape: str) -> None:
    rows: list[dict[str, Any]] = [
        {"instance_id": "a", "model_name_or_path": "org/model", "model_patch": "diff\n"},
        {"instance_id": "b", "model_name_or_path": "org/model", "model_patch": ""},
        {"instance_id": "c", "model_name_or_path": "org/model", "model_patch": None, "cost": 1},
    ]
    path = tmp_path / shape
    if shape == "list.json":
        path.write_text(json.dumps(rows))
    elif shape == "keyed.json":
        path.write_text(json.dumps({r["instance_id"]: r for r in rows}))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ours = load_predictions(path)
    assert [p.model_dump() for p in ours] == get_predictions_from_file(str(path), "", "test")
    assert [p.is_empty for p in ours] == [False, True, True]


def test_exported_predictions_load_back_unchanged(tmp_path: Path) -> None:
    predictions = [
        Prediction(instance_id="a", model_name_or_path="m", model_patch="diff\n"),
        Prediction(instance_id="b", model_name_or_path="m", model_patch=None),
    ]
    for name in ("out.jsonl", "out.json"):
        written = dump_predictions(predictions, tmp_path / "export" / name)
        assert load_predictions(written) == predictions


# name -> (log, the facts report.json must show)
LOGS: dict[str, tuple[str, dict[str, Any]]] = {
    "resolved": (
        ">>>>> Start Test Output\nPASSED t::fix\nPASSED t::old\n>>>>> End Test Output\n",
        {"resolved": True},
    ),
    "unresolved": (
        ">>>>> Start Test Output\nFAILED t::fix\nPASSED t::old\n>>>>> End Test Output\n",
        {"resolved": False, "patch_successfully_applied": True},
    ),
    "oom": (
        ">>>>> Start Test Output\ncollecting ...\nKilled\n",
        {"infra_failure": True, "infra_failure_reason": "out_of_memory"},
    ),
    "docker": (
        "Error response from daemon: container is not running\n",
        {"infra_failure": True, "infra_failure_reason": "container_unavailable"},
    ),
    "no tests": (
        ">>>>> Start Test Output\ncollected 0 items\n>>>>> End Test Output\n",
        {"infra_failure": False, "infra_failure_reason": "no_tests_collected"},
    ),
}


@pytest.mark.parametrize("name", sorted(LOGS))
def test_instance_report_equals_swebenchs_report_json(name: str, tmp_path: Path) -> None:
    log, facts = LOGS[name]
    log_path = tmp_path / "test_output.txt"
    log_path.write_text(log)
    prediction = Prediction(instance_id="x__y-1", model_name_or_path="m", model_patch="diff\n")
    spec = SwebenchTestSpec(
        instance_id="x__y-1",
        image="none",
        eval_script_list=[],
        repo="x/y",
        version="1",
        FAIL_TO_PASS=["t::fix"],
        PASS_TO_PASS=["t::old"],
        log_parser="parse_log_pytest",
        eval_type="pass_and_fail",
    )
    theirs = swe_grading.get_eval_report(spec, prediction.model_dump(), str(log_path), True)
    grade = grade_log(log, parser=parse_pytest, fail_to_pass=["t::fix"], pass_to_pass=["t::old"])
    ours = instance_report(prediction, grade, log=log)
    assert ours == theirs
    assert facts.items() <= ours["x__y-1"].items()


def test_a_null_patch_is_reported_without_a_grade() -> None:
    prediction = Prediction(instance_id="a", model_name_or_path="m", model_patch=None)
    assert instance_report(prediction, None)["a"]["patch_is_None"] is True
    with pytest.raises(InvalidInput):
        instance_report(Prediction(instance_id="a", model_name_or_path="m", model_patch="d"), None)


def test_run_summary_equals_swebenchs_make_run_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run_id, model = "run-7", "org/model"
    dataset = [instance(i) for i in ["ok", "bad", "lost", "empty", "null", "none", "env", "odd"]]
    patches: dict[str, str | None] = {
        "ok": "d",
        "bad": "d",
        "lost": "d",
        "empty": "",
        "null": None,
        "env": "d",
        "odd": "d",
        "extra": "d",
    }
    predictions = [
        Prediction(instance_id=i, model_name_or_path=model, model_patch=p)
        for i, p in patches.items()
    ]
    reports: dict[str, dict[str, Any]] = {
        "ok": {"ok": {"resolved": True}},
        "bad": {"bad": {"resolved": False}},
        "env": {"env": {"resolved": False}},
        "odd": {},
    }
    logs = {"env": "Cannot connect to the Docker daemon\n", "bad": "collected 0 items\n"}
    for instance_id, report in reports.items():
        path = instance_report_path(".", run_id, model, instance_id)
        write_instance_report(path, report)
        if instance_id in logs:
            (path.parent / "test_output.txt").write_text(logs[instance_id])

    theirs_path = make_run_report(
        {p.instance_id: p.model_dump() for p in predictions},
        dataset,
        run_id,
        client=None,
        report_dir=str(tmp_path / "summary"),
    )
    ours = run_summary([d["instance_id"] for d in dataset], predictions, reports, logs=logs)
    assert ours == json.loads(Path(theirs_path).read_text())
    assert Path(theirs_path).name == run_summary_filename(model, run_id)
    assert ours["resolved_ids"] == ["ok"]
    assert ours["error_ids"] == ["lost", "odd"]
    assert ours["empty_patch_ids"] == ["empty", "null"]
    assert ours["incomplete_ids"] == ["none"]
    assert ours["infra_failure_ids"] == ["env"]
