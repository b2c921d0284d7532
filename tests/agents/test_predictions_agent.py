"""The predictions agent: SWE-bench predictions files (and `gold`) evaluated by a campaign."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.agents.helpers import records, run, spec
from tests.root import require_root
from tests.scoring.sandboxed import PYTHON_PYTEST, diff_of, git_repo

pytestmark = pytest.mark.anyio

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"
PYTEST = f"{PYTHON_PYTEST} -rA test_calc.py"


def _write_predictions(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _swebench_tasks(tmp_path: Path, ids: list[str]) -> list[dict[str, Any]]:
    """SWE-bench-shaped tasks sharing one instance: a repo whose `add` subtracts."""
    repo = git_repo(tmp_path / "repo", {"calc.py": BUGGY, "test_calc.py": TESTS})
    gold = diff_of(repo, {"calc.py": FIXED})
    return [
        {
            "instance_id": instance_id,
            "problem_statement": "add subtracts",
            "path": str(repo),
            "patch": gold,
            "FAIL_TO_PASS": json.dumps(["test_calc.py::test_add"]),
            "PASS_TO_PASS": "[]",
            "eval_script": PYTEST,
        }
        for instance_id in ids
    ]


@pytest.mark.root
async def test_predictions_from_a_file_are_evaluated_and_a_missing_one_is_an_error(
    tmp_path: Path,
) -> None:
    require_root()
    tasks = _swebench_tasks(tmp_path, ["calc-fixed", "calc-empty", "calc-missing"])
    predictions = _write_predictions(
        tmp_path / "preds.jsonl",
        [
            {
                "instance_id": "calc-fixed",
                "model_name_or_path": "m",
                "model_patch": tasks[0]["patch"],
            },
            {"instance_id": "calc-empty", "model_name_or_path": "m", "model_patch": ""},
        ],
    )
    agent = {"type": "predictions", "path": predictions}
    with anyio.fail_after(120):
        state, directory = await run(
            tmp_path / "state", spec(tasks, agent, scorer={"type": "tests"})
        )

    trajectories = state.trajectories
    assert trajectories["calc-fixed@0"].outcome == "resolved"
    # An empty prediction is handed in empty: graded `empty` without running the tests.
    assert trajectories["calc-empty@0"].outcome == "failed"
    assert (trajectories["calc-empty@0"].score or {})["status"] == "empty"
    assert trajectories["calc-missing@0"].outcome == "error"
    (failure,) = records(directory, "generation_failed")
    assert "no prediction for task 'calc-missing'" in failure["error"]["message"]
    assert predictions in failure["error"]["message"]


@pytest.mark.root
async def test_gold_predictions_are_each_tasks_own_patch_and_resolve(tmp_path: Path) -> None:
    require_root()
    tasks = _swebench_tasks(tmp_path, ["calc-a", "calc-b"])
    agent = {"type": "predictions", "path": "gold"}
    with anyio.fail_after(120):
        state, directory = await run(
            tmp_path / "state", spec(tasks, agent, scorer={"type": "tests"})
        )

    assert {t.outcome for t in state.trajectories.values()} == {"resolved"}
    empty = {r["trajectory"]: r["submission"]["empty"] for r in records(directory, "generated")}
    assert empty == {"calc-a@0": False, "calc-b@0": False}


async def test_only_the_named_models_predictions_are_used(tmp_path: Path) -> None:
    tasks = [{"id": "t1", "prompt": "-"}, {"id": "t2", "prompt": "-"}]
    predictions = _write_predictions(
        tmp_path / "preds.jsonl",
        [
            {"instance_id": "t1", "model_name_or_path": "mine", "model_patch": "diff --git a/x"},
            {"instance_id": "t2", "model_name_or_path": "theirs", "model_patch": "diff --git a/y"},
        ],
    )
    agent = {"type": "predictions", "path": predictions, "model_name": "mine"}
    with anyio.fail_after(30):
        state, directory = await run(tmp_path / "state", spec(tasks, agent))

    assert state.trajectories["t2@0"].outcome == "error"
    (failure,) = records(directory, "generation_failed")
    assert "no prediction of model 'mine' for task 't2'" in failure["error"]["message"]
    (generated,) = records(directory, "generated")
    assert generated["trajectory"] == "t1@0"
    assert generated["submission"]["empty"] is False


async def test_a_predictions_file_that_does_not_exist_is_each_trajectorys_error(
    tmp_path: Path,
) -> None:
    agent = {"type": "predictions", "path": str(tmp_path / "nowhere.jsonl")}
    with anyio.fail_after(30):
        state, directory = await run(tmp_path / "state", spec([{"id": "t1"}], agent))

    assert state.trajectories["t1@0"].outcome == "error"
    (failure,) = records(directory, "generation_failed")
    assert failure["error"]["type"] == "NotFound"
    assert "nowhere.jsonl" in failure["error"]["message"]
