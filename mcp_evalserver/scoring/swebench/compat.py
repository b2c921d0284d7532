"""SWE-bench files in and out: instances, predictions, per-instance report.json, run summary.

Shapes follow `swebench` 5.0.2 (`harness/utils.py`, `harness/grading.py::get_eval_report`,
`harness/reporting.py::make_run_report`), so tools that read SWE-bench results read ours.

- Instances: a `.json` array, `.jsonl` lines or a task repository (`spec/swebench_repos.py`);
  FAIL_TO_PASS / PASS_TO_PASS as JSON text (as the datasets ship them) or lists. Unknown fields
  are kept.
- Predictions: `.json` (an array, or an object keyed by instance id as SWE-agent writes it)
  or `.jsonl`, each with `instance_id`, `model_name_or_path`, `model_patch`. The source `gold`
  means each instance's own `patch` under the model name `gold`. An empty or null patch is
  counted (in `empty_patch_ids`) but not run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.atomic_files import write_atomically
from mcp_evalserver.scoring.swebench.grading import EvalStatus, Grade, parse_test_list
from mcp_evalserver.scoring.swebench.logparsers import SWEBENCH_REPO_PARSERS
from mcp_evalserver.spec.predictions import Prediction, read_records, validate_records
from mcp_evalserver.spec.swebench_repos import read_task_repo

REPORT_FILE = "report.json"
RUN_EVALUATION_LOG_DIR = Path("logs/run_evaluation")
SUMMARY_SCHEMA_VERSION = 2

# SWE-bench's post-hoc failure signatures (harness/infra_failure.py): (reason, tier, pattern),
# first match wins. Only the "environment" tier marks an instance as an infrastructure failure.
TIER_ENVIRONMENT = "environment"
TIER_AMBIGUOUS = "ambiguous"
_FAILURE_SIGNATURES = tuple(
    (reason, tier, re.compile(pattern, re.MULTILINE))
    for reason, tier, pattern in (
        (
            "browser_launch_failed",
            TIER_ENVIRONMENT,
            r"Failed to launch|Failed to connect to the bus",
        ),
        (
            "display_unavailable",
            TIER_ENVIRONMENT,
            r"cannot open display|Missing X server|unable to open X display",
        ),
        ("out_of_memory", TIER_ENVIRONMENT, r"Cannot allocate memory|OutOfMemoryError|^Killed$"),
        (
            "container_unavailable",
            TIER_ENVIRONMENT,
            r"Error response from daemon|Cannot connect to the Docker daemon",
        ),
        (
            "network_unreachable",
            TIER_ENVIRONMENT,
            r"Could not resolve host|Temporary failure in name resolution",
        ),
        (
            "missing_module",
            TIER_AMBIGUOUS,
            r"Cannot find module|MODULE_NOT_FOUND|ModuleNotFoundError",
        ),
        ("no_tests_collected", TIER_AMBIGUOUS, r"no tests ran|collected 0 items"),
        ("tests_timed_out", TIER_AMBIGUOUS, r"Timeout error: \d+ seconds exceeded"),
    )
)


class SwebenchInstance(BaseModel):
    """One SWE-bench task instance; fields beyond these are kept as extras."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    instance_id: str
    repo: str
    base_commit: str
    patch: str
    test_patch: str
    problem_statement: str = ""
    hints_text: str = ""
    created_at: str = ""
    version: str = ""
    environment_setup_commit: str = ""
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _test_list(cls, value: Any) -> list[str]:
        try:
            return parse_test_list(value)
        except InvalidInput as error:
            raise ValueError(str(error)) from error

    @property
    def log_parser(self) -> str | None:
        """The name of the parser SWE-bench uses for this repository, if it knows one."""
        return SWEBENCH_REPO_PARSERS.get(self.repo)


def _instance_id(instance: SwebenchInstance) -> str:
    return instance.instance_id


def load_instances(path: str | Path) -> list[SwebenchInstance]:
    """Reads SWE-bench instances from a `.json` array, a `.jsonl` file or a SWE-bench task
    repository (a folder holding `sweb.yaml`: the rows it publishes, as a JSONL file holds).

    Raises:
        NotFound: the file does not exist.
        InvalidInput: not JSON, a record misses a field, or an instance id repeats; in a task
            repository, a file or key is missing, unknown or malformed.
    """
    path = Path(path)
    records = read_task_repo(path) if path.is_dir() else read_records(path)
    return validate_records(SwebenchInstance, records, path, _instance_id)


def dump_predictions(predictions: Iterable[Prediction], path: str | Path) -> Path:
    """Writes predictions as `.jsonl` (or a `.json` array if the name says so), atomically.

    Raises:
        InvalidInput: the file cannot be written.
    """
    path = Path(path)
    rows = [p.model_dump(mode="json") for p in predictions]
    if path.suffix == ".json":
        text = json.dumps(rows, indent=2) + "\n"
    else:
        text = "".join(json.dumps(row) + "\n" for row in rows)
    _write_atomically(path, text)
    return path


def classify_failure(log: str) -> tuple[str, str] | None:
    """SWE-bench's post-hoc guess at why a run failed: (reason, tier) or None."""
    if not log:
        return None
    for reason, tier, pattern in _FAILURE_SIGNATURES:
        if pattern.search(log):
            return reason, tier
    return None


def instance_report(
    prediction: Prediction, grade: Grade | None, *, log: str = "", include_tests_status: bool = True
) -> dict[str, Any]:
    """The content of SWE-bench's per-instance `report.json` for one graded prediction.

    `grade` may be None only for a null patch (SWE-bench reports it without running it);
    `log` is the evaluation's output, scanned for infrastructure-failure signatures when the
    log could not be graded.

    Raises:
        InvalidInput: `grade` is None for a prediction that has a patch.
    """
    entry: dict[str, Any] = {
        "patch_is_None": False,
        "patch_exists": False,
        "patch_successfully_applied": False,
        "resolved": False,
        "infra_failure": False,
    }
    report = {prediction.instance_id: entry}
    if prediction.model_patch is None:
        entry["patch_is_None"] = True
        return report
    entry["patch_exists"] = True
    if grade is None:
        raise InvalidInput(f"{prediction.instance_id}: a prediction with a patch needs a grade")
    if grade.status is not EvalStatus.GRADED:
        found = classify_failure(log)
        if found:
            entry["infra_failure"] = found[1] == TIER_ENVIRONMENT
            entry["infra_failure_reason"] = found[0]
        return report
    entry["patch_successfully_applied"] = True
    entry["resolved"] = grade.resolved
    if include_tests_status and grade.tests is not None:
        entry["tests_status"] = grade.tests.to_swebench()
    return report


def instance_report_path(root: str | Path, run_id: str, model: str, instance_id: str) -> Path:
    """Where SWE-bench keeps an instance's report.json under `root`."""
    return (
        Path(root) / RUN_EVALUATION_LOG_DIR / run_id / _model_dir(model) / instance_id / REPORT_FILE
    )


def write_instance_report(path: str | Path, report: Mapping[str, Any]) -> Path:
    """Writes a report.json (indent 4, as SWE-bench does), atomically.

    Raises:
        InvalidInput: the file cannot be written.
    """
    path = Path(path)
    _write_atomically(path, json.dumps(report, indent=4))
    return path


def run_summary(
    instance_ids: Sequence[str],
    predictions: Iterable[Prediction],
    reports: Mapping[str, Mapping[str, Any]],
    *,
    logs: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The run summary SWE-bench's `make_run_report` writes (without its Docker fields).

    `instance_ids` is the whole dataset; `reports` maps an instance id to its report.json
    content for every instance whose evaluation completed; `logs` (test output and run log,
    concatenated) are scanned to classify the failures of unresolved and errored instances.
    """
    by_id = {p.instance_id: p for p in predictions}
    logs = logs or {}
    completed, resolved, unresolved, errors, incomplete, empty = (set[str]() for _ in range(6))
    for instance_id in instance_ids:
        prediction = by_id.get(instance_id)
        if prediction is None:
            incomplete.add(instance_id)
            continue
        if prediction.is_empty:
            empty.add(instance_id)
            continue
        report = reports.get(instance_id)
        if report is None:
            errors.add(instance_id)
            continue
        completed.add(instance_id)
        entry = report.get(instance_id)
        if not isinstance(entry, Mapping) or "resolved" not in entry:
            errors.add(instance_id)
        elif entry["resolved"]:
            resolved.add(instance_id)
        else:
            unresolved.add(instance_id)
    reasons: dict[str, str] = {}
    infra, ambiguous = set[str](), set[str]()
    for instance_id in unresolved | errors:
        found = classify_failure(logs.get(instance_id, ""))
        if found:
            reasons[instance_id] = found[0]
            (infra if found[1] == TIER_ENVIRONMENT else ambiguous).add(instance_id)
    return {
        "total_instances": len(instance_ids),
        "submitted_instances": len(by_id),
        "completed_instances": len(completed),
        "resolved_instances": len(resolved),
        "unresolved_instances": len(unresolved),
        "infra_failure_instances": len(infra),
        "ambiguous_failure_instances": len(ambiguous),
        "empty_patch_instances": len(empty),
        "error_instances": len(errors),
        "completed_ids": sorted(completed),
        "incomplete_ids": sorted(incomplete),
        "empty_patch_ids": sorted(empty),
        "submitted_ids": sorted(by_id),
        "resolved_ids": sorted(resolved),
        "unresolved_ids": sorted(unresolved),
        "infra_failure_ids": sorted(infra),
        "ambiguous_failure_ids": sorted(ambiguous),
        "failure_reasons": dict(sorted(reasons.items())),
        "error_ids": sorted(errors),
        "schema_version": SUMMARY_SCHEMA_VERSION,
    }


def run_summary_filename(model: str, run_id: str) -> str:
    """SWE-bench's name for the summary file: `<model with / as __>.<run_id>.json`."""
    return f"{_model_dir(model)}.{run_id}.json"


def _model_dir(model: str) -> str:
    return model.replace("/", "__")


def _write_atomically(path: Path, text: str) -> None:
    # A reader (or a crash) never sees half a report.
    try:
        write_atomically(path, text.encode())
    except OSError as error:
        raise InvalidInput(f"cannot write {path}: {error}") from error
