"""Which tests a task without an `eval_script` runs, and which parser reads their output.

For a repository SWE-bench knows, its own specs decide, as its harness built eval scripts
before instances carried them (`MAP_REPO_VERSION_TO_SPECS_PY[repo][version]["test_cmd"]`, then
the files the task's `test_patch` touches, Django's as module names; `MAP_REPO_TO_PARSER`),
after the version's setup steps (`swebench_specs`: `eval_commands` such as Django's locale
exports, then `install`) in the conda environment.
For any other repository the test ids decide:

- pytest node ids (`path::name`): `python -m pytest -rA` over the files the ids name; doctest
  ids (`pkg/mod.py::pkg.mod.func`, `README.rst::README.rst`) add `--doctest-modules` or
  `--doctest-glob`; parser `pytest`, or `pytest_verbose` when an id holds a space (SWE-bench's
  `pytest` parser keeps an id's first word only, so such a test would never be found).
- unittest ids (`test_x (pkg.mod.Class)`): `python -m unittest -v` over those classes; parser
  `unittest`.
- anything else: no command (the scorer says to give an `eval_script` or a `test_command`).

Each plan carries one line that says what was chosen and why; the scorer writes it into the
evaluation's log (never into the graded test output).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.swebench import multilingual
from mcp_evalserver.scoring.swebench.doctests import doctest_kind
from mcp_evalserver.scoring.swebench.logparsers import ALL_REPO_PARSERS, SWEBENCH_REPO_PARSERS
from mcp_evalserver.scoring.swebench.specs import swebench_setup
from mcp_evalserver.spec.campaign import Task

# SWE-bench's test commands (swebench/harness/constants/python.py, the last release that
# carried them), by repository; versions that differ are listed below.
_PYTEST = "pytest -rA"
_DJANGO = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
SWEBENCH_TEST_COMMANDS: dict[str, str] = {
    "astropy/astropy": _PYTEST,
    "django/django": _DJANGO,
    "marshmallow-code/marshmallow": _PYTEST,
    "matplotlib/matplotlib": _PYTEST,
    "mwaskom/seaborn": "pytest --no-header -rA",
    "pallets/flask": _PYTEST,
    "psf/requests": _PYTEST,
    "pvlib/pvlib-python": _PYTEST,
    "pydata/xarray": _PYTEST,
    "pydicom/pydicom": _PYTEST,
    "pylint-dev/astroid": _PYTEST,
    "pylint-dev/pylint": _PYTEST,
    "pytest-dev/pytest": _PYTEST,
    "pyvista/pyvista": _PYTEST,
    "scikit-learn/scikit-learn": _PYTEST,
    "sphinx-doc/sphinx": "tox --current-env -epy39 -v --",
    "sqlfluff/sqlfluff": _PYTEST,
    "sympy/sympy": (
        "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"
    ),
}
_SWEBENCH_VERSION_COMMANDS: dict[tuple[str, str], str] = {
    ("django/django", "1.9"): "./tests/runtests.py --verbosity 2",
    **{
        ("astropy/astropy", version): "pytest -rA -vv -o console_output_style=classic --tb=no"
        for version in ("0.1", "0.2", "0.3", "0.4", "1.1", "1.2", "1.3")
    },
}
#: SWE-bench's `NON_TEST_EXTS`: files of a test_patch that are not run ("csv" without its dot,
#: as SWE-bench spells it).
NON_TEST_EXTS = (
    ".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml"
)  # fmt: skip
#: SWE-bench's images keep the test environment in conda; its eval scripts activate it first.
SWEBENCH_ENV = (
    "if [ -f /opt/miniconda3/bin/activate ]; then "
    "source /opt/miniconda3/bin/activate && conda activate testbed; fi"
)
_PYTHON = 'PY="$(command -v python || command -v python3)"'
_DIFF_FILE = re.compile(r"diff --git a/.* b/(.*)")
_UNITTEST_ID = re.compile(r"^\S+ \((?P<where>[\w.]+)\)$")
_PYTEST_PARSERS = frozenset({"pytest", "pytest_options", "pytest_v2", "pytest_verbose"})


@dataclass(frozen=True)
class TestPlan:
    """A test command (None: nothing can be run), its parser's name, and why; `preamble` runs
    before the test section (setting up the environment is not test output)."""

    __test__ = False  # not a pytest test class, despite the name

    command: str | None
    parser: str
    reason: str
    preamble: str = ""


def swebench_directives(task: Task) -> list[str]:
    """SWE-bench's `get_test_directives`: the files the test_patch touches, minus data files;
    for Django, as the module names its runner takes."""
    files = _DIFF_FILE.findall(task.test_patch or "")
    files = [f for f in files if not f.endswith(NON_TEST_EXTS)]
    if task.repo == "django/django":
        files = [
            f.removesuffix(".py").removeprefix("tests/").replace("/", ".") for f in files
        ]  # fmt: skip
    return files


def plan_tests(task: Task, *, command: str | None = None, parser: str = "auto") -> TestPlan:
    """The plan for `task`: the scorer's `command` and `parser` when given, else SWE-bench's
    for the task's repository, else inferred from its test ids (see the module docstring).

    The task's `metadata.log_parser` (SWE-bench 5 instances name theirs) beats the rest for
    `auto`. `command` None with a task `eval_script` only chooses the parser.
    """
    ids = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    inferred = _infer_from_ids(task, ids)
    parser_name, parser_reason = _parser(task, parser, inferred)
    if task.eval_script:
        return TestPlan(None, parser_name, f"the task's eval_script; {parser_reason}")
    if command:
        return TestPlan(command, parser_name, f"the scorer's test_command; {parser_reason}")
    swebench = _swebench_command(task)
    if swebench is not None:
        why = f"SWE-bench's test command for {task.repo}"
        setup = swebench_setup(task.repo, task.version)
        if setup:
            why += f" {task.version}, after its setup steps for that version"
        preamble = "\n".join([SWEBENCH_ENV, *setup])
        return TestPlan(swebench, parser_name, f"{why}; {parser_reason}", preamble)
    if inferred.command is None:
        return TestPlan(None, parser_name, inferred.reason)
    return TestPlan(inferred.command, parser_name, f"{inferred.reason}; {parser_reason}")


def task_eval_type(task: Task) -> str:
    """How the task's tests grade: its `metadata.eval_type` (SWE-bench 5 instances carry one),
    else `fail_only` for SWE-bench's fail-only repositories, else `pass_and_fail`.

    Raises:
        InvalidInput: an eval_type SWE-bench does not have.
    """
    named = task.metadata.get("eval_type")
    if named is None:
        return "fail_only" if task.repo in multilingual.FAIL_ONLY_REPOS else "pass_and_fail"
    if named not in ("pass_and_fail", "fail_only"):
        raise InvalidInput(
            f"task {task.id}: eval_type {named!r} is not one of SWE-bench's "
            "(pass_and_fail, fail_only)"
        )
    return str(named)


def parser_instance(task: Task) -> multilingual.Instance:
    """What a SWE-bench parser may read of the task (its id and version)."""
    return multilingual.Instance(task.id, task.version or "")


def _parser(task: Task, configured: str, inferred: TestPlan) -> tuple[str, str]:
    if configured != "auto":
        return configured, f"parser {configured} (the scorer's)"
    named = task.metadata.get("log_parser")
    if isinstance(named, str) and named:
        return named, f"parser {named} (the task's log_parser)"
    if task.repo in ALL_REPO_PARSERS:
        name = ALL_REPO_PARSERS[task.repo]
        return name, f"parser {name} (SWE-bench's for {task.repo})"
    return inferred.parser, f"parser {inferred.parser} ({_parser_why(inferred.parser)})"


def _parser_why(name: str) -> str:
    return {
        "pytest_verbose": "a test id holds a space",
        "unittest": "the test ids are unittest's",
    }.get(name, "the default")


def _swebench_command(task: Task) -> str | None:
    repo = task.repo or ""
    base = _SWEBENCH_VERSION_COMMANDS.get((repo, task.version or ""))
    base = base or SWEBENCH_TEST_COMMANDS.get(repo)
    if base is None:
        return None
    directives = swebench_directives(task)
    if not directives and SWEBENCH_REPO_PARSERS.get(repo) in _PYTEST_PARSERS:
        # No test_patch: SWE-bench would run the whole suite; the ids' files say the same
        # tests in far less time.
        directives = list(_files_of(task))
    return " ".join([base, *(shlex.quote(d) for d in directives)])


def _infer_from_ids(task: Task, ids: list[str]) -> TestPlan:
    where = [_UNITTEST_ID.match(i) for i in ids]
    if ids and all(where):
        classes = dict.fromkeys(m.group("where") for m in where if m)
        command = f'{_PYTHON}; "$PY" -m unittest -v ' + " ".join(map(shlex.quote, classes))
        return TestPlan(command, "unittest", "python -m unittest: the test ids are unittest's")
    parser = "pytest_verbose" if any(" " in i for i in ids) else "pytest"
    files = list(_files_of(task))
    if not files:
        return TestPlan(None, parser, "no test command: the test ids name no files")
    options = ["-rA", "-p", "no:cacheprovider", *_doctest_options(ids)]
    command = f'{_PYTHON}; "$PY" -m pytest ' + " ".join(map(shlex.quote, [*options, *files]))
    doctests = " with doctests" if len(options) > 3 else ""
    return TestPlan(command, parser, f"python -m pytest{doctests} over the test ids' files")


def _files_of(task: Task) -> dict[str, None]:
    files: dict[str, None] = {}
    for test in [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]:
        path, separator, _ = test.partition("::")
        if separator:
            files.setdefault(path)
    return files


def _doctest_options(ids: list[str]) -> list[str]:
    """pytest collects doctests only when asked: `path.py::dotted.name` ids are doctests of a
    module, ids of a text file (`README.rst::README.rst`) doctests of that file."""
    modules = False
    globs: dict[str, None] = {}
    for test in ids:
        kind = doctest_kind(test)
        if kind == "textfile":
            globs.setdefault(test.partition("::")[0].rsplit("/", 1)[-1])
        elif kind == "module":
            modules = True
    return [*(["--doctest-modules"] if modules else []), *(f"--doctest-glob={g}" for g in globs)]
