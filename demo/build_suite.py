"""Builds the demo task suite from real code: pinned PyPI sdists with bugs injected.

For each project in `demo/projects.json`, the sdist is downloaded (pip, sha256 checked) and
unpacked once as a pristine tree whose test suite is run to learn which tests pass. For each bug
in `demo/bugs/<project>/` the pristine tree is copied, the bug patch applied and the result
committed as the base of a fresh git repository: that directory is the task's instance, so every
trajectory starts from the buggy code. The tests are run again there; FAIL_TO_PASS are the tests
that pass clean and fail buggy, PASS_TO_PASS those that pass in both, and the gold patch is the
bug patch reversed. Tasks go to `<build>/tasks.jsonl`.

Every step is cached under the build directory, keyed by what it depends on, so a second run only
checks keys; editing one bug patch rebuilds that one task. No third-party source is committed:
the repository holds only the bug patches and their one-line problem statements.

Usage: python -m demo.build_suite [--build DIR] [--cache DIR] [--project NAME] [--bug ID ...]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_evalserver.scoring.swebench.grading import eval_test_section, extract_test_output
from mcp_evalserver.scoring.swebench.logparsers import TestStatus, parse_pytest

DEMO_DIR = Path(__file__).resolve().parent
DEFAULT_BUILD_DIR = DEMO_DIR / "build"
#: Downloads and the test environment, shared by every build directory.
DEFAULT_CACHE = Path.home() / ".cache" / "mcp-evalserver"
#: The test runner every instance uses; pinned so that test ids and outcomes are reproducible.
PYTEST_REQUIREMENT = "pytest==9.2.0"
#: A bug that makes a test loop forever must not hang the build.
TEST_TIMEOUT_S = 600
#: Fixed identity and dates make base commits identical from one build to the next.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "demo",
    "GIT_AUTHOR_EMAIL": "demo@mcp-evalserver.invalid",
    "GIT_COMMITTER_NAME": "demo",
    "GIT_COMMITTER_EMAIL": "demo@mcp-evalserver.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}
#: The message of every instance's base commit (`git log` in its workspace).
BASE_MESSAGE = "base"
#: What running the tests leaves behind; kept out of every diff an agent or scorer takes.
_EXCLUDES = ".venv/\n__pycache__/\n*.pyc\n.pytest_cache/\n"
_COMPLETE = ".complete"

#: Where an instance's interpreter may live. Local workspaces hide /root, /home and /run (the
#: sandbox masks them), so a pyenv or home-directory Python would vanish inside them.
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
# What a workspace's view shows of the host besides the instance (docs/design/isolation.md):
# the interpreter must live there.
_VISIBLE_IN_WORKSPACES = ("/usr/", "/bin/", "/sbin/", "/lib")

Log = Callable[[str], None]


class BuildError(Exception):
    """The suite cannot be built as described (download, checksum, patch or test failure)."""


@dataclass(frozen=True)
class Project:
    """One pinned PyPI project whose sdist ships its tests."""

    name: str
    version: str
    sha256: str
    repo: str
    test_command: str
    import_paths: tuple[str, ...]

    @property
    def dirname(self) -> str:
        return f"{self.name}-{self.version}"


@dataclass(frozen=True)
class Bug:
    """An injected bug: a patch against the pristine sdist and what a user would report."""

    project: str
    id: str
    statement: str
    patch: str

    @property
    def task_id(self) -> str:
        return f"{self.project}__{self.id}"

    @property
    def instance_name(self) -> str:
        """The instance's directory: the workdir an agent sees (`pwd`), so it names the project
        and nothing of the bug."""
        return f"{self.project}-{hashlib.sha256(self.task_id.encode()).hexdigest()[:12]}"


def load_projects(demo_dir: Path = DEMO_DIR) -> list[Project]:
    """The pinned projects of `projects.json`."""
    rows = json.loads((demo_dir / "projects.json").read_text(encoding="utf-8"))
    return [
        Project(
            name=row["name"],
            version=row["version"],
            sha256=row["sha256"],
            repo=row["repo"],
            test_command=row["test_command"],
            import_paths=tuple(row.get("import_paths", ["."])),
        )
        for row in rows["projects"]
    ]


def load_bugs(project: Project, demo_dir: Path = DEMO_DIR) -> list[Bug]:
    """The bugs of one project, in the order `bugs.json` lists them.

    Raises:
        BuildError: a listed bug has no patch file.
    """
    folder = demo_dir / "bugs" / project.name
    statements: dict[str, str] = json.loads((folder / "bugs.json").read_text(encoding="utf-8"))
    bugs = []
    for bug_id, statement in statements.items():
        patch_file = folder / f"{bug_id}.patch"
        if not patch_file.is_file():
            raise BuildError(f"{project.name}: bug {bug_id} is listed but {patch_file} is missing")
        bugs.append(Bug(project.name, bug_id, statement, patch_file.read_text(encoding="utf-8")))
    return bugs


def _run(
    command: Sequence[str], cwd: Path, *, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """Runs a build step; a non-zero exit is a BuildError that shows the step's output."""
    result = subprocess.run(
        list(command),
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if result.returncode != 0:
        raise BuildError(
            f"`{shlex.join(command)}` in {cwd} exited {result.returncode}:\n"
            f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    return result


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _find_by_sha256(folder: Path, sha256: str) -> Path | None:
    # The pinned hash names the file: whatever pip called it, only those bytes are used.
    return next((f for f in sorted(folder.glob("*.tar.gz")) if _sha256(f) == sha256), None)


def fetch_sdist(project: Project, cache: Path) -> Path:
    """The project's sdist from the cache, downloaded with pip the first time.

    Raises:
        BuildError: pip failed, or the file's sha256 is not the pinned one.
    """
    cache.mkdir(parents=True, exist_ok=True)
    sdist = _find_by_sha256(cache, project.sha256)
    if sdist is not None:
        return sdist
    requirement = f"{project.name}=={project.version}"
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:"]
    _run([*pip, "--no-deps", requirement, "-d", str(cache)], cwd=cache)
    sdist = _find_by_sha256(cache, project.sha256)
    if sdist is not None:
        return sdist
    raise BuildError(
        f"pip downloaded {requirement} but no file in {cache} has the pinned sha256 "
        f"{project.sha256}: the index serves a different file, refusing to use it"
    )


def _unpack(sdist: Path, dest: Path) -> None:
    """Extracts the sdist's single top-level folder as `dest` (tar's `data` filter: no escapes)."""
    scratch = dest.with_name(dest.name + ".unpacking")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(scratch, filter="data")
    (top,) = list(scratch.iterdir())
    top.rename(dest)
    scratch.rmdir()


def ensure_testenv(cache: Path, log: Log) -> Path:
    """A folder holding only the pinned pytest, linked into every instance's venv.

    It lives in the cache, shared by every build (tests build suites of their own), and is
    installed once with `pip install --target` into a scratch folder renamed into place, so
    two builds at once never see half an install.
    """
    testenv = cache / f"testenv-{PYTEST_REQUIREMENT.replace('==', '-')}"
    if (testenv / _COMPLETE).is_file():
        return testenv
    log(f"installing {PYTEST_REQUIREMENT} into {testenv}")
    cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".testenv-", dir=cache))
    try:
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        _run([*pip, "--target", str(scratch), PYTEST_REQUIREMENT], cwd=cache)
        (scratch / _COMPLETE).write_text(PYTEST_REQUIREMENT)
        with contextlib.suppress(OSError):  # another build got there first: same contents
            scratch.rename(testenv)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return testenv


def instance_python() -> str:
    """The system's python3, which workspaces can see (`MCP_EVALSERVER_DEMO_PYTHON` overrides).

    Raises:
        BuildError: there is none in the directories workspaces see.
    """
    python = os.environ.get("MCP_EVALSERVER_DEMO_PYTHON") or shutil.which(
        "python3", path=SYSTEM_PATH
    )
    if python is None or not os.path.realpath(python).startswith(_VISIBLE_IN_WORKSPACES):
        raise BuildError(
            f"no python3 on {SYSTEM_PATH} under /usr, /bin or /sbin (found {python}); "
            "install one: apt-get install python3 python3-venv"
        )
    return python


def _site_packages(venv: Path) -> Path:
    (path,) = (venv / "lib").glob("python3*/site-packages")
    return path


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem
        shutil.copy2(source, target)


def _make_instance_venv(tree: Path, project: Project, testenv: Path) -> None:
    """`.venv` inside the tree, so agents and scorers run `.venv/bin/python -m pytest` there.

    Everything the tests need lives inside the tree: workspaces see an instance at its own
    path even where the rest of the host is hidden (/tmp, /root). A venv without pip takes a
    fraction of a second; pytest is hard-linked in from the shared test environment, and a
    .pth file puts the project's own code on the path (like an editable install).
    """
    venv = tree / ".venv"
    _run([instance_python(), "-m", "venv", "--without-pip", str(venv)], cwd=tree)
    site = _site_packages(venv)
    shutil.copytree(
        testenv,
        site,
        dirs_exist_ok=True,
        copy_function=_link_or_copy,
        ignore=shutil.ignore_patterns("bin", "__pycache__", _COMPLETE),
    )
    lines = [str(tree / p) for p in project.import_paths]
    (site / "_demo_paths.pth").write_text("\n".join(lines) + "\n")


def eval_script(tree: Path, project: Project) -> str:
    """The shell script that runs the project's tests in `tree` between SWE-bench's markers."""
    return "\n".join(
        [
            f"cd {shlex.quote(str(tree))}",
            # Bytecode written by the tests must not show up in anyone's diff.
            "export PYTHONDONTWRITEBYTECODE=1",
            f'export PATH={shlex.quote(str(tree / ".venv" / "bin"))}:"$PATH"',
            eval_test_section(project.test_command),
        ]
    )


def run_tests(tree: Path, project: Project) -> dict[str, TestStatus]:
    """Runs the eval script in `tree` and parses its pytest log as the scorer will.

    Raises:
        BuildError: the log has no test section or no results.
    """
    try:
        result = subprocess.run(
            ["bash", "-c", eval_script(tree, project)],
            cwd=tree,
            capture_output=True,
            text=True,
            timeout=TEST_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"the tests of {tree} ran past {TEST_TIMEOUT_S} s") from exc
    section = extract_test_output(result.stdout)
    statuses = parse_pytest(section or "")
    if not statuses:
        raise BuildError(
            f"the tests of {tree} produced no results:\n"
            f"{result.stdout[-3000:]}{result.stderr[-2000:]}"
        )
    # The parser cuts an id at its first space (as SWE-bench's does), so two parametrizations
    # can share one cut id; only ids that stand for exactly one test may go into the lists.
    seen = Counter(test for line in (section or "").splitlines() for test in parse_pytest(line))
    return {test: status for test, status in statuses.items() if seen[test] == 1}


def _git(tree: Path, *args: str, stdin: str = "") -> str:
    # A user's global config must not change the commits (signing would also need a key).
    return _run(
        ["git", "-c", "commit.gpgsign=false", *args], cwd=tree, env=_GIT_ENV, stdin=stdin
    ).stdout


def _passing(statuses: dict[str, TestStatus]) -> set[str]:
    return {test for test, status in statuses.items() if status is TestStatus.PASSED}


def _key(*parts: Any) -> str:
    # The builder's own source is part of every key: changing how tasks are made remakes them.
    builder = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps([builder, *parts], default=str).encode()).hexdigest()


def ensure_pristine(
    project: Project, build: Path, cache: Path, testenv: Path, log: Log
) -> tuple[Path, set[str]]:
    """The unpacked sdist and the tests that pass in it (both cached)."""
    tree = build / "sources" / project.dirname
    record = build / "sources" / f"{project.dirname}.json"
    key = _key(project, PYTEST_REQUIREMENT, instance_python())
    if tree.is_dir() and record.is_file():
        cached = json.loads(record.read_text())
        if cached["key"] == key:
            return tree, set(cached["passing"])
    log(f"{project.dirname}: fetching the sdist and running its tests")
    # The record goes first: a build interrupted half-way must never look cached.
    record.unlink(missing_ok=True)
    shutil.rmtree(tree, ignore_errors=True)
    _unpack(fetch_sdist(project, cache / "sdists"), tree)
    _make_instance_venv(tree, project, testenv)
    passing = _passing(run_tests(tree, project))
    if not passing:
        raise BuildError(f"{project.dirname}: no test passes on the pristine sources")
    record.write_text(json.dumps({"key": key, "passing": sorted(passing)}))
    return tree, passing


def _how_to_test(project: Project) -> str:
    # Agents see only the prompt: tell them where the interpreter with pytest is.
    return f"The tests run from the repository's root with `.venv/bin/{project.test_command}`."


def build_task(
    project: Project, bug: Bug, pristine: Path, clean_passing: set[str], build: Path, testenv: Path
) -> dict[str, Any]:
    """Makes the bug's instance (the buggy tree, committed) and returns its task row.

    Raises:
        BuildError: the patch does not apply, or no test that passes clean fails with the bug.
    """
    tree = build / "instances" / bug.instance_name
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(pristine, tree, ignore=shutil.ignore_patterns(".venv", "__pycache__"))
    _git(tree, "init", "-q", "-b", "main", ".")
    (tree / ".git" / "info" / "exclude").write_text(_EXCLUDES)
    _git(tree, "apply", "--whitespace=nowarn", "-", stdin=bug.patch)
    _git(tree, "add", "-A")
    # What `git log` shows the agent: nothing of the bug (nor of its task).
    _git(tree, "commit", "-q", "-m", BASE_MESSAGE)
    base_commit = _git(tree, "rev-parse", "HEAD").strip()
    # The gold patch is the bug reversed, as git writes it (what `git apply` expects back).
    _git(tree, "apply", "-R", "-", stdin=bug.patch)
    gold = _git(tree, "diff", "HEAD")
    _git(tree, "checkout", "-q", "--", ".")
    _make_instance_venv(tree, project, testenv)
    buggy_passing = _passing(run_tests(tree, project))
    fail_to_pass = sorted(clean_passing - buggy_passing)
    pass_to_pass = sorted(clean_passing & buggy_passing)
    if not fail_to_pass:
        raise BuildError(f"{bug.task_id}: rejected, no test that passes clean fails with the bug")
    return {
        "id": bug.task_id,
        "prompt": f"{bug.statement}\n\n{_how_to_test(project)}",
        "path": str(tree),
        "repo": project.repo,
        "version": project.version,
        "base_commit": base_commit,
        "patch": gold,
        "test_patch": "",
        "FAIL_TO_PASS": fail_to_pass,
        "PASS_TO_PASS": pass_to_pass,
        "eval_script": eval_script(tree, project),
        "metadata": {
            "project": project.name,
            "bug": bug.id,
            "test_command": project.test_command,
            "log_parser": "pytest",
        },
    }


def ensure_task(
    project: Project, bug: Bug, pristine: Path, clean_passing: set[str], build: Path, testenv: Path
) -> tuple[dict[str, Any], bool]:
    """The task row, rebuilt only when the bug, project or builder changed (True if rebuilt)."""
    record = build / "instances" / f"{bug.instance_name}.json"
    key = _key(
        project, bug, sorted(clean_passing), PYTEST_REQUIREMENT, instance_python(), str(build)
    )
    if record.is_file() and (build / "instances" / bug.instance_name).is_dir():
        cached = json.loads(record.read_text())
        if cached["key"] == key:
            return cached["task"], False
    record.unlink(missing_ok=True)
    task = build_task(project, bug, pristine, clean_passing, build, testenv)
    record.write_text(json.dumps({"key": key, "task": task}))
    return task, True


def _remove_stale(instances: Path, keep: set[str]) -> None:
    """Drops the instances of bugs that are no longer listed (a full build only)."""
    for entry in instances.iterdir():
        if entry.name.removesuffix(".json") not in keep:
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def build_suite(
    build: Path = DEFAULT_BUILD_DIR,
    *,
    demo_dir: Path = DEMO_DIR,
    cache: Path = DEFAULT_CACHE,
    projects: Sequence[str] = (),
    bugs: Sequence[str] = (),
    log: Log = print,
) -> Path:
    """Builds (or reuses) the instances and writes `<build>/tasks.jsonl`; returns its path.

    `projects` and `bugs` select a subset (empty: all). Bugs that fail to build are reported
    and left out; the build fails only when no task is left.

    Raises:
        BuildError: a project cannot be fetched or tested, or no task could be built.
    """
    build = build.resolve()
    (build / "instances").mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    testenv = ensure_testenv(cache, log)
    jobs: list[tuple[Project, Bug, Path, set[str]]] = []
    for project in load_projects(demo_dir):
        if projects and project.name not in projects:
            continue
        pristine, clean_passing = ensure_pristine(project, build, cache, testenv, log)
        jobs += [
            (project, bug, pristine, clean_passing)
            for bug in load_bugs(project, demo_dir)
            if not bugs or bug.id in bugs
        ]
    if not projects and not bugs:
        _remove_stale(build / "instances", {bug.instance_name for _, bug, _, _ in jobs})

    def attempt(job: tuple[Project, Bug, Path, set[str]]) -> dict[str, Any] | None:
        project, bug, pristine, clean_passing = job
        try:
            task, rebuilt = ensure_task(project, bug, pristine, clean_passing, build, testenv)
        except BuildError as exc:
            shutil.rmtree(build / "instances" / bug.instance_name, ignore_errors=True)
            log(f"REJECTED {exc}")
            return None
        if rebuilt:
            log(
                f"{task['id']}: {len(task['FAIL_TO_PASS'])} FAIL_TO_PASS, "
                f"{len(task['PASS_TO_PASS'])} PASS_TO_PASS"
            )
        return task

    # Each task's tests run in a process of their own; while one task waits on git or on
    # creating its venv, another can use the CPU.
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        tasks = [task for task in pool.map(attempt, jobs) if task is not None]
    if not tasks:
        raise BuildError("no task was built; see the REJECTED lines above")
    out = build / "tasks.jsonl"
    scratch = out.with_suffix(".jsonl.tmp")
    scratch.write_text("".join(json.dumps(task) + "\n" for task in tasks))
    scratch.replace(out)
    log(f"{len(tasks)} tasks in {out} ({time.monotonic() - started:.1f} s)")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--build", type=Path, default=DEFAULT_BUILD_DIR)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--project", action="append", default=[])
    parser.add_argument("--bug", action="append", default=[])
    args = parser.parse_args(argv)
    try:
        build_suite(args.build, cache=args.cache, projects=args.project, bugs=args.bug)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
