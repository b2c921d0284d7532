"""The demo suite written as a SWE-bench 5 task repository grades as its JSONL does.

A subset of the suite (three inflection bugs) is built, written out by
`demo.write_swebench_repo`, and run from both: the oracle campaign from `tasks.jsonl` and from
the repository, and `import-predictions` from the repository and from the JSONL that swebench's
own `load_task_repo` makes of it. Every trajectory must get the same verdict, score and test
statuses either way; the predictions are chosen to give three different verdicts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from demo.build_suite import DEMO_DIR, build_suite
from demo.write_swebench_repo import write_demo_repo
from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.spec.campaign import CampaignSpec, Task, load_tasks
from tests.engine.helpers import run_campaign
from tests.scoring.swebench_reference import load_task_repo

pytestmark = [pytest.mark.root, pytest.mark.slow]

BUGS = ("camelize-lower-first", "ordinal-thirteen", "underscore-acronym")
#: A patch that applies anywhere and fixes nothing.
HARMLESS = (
    "diff --git a/NOTES.txt b/NOTES.txt\nnew file mode 100644\n--- /dev/null\n+++ b/NOTES.txt\n"
    "@@ -0,0 +1 @@\n+nothing here\n"
)
#: A patch of a file no instance has: no way of applying it works.
ELSEWHERE = (
    "diff --git a/absent.py b/absent.py\n--- a/absent.py\n+++ b/absent.py\n@@ -1 +1 @@\n-a\n+b\n"
)


@pytest.fixture(autouse=True)
def _needs_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("needs root for mount namespaces and overlayfs")
        pytest.skip("needs root for mount namespaces and overlayfs")


class Suite:
    """The subset as `tasks.jsonl`, as a task repository, and as swebench's JSONL of it."""

    def __init__(self, root: Path) -> None:
        self.tasks_file = build_suite(
            root / "build", projects=["inflection"], bugs=list(BUGS), log=lambda _: None
        )
        self.repo = write_demo_repo(self.tasks_file, root / "repo")
        self.instances = root / "instances.jsonl"
        rows = (
            {k: v for k, v in row.items() if k not in ("split", "datasets")}
            for row in load_task_repo(self.repo)
        )
        self.instances.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    return Suite(tmp_path_factory.mktemp("demo"))


def verdicts(state: CampaignState) -> dict[str, dict[str, Any]]:
    """Per trajectory, all that grading decided (not how long it took)."""
    decided: dict[str, dict[str, Any]] = {}
    for trajectory_id, trajectory in sorted(state.trajectories.items()):
        score = trajectory.score or {}
        details = score.get("details") or {}
        decided[trajectory_id] = {
            "outcome": trajectory.outcome,
            "status": score.get("status"),
            "value": score.get("value"),
            "eval_status": details.get("eval_status"),
            "resolution": details.get("resolution"),
            "tests_status": details.get("tests_status"),
        }
    return decided


def test_the_repository_holds_the_tasks_of_the_jsonl(suite: Suite) -> None:
    from_jsonl = {task.id: task for task in load_tasks(suite.tasks_file)}
    from_repo = {task.id: task for task in load_tasks(suite.repo)}
    assert sorted(from_repo) == sorted(from_jsonl) == [f"inflection__{bug}" for bug in BUGS]
    for task_id, task in from_repo.items():
        # What SWE-bench's layout adds: hints_text "" without hints.md, and the eval_type.
        expected = from_jsonl[task_id].model_copy(
            update={
                "hints_text": "",
                "metadata": {**from_jsonl[task_id].metadata, "eval_type": "pass_and_fail"},
            }
        )
        assert task == expected


def _oracle_spec(tasks: list[Task]) -> CampaignSpec:
    spec = CampaignSpec.model_validate_json((DEMO_DIR / "campaign-oracle.json").read_text())
    return spec.model_copy(update={"tasks": tasks, "samples": 1})


@pytest.mark.anyio
async def test_the_oracle_campaign_grades_the_same_from_the_repository_and_the_jsonl(
    suite: Suite, tmp_path: Path
) -> None:
    with anyio.fail_after(240):
        _, from_jsonl = await run_campaign(
            tmp_path / "jsonl", _oracle_spec(load_tasks(suite.tasks_file))
        )
        _, from_repo = await run_campaign(tmp_path / "repo", _oracle_spec(load_tasks(suite.repo)))
    assert verdicts(from_repo) == verdicts(from_jsonl)
    assert {v["outcome"] for v in verdicts(from_repo).values()} == {"resolved"}


def test_predictions_grade_the_same_from_the_repository_and_swebenchs_jsonl(
    suite: Suite, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gold = {task.id: task.patch for task in load_tasks(suite.repo)}
    predictions = tmp_path / "predictions.jsonl"
    patches = {
        "inflection__camelize-lower-first": gold["inflection__camelize-lower-first"],
        "inflection__ordinal-thirteen": ELSEWHERE,
        "inflection__underscore-acronym": HARMLESS,
    }
    predictions.write_text(
        "".join(
            json.dumps({"instance_id": i, "model_name_or_path": "m", "model_patch": p}) + "\n"
            for i, p in patches.items()
        )
    )
    state = tmp_path / "state"
    for campaign_id, instances in (("from-jsonl", suite.instances), ("from-repo", suite.repo)):
        argv = ["--state-dir", str(state), "import-predictions", str(predictions)]
        argv += ["--instances", str(instances), "--id", campaign_id, "--no-progress"]
        assert main(argv) == 0, capsys.readouterr().err
    store = CampaignStore(state)
    from_repo = verdicts(store.load("from-repo"))
    assert from_repo == verdicts(store.load("from-jsonl"))
    assert {tid: v["eval_status"] for tid, v in from_repo.items()} == {
        "inflection__camelize-lower-first@0": "graded",
        "inflection__ordinal-thirteen@0": "patch_apply_failed",
        "inflection__underscore-acronym@0": "graded",
    }
    assert from_repo["inflection__camelize-lower-first@0"]["outcome"] == "resolved"
    assert from_repo["inflection__underscore-acronym@0"]["outcome"] == "failed"
