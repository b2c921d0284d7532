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

What it cannot stop: code running inside this pytest process (the code under test, a plugin the
environment loads) can write to the socket too. See docs/reference/scorers.md, "Strict mode".

Stdlib and pytest only, Python >= 3.6 syntax: it runs under the task's own interpreter.
"""

import contextlib
import ctypes
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
