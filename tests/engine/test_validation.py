"""`mcp-evalserver validate`: a suite made for the test, with a planted flaky PASS_TO_PASS test,
a planted broken gold patch and a planted trivial task, is named task by task; the flaky
test's exclusion list then lets every honest fix resolve, every time (issue 41).

The flaky test fails when a fresh random draw says so (1 run in 3): nothing inside a workspace
tells one run from another, by design, so the coin is truly random. The run counts keep a
wrong answer of this test below 1 in 3,000: 20 runs of the flaky test in its validation
((2/3)^20 that it never fails, (1/3)^10 that the gold never resolves), 20 repetitions of the
campaign without its exclusion.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.store import CampaignStore
from tests.sandbox.docker_support import require_docker
from tests.scoring.sandboxed import PYTHON_PYTEST, diff_of, git_repo

HARBOR_EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "harbor"

pytestmark = [pytest.mark.root, pytest.mark.slow]

CODE = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
OLD_TESTS = "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
NEW_TESTS = OLD_TESTS + "\n\ndef test_add():\n    assert add(2, 2) == 4\n"
#: The base's test_zero, failing 1 run in 3 by a coin drawn afresh in every run.
FLAKY_TESTS = NEW_TESTS.replace(
    "def test_zero():\n",
    "def test_zero():\n    import random\n\n    assert random.SystemRandom().random() >= 1 / 3\n",
)
#: The suite's tasks; the flaky one is validated apart, with more runs.
TASKS = ("sound", "flaky", "broken", "trivial")
FLAKY_RUNS = 10
FLAKY_BASE = FLAKY_TESTS.split("\n\n\ndef test_add")[0] + "\n"


def _task(root: Path, task_id: str, tests: str, gold: str, tests_after: str) -> dict[str, object]:
    repo = git_repo(root / task_id, {"calc.py": CODE, "test_calc.py": tests})
    return {
        "id": task_id,
        "path": str(repo),
        "patch": diff_of(repo, {"calc.py": gold}),
        "test_patch": diff_of(repo, {"test_calc.py": tests_after}),
        "FAIL_TO_PASS": ["test_calc.py::test_add"],
        "PASS_TO_PASS": ["test_calc.py::test_zero"],
        "eval_script": f"{PYTHON_PYTEST} -rA -p no:cacheprovider test_calc.py",
    }


def _suite(tmp_path: Path, names: tuple[str, ...] = TASKS) -> Path:
    made = {
        "sound": lambda: _task(tmp_path, "sound", OLD_TESTS, FIXED, NEW_TESTS),
        "flaky": lambda: _task(tmp_path, "flaky", FLAKY_BASE, FIXED, FLAKY_TESTS),
        # The gold patch fixes nothing.
        "broken": lambda: _task(tmp_path, "broken", OLD_TESTS, CODE.replace("a - b", "b - a"),
                                NEW_TESTS),
        # test_add passes on the base already: it asks for 0 + 0.
        "trivial": lambda: _task(tmp_path, "trivial", OLD_TESTS, FIXED,
                                 NEW_TESTS.replace("add(2, 2) == 4", "add(0, 0) == 0")),
    }  # fmt: skip
    path = tmp_path / f"{'-'.join(names)}.jsonl"
    path.write_text("".join(json.dumps(made[name]()) + "\n" for name in names))
    return path


def _validate(
    capsys: pytest.CaptureFixture[str], state: str, tasks: Path, runs: int, *extra: str
) -> tuple[str, dict[str, Any]]:
    """Validates `tasks` as campaign `tasks.stem`; its printed report and its JSON report."""
    argv = ["--state-dir", state, "validate", str(tasks), "--runs", str(runs), "--id", tasks.stem]
    assert main([*argv, *extra, "--no-progress"]) == 0
    out = capsys.readouterr().out
    report = json.loads(
        _cli(capsys, "--state-dir", state, "report", tasks.stem, "--format", "json")
    )
    return out, report["validation"]


def test_validate_names_the_broken_and_trivial_tasks_beside_a_sound_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = _suite(tmp_path, ("sound", "broken", "trivial"))
    clean = tmp_path / "clean.jsonl"
    out, report = _validate(capsys, str(tmp_path / "state"), tasks, 2, "--write-clean", str(clean))
    rows = report["tasks"]
    verdicts = {task: row["verdict"] for task, row in rows.items()}
    assert verdicts == {"sound": "ok", "broken": "broken", "trivial": "trivial"}, out
    assert rows["sound"]["gold"] == {"resolved": 2, "runs": 2}
    assert rows["sound"]["empty"] == {"resolved": 0, "runs": 2}
    failing = rows["broken"]["tests"]["fail_to_pass_failing_with_gold"]
    assert failing == {"test_calc.py::test_add": ["broken@0", "broken@1"]}
    assert rows["trivial"]["empty"] == {"resolved": 2, "runs": 2}
    passing = rows["trivial"]["tests"]["fail_to_pass_passing_without_fix"]
    assert passing == {"test_calc.py::test_add": ["trivial@2", "trivial@3"]}
    assert [json.loads(line)["id"] for line in clean.read_text().splitlines()] == ["sound"]
    assert "| broken | broken | 0/2 | 0/2 |" in out


def test_validate_names_a_flaky_test_and_its_exclusion_makes_every_honest_fix_resolve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "state")
    ignore, clean = tmp_path / "ignore.json", tmp_path / "clean.jsonl"
    files = ["--write-ignore", str(ignore), "--write-clean", str(clean)]
    out, report = _validate(capsys, state, _suite(tmp_path, ("flaky",)), FLAKY_RUNS, *files)
    row = report["tasks"]["flaky"]
    assert row["verdict"] == "flaky", out
    seen = row["tests"]["flaky"]["test_calc.py::test_zero"]
    runs = {run for side in seen.values() for ids in side.values() for run in ids}
    assert len(runs) == 2 * FLAKY_RUNS, "every run of the flaky test is named"
    assert json.loads(ignore.read_text()) == {"flaky": ["test_calc.py::test_zero"]}
    assert [json.loads(line)["id"] for line in clean.read_text().splitlines()] == ["flaky"]
    assert "test_calc.py::test_zero" in out

    # The honest fix, again and again: with the exclusion every one resolves (10 of 10);
    # without it the flaky test costs some of 20.
    resolved = {}
    for name, scorer, samples in (
        ("with", {"type": "tests", "ignore_tests": str(ignore)}, 10),
        ("without", {"type": "tests"}, 20),
    ):
        spec = tmp_path / f"{name}.json"
        spec.write_text(
            json.dumps(
                {
                    "name": name,
                    "tasks": str(clean),
                    "samples": samples,
                    "agent": {"type": "oracle"},
                    "scorer": scorer,
                    "limits": {"concurrency": 4},
                }
            )
        )
        assert main(["--state-dir", state, "run", str(spec), "--id", name, "--no-progress"]) == 0
        text = capsys.readouterr().out
        state_of = CampaignStore(Path(state)).load(name)
        resolved[name] = sum(t.outcome == "resolved" for t in state_of.trajectories.values())
        if name == "with":
            assert "`scorer.ignore_tests`" in text
            assert "flaky: `test_calc.py::test_zero`" in text
            details = [t.score["details"] for t in state_of.trajectories.values() if t.score]
            named = [d["ignored_tests"] for d in details if d.get("ignored_tests")]
            assert named == [["test_calc.py::test_zero"]] * 10, "every verdict names it"
    assert resolved["with"] == 10
    assert resolved["without"] < 20


def test_validating_again_with_the_same_id_runs_nothing_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks, state = _suite(tmp_path, ("sound", "broken")), str(tmp_path / "state")
    argv = ["--state-dir", state, "validate", str(tasks), "--runs", "1", "--id", "v"]
    assert main([*argv, "--no-progress"]) == 0
    ledger = Path(state) / "campaigns" / "v" / "ledger.jsonl"
    before = ledger.read_text().splitlines()
    assert main([*argv, "--no-progress"]) == 0
    after = ledger.read_text().splitlines()
    kinds = [json.loads(line)["kind"] for line in after[len(before) :]]
    assert not {"generated", "scored"} & set(kinds), kinds
    capsys.readouterr()


def test_validate_refuses_a_campaign_that_is_no_validation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "state")
    spec = tmp_path / "answers.json"
    spec.write_text(
        json.dumps({"tasks": [{"id": "t", "answer": "4"}], "agent": {"type": "oracle"}})
    )
    assert main(["--state-dir", state, "run", str(spec), "--id", "c", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["--state-dir", state, "validate", str(spec), "--id", "c"]) != 0
    assert "is not a validation" in capsys.readouterr().err


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out


@pytest.mark.docker
def test_validate_runs_harbor_tasks_oracle_and_noop_on_docker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_docker()
    tasks = tmp_path / "tasks"
    for name in ("fractional", "reward-json"):
        shutil.copytree(HARBOR_EXAMPLES / name, tasks / name)
    state = str(tmp_path / "state")
    argv = ["--state-dir", state, "validate", str(tasks), "--runs", "2", "--id", "h"]
    assert main([*argv, "--no-progress"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    report = json.loads(_cli(capsys, "--state-dir", state, "report", "h", "--format", "json"))
    assert report["scorer"] == "harbor"
    rows = report["validation"]["tasks"]
    assert {task: row["verdict"] for task, row in rows.items()} == {
        "fractional": "ok",
        "reward-json": "ok",
    }
    assert {task: row["gold_score_range"] for task, row in rows.items()} == {
        "fractional": [1.0, 1.0],
        "reward-json": [1.0, 1.0],
    }
