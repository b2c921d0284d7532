"""Test-log parsers: a test runner's output in, `{test id: TestStatus}` out.

Two families:

- Mirrors of SWE-bench's Python parsers (`swebench.harness.log_parsers.python`), same names
  without the `parse_log_` prefix and the same ids, so FAIL_TO_PASS / PASS_TO_PASS lists from
  SWE-bench datasets grade identically: `pytest`, `pytest_options`, `pytest_v2`, `django`,
  `sympy`, `seaborn`, `matplotlib`. Two deliberate differences: SWE-bench records the first
  (or last) word of a matching line as the status even when it is not exactly a status word
  (say `ERROR:`), which then grades as neither pass nor fail, and its Django parser raises on a
  bare `FAIL:` line; these parsers skip such lines.
- Our own, for tasks not taken from SWE-bench: `pytest_verbose` (verbose progress lines, the
  `-rA` short summary, xdist prefixes, ids with spaces and brackets) and `unittest` (verbosity 2,
  including Python 3.11+ ids and docstring descriptions).

Each parser is total: any text gives a (possibly empty) map, never an exception.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from enum import StrEnum

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.swebench import multilingual


class TestStatus(StrEnum):
    """The status words of SWE-bench's status maps."""

    __test__ = False  # not a pytest test class, despite the name

    FAILED = "FAILED"
    PASSED = "PASSED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"


StatusMap = dict[str, TestStatus]
LogParser = Callable[[str], StatusMap]

_STATUS_WORDS = tuple(s.value for s in TestStatus)
_SKIP_SUMMARY_COUNT = re.compile(r"^\[\d+\]$")
_OPTION = re.compile(r"(.*?)\[(.*)\]")
_ANSI_COLOUR = re.compile(r"\[(\d+)m")
_CONTROL_CHARS = str.maketrans("", "", "".join(chr(c) for c in range(1, 32)))


def _status(word: str) -> TestStatus | None:
    return TestStatus(word) if word in _STATUS_WORDS else None


def _is_skip_summary(status: str, name: str) -> bool:
    # pytest's `SKIPPED [N] path:line: reason`: [N] is a count, not a test id.
    return status == TestStatus.SKIPPED and bool(_SKIP_SUMMARY_COUNT.match(name))


def _starts_with_status(line: str) -> bool:
    return line.startswith(_STATUS_WORDS)


def parse_pytest(log: str) -> StatusMap:
    """SWE-bench's `parse_log_pytest`: `-rA` summary lines, the id is the first word after."""
    return dict(_summary_entries(log))


def parse_matplotlib(log: str) -> StatusMap:
    """SWE-bench's `parse_log_matplotlib`: `parse_pytest` with MouseButton enums spelled out."""
    return dict(
        _summary_entries(
            log,
            lambda line: line.replace("MouseButton.LEFT", "1").replace("MouseButton.RIGHT", "3"),
        )
    )


def _summary_entries(
    log: str, rewrite: Callable[[str], str] = lambda line: line
) -> Iterator[tuple[str, TestStatus]]:
    """(id, status) of each `-rA` summary line, in the log's order (a later line wins)."""
    for raw in log.split("\n"):
        line = rewrite(raw)
        if not _starts_with_status(line):
            continue
        if line.startswith(TestStatus.FAILED):
            line = line.replace(" - ", " ")
        words = line.split()
        if len(words) <= 1 or _is_skip_summary(words[0], words[1]):
            continue
        status = _status(words[0])
        if status is not None:
            yield words[1], status


def parse_pytest_options(log: str) -> StatusMap:
    """SWE-bench's `parse_log_pytest_options`: like `parse_pytest`, but a parameter that is an
    absolute path keeps only its last component (ids stay stable across machines)."""
    statuses: StatusMap = {}
    for name, status in _summary_entries(log):
        option = _OPTION.search(name)
        if option:
            main, param = option.groups()
            if param.startswith("/") and not param.startswith("//") and "*" not in param:
                param = "/" + param.split("/")[-1]
            name = f"{main}[{param}]"
        statuses[name] = status
    return statuses


def parse_pytest_v2(log: str) -> StatusMap:
    """SWE-bench's `parse_log_pytest_v2`: colour codes removed, ids may contain spaces, and
    old-style `id STATUS` lines are read too."""
    statuses: StatusMap = {}
    for raw in log.split("\n"):
        line = _ANSI_COLOUR.sub("", raw).translate(_CONTROL_CHARS)
        if _starts_with_status(line):
            if line.startswith(TestStatus.FAILED):
                line = line.split(" - ", 1)[0]
            words = line.split()
            if len(words) >= 2 and not _is_skip_summary(words[0], words[1]):
                status = _status(words[0])
                if status is not None:
                    statuses[" ".join(words[1:])] = status
        elif line.endswith(_STATUS_WORDS):
            words = line.split()
            status = _status(words[-1]) if len(words) >= 2 else None
            if status is not None:
                statuses[" ".join(words[:-1])] = status
    return statuses


def parse_seaborn(log: str) -> StatusMap:
    """SWE-bench's `parse_log_seaborn`."""
    statuses: StatusMap = {}
    for line in log.split("\n"):
        words = line.split()
        if len(words) < 2:
            continue
        if line.startswith(TestStatus.FAILED):
            statuses[words[1]] = TestStatus.FAILED
        elif f" {TestStatus.PASSED} " in line:
            if words[1] == TestStatus.PASSED:
                statuses[words[0]] = TestStatus.PASSED
        elif line.startswith(TestStatus.PASSED):
            statuses[words[1]] = TestStatus.PASSED
    return statuses


def parse_sympy(log: str) -> StatusMap:
    """SWE-bench's `parse_log_sympy`: sympy's own runner (`test_x ok`, `test_y F`, `test_z E`)."""
    statuses: StatusMap = {}
    for match in re.findall(r"(_*) (.*)\.py:(.*) (_*)", log):
        statuses[f"{match[1]}.py:{match[2]}"] = TestStatus.FAILED
    for raw in log.split("\n"):
        line = raw.strip()
        if not line.startswith("test_"):
            continue
        if line.endswith(" E"):
            statuses[line.split()[0]] = TestStatus.ERROR
        if line.endswith(" F"):
            statuses[line.split()[0]] = TestStatus.FAILED
        if line.endswith(" ok"):
            statuses[line.split()[0]] = TestStatus.PASSED
    return statuses


# Django's runner sometimes prints a long message between "..." and the result (see SWE-bench).
_DJANGO_INTERRUPTED = (
    r"^(.*?)\s\.\.\.\sTesting\ against\ Django\ installed\ in\ ((?s:.*?))\ silenced\)\.\nok$",
    r"^(.*?)\s\.\.\.\sInternal\ Server\ Error:\ \/(.*)\/\nok$",
    r"^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$",
)


def parse_django(log: str) -> StatusMap:
    """SWE-bench's `parse_log_django`: Django's runner at verbosity 2 (`name (mod.Class) ... ok`).

    Like SWE-bench, `FAIL:`/`ERROR:` headers record only the method name.
    """
    statuses: StatusMap = {}
    previous: str | None = None
    for raw in log.split("\n"):
        line = raw.strip()
        if "--version is equivalent to version" in line:
            statuses["--version is equivalent to version"] = TestStatus.PASSED
        if " ... " in line:
            previous = line.split(" ... ")[0]
        for suffix in (" ... ok", " ... OK", " ...  OK"):
            if line.endswith(suffix):
                # SWE-bench's special case for django__django-7188's interleaved migration output.
                if line.startswith("Applying sites.0002_alter_domain_unique...test_no_migrations"):
                    line = line.split("...", 1)[-1].strip()
                statuses[line.rsplit(suffix, 1)[0]] = TestStatus.PASSED
                break
        if " ... skipped" in line:
            statuses[line.split(" ... skipped")[0]] = TestStatus.SKIPPED
        if line.endswith(" ... FAIL"):
            statuses[line.split(" ... FAIL")[0]] = TestStatus.FAILED
        words = line.split()
        # SWE-bench raises IndexError on a bare "FAIL:" or "ERROR:" line; we skip it.
        if line.startswith("FAIL:") and len(words) > 1:
            statuses[words[1]] = TestStatus.FAILED
        if line.endswith(" ... ERROR"):
            statuses[line.split(" ... ERROR")[0]] = TestStatus.ERROR
        if line.startswith("ERROR:") and len(words) > 1:
            statuses[words[1]] = TestStatus.ERROR
        if line.lstrip().startswith("ok") and previous is not None:
            # The result came on its own line after output the test printed.
            statuses[previous] = TestStatus.PASSED
    for pattern in _DJANGO_INTERRUPTED:
        for match in re.finditer(pattern, log, re.MULTILINE):
            statuses[match.group(1)] = TestStatus.PASSED
    return statuses


# --- our own parsers ------------------------------------------------------------------------

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PYTEST_WORDS = "PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS"
_PYTEST_PROGRESS = re.compile(
    rf"^(?:\[gw\d+\] \[\s*\d+%\] (?P<xstatus>{_PYTEST_WORDS}) (?P<xid>\S.*?::.*?)"
    rf"|(?P<id>\S+?::.*?) (?P<status>{_PYTEST_WORDS})(?: \(.*\))?(?:\s+\[\s*\d+%\])?)\s*$"
)
_PYTEST_SUMMARY = re.compile(rf"^(?P<status>{_PYTEST_WORDS}) (?P<rest>.+)$")
# A non-strict XPASS is a pass to pytest (exit code 0); strict ones are reported as FAILED.
_PYTEST_STATUS = {word: TestStatus(word) for word in _STATUS_WORDS} | {"XPASS": TestStatus.PASSED}


def parse_pytest_verbose(log: str) -> StatusMap:
    """pytest run with `-v` and/or `-rA`: progress lines and the short test summary.

    Ids are node ids (`path::Class::test[param]`) and may contain spaces, brackets and ` - `
    inside the brackets; in the summary the id ends at the first space outside brackets.
    Summary lines come last, so where both forms name a test the summary wins (a test that
    passed but errored in teardown ends as ERROR). `XPASS` counts as PASSED.
    """
    statuses: StatusMap = {}
    for raw in log.split("\n"):
        line = _ANSI_ESCAPE.sub("", raw).rstrip()
        progress = _PYTEST_PROGRESS.match(line)
        if progress:
            test_id = progress.group("id") or progress.group("xid")
            word = progress.group("status") or progress.group("xstatus")
            statuses[test_id] = _PYTEST_STATUS[word]
            continue
        summary = _PYTEST_SUMMARY.match(line)
        if summary and not _SKIP_SUMMARY_COUNT.match(summary.group("rest").split(" ", 1)[0]):
            statuses[_node_id(summary.group("rest"))] = _PYTEST_STATUS[summary.group("status")]
    return statuses


def _node_id(rest: str) -> str:
    # A node id has spaces only inside its parametrization brackets; the first space outside
    # them starts the reason (" - reason" on pytest 8, a bare reason for XPASS on pytest 7).
    depth = 0
    for index, char in enumerate(rest):
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        elif depth == 0 and char.isspace():
            return rest[:index]
    return rest


_UNITTEST_ID = r"(?P<name>\S+) \((?P<where>[\w.]+)\)"
_UNITTEST_RESULTS: tuple[tuple[str, TestStatus], ...] = (
    ("ok", TestStatus.PASSED),
    ("FAIL", TestStatus.FAILED),
    ("ERROR", TestStatus.ERROR),
    ("skipped", TestStatus.SKIPPED),
    ("expected failure", TestStatus.XFAIL),
    # unittest counts an unexpected success as a failure of the run.
    ("unexpected success", TestStatus.FAILED),
)
_UNITTEST_HEADER = re.compile(rf"^(?P<kind>FAIL|ERROR): {_UNITTEST_ID}")
_UNITTEST_ALONE = re.compile(rf"^{_UNITTEST_ID}$")


def parse_unittest(log: str) -> StatusMap:
    """unittest at verbosity 2: `test_x (pkg.mod.Class) ... ok` and the `FAIL:`/`ERROR:` headers.

    Python 3.11+ prints `test_x (pkg.mod.Class.test_x)`; such ids are also recorded under the
    older `test_x (pkg.mod.Class)` form so test lists written either way match. A docstring
    description (printed on the line after the id) is attributed to the id above it, and a
    result printed on its own line after test output goes to the test still waiting for one.
    """
    statuses: StatusMap = {}
    waiting: re.Match[str] | None = None  # a test whose result has not been printed yet
    described: re.Match[str] | None = None  # an id alone on the line just before
    for raw in log.split("\n"):
        line = _ANSI_ESCAPE.sub("", raw).rstrip()
        header = _UNITTEST_HEADER.match(line)
        alone = _UNITTEST_ALONE.match(line)
        previous, described = described, None
        if header:
            kind = TestStatus.FAILED if header.group("kind") == "FAIL" else TestStatus.ERROR
            _record(statuses, header, kind)
            waiting = None
        elif alone:
            described = alone
        elif " ... " in line:
            head, _, result = line.partition(" ... ")
            test = _UNITTEST_ALONE.match(head) or previous
            status = _unittest_result(result)
            if test is not None and status is not None:
                _record(statuses, test, status)
            waiting = test if status is None else None
        elif waiting is not None:
            status = _unittest_result(line)
            if status is not None:
                _record(statuses, waiting, status)
                waiting = None
    return statuses


def _unittest_result(text: str) -> TestStatus | None:
    text = text.strip()
    for word, status in _UNITTEST_RESULTS:
        if text == word or (word == "skipped" and text.startswith("skipped ")):
            return status
    return None


def _record(statuses: StatusMap, test: re.Match[str], status: TestStatus) -> None:
    name, where = test.group("name"), test.group("where")
    statuses[f"{name} ({where})"] = status
    if where.endswith(f".{name}"):
        statuses[f"{name} ({where.removesuffix('.' + name)})"] = status


#: Parsers by name; the SWE-bench mirrors also answer to SWE-bench's `parse_log_*` names.
PARSERS: dict[str, LogParser] = {
    "pytest": parse_pytest,
    "pytest_options": parse_pytest_options,
    "pytest_v2": parse_pytest_v2,
    "django": parse_django,
    "sympy": parse_sympy,
    "seaborn": parse_seaborn,
    "matplotlib": parse_matplotlib,
    "pytest_verbose": parse_pytest_verbose,
    "unittest": parse_unittest,
}

# SWE-bench's per-repository parser names that are plain aliases of a mirrored parser.
_SWEBENCH_ALIASES = {
    **dict.fromkeys(
        ["astroid", "flask", "marshmallow", "pvlib", "pyvista", "sqlfluff", "xarray"], "pytest"
    ),
    **dict.fromkeys(["pydicom", "requests", "pylint"], "pytest_options"),
    **dict.fromkeys(["astropy", "scikit", "sphinx"], "pytest_v2"),
}

#: SWE-bench's repository → parser table for its Python repositories.
SWEBENCH_REPO_PARSERS: dict[str, str] = {
    "astropy/astropy": "pytest_v2",
    "django/django": "django",
    "marshmallow-code/marshmallow": "pytest",
    "matplotlib/matplotlib": "matplotlib",
    "mwaskom/seaborn": "seaborn",
    "pallets/flask": "pytest",
    "psf/requests": "pytest_options",
    "pvlib/pvlib-python": "pytest",
    "pydata/xarray": "pytest",
    "pydicom/pydicom": "pytest_options",
    "pylint-dev/astroid": "pytest",
    "pylint-dev/pylint": "pytest_options",
    "pytest-dev/pytest": "pytest",
    "pyvista/pyvista": "pytest",
    "scikit-learn/scikit-learn": "pytest_v2",
    "sqlfluff/sqlfluff": "pytest",
    "sphinx-doc/sphinx": "pytest_v2",
    "sympy/sympy": "sympy",
}


#: Every repository SWE-bench 5.0.2 names a parser for, by that parser's name.
ALL_REPO_PARSERS: dict[str, str] = {
    **SWEBENCH_REPO_PARSERS,
    **{repo: multilingual.short_name(p) for repo, p in multilingual.REPO_PARSERS.items()},
}


def parser_names() -> list[str]:
    """Every parser name `get_parser` takes (besides SWE-bench's `parse_log_` spellings)."""
    return sorted({*PARSERS, *_SWEBENCH_ALIASES, *multilingual.PARSERS})


def get_parser(name: str, instance: multilingual.Instance | None = None) -> LogParser:
    """The parser called `name` (ours, or SWE-bench's `parse_log_*` name for a mirror or one
    of its other languages' parsers). `instance`: the task's id and version, which a few of
    SWE-bench's parsers read to choose a format (default: neither known).

    SWE-bench's other-language parsers run as SWE-bench runs them, with one difference: where
    one raises on a log (an index or attribute error on output it did not expect, which fails
    the whole evaluation in SWE-bench), the log has no results here, graded as such.

    Raises:
        InvalidInput: no parser has that name; the message lists those that exist.
    """
    short = name.removeprefix("parse_log_")
    parser = PARSERS.get(_SWEBENCH_ALIASES.get(short, short))
    if parser is not None:
        return parser
    raw = multilingual.PARSERS.get(short) or multilingual.PARSERS.get(name.removeprefix("parse_"))
    if raw is None:
        raise InvalidInput(f"unknown log parser {name!r}; known: {', '.join(parser_names())}")
    return functools.partial(_ported, raw, instance or multilingual.Instance("", ""))


def _ported(raw: multilingual.RawParser, instance: multilingual.Instance, log: str) -> StatusMap:
    try:
        statuses = raw(log, instance)
    except Exception:
        return {}
    return {test: found for test, word in statuses.items() if (found := _status(word))}
