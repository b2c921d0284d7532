"""Strict grading's pytest plugin: pytest's own JUnit report, sent on the sandbox's channel.

The `tests` scorer in strict mode copies this file into the workspace as
`mcp_evalserver_report.py` and loads it with `-p mcp_evalserver_report` (PYTEST_ADDOPTS), so
pytest imports it before any conftest.py or test module. The sandbox gives the test command
the write end of a private unix socket (`Workspace.exec(report=True)`, at the descriptor that
MCP_EVALSERVER_REPORT_FD names), reads it to EOF itself and learns from the kernel which
processes wrote to it. Nothing in the workspace's files names that socket.

At import, before any code of the submission runs in this process, the plugin:
- takes the socket: a close-on-exec duplicate, the inherited descriptor closed and the variable
  removed, so programs the tests start get neither;
- makes pytest non-dumpable: other processes of the same uid can no longer ptrace it or open
  its descriptors through /proc (a socket cannot be opened through /proc anyway);
- writes `HELLO` on it, so pytest is a writer before any test code can start another one (the
  scorer refuses a report that more than one process wrote).
pytest's junitxml plugin writes its report into an unnamed temporary file (also out of every
other process's reach); at unconfigure the plugin sends those bytes and closes the socket.

Doctests the task names: at import the plugin also reads `mcp_evalserver_doctests.json` from
its own directory (the scorer wrote it there, with the examples' text per test id, taken from a
version of each file the submission did not write). Right before such a doctest runs, its
examples are parsed from that text and replace the ones pytest collected from the submission's
file: the test runs its own examples against the submission's code.

What it cannot stop: code running inside this pytest process (the code under test, a plugin the
environment loads) can write to the socket too. See docs/reference/scorers.md, "Strict mode".

Stdlib and pytest only, Python >= 3.6 syntax: it runs under the task's own interpreter.
"""

import contextlib
import ctypes
import doctest
import json
import os
import stat
import tempfile
import typing

import pytest

FD_VARIABLE = "MCP_EVALSERVER_REPORT_FD"
HELLO = b"mcp-evalserver-report 1\n"
_PR_SET_DUMPABLE = 4


def _claim() -> int:
    wanted = os.environ.pop(FD_VARIABLE, None)
    if wanted is None:
        return -1  # not under strict grading (or an xdist worker: its parent took it)
    try:
        inherited = int(wanted)
        if not stat.S_ISSOCK(os.fstat(inherited).st_mode):
            return -1
        private = os.dup(inherited)  # not inheritable: close-on-exec (PEP 446)
        os.close(inherited)
    except (ValueError, OSError):
        return -1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    _send(private, HELLO)
    return private


def _send(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_CHANNEL = _claim()
_REPORTS: "list[typing.IO[bytes]]" = []  # where junitxml writes, once configured
DOCTESTS_FILE = "mcp_evalserver_doctests.json"


def _doctest_examples() -> "dict[str, str]":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), DOCTESTS_FILE)
    try:
        with open(path, encoding="utf-8") as file:
            return dict(json.load(file))
    except FileNotFoundError:
        return {}


_DOCTESTS = _doctest_examples()  # read now, before any code of the submission runs here


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: "pytest.Item") -> None:
    text = _DOCTESTS.get(item.nodeid)
    test = getattr(item, "dtest", None)
    if text is None or not isinstance(test, doctest.DocTest):
        return
    # Parsed by this interpreter's doctest, now: option names pytest registers
    # (NUMBER, ALLOW_UNICODE) are known by the time a doctest runs.
    test.examples = doctest.DocTestParser().get_examples(text, test.name)
    test.docstring = text


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: "pytest.Config") -> None:
    if _CHANNEL < 0 or hasattr(config, "workerinput"):
        return
    report = tempfile.TemporaryFile()  # noqa: SIM115 (open until unconfigure)
    _REPORTS.append(report)
    # Before junitxml's own pytest_configure reads it (tryfirst).
    config.option.xmlpath = f"/proc/self/fd/{report.fileno()}"


def pytest_unconfigure(config: "pytest.Config") -> None:
    if _CHANNEL < 0 or not _REPORTS:
        return
    report = _REPORTS.pop()
    report.seek(0)
    try:
        _send(_CHANNEL, report.read())
    finally:
        report.close()
        os.close(_CHANNEL)
