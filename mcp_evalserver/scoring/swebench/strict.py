"""The `tests` scorer's strict mode: grading that does not trust the test run's printed text.

SWE-bench 5.0.2 reads results from text the tests print, so four known tricks fool it: printing
PASSED lines at exit and then `os._exit(0)`, neutering a FAIL_TO_PASS test when the task has
no `test_patch`, a failing subtest under a passing parent, and a conftest.py or pytest
configuration that rewrites reports. Strict mode closes them:

- Test infrastructure comes from the instance, not the submission: before the tests run, every
  `conftest.py`, pytest configuration file (`pytest.ini`, `.pytest.ini`, `tox.ini`,
  `setup.cfg`, `pyproject.toml`), `sitecustomize.py`, `usercustomize.py` and `.pth` file that
  the patch names or git sees changed, every file of package metadata (`*.dist-info`,
  `*.egg-info`: an `entry_points.txt` there registers a pytest plugin) and every root-level
  stand-in for pytest (`pytest.py`, `_pytest/`, `pluggy/`, ...) the patch names, and every
  file a FAIL_TO_PASS / PASS_TO_PASS id names (but a doctest's), is put back as the base
  commit has it (removed if it has none); then the task's
  `test_patch` goes in as usual. A fix that needs to change one of those files is not graded
  as it was written (`details.restored` lists what was put back).
- A doctest id (`pkg/mod.py::pkg.mod.func`, `README.rst::README.rst`) names the file the fix
  changes, so that file stays the submission's; the test does not. Its examples are read,
  before the patch goes in, from the file as the task's authors wrote it (the test_patch's
  version, else the gold patch's, else the base commit's; `doctests`), and strict mode's plugin
  runs those in place of the ones pytest collected from the submission's file. A doctest id
  with no such examples fails, and so does one skipped or xfailed (the module that holds it
  is the submission's, and its `pytestmark` could say so): an edited expected output or
  example, a `+SKIP`, a `__doc__` assigned at import all leave the test as it was written.
- Paths inside `.git` the patch names (only GNU `patch`, the chain's last command, writes
  there: a hook that runs at the next `git checkout`, a `config` naming commands) are put back
  as they were before the patch, before any git command runs.
- Results come from pytest's own JUnit XML report, never from the log, and never from a file:
  strict mode's pytest plugin (`report_plugin`, loaded with `-p` before any conftest.py or
  test module) sends it on the sandbox's report channel (`Workspace.exec(report=True)`): a
  socket the sandbox reads itself, that no path in the workspace names. A file in the
  workspace, however randomly named, is one any process of the run can replace after pytest
  wrote it (a daemon the code under test forks at import), so the report never touches one.
  The report must come from exactly one process (the kernel counts the channel's writers), and
  begin with the plugin's `HELLO`, which it sends at import, before any code of the submission
  runs in pytest: a process the tests start that also writes makes it `tests_errored`.
  A test id passes only if every report entry for it passed (a failing subtest fails it).
- The report must agree with the process's exit status (0 exactly when nothing failed or
  errored), and a run that sent no report is `tests_errored`.

Limits (said plainly): the submission's code runs inside the pytest process, and that process
can write to its own channel: code that sets out to forge strict mode's report from inside it
(monkeypatching pytest or doctest's output checker at import time, writing to the plugin's
socket) is not excluded; nor is
code that runs earlier in the same eval script (an install step running the submission's
setup.py), which can rewrite pytest itself. Only running the code under test outside the test
process would exclude them. Processes left from the agent's commands are not a threat: each
command's pid namespace dies with it, and grading uses a fresh workspace. Strict mode needs
pytest run once by the eval script, with the plugin importable (a test command that sets
`PYTHONPATH` itself hides it): otherwise it is `tests_errored`. A doctest whose docstring the
task's own code builds at run time (a decorator, `__doc__` assigned) has no examples strict
mode can read from the source: it fails, and such a task is graded without strict.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import xml.etree.ElementTree as ElementTree
from collections.abc import Collection, Mapping, Sequence
from importlib import resources
from pathlib import PurePosixPath

from mcp_evalserver.scoring.swebench.doctests import (
    doctest_examples_text,
    doctest_kind,
    reference_source,
)
from mcp_evalserver.scoring.swebench.grading import (
    EvalStatus,
    Grade,
    ResolutionStatus,
    grade_tests,
    parse_test_list,
    ungraded,
)
from mcp_evalserver.scoring.swebench.logparsers import StatusMap, TestStatus

#: File names whose content changes how pytest collects, runs or reports tests.
TEST_INFRASTRUCTURE = (
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "sitecustomize.py",
    "usercustomize.py",
    "*.pth",
)
# Worst first: one failing entry (a subtest, a teardown error) decides the test's status.
_RANK = {
    TestStatus.ERROR: 0,
    TestStatus.FAILED: 1,
    TestStatus.SKIPPED: 2,
    TestStatus.XFAIL: 3,
    TestStatus.PASSED: 4,
}


#: The name strict mode's plugin is imported by, and what it sends first (`report_plugin`;
#: not imported here: it needs pytest, which only the task's environment has).
PLUGIN_MODULE = "mcp_evalserver_report"
PLUGIN_FD_VARIABLE = "MCP_EVALSERVER_REPORT_FD"
PLUGIN_HELLO = b"mcp-evalserver-report 1\n"
#: Beside the plugin: the examples of the doctests the task names (`doctests_file`; the
#: plugin spells the name itself, as it does `HELLO`).
DOCTESTS_FILE = "mcp_evalserver_doctests.json"


def plugin_source() -> str:
    """The plugin's source, to be written as `<dir>/mcp_evalserver_report.py`."""
    return resources.files("mcp_evalserver.scoring").joinpath("report_plugin.py").read_text()


def plugin_env(plugin_dir: str, report_fd: int) -> dict[str, str]:
    """What strict mode adds to the test run's environment: the plugin loaded first (`-p`,
    before conftest files), JUnit reports with file names (xunit1), and the channel's fd."""
    return {
        "PYTEST_ADDOPTS": f"-p {PLUGIN_MODULE} -o junit_family=xunit1",
        "PYTHONPATH": plugin_dir,
        PLUGIN_FD_VARIABLE: str(report_fd),
    }


#: Directories whose files register plugins: an `entry_points.txt` with a `[pytest11]` section
#: in any `*.dist-info`/`*.egg-info` on `sys.path` (the repository's root is, under
#: `python -m pytest`) is loaded by pytest as a plugin.
PACKAGE_METADATA = (".dist-info", ".egg-info")
#: Modules at the repository's root that would stand in for pytest itself under
#: `python -m pytest` (the root comes first on `sys.path`).
PYTEST_SHADOWS = ("pytest", "pytest.py", "_pytest", "pluggy", "pluggy.py", "py.py")


def is_infrastructure(path: str) -> bool:
    """Whether a repository path names a test-infrastructure file: one of
    `TEST_INFRASTRUCTURE` anywhere, a file of package metadata, or a root-level stand-in for
    pytest."""
    parts = PurePosixPath(path).parts
    if not parts:
        return False
    if parts[0] in PYTEST_SHADOWS:
        return True
    if any(part.endswith(PACKAGE_METADATA) for part in parts):
        return True
    return any(fnmatch.fnmatchcase(parts[-1], pattern) for pattern in TEST_INFRASTRUCTURE)


def infrastructure_in_patch(patch: str) -> list[str]:
    """The test-infrastructure paths a patch names in any header `git apply` or `patch -p1`
    reads (git, unified and context headers, renames, copies), in order, unique.

    Read from the patch itself, not only from git, because GNU `patch` also writes inside
    `.git` (an `info/exclude` entry would hide a new conftest.py from `git status`).
    """
    return [path for path in paths_in_patch(patch) if is_infrastructure(path)]


def git_dir_paths_in(patch: str) -> list[str]:
    """The paths inside `.git` a patch names. `git apply` refuses them, but the chain's last
    command, GNU `patch`, writes them: an executable `hooks/post-checkout` runs at the next
    `git checkout` (the eval script's, or strict mode's own restore), a `config` can name
    filter, diff and fsmonitor commands."""
    return [path for path in paths_in_patch(patch) if PurePosixPath(path).parts[:1] == (".git",)]


def paths_in_patch(patch: str) -> list[str]:
    """Every path a patch names in a header a patch tool reads, in order, unique."""
    found: dict[str, None] = {}
    for line in patch.splitlines():
        for prefix, strip in _HEADERS:
            if line.startswith(prefix):
                for path in _header_paths(line.removeprefix(prefix), strip):
                    found.setdefault(str(PurePosixPath(path)))
                break
    return list(found)


def git_dir_snapshot_script(paths: Sequence[str], snapshot: str) -> str:
    """A shell script (run in the workdir before the patch goes in) that copies the `.git`
    paths that exist to `snapshot`, for `git_dir_restore_script`."""
    quoted = " ".join(shlex.quote(path) for path in paths)
    snap = shlex.quote(snapshot)
    return (
        f"mkdir -p {snap} && for f in {quoted}; do "
        'if [ -e "$f" ] || [ -L "$f" ]; then '
        f'mkdir -p {snap}/"$(dirname -- "$f")" && cp -a -- "$f" {snap}/"$f"; fi; done'
    )


def git_dir_restore_script(paths: Sequence[str], snapshot: str) -> str:
    """A shell script that puts the `.git` paths back as `git_dir_snapshot_script` found
    them (removed if they did not exist), printing each path whose content or mode the patch
    had changed. Runs before any git command after the patch."""
    quoted = " ".join(shlex.quote(path) for path in paths)
    snap = shlex.quote(snapshot)
    return (
        f"for f in {quoted}; do "
        f'if [ -e {snap}/"$f" ] || [ -L {snap}/"$f" ]; then '
        f'if ! cmp -s -- {snap}/"$f" "$f" || '
        f'[ "$(stat -c %f -- {snap}/"$f")" != "$(stat -c %f -- "$f" 2>/dev/null)" ]; '
        'then echo "$f"; fi; '
        f'rm -rf -- "$f" && cp -a -- {snap}/"$f" "$f"; '
        'elif [ -e "$f" ] || [ -L "$f" ]; then rm -rf -- "$f" && echo "$f"; fi; done'
    )


# Header prefixes and whether `-p1` strips a leading component from the paths after them.
_HEADERS = (
    ("diff --git ", True),
    ("--- ", True),
    ("+++ ", True),
    ("*** ", True),
    ("Index: ", True),
    ("rename from ", False),
    ("rename to ", False),
    ("copy from ", False),
    ("copy to ", False),
)


def _header_paths(rest: str, strip: bool) -> list[str]:
    rest = rest.split("\t", 1)[0].strip()
    # `diff --git a/x b/x` names two paths; a quoted one ("a/con\146test.py") is unescaped.
    parts = re.findall(r'"(?:[^"\\]|\\.)*"|\S+', rest) if rest.startswith(("a/", '"')) else [rest]
    paths = []
    for part in parts:
        if len(part) >= 2 and part[0] == part[-1] == '"':
            raw = part[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
            part = raw.encode("latin-1", "replace").decode("utf-8", "replace")
        if strip and "/" in part:
            part = part.split("/", 1)[1]
        paths.append(part)
    return paths


def infrastructure_restore_script(paths: Sequence[str]) -> str:
    """A shell script (run in the workdir) that puts `paths`, and every test-infrastructure
    file git sees changed or added, back as the base commit has them (removed if it has
    none), printing each path it restored.

    Package metadata and pytest stand-ins count only when the patch names them: an
    instance's own untracked `*.egg-info` (an editable install) must survive.
    """
    names = "|".join(re.escape(name).replace(r"\*", "[^/]*") for name in TEST_INFRASTRUCTURE)
    quoted = " ".join(shlex.quote(path) for path in paths)
    return (
        "{ git ls-files -m -o --exclude-standard | "
        f"grep -E {shlex.quote(f'(^|/)({names})$')}; "
        f'for f in {quoted}; do echo "$f"; done; }} | sort -u | while IFS= read -r f; do '
        'if git cat-file -e "HEAD:$f" 2>/dev/null; then '
        'git show "HEAD:$f" | cmp -s - "$f" || { git checkout -q HEAD -- "$f" && echo "$f"; }; '
        'elif [ -e "$f" ] || [ -L "$f" ]; then rm -rf -- "$f" && echo "$f"; fi; done'
    )


def files_named_by(test_ids: Sequence[str]) -> list[str]:
    """The files pytest ids (`path::test`) name, in order, unique, but for doctest ids: a
    doctest's file holds the code under test, which the fix changes (its examples are given
    to the test instead, `doctest_references`)."""
    files: dict[str, None] = {}
    for test in test_ids:
        path, separator, _ = test.partition("::")
        if separator and path and doctest_kind(test) is None:
            files.setdefault(path)
    return list(files)


def doctest_references(
    bases: Mapping[str, str | None],
    test_ids: Sequence[str],
    *,
    gold: str | None,
    test_patch: str | None,
) -> tuple[dict[str, str], list[str]]:
    """The examples each doctest id runs in strict mode, and the log's account of them.

    `bases` maps the files the doctest ids name to their text at the base commit (None: no
    such file). Each id's examples come from the file as the task's authors meant it
    (`doctests.reference_source`): the test_patch's, else the gold patch's, else the base's
    version, never the submission's. The first value maps ids to the text doctest parses
    (a docstring, or a whole text file); an id missing from it has no examples anywhere the
    submission did not write, and fails.
    """
    references: dict[str, str] = {}
    account: list[str] = []
    for test in test_ids:
        if doctest_kind(test) is None:
            continue
        path = test.partition("::")[0]
        source, origin = reference_source(bases.get(path), path, gold=gold, test_patch=test_patch)
        text = doctest_examples_text(source, test) if source is not None else None
        if text is None:
            account.append(f"{test}: no examples in {origin} (it fails)")
        else:
            references[test] = text
            account.append(f"{test}: examples from {origin}")
    return references, account


def doctests_file(references: Mapping[str, str]) -> str:
    """What strict mode writes beside its plugin as `DOCTESTS_FILE`: the examples' text per
    doctest id, for the plugin to run in place of the submission's."""
    return json.dumps(references, sort_keys=True)


def parse_junit(xml: bytes) -> StatusMap:
    """pytest's xunit1 JUnit report as a status map keyed by pytest node id.

    Raises:
        ValueError: not a JUnit report (malformed, a DOCTYPE, no test suite).
    """
    if b"<!DOCTYPE" in xml or b"<!ENTITY" in xml:
        raise ValueError("the report declares a DOCTYPE or entities")
    root = ElementTree.fromstring(xml)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if not suites:
        raise ValueError("no <testsuite> in the report")
    statuses: StatusMap = {}
    for suite in suites:
        for case in suite.iter("testcase"):
            test_id = _node_id(case)
            status = _case_status(case)
            known = statuses.get(test_id)
            if known is None or _RANK[status] < _RANK[known]:
                statuses[test_id] = status
    return statuses


def _node_id(case: ElementTree.Element) -> str:
    name = case.get("name", "")
    classname = case.get("classname", "")
    path = case.get("file", "")
    if not path:
        return f"{classname}::{name}" if classname else name
    module = path.removesuffix(".py").replace("/", ".")
    rest = classname[len(module) :].lstrip(".") if classname.startswith(module) else ""
    return "::".join([path, *(part for part in rest.split(".") if part), name])


def _case_status(case: ElementTree.Element) -> TestStatus:
    tags = {child.tag for child in case}
    if "error" in tags:
        return TestStatus.ERROR
    if "failure" in tags:
        return TestStatus.FAILED
    skipped = case.find("skipped")
    if skipped is not None:
        return TestStatus.XFAIL if skipped.get("type") == "pytest.xfail" else TestStatus.SKIPPED
    return TestStatus.PASSED


def grade_report(
    channel: bytes | None,
    *,
    writers: int,
    fail_to_pass: str | Sequence[str] | None,
    pass_to_pass: str | Sequence[str] | None,
    exit_status: int,
    doctests: Collection[str] = (),
) -> Grade:
    """Grades a run from what its report channel carried (`channel`, written by `writers`
    processes) and its exit status (see the module docstring).

    `doctests` are the task's doctest ids that ran examples the submission did not write
    (`doctest_references`); every other doctest id of the lists fails. A doctest passes only
    if it passed: the module that holds it is the submission's, and a `pytestmark` there can
    skip it or mark it xfail.

    Raises:
        InvalidInput: a test list is malformed.
    """
    f2p = parse_test_list(fail_to_pass, "FAIL_TO_PASS")
    p2p = parse_test_list(pass_to_pass, "PASS_TO_PASS")
    if writers > 1:
        return ungraded(
            EvalStatus.TESTS_ERRORED,
            f"strict: {writers} processes wrote to the report channel, where only pytest "
            "may: something the tests ran tried to write the results",
            exit_status,
        )
    if not channel or not channel.startswith(PLUGIN_HELLO):
        return ungraded(
            EvalStatus.TESTS_ERRORED,
            "strict: pytest never loaded strict mode's plugin (the runner is not pytest, or "
            "the test command sets PYTHONPATH itself and hides it)",
            exit_status,
        )
    report = channel.removeprefix(PLUGIN_HELLO)
    if not report:
        return ungraded(
            EvalStatus.TESTS_ERRORED,
            "strict: pytest sent no JUnit report (it did not finish)",
            exit_status,
        )
    try:
        statuses = parse_junit(report)
    except (ValueError, ElementTree.ParseError) as error:
        explanation = f"strict: the JUnit report is unreadable: {error}"
        return ungraded(EvalStatus.TESTS_ERRORED, explanation, exit_status)
    failing = {TestStatus.FAILED, TestStatus.ERROR} & set(statuses.values())
    refused = _refused_doctests([*f2p, *p2p], statuses, doctests)
    tests = grade_tests({**statuses, **dict.fromkeys(refused, TestStatus.FAILED)}, f2p, p2p)
    if bool(failing) != (exit_status != 0):
        return Grade(
            status=EvalStatus.EXIT_CODE_MISMATCH,
            resolution=ResolutionStatus.NO,
            explanation=f"strict: tests exited {exit_status} but the JUnit report has "
            f"{'failures' if failing else 'no failure'}",
            tests=tests,
            statuses=statuses,
            exit_code=exit_status,
        )
    f2p_group, p2p_group = tests.fail_to_pass, tests.pass_to_pass
    explanation = (
        f"strict: FAIL_TO_PASS {len(f2p_group.success)}/{len(f2p)} pass, "
        f"PASS_TO_PASS {len(p2p_group.success)}/{len(p2p)} pass (JUnit report)"
    )
    failures = [*f2p_group.failure, *p2p_group.failure]
    if failures:
        explanation += f"; first failing: {failures[0]}"
        if failures[0] in refused:
            explanation += f" ({refused[failures[0]]})"
    return Grade(
        status=EvalStatus.GRADED,
        resolution=tests.resolution,
        explanation=explanation,
        tests=tests,
        statuses=statuses,
        exit_code=exit_status,
    )


def _refused_doctests(
    test_ids: Sequence[str], statuses: StatusMap, doctests: Collection[str]
) -> dict[str, str]:
    """The doctest ids strict mode fails although pytest may not have, and why."""
    refused: dict[str, str] = {}
    for test in test_ids:
        if doctest_kind(test) is None:
            continue
        status = statuses.get(test)
        if test not in doctests:
            refused[test] = "a doctest with no examples the submission did not write"
        elif status in (TestStatus.SKIPPED, TestStatus.XFAIL):
            refused[test] = f"a doctest {status.value}: only a pass counts for one"
    return refused
