"""`mcp-evalserver validate`: a suite made for the test, with a planted flaky PASS_TO_PASS test,
a planted broken gold patch and a planted trivial task, is named task by task; the flaky
test's exclusion list then lets every honest fix resolve, every time (issue 41).

The flaky test fails when a fresh random draw says so (1 run in 3): nothing inside a workspace
tells one run from another, by design, so the coin is truly random. The run counts keep a
wrong answer of this test below 1 in 3,000: 20 runs of the flaky test in the validation
((2/3)^20 that it never fails), 20 repetitions of the campaign without its exclusion.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

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
RUNS = 10


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


def _suite(tmp_path: Path) -> Path:
    tasks = [
        _task(tmp_path, "sound", OLD_TESTS, FIXED, NEW_TESTS),
        _task(tmp_path, "flaky", FLAKY_TESTS.split("\n\n\ndef test_add")[0] + "\n", FIXED,
              FLAKY_TESTS),
        # The gold patch fixes nothing.
        _task(tmp_path, "broken", OLD_TESTS, CODE.replace("a - b", "b - a"), NEW_TESTS),
        # test_add passes on the base already: it asks for 0 + 0.
        _task(tmp_path, "trivial", OLD_TESTS, FIXED,
              NEW_TESTS.replace("add(2, 2) == 4", "add(0, 0) == 0")),
    ]  # fmt: skip
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks))
    return path


def test_validate_names_the_flaky_broken_and_trivial_tasks_and_the_exclusion_makes_honest_fixes_resolve(  # noqa: E501
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks, state = _suite(tmp_path), str(tmp_path / "state")
    ignore, clean = tmp_path / "ignore.json", tmp_path / "clean.jsonl"
    argv = ["--state-dir", state, "validate", str(tasks), "--runs", str(RUNS), "--id", "v"]
    files = ["--write-ignore", str(ignore), "--write-clean", str(clean), "--no-progress"]
    assert main([*argv, *files]) == 0
    out = capsys.readouterr().out
    report = json.loads(_cli(capsys, "--state-dir", state, "report", "v", "--format", "json"))
    rows = report["validation"]["tasks"]
    assert {task: row["verdict"] for task, row in rows.items()} == {
        "sound": "ok",
        "flaky": "flaky",
        "broken": "broken",
        "trivial": "trivial",
    }, out
    assert rows["sound"]["gold"] == {"resolved": RUNS, "runs": RUNS}
    assert rows["broken"]["gold"]["resolved"] == 0
    assert rows["broken"]["tests"]["fail_to_pass_failing_with_gold"]["test_calc.py::test_add"]
    assert rows["trivial"]["empty"] == {"resolved": RUNS, "runs": RUNS}
    assert rows["trivial"]["tests"]["fail_to_pass_passing_without_fix"]
    flaky = rows["flaky"]["tests"]["flaky"]["test_calc.py::test_zero"]
    runs = {run for side in flaky.values() for ids in side.values() for run in ids}
    assert all(run.startswith("flaky@") for run in runs), "the runs are named"
    assert json.loads(ignore.read_text()) == {"flaky": ["test_calc.py::test_zero"]}
    assert [json.loads(line)["id"] for line in clean.read_text().splitlines()] == [
        "sound",
        "flaky",
    ]
    assert "| flaky | flaky |" in out
    assert "test_calc.py::test_zero" in out

    # The cleaned suite, its honest fixes 20 times: with the exclusions every one resolves;
    # without them the flaky test costs some.
    resolved = {}
    for name, scorer in (
        ("with", {"type": "tests", "ignore_tests": str(ignore)}),
        ("without", {"type": "tests"}),
    ):
        spec = tmp_path / f"{name}.json"
        spec.write_text(
            json.dumps(
                {
                    "name": name,
                    "tasks": str(clean),
                    "samples": 20,
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
            flaky_runs = [d for d in details if d.get("ignored_tests")]
            assert len(flaky_runs) == 20, "every verdict that used an exclusion names it"
    assert resolved == {"with": 40, "without": resolved["without"]}
    assert resolved["without"] < 40


def test_validating_again_with_the_same_id_runs_nothing_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks, state = _suite(tmp_path), str(tmp_path / "state")
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
