"""Strict mode's report channel against processes that try to write the results for pytest.

Each submission here fixes nothing: the real tests fail and pytest exits 1. What it adds is a
process outside pytest that forges the JUnit report: it replaces every finished `*.xml` under
/tmp with a report in which the graded tests pass (plus one failure of a test nobody grades,
so that "the tests failed" still agrees with pytest's exit status), and writes the same
forgery, wrapped so that it stays well-formed XML around whatever else arrives, to every pipe
or socket it holds or can open of pytest's. None may resolve in strict mode.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mcp_evalserver.sandbox.base import REPORT_FD
from mcp_evalserver.scoring.base import ScoreResult
from mcp_evalserver.scoring.swebench.strict import grade_report, plugin_env, plugin_source
from mcp_evalserver.scoring.testsuite import TestsScorer
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.submission import Submission
from tests.scoring.sandboxed import PYTHON_PYTEST, diff_of, git_repo, scoring_in_workspaces
from tests.scoring.test_tests_scorer import BUGGY, _task

pytestmark = [pytest.mark.anyio, pytest.mark.root]

GRADED = ("test_add", "test_mul", "test_zero")
FORGERY = (
    '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" '
    'failures="1" skipped="0" tests="4">'
    + "".join(f'<testcase classname="test_calc" name="{n}" file="test_calc.py"/>' for n in GRADED)
    + '<testcase classname="test_other" name="test_unrelated" file="test_other.py">'
    '<failure message="boom">boom</failure></testcase></testsuite></testsuites>'
)

#: The forger: `forge(target, forgery)` runs until `target` (a pid) is gone, or forever.
FORGER = r'''
import glob
import os
import stat
import time


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _channels(pid):
    """Write ends of the pipes and sockets of `pid` this process can open."""
    found = []
    try:
        names = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return found
    for name in names:
        path = "/proc/%d/fd/%s" % (pid, name)
        try:
            mode = os.stat(path).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                found.append(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    return found


def _write_all(fds, data):
    for fd in fds:
        try:
            os.write(fd, data.encode())
        except OSError:
            pass


def forge(target, forgery):
    # Inherited descriptors (a fork of pytest holds all of pytest's), then whatever can be
    # opened of every other process's: a forged document first, opening a comment that the
    # end closes, so that the genuine report in between is swallowed by a naive reader.
    held = [int(n) for n in os.listdir("/proc/self/fd") if int(n) > 2]
    visited = {os.getpid()}
    _write_all(held, forgery + "<!--")
    replaced = set()
    while target is None or _alive(target):
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in visited:
                visited.add(int(entry))
                opened = _channels(int(entry))
                _write_all(opened, forgery + "<!--")
                held += opened
        for path in glob.glob("/tmp/**/*.xml", recursive=True):
            if path in replaced:
                continue
            try:
                with open(path) as f:
                    done = "</testsuites>" in f.read()
            except OSError:
                continue
            if done:
                with open(path + ".forged", "w") as f:
                    f.write(forgery)
                os.replace(path + ".forged", path)
                replaced.add(path)
        time.sleep(0.002)
    _write_all(held, "-->")
'''


def _patched_module(launcher: str) -> str:
    """calc.py, still buggy, with code that runs when the tests import it."""
    return f"{BUGGY}\n\n{launcher}"


#: Import-time code that double-forks a daemon (a copy of pytest: it holds pytest's
#: descriptors) which outlives pytest in a session of its own.
FORKED_DAEMON = _patched_module(
    "import os as _os\n\n"
    "_pytest = _os.getpid()\n"
    "_child = _os.fork()\n"
    "if _child == 0:\n"
    "    _os.setsid()\n"
    "    if _os.fork():\n"
    "        _os._exit(0)\n"
    f"    exec({FORGER!r})\n"
    f"    forge(_pytest, {FORGERY!r})\n"
    "    _os._exit(0)\n"
    "_os.waitpid(_child, 0)\n"
)
#: Import-time code that starts a fresh program (nothing inherited), detached, that reaches
#: for pytest's descriptors through /proc.
SPAWNED_DAEMON = _patched_module(
    "import os as _os\nimport subprocess as _subprocess\nimport sys as _sys\n\n"
    "_subprocess.Popen(\n"
    f"    [_sys.executable, '-c', {FORGER!r} + 'forge(%d, %r)' % (_os.getpid(), {FORGERY!r})],\n"
    "    start_new_session=True,\n"
    "    stdin=_subprocess.DEVNULL,\n"
    "    stdout=_subprocess.DEVNULL,\n"
    "    stderr=_subprocess.DEVNULL,\n"
    ")\n"
)


async def _strict(task: Task, patch: str, tmp_path: Path) -> ScoreResult:
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        return await scoring.score(TestsScorer(strict=True), task, Submission(patch=patch))


def _graded_as_failing(result: ScoreResult) -> None:
    assert not result.resolved, result.explanation
    assert (result.status, result.details["mode"]) == ("failed", "strict"), result.explanation
    assert result.details["tests_status"]["FAIL_TO_PASS"]["failure"] == [
        "test_calc.py::test_add",
        "test_calc.py::test_mul",
    ]


async def test_a_daemon_forked_by_the_patched_module_cannot_forge_the_strict_report(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path)
    patch = diff_of(Path(task.path or ""), {"calc.py": FORKED_DAEMON})
    result = await _strict(task, patch, tmp_path)
    assert not result.resolved, result.explanation
    # The fork holds pytest's own descriptor of the channel, so its bytes arrive; the kernel
    # says they came from a second process, and nothing is graded.
    assert (result.status, result.details["mode"]) == ("tests_errored", "strict")
    assert "2 processes wrote to the report channel" in result.explanation


async def test_a_detached_program_the_tests_start_cannot_forge_the_strict_report(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path)
    patch = diff_of(Path(task.path or ""), {"calc.py": SPAWNED_DAEMON})
    result = await _strict(task, patch, tmp_path)
    # Nothing reaches the channel (pytest is non-dumpable; a socket cannot be opened through
    # /proc) and the files it replaced are not read: pytest's own report is graded.
    _graded_as_failing(result)


async def test_a_daemon_an_agent_command_left_in_the_workspace_cannot_forge_the_strict_report(
    tmp_path: Path,
) -> None:
    # Stronger than a campaign, which grades in a fresh workspace: here the graded run shares
    # the workspace (and its mount namespace) with the agent's earlier command.
    task = _task(tmp_path)
    daemon = f"{FORGER}\nforge(None, {FORGERY!r})\n"
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        sandbox = scoring.sandbox(task)
        workspace = await sandbox.workspace()
        left = await workspace.exec(
            ["sh", "-c", 'setsid nohup python3 -c "$0" >/dev/null 2>&1 & echo $!', daemon]
        )
        assert left.ok, left
        assert left.stdout.strip().isdigit(), left
        patch = diff_of(Path(task.path or ""), {"calc.py": f"{BUGGY}# tried\n"})
        result = await scoring.score(
            TestsScorer(strict=True), task, Submission(patch=patch), sandbox
        )
    # The daemon outlived the agent's command, as in a container, and died before any grading
    # step ran (the scorer ends a workspace's processes first).
    _graded_as_failing(result)


#: A program that tries to reach the process that started it: PTRACE_ATTACH, then opening
#: one of its descriptors through /proc. Prints the ptrace result and "opened" or "denied".
PROBE = """import ctypes
import os
import sys

pid = int(sys.argv[1])
libc = ctypes.CDLL(None)
attached = libc.ptrace(16, pid, 0, 0)  # PTRACE_ATTACH
print(attached)
if attached == 0:  # let it go again: PTRACE_DETACH once it stopped
    os.waitpid(pid, 0x40000000)
    libc.ptrace(17, pid, 0, 0)
try:  # its stdout, a pipe: reopened through /proc were pytest reachable
    os.close(os.open("/proc/%d/fd/1" % pid, os.O_WRONLY))
    print("opened")
except PermissionError:
    print("denied")
"""
PROBE_TEST = (
    "import os\nimport subprocess\nimport sys\n\n\n"
    "def test_pytest_is_out_of_reach():\n"
    "    run = subprocess.run([sys.executable, 'probe.py', str(os.getpid())],\n"
    "                         stdout=subprocess.PIPE, universal_newlines=True)\n"
    "    assert run.stdout.split() == ['-1', 'denied']\n"
)


async def test_under_strict_mode_no_program_the_tests_start_can_ptrace_pytest_or_open_its_fds(
    tmp_path: Path,
) -> None:
    # The same test, with and without strict mode's plugin: without it, a program the tests
    # start attaches to pytest (same uid) and opens its descriptors.
    repo = git_repo(tmp_path / "repo", {"probe.py": PROBE, "test_probe.py": PROBE_TEST})
    task = Task.model_validate({"id": "probe", "path": str(repo)})
    command = f"{PYTHON_PYTEST} -q -p no:cacheprovider test_probe.py"
    plugin_dir = "/tmp/strict-plugin"
    with anyio.fail_after(120):
        async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
            sandbox = scoring.sandbox(task)
            try:
                workspace = await sandbox.workspace()
                plugin = f"{plugin_dir}/mcp_evalserver_report.py"
                await workspace.write_file(plugin, plugin_source())
                plain = await workspace.exec(command, timeout=60)
                strict = await workspace.exec(
                    command, env=plugin_env(plugin_dir, REPORT_FD), report=True, timeout=60
                )
            finally:
                await sandbox.aclose()
    assert plain.exit_code == 1, plain.stdout
    # (Attaching needs no Yama, or ptrace_scope 0; opening through /proc works either way.)
    assert "'opened']" in plain.stdout, plain.stdout
    assert (strict.exit_code, strict.report_writers) == (0, 1), strict.stdout
    grade = grade_report(
        strict.report,
        writers=strict.report_writers,
        fail_to_pass=["test_probe.py::test_pytest_is_out_of_reach"],
        pass_to_pass=[],
        exit_status=strict.exit_code,
    )
    assert grade.resolved, grade.explanation
