"""Strict mode's parts: the JUnit report as results, and what counts as test infrastructure.

The scorer in strict mode, against real submissions in real workspaces, is in
test_tests_scorer_adversarial.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_evalserver.scoring.swebench.grading import EvalStatus
from mcp_evalserver.scoring.swebench.logparsers import TestStatus
from mcp_evalserver.scoring.swebench.strict import (
    git_dir_paths_in,
    grade_report,
    infrastructure_in_patch,
    parse_junit,
    plugin_env,
    plugin_source,
)

PLUGIN_HELLO = b"mcp-evalserver-report 1\n"


def channel_of_a_real_run(tmp_path: Path, tests: str) -> tuple[bytes, int]:
    """What strict mode's plugin sends on its channel (here a socket pair on the host) for a
    real pytest run of a test module, and the run's exit status."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "test_m.py").write_text(tests)
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "mcp_evalserver_report.py").write_text(plugin_source())
    ours, theirs = socket.socketpair()
    with ours:
        with theirs:
            child = subprocess.Popen(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "pkg/test_m.py"],
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                env={
                    "PATH": "/usr/bin:/bin",
                    **plugin_env(str(tmp_path / "plugin"), theirs.fileno()),
                },
                pass_fds=(theirs.fileno(),),
            )
        channel = b"".join(iter(lambda: ours.recv(1 << 16), b""))
    return channel, child.wait()


def junit_of_a_real_run(tmp_path: Path, tests: str) -> tuple[bytes, int]:
    """pytest's own xunit1 report, as the plugin sent it, and the run's exit status."""
    channel, status = channel_of_a_real_run(tmp_path, tests)
    assert channel.startswith(PLUGIN_HELLO), channel[:200]
    return channel.removeprefix(PLUGIN_HELLO), status


def test_a_real_pytest_report_maps_to_node_ids_and_statuses(tmp_path: Path) -> None:
    tests = (
        "import pytest\n\n\n"
        "class TestK:\n    def test_ok(self):\n        pass\n\n\n"
        "@pytest.mark.parametrize('x', ['a b', 'c'])\ndef test_p(x):\n    assert x != 'c'\n\n\n"
        "@pytest.mark.skip\ndef test_s():\n    pass\n\n\n"
        "@pytest.mark.xfail\ndef test_x():\n    assert False\n\n\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError\n\n\n"
        "def test_e(broken):\n    pass\n"
    )
    report, status = junit_of_a_real_run(tmp_path, tests)
    assert status == 1
    assert parse_junit(report) == {
        "pkg/test_m.py::TestK::test_ok": TestStatus.PASSED,
        "pkg/test_m.py::test_p[a b]": TestStatus.PASSED,
        "pkg/test_m.py::test_p[c]": TestStatus.FAILED,
        "pkg/test_m.py::test_s": TestStatus.SKIPPED,
        "pkg/test_m.py::test_x": TestStatus.XFAIL,
        "pkg/test_m.py::test_e": TestStatus.ERROR,
    }


def test_a_failing_subtest_fails_its_passing_parent() -> None:
    # pytest-subtests on pytest 7/8 reports the parent PASSED and the subtest as a second
    # entry of the same test (SUBFAIL in the log, which SWE-bench's parsers skip).
    report = (
        b'<testsuites><testsuite name="pytest" tests="2">'
        b'<testcase classname="test_m" name="test_a" file="test_m.py">'
        b'<failure message="subtest">x</failure></testcase>'
        b'<testcase classname="test_m" name="test_a" file="test_m.py"/>'
        b"</testsuite></testsuites>"
    )
    assert parse_junit(report) == {"test_m.py::test_a": TestStatus.FAILED}
    grade = grade_report(
        PLUGIN_HELLO + report,
        writers=1,
        fail_to_pass=["test_m.py::test_a"],
        pass_to_pass=[],
        exit_status=1,
    )
    assert (grade.status, grade.resolved) == (EvalStatus.GRADED, False)


def test_a_report_that_disagrees_with_the_exit_status_is_not_graded() -> None:
    passing = PLUGIN_HELLO + PASSING
    grade = grade_report(
        passing, writers=1, fail_to_pass=["t.py::test_a"], pass_to_pass=[], exit_status=1
    )
    assert (grade.status, grade.resolved) == (EvalStatus.EXIT_CODE_MISMATCH, False)
    clean = grade_report(
        passing, writers=1, fail_to_pass=["t.py::test_a"], pass_to_pass=[], exit_status=0
    )
    assert clean.resolved


PASSING = b'<testsuite><testcase classname="t" name="test_a" file="t.py"/></testsuite>'


@pytest.mark.parametrize(
    ("channel", "writers", "why"),
    [
        (None, 0, "never loaded strict mode's plugin"),
        (PASSING, 1, "never loaded strict mode's plugin"),
        (PLUGIN_HELLO, 1, "sent no JUnit report"),
        (PLUGIN_HELLO + PASSING, 2, "2 processes wrote to the report channel"),
        (PLUGIN_HELLO + b"<testsuite><testcase", 1, "unreadable"),
        (PLUGIN_HELLO + b"<html/>", 1, "no <testsuite>"),
        (PLUGIN_HELLO + b'<!DOCTYPE x [<!ENTITY a "b">]><testsuite/>', 1, "DOCTYPE"),
    ],
)
def test_a_missing_unreadable_or_shared_report_is_tests_errored(
    channel: bytes | None, writers: int, why: str
) -> None:
    grade = grade_report(
        channel, writers=writers, fail_to_pass=["t.py::test_a"], pass_to_pass=[], exit_status=0
    )
    assert grade.status is EvalStatus.TESTS_ERRORED
    assert why in grade.explanation


def test_the_plugin_announces_itself_first_and_no_program_the_tests_start_inherits_it(
    tmp_path: Path,
) -> None:
    # Looked for the way a forger would: the variable, and every socket a program started
    # by the tests would inherit. (That other processes cannot reach pytest's descriptors
    # through /proc is proven in workspaces, where nothing has CAP_SYS_PTRACE.)
    tests = (
        "import os\nimport stat\n\n\n"
        "def test_channel_is_out_of_reach():\n"
        "    assert 'MCP_EVALSERVER_REPORT_FD' not in os.environ\n"
        "    for name in os.listdir('/proc/self/fd'):\n"
        "        try:\n"
        "            mode = os.fstat(int(name)).st_mode\n"
        "        except OSError:\n"
        "            continue\n"
        "        assert not (stat.S_ISSOCK(mode) and os.get_inheritable(int(name))), name\n"
    )
    channel, status = channel_of_a_real_run(tmp_path, tests)
    assert channel.startswith(PLUGIN_HELLO + b"<?xml")
    assert status == 0, channel.decode(errors="replace")


def test_infrastructure_is_found_in_every_header_a_patch_tool_reads() -> None:
    patch = (
        "diff --git a/pkg/conftest.py b/pkg/conftest.py\n"
        "--- x/pytest.ini\t2026-01-01\n"
        "+++ y/pytest.ini\t2026-01-01\n"
        '+++ "b/con\\146test.py"\n'
        "rename to setup.cfg\n"
        "*** q/deep/tox.ini\n"
        "--- a/.git/info/exclude\n"
        "+++ b/lib/site.pth\n"
        "--- a/calc.py\n"
        "+++ b/evil-1.0.dist-info/entry_points.txt\n"
        "+++ b/src/pkg.egg-info/entry_points.txt\n"
        "Index: a/pytest.py\n"
        "+++ b/_pytest/junitxml.py\n"
        "+++ b/src/_pytest/junitxml.py\n"
    )
    assert infrastructure_in_patch(patch) == [
        "pkg/conftest.py",
        "pytest.ini",
        "conftest.py",
        "setup.cfg",
        "deep/tox.ini",
        "lib/site.pth",
        "evil-1.0.dist-info/entry_points.txt",
        "src/pkg.egg-info/entry_points.txt",
        "pytest.py",
        "_pytest/junitxml.py",
    ], "pytest's own sources below the root (pytest-dev's src/_pytest) are not stand-ins"


def test_paths_inside_dot_git_are_found_however_a_header_spells_them() -> None:
    patch = (
        "diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout\n"
        "--- a/./.git/config\n"
        "+++ b/.git//info/exclude\n"
        "+++ b/src/.git-blame-ignore\n"
        "--- a/calc.py\n"
    )
    assert git_dir_paths_in(patch) == [
        ".git/hooks/post-checkout",
        ".git/config",
        ".git/info/exclude",
    ]
