"""SWE-bench 5 task repositories as task files: read as swebench reads them, bad ones refused.

Where swebench 5.0.2 has the function (`swebench.task.repo`), the test runs it on the same
folder and requires the same rows.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mcp_evalserver.cli.main import main
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.swebench.compat import load_instances
from mcp_evalserver.spec.campaign import load_spec, load_tasks
from mcp_evalserver.spec.swebench_repos import read_task_repo, write_task_repo
from tests.scoring.swebench_reference import swe_repo


def row(instance_id: str, **fields: Any) -> dict[str, Any]:
    """A SWE-bench 5 row as a dataset publishes it (lists as JSON text, as the datasets do)."""
    return {
        "instance_id": instance_id,
        "repo": "psf/requests",
        "base_commit": "0" * 40,
        "version": "2.0",
        "image": f"swebench/sweb.eval.x86_64.{instance_id}:latest",
        "log_parser": "pytest",
        "eval_type": "pass_and_fail",
        "created_at": "2024-01-01T00:00:00Z",
        "environment_setup_commit": "1" * 40,
        "problem_statement": "It breaks.\n",
        "hints_text": "",
        "patch": f"diff --git a/{instance_id} b/{instance_id}\n",
        "test_patch": "diff --git a/tests/t.py b/tests/t.py\n",
        "eval_script": "#!/bin/bash\necho '>>>>> Start Test Output'\npytest\n"
        "echo '>>>>> End Test Output'\n",
        "FAIL_TO_PASS": json.dumps(["tests/t.py::test_fix"]),
        "PASS_TO_PASS": json.dumps(["tests/t.py::test_old"]),
        **fields,
    }


ROWS = [
    row("psf__requests-1", hints_text="Look at the adapter.\n"),
    # A CRLF inside a patch is the patch's own: it must reach the instance as written.
    row("psf__requests-2", patch="diff --git a/w.bat b/w.bat\r\n+echo\r\n", version="3.10"),
]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return write_task_repo(ROWS, tmp_path / "repo", datasets=["SWE-bench/demo"])


def _published(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """swebench's rows as its dataset publishes them: without `split` and `datasets`."""
    return [{k: v for k, v in r.items() if k not in ("split", "datasets")} for r in rows]


def test_a_written_repository_is_read_by_swebench_as_by_us(repo: Path) -> None:
    assert read_task_repo(repo) == _published(swe_repo.load_task_repo(repo))
    assert swe_repo.load_config(repo) == {"datasets": ["SWE-bench/demo"], "splits": ["test"]}


def test_a_repository_written_by_swebench_reads_as_the_rows_it_holds(tmp_path: Path) -> None:
    # Laid out with swebench's own writers, task.yaml sorted and YAML-typed as theirs.
    root = tmp_path / "upstream"
    root.mkdir()
    (root / "sweb.yaml").write_text(swe_repo.dump_yaml({"datasets": ["d"], "splits": ["test"]}))
    for source in ROWS:
        folder = root / "tasks" / source["instance_id"]
        folder.mkdir(parents=True)
        columns = {**swe_repo.AS_FILE, **swe_repo.OPTIONAL_FILE}
        tests = {key: json.loads(source[key]) for key in swe_repo.TEST_KEYS}
        meta = {k: v for k, v in source.items() if k not in columns and k not in tests}
        (folder / "task.yaml").write_text(swe_repo.dump_yaml({**meta, "split": "test"}))
        (folder / "tests.json").write_text(swe_repo.dump_tests(tests))
        for column, filename in columns.items():
            if source[column]:
                (folder / filename).write_bytes(source[column].encode())
    ours = read_task_repo(root)
    assert ours == _published(swe_repo.load_task_repo(root))
    expected = [{**r, **{k: json.loads(r[k]) for k in swe_repo.TEST_KEYS}} for r in ROWS]
    assert sorted(ours, key=lambda r: r["instance_id"]) == expected


def test_tasks_read_from_a_repository_are_the_tasks_of_its_jsonl(
    repo: Path, tmp_path: Path
) -> None:
    jsonl = tmp_path / "instances.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert load_tasks(repo) == load_tasks(jsonl)
    assert load_instances(repo) == load_instances(jsonl)
    (crlf,) = [t for t in load_tasks(repo) if t.id == "psf__requests-2"]
    assert crlf.patch == ROWS[1]["patch"]
    assert crlf.version == "3.10"
    assert crlf.metadata == {"log_parser": "pytest", "eval_type": "pass_and_fail"}


def test_a_spec_names_a_repository_relative_to_itself(repo: Path, tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({"tasks": "repo", "scorer": {"type": "tests"}}))
    tasks = load_spec(spec_file).task_list()
    assert [t.id for t in tasks] == ["psf__requests-1", "psf__requests-2"]
    assert tasks[0].hints_text == "Look at the adapter.\n"


def test_tasks_in_a_split_the_repository_does_not_publish_are_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [ROWS[0], {**ROWS[1], "split": "deprecated"}]
    repo = write_task_repo(rows, tmp_path / "repo", datasets=["d"])
    (repo / "sweb.yaml").write_text("datasets: [d]\nsplits: [test]\n")
    assert [r["instance_id"] for r in read_task_repo(repo)] == ["psf__requests-1"]
    assert "1 task(s) left out, in split(s) sweb.yaml does not publish: deprecated" in caplog.text


def _break(repo: Path, how: str) -> tuple[str, str]:
    """Breaks `repo` one way; returns the file and the field the error must name."""
    task = repo / "tasks" / "psf__requests-1"
    meta = (task / "task.yaml").read_text()
    if how == "no sweb.yaml":
        (repo / "sweb.yaml").unlink()
        return str(repo), "sweb.yaml"
    if how == "sweb.yaml without datasets":
        (repo / "sweb.yaml").write_text("splits: [test]\n")
        return str(repo / "sweb.yaml"), "datasets"
    if how == "unknown key":
        (task / "task.yaml").write_text(meta + "log_parsr: pytest\n")
        return str(task / "task.yaml"), "log_parsr: unknown key (did you mean 'log_parser'?)"
    if how == "missing key":
        (task / "task.yaml").write_text(meta.replace("base_commit:", "# base_commit:"))
        return str(task / "task.yaml"), "base_commit: missing"
    if how == "no image":
        (task / "task.yaml").write_text(meta.replace("image:", "# image:"))
        return str(task / "task.yaml"), "image: missing"
    if how == "a version YAML reads as a number":
        (task / "task.yaml").write_text(meta.replace("version: '2.0'", "version: 2.10"))
        return str(
            task / "task.yaml"
        ), "version: YAML read 2.1, a float, not text; put the value in quotes"
    if how == "instance_id of another folder":
        (task / "task.yaml").write_text(
            meta.replace("instance_id: psf__requests-1", "instance_id: psf__requests-9")
        )
        return str(task / "task.yaml"), "instance_id: 'psf__requests-9'"
    if how == "no tests.json":
        (task / "tests.json").unlink()
        return str(task / "tests.json"), "FAIL_TO_PASS"
    if how == "tests.json without PASS_TO_PASS":
        (task / "tests.json").write_text('{"FAIL_TO_PASS": ["t"]}')
        return str(task / "tests.json"), "PASS_TO_PASS: missing"
    if how == "no eval.sh":
        (task / "eval.sh").unlink()
        return str(task / "eval.sh"), "eval.sh"
    if how == "a folder without task.yaml":
        (repo / "tasks" / "stray").mkdir()
        return str(repo / "tasks" / "stray" / "task.yaml"), "task.yaml"
    raise AssertionError(how)


BREAKAGES = [
    "no sweb.yaml",
    "sweb.yaml without datasets",
    "unknown key",
    "missing key",
    "no image",
    "a version YAML reads as a number",
    "instance_id of another folder",
    "no tests.json",
    "tests.json without PASS_TO_PASS",
    "no eval.sh",
    "a folder without task.yaml",
]


@pytest.mark.parametrize("how", BREAKAGES)
def test_a_broken_repository_is_refused_naming_the_file_and_the_field(repo: Path, how: str) -> None:
    where, field = _break(repo, how)
    for read in (load_tasks, load_instances):
        with pytest.raises(InvalidInput) as caught:
            read(repo)
        message = str(caught.value)
        assert message.startswith(where), message
        assert field in message, message


def test_a_broken_repository_records_nothing_and_loses_nothing_recorded(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    cli = ["--state-dir", str(state)]
    assert main([*cli, "import-predictions", "gold", "--instances", str(repo), "--id", "good",
                 "--no-run"]) == 0  # fmt: skip
    assert "good" in capsys.readouterr().out
    ledger = state / "campaigns" / "good" / "ledger.jsonl"
    recorded = ledger.read_bytes()

    # The campaign holds its tasks: breaking the repository afterwards takes nothing from it.
    shutil.copytree(repo, tmp_path / "broken")
    _break(tmp_path / "broken", "no tests.json")
    shutil.rmtree(repo)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"tasks": "broken", "scorer": {"type": "tests"}}))
    assert main([*cli, "run", str(spec), "--id", "bad-run"]) == 2
    assert "tests.json is missing: every task needs one" in capsys.readouterr().err
    assert main([*cli, "import-predictions", "gold", "--instances", str(tmp_path / "broken"),
                 "--id", "bad-import", "--no-run"]) == 2  # fmt: skip
    assert "tests.json is missing" in capsys.readouterr().err

    assert ledger.read_bytes() == recorded
    assert sorted(p.name for p in (state / "campaigns").iterdir()) == ["good"]
    assert main([*cli, "status", "good"]) == 0
    assert json.loads(capsys.readouterr().out)["trajectories"] == 2


def test_writing_refuses_a_folder_that_holds_files_and_what_reading_would_refuse(
    repo: Path, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput, match="is not an empty folder; give a new one"):
        write_task_repo(ROWS, repo, datasets=["d"])
    with pytest.raises(InvalidInput, match="instance a/b: instance_id: not a folder name"):
        write_task_repo([row("a/b")], tmp_path / "nested", datasets=["d"])
    unparsed = {k: v for k, v in row("x").items() if k != "log_parser"}
    with pytest.raises(InvalidInput, match="instance x: log_parser: missing"):
        write_task_repo([unparsed], tmp_path / "none", datasets=["d"])
