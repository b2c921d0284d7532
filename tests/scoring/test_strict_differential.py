"""Differential test: strict mode against the default (SWE-bench) mode, on real tasks.

Every submission is scored in both modes, in real workspaces, by real pytest runs. An honest
submission (the gold patch, the gold patch applied only by fuzzy `patch`, the gold patch with
an unrelated new file, with a harmless edit to a test file) gets the same verdict in both: strict
mode must not cost a fix. A cheat (tests or doctests edited, skipped, rewritten by a conftest.py)
is never resolved in strict mode, whatever the default mode says.

The tasks: the calc task of the scorer's tests (with and without a test_patch), the SWE-bench
shaped instance of the harness differential, and a package whose FAIL_TO_PASS tests are
doctests of the module the fix changes (as boltons and astropy name theirs).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcp_evalserver.engine.swebench_runs import instance_task
from mcp_evalserver.scoring.swebench.compat import SwebenchInstance
from mcp_evalserver.scoring.testsuite import TestsScorer
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.submission import Submission
from tests.scoring.sandboxed import diff_of, git_repo, scoring_in_workspaces
from tests.scoring.test_swebench_harness_differential import _instance as swebench_instance
from tests.scoring.test_tests_scorer import NEW_TESTS, _pytest_at_the_root, _task
from tests.scoring.test_tests_scorer_adversarial import REWRITE_REPORTS
from testsupport.repos import GIT

pytestmark = [pytest.mark.anyio, pytest.mark.root, pytest.mark.slow]


# --- the doctest task ----------------------------------------------------------------------

AREA = '''"""Areas of shapes, in square units of UNIT.

>>> UNIT
'cm'
"""

UNIT = "cm"


def rect(width, height):
    """The area of a width by height rectangle.

    >>> rect(2, 3)
    6
    >>> rect(0, 5)
    0
    """
    return width + height


def describe(width, height):
    """A rectangle's size, as people write it.

    >>> describe(2, 3)
    '2x3'
    """
    return "%sx%s" % (width, height)
'''
#: The fix: `rect` multiplies, a new `square` with its doctest, and `describe` spaced (its
#: doctest changed with it: the gold patch, not the base, holds that test's examples).
GOLD_AREA = (
    AREA.replace("return width + height", "return width * height")
    .replace("'2x3'", "'2 x 3'")
    .replace('"%sx%s"', '"%s x %s"')
    + '''

def square(side):
    """The area of a square.

    >>> square(3)
    9
    """
    return rect(side, side)
'''
)
README = "Shapes\n======\n\n>>> from shapes.area import UNIT\n>>> UNIT\n'cm'\n"
UNIT_TESTS = "from shapes.area import UNIT\n\n\ndef test_unit():\n    assert UNIT == 'cm'\n"
MORE_UNIT_TESTS = UNIT_TESTS + "\n\ndef test_unit_is_metric():\n    assert UNIT in ('cm', 'm')\n"
AREA_PY = "shapes/area.py"
DOCTEST_F2P = [f"{AREA_PY}::shapes.area.{name}" for name in ("rect", "square", "describe")]
DOCTEST_P2P = [
    f"{AREA_PY}::shapes.area",
    "README.rst::README.rst",
    "tests/test_area.py::test_unit",
    "tests/test_area.py::test_unit_is_metric",
]


def doctest_task(tmp_path: Path) -> Task:
    """A package whose FAIL_TO_PASS tests are doctests in the module the fix changes; its
    PASS_TO_PASS tests a module doctest, a text file's doctest and two test functions."""
    files = {
        "shapes/__init__.py": '"""Shapes."""\n',
        AREA_PY: AREA,
        "README.rst": README,
        "tests/test_area.py": UNIT_TESTS,
    }
    repo = _pytest_at_the_root(git_repo(tmp_path / "repo", files))
    return Task(
        id="shapes",
        path=str(repo),
        patch=diff_of(repo, {AREA_PY: GOLD_AREA}),
        test_patch=diff_of(repo, {"tests/test_area.py": MORE_UNIT_TESTS}),
        FAIL_TO_PASS=DOCTEST_F2P,
        PASS_TO_PASS=DOCTEST_P2P,
    )


# --- the calc tasks ----------------------------------------------------------------------------


def calc_task(tmp_path: Path) -> Task:
    return _task(tmp_path)


def calc_task_without_test_patch(tmp_path: Path) -> Task:
    """The FAIL_TO_PASS tests are in the base commit already: nothing of SWE-bench's flow puts
    them back."""
    task = _task(tmp_path, test_patch=None)
    repo = Path(task.path or "")
    (repo / "test_calc.py").write_text(NEW_TESTS)
    subprocess.run([*GIT, "commit", "-qam", "tests"], cwd=repo, check=True)
    return task


def swebench_task(tmp_path: Path) -> Task:
    """SWE-bench 5's shape: the instance's own eval_script resets and patches the tests."""
    instance, repo = swebench_instance(tmp_path)
    fields = {k: v for k, v in instance.items() if k != "image"}
    return Task.model_validate(
        instance_task(SwebenchInstance.model_validate(fields), path=str(repo))
    )


TASKS: dict[str, Callable[[Path], Task]] = {
    "calc": calc_task,
    "calc, no test_patch": calc_task_without_test_patch,
    "swebench instance": swebench_task,
    "doctests": doctest_task,
}


# --- submissions -----------------------------------------------------------------------------


def fuzzed(patch: str) -> str:
    """The patch with its blob ids dropped and its first context line changed: every
    `git apply` of the chain refuses it, `patch --fuzz` applies it as the gold."""
    lines = [line for line in patch.split("\n") if not line.startswith("index ")]
    first_hunk = next(n for n, line in enumerate(lines) if line.startswith("@@"))
    context = first_hunk + 1
    assert lines[context].startswith(" "), "the first hunk starts with context"
    lines[context] += "  # not in the file"
    return "\n".join(lines)


def repo_of(task: Task) -> Path:
    return Path(task.path or "")


def gold(task: Task) -> str:
    return task.patch or ""


def file_of_tests(task: Task) -> str:
    return "tests/test_area.py" if task.id == "shapes" else "test_calc.py"


def gold_with(files: Callable[[Task], dict[str, str]]) -> Callable[[Task], str]:
    """The gold patch plus a diff writing `files` (computed from the task)."""
    return lambda task: gold(task) + diff_of(repo_of(task), files(task))


def with_comment(task: Task) -> dict[str, str]:
    path = file_of_tests(task)
    return {path: "# Tests of the task.\n" + (repo_of(task) / path).read_text()}


HONEST: dict[str, Callable[[Task], str]] = {
    "gold": gold,
    "gold, applied by fuzzy patch": lambda task: fuzzed(gold(task)),
    "gold + an unrelated new file": gold_with(lambda _: {"NOTES.txt": "Read me later.\n"}),
    "gold + a comment in a test file": gold_with(with_comment),
}
#: Honest edits only a doctest task has: the module that holds the doctests is the fix's.
DOCTEST_HONEST: dict[str, Callable[[Task], str]] = {
    "gold + reworded docstring prose": lambda task: diff_of(
        repo_of(task),
        {AREA_PY: GOLD_AREA.replace("A rectangle's size, as", "The size of a rectangle, as")},
    ),
    "its own fix, with its own doctest for square": lambda task: diff_of(
        repo_of(task),
        {AREA_PY: GOLD_AREA.replace(">>> square(3)\n    9", ">>> square(4)\n    16")},
    ),
}

#: A cheat's edits to the doctest task: no fix, `square` added only to carry a doctest.
NO_FIX_SQUARE = '''

def square(side):
    """The area of a square.

    >>> square(3)
    6
    """
    return rect(side, side)
'''


def area(replacements: dict[str, str], extra: str = NO_FIX_SQUARE) -> Callable[[Task], str]:
    """A patch of shapes/area.py: the base with `replacements` made and `extra` appended."""

    def patch(task: Task) -> str:
        text = AREA
        for old, new in replacements.items():
            assert old in text, old
            text = text.replace(old, new)
        return diff_of(repo_of(task), {AREA_PY: text + extra})

    return patch


RUNTIME_DOCS = (
    "\n\nrect.__doc__ = '>>> rect(2, 3)\\n5\\n'\n"
    "square.__doc__ = '>>> square(3)\\n6\\n'\n"
    "describe.__doc__ = \">>> describe(2, 3)\\n'2x3'\\n\"\n"
)
SKIP_DOCTESTS = (
    "import pytest\n\n\ndef pytest_collection_modifyitems(items):\n"
    "    for item in items:\n"
    "        if type(item).__name__ == 'DoctestItem':\n"
    "            item.add_marker(pytest.mark.skip(reason='slow'))\n"
)
NAMESPACE_FIXES = (
    "import pytest\n\n\n@pytest.fixture(autouse=True)\n"
    "def _fixed(doctest_namespace):\n"
    "    doctest_namespace['rect'] = lambda width, height: width * height\n"
    "    doctest_namespace['square'] = lambda side: side * side\n"
    "    doctest_namespace['describe'] = lambda width, height: '%s x %s' % (width, height)\n"
)
DOCTEST_CHEATS: dict[str, Callable[[Task], str]] = {
    "expected output edited to the bug's": area(
        {"    6\n    >>> rect(0, 5)\n    0": "    5\n    >>> rect(0, 5)\n    5"}
    ),
    "examples edited": area(
        {">>> rect(2, 3)\n    6\n    >>> rect(0, 5)\n    0": ">>> rect(2, 3) > 0\n    True"},
        NO_FIX_SQUARE.replace(">>> square(3)\n    6", ">>> square(3) > 0\n    True"),
    ),
    "doctest deleted": area(
        {
            '"""The area of a width by height rectangle.\n\n    >>> rect(2, 3)\n    6\n'
            '    >>> rect(0, 5)\n    0\n    """\n': ""
        },
        "\n\ndef square(side):\n    return rect(side, side)\n",
    ),
    "failing examples +SKIP, a passing one added": area(
        {
            ">>> rect(0, 5)\n    0": ">>> rect(0, 5)  # doctest: +SKIP\n    0\n"
            "    >>> rect(0, 0)\n    0",
            ">>> rect(2, 3)": ">>> rect(2, 3)  # doctest: +SKIP",
        }
    ),
    "every example +SKIP": area(
        {
            ">>> rect(2, 3)": ">>> rect(2, 3)  # doctest: +SKIP",
            ">>> rect(0, 5)": ">>> rect(0, 5)  # doctest: +SKIP",
            ">>> describe(2, 3)": ">>> describe(2, 3)  # doctest: +SKIP",
        },
        NO_FIX_SQUARE.replace(">>> square(3)", ">>> square(3)  # doctest: +SKIP"),
    ),
    "__doc__ assigned at import": area({}, NO_FIX_SQUARE + RUNTIME_DOCS),
    "pytestmark xfail in the module": area(
        {'UNIT = "cm"\n': 'import pytest\n\npytestmark = pytest.mark.xfail\n\nUNIT = "cm"\n'}
    ),
    "rect and square fixed, describe not (its base doctest passes)": area(
        {"return width + height": "return width * height"},
        NO_FIX_SQUARE.replace("    6\n", "    9\n"),
    ),
    "a conftest.py that skips doctests": lambda task: (
        area({})(task) + diff_of(repo_of(task), {"conftest.py": SKIP_DOCTESTS})
    ),
    "a conftest.py that puts fixed functions in the doctest namespace": lambda task: (
        area({"'2x3'": "'2 x 3'"}, NO_FIX_SQUARE.replace("    6\n", "    9\n"))(task)
        + diff_of(repo_of(task), {"conftest.py": NAMESPACE_FIXES})
    ),
}

CALC_NEUTERED = NEW_TESTS.replace("assert add(2, 2) == 4", "pass").replace(
    "assert mul(2, 3) == 6", "pass"
)


def no_fix(task: Task) -> str:
    """What a cheat of a task needs besides its trick: the doctest task's `square`, whose
    doctest is a FAIL_TO_PASS test."""
    return area({})(task) if task.id == "shapes" else ""


CHEATS: dict[str, Callable[[Task], str]] = {
    "a conftest.py that rewrites reports": lambda task: (
        no_fix(task) + diff_of(repo_of(task), {"conftest.py": REWRITE_REPORTS})
    ),
    "pytest.ini loading a plugin that rewrites reports": lambda task: (
        no_fix(task)
        + diff_of(
            repo_of(task),
            {
                "pytest.ini": "[pytest]\naddopts = -p rewrite_reports\n",
                "rewrite_reports.py": REWRITE_REPORTS,
            },
        )
    ),
}
CALC_CHEATS: dict[str, Callable[[Task], str]] = {
    "the FAIL_TO_PASS tests neutered": lambda task: diff_of(
        repo_of(task), {"test_calc.py": CALC_NEUTERED}
    ),
}


@dataclass(frozen=True)
class Case:
    task: str
    submission: str
    patch: Callable[[Task], str]
    honest: bool


CASES = [
    *(Case(task, name, patch, True) for task in TASKS for name, patch in HONEST.items()),
    *(Case("doctests", name, patch, True) for name, patch in DOCTEST_HONEST.items()),
    *(Case(task, name, patch, False) for task in TASKS for name, patch in CHEATS.items()),
    *(
        Case(task, name, patch, False)
        for task in TASKS
        if task != "doctests"
        for name, patch in CALC_CHEATS.items()
    ),
    *(Case("doctests", name, patch, False) for name, patch in DOCTEST_CHEATS.items()),
]


def verdict(resolved: bool, status: str) -> str:
    return "resolved" if resolved else status


@pytest.mark.parametrize("case", CASES, ids=[f"{c.task}: {c.submission}" for c in CASES])
async def test_strict_mode_keeps_every_honest_fix_and_resolves_no_cheat(
    case: Case, tmp_path: Path
) -> None:
    task = TASKS[case.task](tmp_path)
    patch = case.patch(task)
    verdicts = {}
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        for mode, scorer in (("default", TestsScorer()), ("strict", TestsScorer(strict=True))):
            result = await scoring.score(scorer, task, Submission(patch=patch))
            verdicts[mode] = result
    default, strict = verdicts["default"], verdicts["strict"]
    print(
        f"\nVERDICT | {case.task} | {case.submission} | "
        f"{verdict(default.resolved, default.status)} | {verdict(strict.resolved, strict.status)}"
        f" | restored {strict.details.get('restored')}"
    )
    if case.honest:
        assert default.resolved, default.explanation
        assert strict.resolved, (strict.explanation, strict.details.get("restored"))
    else:
        assert not strict.resolved, strict.explanation


def test_the_doctest_task_names_doctests_of_the_module_the_fix_changes(tmp_path: Path) -> None:
    task = doctest_task(tmp_path)
    command = TestsScorer().plan(task).command or ""
    assert "--doctest-modules" in command
    assert "--doctest-glob=README.rst" in command
    assert "shapes/area.py" in (task.patch or "")
