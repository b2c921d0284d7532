"""SWE-bench runs in and out of campaigns: predictions in, predictions and reports out.

- `predictions_spec` makes an evaluation-only campaign: SWE-bench instances as tasks (those a
  prediction names), the `predictions` agent (it submits each prediction's patch; `gold`
  submits each instance's own) and the `tests` scorer. Running it is SWE-bench's
  `run_evaluation`: empty patches are counted, not run.
- `export_predictions` writes a campaign's patches back as a SWE-bench predictions file.
- `write_swebench_reports` writes per-instance `report.json` (with the test log and patch
  beside it, as SWE-bench lays them out) and the run summary JSON, in SWE-bench's shapes.

A SWE-bench run has one prediction per instance; a campaign with several samples exports one
sample (`sample`, default 0). Buckets are SWE-bench 5.0.2's (`run_instance`, `make_run_report`):
a patch that did not apply and tests that ran past the time limit raise there before any
report.json is written, so here too they get none and land in `error_ids`, as do trajectories
not scored or scored by another scorer. The campaign's own report keeps the richer statuses.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mcp_evalserver.engine.state import CampaignState, TrajectoryState
from mcp_evalserver.errors import InvalidInput, NotFound
from mcp_evalserver.runtime.artifacts import read_artifact
from mcp_evalserver.scoring.swebench.compat import (
    SwebenchInstance,
    dump_predictions,
    instance_report,
    instance_report_path,
    load_instances,
    run_summary,
    run_summary_filename,
    write_instance_report,
)
from mcp_evalserver.scoring.swebench.grading import (
    EvalStatus,
    Grade,
    ResolutionStatus,
    TestGroup,
    TestsReport,
)
from mcp_evalserver.spec.campaign import (
    CampaignSpec,
    Task,
    describe_validation_error,
    note_extra_task_fields,
    parse_spec,
    trajectory_id,
)
from mcp_evalserver.spec.predictions import GOLD, Prediction, load_predictions

#: Evaluations SWE-bench ends with an `EvaluationError` before writing report.json.
_NO_REPORT = frozenset({EvalStatus.PATCH_APPLY_FAILED, EvalStatus.TIMEOUT})


def instance_task(
    instance: SwebenchInstance, *, image: str | None = None, path: str | None = None
) -> dict[str, Any]:
    """A SWE-bench instance as a task; fields a task does not know go to its `metadata`.

    `image` and `path` are templates formatted with the instance's fields (e.g.
    `swebench/sweb.eval.x86_64.{instance_id}`); without them the instance's own `image` or
    `path` field is used.
    """
    fields = instance.model_dump()
    task = dict(fields)  # the task keeps what it does not know in `metadata`
    if image is not None:
        task["image"] = image.format(**fields)
    if path is not None:
        task["path"] = path.format(**fields)
    return task


def predictions_spec(
    predictions: str | Path,
    instances: str | Path,
    *,
    scorer: dict[str, Any] | None = None,
    name: str | None = None,
    image: str | None = None,
    path: str | None = None,
    limits: dict[str, Any] | None = None,
) -> CampaignSpec:
    """An evaluation-only campaign of `predictions` (a file, or `gold`) on `instances`.

    The tasks are the instances a prediction names (all of them for `gold`).

    Raises:
        NotFound: a file does not exist.
        InvalidInput: a file is malformed, a prediction names an instance the instances file
            does not hold, or the resulting spec is invalid.
    """
    loaded = load_instances(instances)
    chosen = load_predictions(predictions, loaded)
    known = {i.instance_id for i in loaded}
    unknown = sorted({p.instance_id for p in chosen} - known)
    if unknown:
        raise InvalidInput(
            f"{len(unknown)} prediction(s) name instances not in {instances}: "
            f"{', '.join(unknown[:5])}"
        )
    wanted = {p.instance_id for p in chosen}
    note_extra_task_fields((i.model_dump() for i in loaded if i.instance_id in wanted), instances)
    models = sorted({p.model_name_or_path for p in chosen})
    if name is None:
        label = models[0] if len(models) == 1 else "predictions"
        name = re.sub(r"[^A-Za-z0-9._-]", "_", label.rsplit("/", 1)[-1])[:64] or "predictions"
    source = str(predictions) if str(predictions) == GOLD else str(Path(predictions).resolve())
    tasks: list[Task] = []
    for instance in loaded:
        if instance.instance_id in wanted:
            try:
                tasks.append(Task.model_validate(instance_task(instance, image=image, path=path)))
            except ValidationError as exc:
                raise InvalidInput(
                    f"{instances}: instance {instance.instance_id}: "
                    f"{describe_validation_error(exc)}"
                ) from exc
    return parse_spec(
        {
            "name": name,
            "tasks": tasks,  # validated above, so the note names the instances file
            "agent": {"type": "predictions", "path": source},
            "scorer": scorer or {"type": "tests"},
            "limits": limits or {},
        }
    )


def _patch(state: CampaignState, directory: Path, trajectory: TrajectoryState) -> str | None:
    ref = (trajectory.submission or {}).get("patch")
    return read_artifact(directory, ref).decode(errors="replace") if ref else None


def _chosen(state: CampaignState, sample: int) -> list[TrajectoryState]:
    # (Adaptive sampling gives tasks different counts: every task has its first ones.)
    if not 0 <= sample < (count := state.spec.initial_samples):
        raise InvalidInput(f"sample {sample}: campaign {state.id} has {count} for every task")
    return [state.trajectories[trajectory_id(t.id, sample)] for t in state.spec.task_list()]


def campaign_predictions(
    state: CampaignState, directory: Path, *, model: str, sample: int = 0
) -> list[Prediction]:
    """The generated patches of one sample as SWE-bench predictions (empty patch: "").

    Raises:
        InvalidInput: no such sample.
        NotFound: a patch artifact is missing.
        LedgerCorrupt: a patch artifact does not match its hash.
    """
    return [
        Prediction(
            instance_id=t.task_id,
            model_name_or_path=model,
            model_patch=_patch(state, directory, t) or "",
        )
        for t in _chosen(state, sample)
        if t.generated_seq is not None
    ]


def export_predictions(
    state: CampaignState, directory: Path, out: str | Path, *, model: str, sample: int = 0
) -> Path:
    """Writes one sample's patches as a SWE-bench predictions file (`.jsonl` or `.json`).

    Raises:
        InvalidInput: no such sample, or the file cannot be written.
        NotFound: a patch artifact is missing.
    """
    return dump_predictions(campaign_predictions(state, directory, model=model, sample=sample), out)


def grade_of(score: dict[str, Any]) -> Grade | None:
    """The grade a `tests` score records (None for a score from another scorer)."""
    details = score.get("details") or {}
    if "eval_status" not in details:
        return None
    tests = details.get("tests_status")
    report = None
    if tests:
        report = TestsReport(
            fail_to_pass=TestGroup(
                tuple(tests["FAIL_TO_PASS"]["success"]), tuple(tests["FAIL_TO_PASS"]["failure"])
            ),
            pass_to_pass=TestGroup(
                tuple(tests["PASS_TO_PASS"]["success"]), tuple(tests["PASS_TO_PASS"]["failure"])
            ),
        )
    return Grade(
        status=EvalStatus(details["eval_status"]),
        resolution=ResolutionStatus(details["resolution"]),
        explanation=str(score.get("explanation", "")),
        tests=report,
        exit_code=details.get("exit_code"),
    )


def write_swebench_reports(
    state: CampaignState,
    directory: Path,
    out: str | Path,
    *,
    model: str | None = None,
    run_id: str | None = None,
    sample: int = 0,
) -> Path:
    """Writes SWE-bench's evaluation layout for one sample; returns the run summary's path.

    `out/logs/run_evaluation/<run_id>/<model>/<instance>/` gets `report.json` (none for an
    apply failure or a timeout, as in SWE-bench), `patch.diff`, `test_output.txt` (the graded
    output of the test run, when the tests ran) and `run_instance.log` (the whole log);
    `out/<model>.<run_id>.json` is the run summary. The model defaults to the campaign's name,
    the run id to the campaign's id.

    Raises:
        InvalidInput: no such sample, or a file cannot be written.
        NotFound: an artifact is missing.
    """
    model = model or state.spec.name
    run_id = run_id or state.id
    predictions = campaign_predictions(state, directory, model=model, sample=sample)
    reports: dict[str, dict[str, Any]] = {}
    logs: dict[str, str] = {}
    for trajectory, prediction in _with_predictions(state, sample, predictions):
        grade = grade_of(trajectory.score) if trajectory.score else None
        log = _log(directory, trajectory)
        logs[prediction.instance_id] = log
        if prediction.is_empty or grade is None:
            continue
        path = instance_report_path(out, run_id, model, prediction.instance_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "patch.diff").write_text(prediction.model_patch or "")
        # The whole log stands in for SWE-bench's run_instance.log (its failure classifier
        # reads both files).
        (path.parent / "run_instance.log").write_text(log)
        test_output = _log(directory, trajectory, "test_output")
        if test_output:
            (path.parent / "test_output.txt").write_text(test_output)
        if grade.status in _NO_REPORT:
            continue
        report = instance_report(prediction, grade, log=log)
        reports[prediction.instance_id] = report
        write_instance_report(path, report)
    summary = run_summary([t.id for t in state.spec.task_list()], predictions, reports, logs=logs)
    summary_path = Path(out) / run_summary_filename(model, run_id)
    write_instance_report(summary_path, summary)
    return summary_path


def _with_predictions(
    state: CampaignState, sample: int, predictions: list[Prediction]
) -> list[tuple[TrajectoryState, Prediction]]:
    by_id = {p.instance_id: p for p in predictions}
    return [(t, by_id[t.task_id]) for t in _chosen(state, sample) if t.task_id in by_id]


def _log(directory: Path, trajectory: TrajectoryState, name: str = "log") -> str:
    ref = ((trajectory.score or {}).get("details") or {}).get(name)
    if not ref:
        return ""
    try:
        return read_artifact(directory, ref).decode(errors="replace")
    except NotFound:
        return ""
