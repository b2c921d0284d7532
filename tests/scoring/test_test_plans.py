"""Which test command and parser a task without an eval_script gets, and the line that says so."""

from __future__ import annotations

import pytest

from mcp_evalserver.scoring.swebench.test_plans import SWEBENCH_ENV, plan_tests, swebench_directives
from mcp_evalserver.spec.campaign import Task

PY = 'PY="$(command -v python || command -v python3)"; "$PY" -m'


def _diff(*files: str) -> str:
    return "".join(
        f"diff --git a/{f} b/{f}\n--- a/{f}\n+++ b/{f}\n@@ -1 +1 @@\n-a\n+b\n" for f in files
    )


def test_a_django_task_runs_swebench_runtests_over_the_test_patch_modules() -> None:
    task = Task(
        id="django__django-1",
        repo="django/django",
        version="3.0",
        test_patch=_diff("tests/admin_views/tests.py", "tests/admin_views/fixtures/data.json"),
        FAIL_TO_PASS=["test_x (admin_views.tests.AdminViewTests)"],
    )
    plan = plan_tests(task)
    assert plan.command == (
        "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 admin_views.tests"
    )
    assert plan.parser == "django"
    assert plan.preamble.split("\n")[0] == SWEBENCH_ENV  # then version 3.0's setup steps
    assert plan.reason == (
        "SWE-bench's test command for django/django 3.0, after its setup steps for that "
        "version; parser django (SWE-bench's for django/django)"
    )
    old = task.model_copy(update={"version": "1.9"})
    assert plan_tests(old).command == "./tests/runtests.py --verbosity 2 admin_views.tests"


@pytest.mark.parametrize(
    ("repo", "version", "command", "parser"),
    [
        (
            "sympy/sympy",
            "1.12",
            "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose "
            "sympy/core/tests/test_basic.py",
            "sympy",
        ),
        (
            "astropy/astropy",
            "1.3",
            "pytest -rA -vv -o console_output_style=classic --tb=no sympy/core/tests/test_basic.py",
            "pytest_v2",
        ),
        ("astropy/astropy", "5.1", "pytest -rA sympy/core/tests/test_basic.py", "pytest_v2"),
        (
            "mwaskom/seaborn",
            "0.12",
            "pytest --no-header -rA sympy/core/tests/test_basic.py",
            "seaborn",
        ),
        (
            "sphinx-doc/sphinx",
            "7.2",
            "tox --current-env -epy39 -v -- sympy/core/tests/test_basic.py",
            "pytest_v2",
        ),
    ],
)
def test_a_swebench_repository_gets_its_own_command_and_parser(
    repo: str, version: str, command: str, parser: str
) -> None:
    task = Task(
        id="t",
        repo=repo,
        version=version,
        test_patch=_diff("sympy/core/tests/test_basic.py", "doc/changes.md"),
    )
    plan = plan_tests(task)
    assert (plan.command, plan.parser) == (command, parser)


def test_swebench_directives_drop_data_files_as_swebench_does() -> None:
    task = Task(
        id="t", test_patch=_diff("a/test_a.py", "a/data.csv", "a/b.yaml", "a/c.toml", "a/d.rst")
    )
    assert swebench_directives(task) == ["a/test_a.py", "a/d.rst"]


def test_an_unknown_repository_with_ids_that_hold_spaces_gets_a_parser_that_keeps_them() -> None:
    task = Task(
        id="t",
        repo="someone/project",
        FAIL_TO_PASS=["tests/test_a.py::test_names[first name]", "tests/test_a.py::test_b"],
        PASS_TO_PASS=["tests/test_c.py::TestC::test_d[1-2]"],
    )
    plan = plan_tests(task)
    assert plan.command == f"{PY} pytest -rA -p no:cacheprovider tests/test_a.py tests/test_c.py"
    assert plan.parser == "pytest_verbose"
    assert plan.reason == (
        "python -m pytest over the test ids' files; parser pytest_verbose (a test id holds a space)"
    )
    assert plan.preamble == ""


def test_ids_without_spaces_keep_swebench_default_parser() -> None:
    task = Task(id="t", FAIL_TO_PASS=["tests/test_a.py::test_b[1.5-x]"])
    assert plan_tests(task).parser == "pytest"


def test_doctest_ids_ask_pytest_to_collect_doctests() -> None:
    task = Task(
        id="t",
        FAIL_TO_PASS=["src/pkg/mod.py::pkg.mod.add", "README.rst::README.rst"],
        PASS_TO_PASS=["tests/test_a.py::test_b"],
    )
    plan = plan_tests(task)
    assert plan.command == (
        f"{PY} pytest -rA -p no:cacheprovider --doctest-modules --doctest-glob=README.rst "
        "src/pkg/mod.py README.rst tests/test_a.py"
    )
    assert plan.reason.startswith("python -m pytest with doctests over the test ids' files")


def test_unittest_ids_run_under_unittest_with_its_parser() -> None:
    task = Task(
        id="t",
        FAIL_TO_PASS=["test_x (pkg.tests.test_a.ATests)", "test_y (pkg.tests.test_a.ATests)"],
        PASS_TO_PASS=["test_z (pkg.tests.test_b.BTests.test_z)"],
    )
    plan = plan_tests(task)
    assert plan.command == (
        'PY="$(command -v python || command -v python3)"; "$PY" -m unittest -v '
        "pkg.tests.test_a.ATests pkg.tests.test_b.BTests.test_z"
    )
    assert plan.parser == "unittest"


def test_ids_that_name_nothing_runnable_give_no_command_and_say_why() -> None:
    plan = plan_tests(Task(id="t", FAIL_TO_PASS=["test_foo"]))
    assert plan.command is None
    assert plan.reason == "no test command: the test ids name no files"


def test_the_scorers_command_and_parser_and_the_tasks_log_parser_come_first() -> None:
    task = Task(
        id="t",
        repo="django/django",
        FAIL_TO_PASS=["a b"],
        metadata={"log_parser": "parse_log_pytest"},
    )
    plan = plan_tests(task, command="make test")
    assert (plan.command, plan.parser, plan.preamble) == ("make test", "parse_log_pytest", "")
    assert (
        plan.reason == "the scorer's test_command; parser parse_log_pytest (the task's log_parser)"
    )
    assert plan_tests(task, parser="unittest").parser == "unittest"
    scripted = task.model_copy(update={"eval_script": "run-tests"})
    assert plan_tests(scripted).command is None
    assert plan_tests(scripted).reason.startswith("the task's eval_script; ")
