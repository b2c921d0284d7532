"""The demo suite builder, on a subset (one project, two bugs) so the module stays fast."""

from __future__ import annotations

import difflib
import json
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest

from demo.build_suite import BASE_MESSAGE, DEMO_DIR, build_suite
from mcp_evalserver.sandbox.base import InstanceSpec
from mcp_evalserver.sandbox.local import LocalBackend
from mcp_evalserver.scoring.swebench.grading import grade_log
from mcp_evalserver.scoring.swebench.logparsers import parse_pytest
from mcp_evalserver.spec.campaign import load_tasks

pytestmark = pytest.mark.slow

BUGS = ("ordinal-thirteen", "camelize-lower-first")


def _demo_copy(root: Path) -> Path:
    """A demo folder with the real projects.json and two of inflection's bugs."""
    demo = root / "demo"
    bugs = demo / "bugs" / "inflection"
    bugs.mkdir(parents=True)
    shutil.copy(DEMO_DIR / "projects.json", demo / "projects.json")
    statements = json.loads((DEMO_DIR / "bugs" / "inflection" / "bugs.json").read_text())
    (bugs / "bugs.json").write_text(json.dumps({b: statements[b] for b in BUGS}))
    for bug in BUGS:
        shutil.copy(DEMO_DIR / "bugs" / "inflection" / f"{bug}.patch", bugs / f"{bug}.patch")
    return demo


class Built:
    def __init__(self, root: Path) -> None:
        self.demo = _demo_copy(root)
        self.build = root / "build"
        self.log: list[str] = []
        self.tasks_file = self.rebuild()

    def rebuild(self) -> Path:
        self.log.clear()
        return build_suite(
            self.build, demo_dir=self.demo, projects=["inflection"], log=self.log.append
        )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return Built(tmp_path_factory.mktemp("suite"))


def _run_eval(script: str) -> str:
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=False
    ).stdout


def _git(tree: str, *args: str, stdin: str = "") -> str:
    return subprocess.run(
        ["git", *args], cwd=tree, input=stdin, capture_output=True, text=True, check=True
    ).stdout


def test_the_task_file_is_valid_for_the_engine_and_names_every_bug(built: Built) -> None:
    tasks = load_tasks(built.tasks_file)
    assert [t.id for t in tasks] == [f"inflection__{b}" for b in BUGS]
    for task in tasks:
        assert task.path is not None
        assert Path(task.path).is_dir()
        assert task.prompt
        assert task.patch
        assert task.eval_script
        assert task.FAIL_TO_PASS
        assert task.PASS_TO_PASS
        assert not set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS)


@pytest.mark.root
@pytest.mark.anyio
async def test_what_a_workspace_shows_of_its_repository_names_nothing_of_the_task(
    built: Built,
) -> None:
    # What an agent can read without reading the code: `git log` (messages, branches) and the
    # directory it works in. A bug's name is a hint: "with bug ordinal-thirteen".
    shown = "git log --all --format='%an %ae %s %b' && git branch -a && pwd"
    tasks = load_tasks(built.tasks_file)
    async with LocalBackend() as backend:
        for task in tasks:
            assert task.path is not None
            spec = InstanceSpec(path=task.path)
            with anyio.fail_after(60):
                async with (
                    await backend.instance(spec) as instance,
                    await instance.workspace("look") as ws,
                ):
                    looked = await ws.exec(shown)
            assert looked.exit_code == 0, looked.stderr
            bug = task.metadata["bug"]
            named = {task.id, bug, *bug.split("-"), "bug"}
            for word in named:
                assert word.lower() not in looked.stdout.lower(), (word, looked.stdout)
            assert looked.stdout.startswith(f"demo demo@mcp-evalserver.invalid {BASE_MESSAGE}")


def test_each_instance_starts_buggy_and_its_gold_patch_resolves_it(built: Built) -> None:
    for task in load_tasks(built.tasks_file):
        assert task.path is not None
        assert task.eval_script is not None
        buggy = grade_log(
            _run_eval(task.eval_script),
            parser=parse_pytest,
            fail_to_pass=task.FAIL_TO_PASS,
            pass_to_pass=task.PASS_TO_PASS,
        )
        assert buggy.tests is not None
        assert not buggy.tests.fail_to_pass.success, "every FAIL_TO_PASS test fails on the base"
        assert not buggy.tests.pass_to_pass.failure
        # Running the tests leaves nothing an agent's diff would pick up.
        assert _git(task.path, "status", "--porcelain") == ""
        _git(task.path, "apply", "-", stdin=task.patch or "")
        try:
            fixed = grade_log(
                _run_eval(task.eval_script),
                parser=parse_pytest,
                fail_to_pass=task.FAIL_TO_PASS,
                pass_to_pass=task.PASS_TO_PASS,
            )
        finally:
            _git(task.path, "checkout", "-q", "--", ".")
        assert fixed.resolved, fixed.explanation


def test_a_second_build_reuses_every_task(built: Built) -> None:
    before = built.tasks_file.read_text()
    built.rebuild()
    assert built.tasks_file.read_text() == before
    assert [line.split(" (")[0] for line in built.log] == [
        f"2 tasks in {built.build.resolve() / 'tasks.jsonl'}"
    ]


def test_a_changed_bug_rebuilds_only_that_task(built: Built) -> None:
    statements_file = built.demo / "bugs" / "inflection" / "bugs.json"
    statements = json.loads(statements_file.read_text())
    statements[BUGS[1]] = "camelize() with uppercase_first_letter=False keeps a capital."
    statements_file.write_text(json.dumps(statements))
    built.rebuild()
    rebuilt = [line for line in built.log if "FAIL_TO_PASS" in line]
    assert [line.split(":")[0] for line in rebuilt] == [f"inflection__{BUGS[1]}"]
    assert load_tasks(built.tasks_file)[1].prompt.startswith(statements[BUGS[1]])


def test_a_bug_that_no_test_catches_is_rejected_with_a_message(built: Built) -> None:
    source = built.build / "sources" / "inflection-0.5.1" / "inflection" / "__init__.py"
    lines = source.read_text().splitlines(keepends=True)
    harmless = [line.replace("A port of Ruby on Rails", "A port of Rails") for line in lines]
    patch = "".join(
        difflib.unified_diff(
            lines, harmless, "a/inflection/__init__.py", "b/inflection/__init__.py"
        )
    )
    bugs = built.demo / "bugs" / "inflection"
    (bugs / "docstring-only.patch").write_text(patch)
    statements = json.loads((bugs / "bugs.json").read_text())
    (bugs / "bugs.json").write_text(json.dumps({**statements, "docstring-only": "Nothing."}))
    built.rebuild()
    assert any(
        line.startswith("REJECTED inflection__docstring-only") and "no test" in line
        for line in built.log
    ), built.log
    assert len(load_tasks(built.tasks_file)) == len(BUGS)
