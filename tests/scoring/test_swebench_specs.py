"""SWE-bench's per-version setup steps in the eval script of a task that has none: the
spec's `eval_commands`, then its `install`, between the environment's activation and the test
section, as `make_eval_script_list` placed them (swebench==5.0.2 no longer carries the specs;
the expected lines are those of `swebench/harness/constants/python.py`, the last release
that did)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_evalserver.scoring.swebench.grading import START_TEST_OUTPUT
from mcp_evalserver.scoring.swebench.test_plans import SWEBENCH_ENV
from mcp_evalserver.scoring.testsuite import TestsScorer
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.submission import Submission
from tests.root import require_root
from tests.scoring.sandboxed import diff_of, git_repo, scoring_in_workspaces

DJANGO_OLD_LOCALE = [
    "export LANG=en_US.UTF-8",
    "export LC_ALL=en_US.UTF-8",
    "export PYTHONIOENCODING=utf8",
    "export LANGUAGE=en_US:en",
]
DJANGO_LOCALE = [
    "sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen",
    "export LANG=en_US.UTF-8",
    "export LANGUAGE=en_US:en",
    "export LC_ALL=en_US.UTF-8",
]
PIP_E = "python -m pip install -e ."
#: (repo, version): SWE-bench's eval_commands + install for it.
FAMILIES = {
    ("django/django", "1.11"): [*DJANGO_OLD_LOCALE, "python setup.py install"],
    ("django/django", "3.1"): [*DJANGO_LOCALE, PIP_E],
    ("django/django", "4.2"): [PIP_E],
    ("astropy/astropy", "4.3"): ["python -m pip install -e .[test] --verbose"],
    ("scikit-learn/scikit-learn", "0.22"): [
        "python -m pip install -v --no-use-pep517 --no-build-isolation -e ."
    ],
    ("matplotlib/matplotlib", "3.9"): ['python -m pip install --no-build-isolation -e ".[dev]"'],
    ("matplotlib/matplotlib", "3.5"): [PIP_E],
    ("mwaskom/seaborn", "0.12"): ["python -m pip install -e .[dev]"],
    ("psf/requests", "2.27"): ["python -m pip install ."],
    ("pvlib/pvlib-python", "0.9"): ["python -m pip install -e .[all]"],
    ("marshmallow-code/marshmallow", "3.0"): ["python -m pip install -e '.[dev]'"],
    ("sphinx-doc/sphinx", "4.4"): ["python -m pip install -e .[test]"],
    ("sympy/sympy", "1.12"): [PIP_E],
    ("pytest-dev/pytest", "5.4"): [PIP_E],
    ("pylint-dev/pylint", "2.15"): [PIP_E],
    ("pydata/xarray", "2022.06"): [PIP_E],
    ("pallets/flask", "2.3"): [PIP_E],
}


def _task(repo: str, version: str) -> Task:
    return Task(
        id=f"{repo.replace('/', '__')}-1",
        repo=repo,
        version=version,
        test_patch="diff --git a/tests/test_x.py b/tests/test_x.py\n",
        FAIL_TO_PASS=["tests/test_x.py::test_x"],
    )


@pytest.mark.parametrize(("repo", "version"), list(FAMILIES))
def test_each_repo_family_gets_swebenchs_setup_steps_in_swebenchs_order(
    repo: str, version: str
) -> None:
    script = TestsScorer().eval_script(_task(repo, version)) or ""
    lines = script.split("\n")
    expected = [SWEBENCH_ENV, *FAMILIES[repo, version]]
    # The environment first, then eval_commands, then install, then the test section.
    assert lines[: len(expected)] == expected
    assert START_TEST_OUTPUT in lines[len(expected)]
    assert (
        f"{version}, after its setup steps for that version"
        in TestsScorer().plan(_task(repo, version)).reason
    )


def test_a_version_swebench_has_no_spec_for_gets_the_environment_only() -> None:
    script = TestsScorer().eval_script(_task("django/django", "9.9")) or ""
    assert script.split("\n")[0] == SWEBENCH_ENV
    assert START_TEST_OUTPUT in script.split("\n")[1]


RUNTESTS = """#!/usr/bin/python3
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from calc import add
ok = add(2, 2) == 4 and os.environ.get("LC_ALL") == "en_US.UTF-8"
print("test_add (admin_views.tests.CalcTests) ... " + ("ok" if ok else "FAIL"))
sys.exit(0 if ok else 1)
"""


@pytest.mark.anyio
@pytest.mark.root
async def test_a_django_task_without_eval_script_runs_its_tests_under_swebenchs_locale(
    tmp_path: Path,
) -> None:
    # Django 1.11's tests need SWE-bench's locale exports (a UTF-8 LC_ALL): without them the
    # gold patch fails here, as such tests fail on a POSIX locale.
    require_root()
    repo = git_repo(
        tmp_path / "repo",
        {
            "calc.py": "def add(a, b):\n    return a - b\n",
            "tests/runtests.py": RUNTESTS,
            "tests/admin_views/tests.py": "# tests\n",
        },
    )
    (repo / "tests" / "runtests.py").chmod(0o755)
    task = Task(
        id="django__django-1",
        repo="django/django",
        version="1.11",
        path=str(repo),
        patch=diff_of(repo, {"calc.py": "def add(a, b):\n    return a + b\n"}),
        test_patch=diff_of(repo, {"tests/admin_views/tests.py": "# tests, new\n"}),
        FAIL_TO_PASS=["test_add (admin_views.tests.CalcTests)"],
    )
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(TestsScorer(), task, Submission(patch=task.patch))
        log = scoring.artifact(result.details["log"])
    assert result.resolved, (result.explanation, log)
