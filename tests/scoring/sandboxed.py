"""Builders for scorer tests that run in real local-backend workspaces (root needed)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.runtime.artifacts import ARTIFACTS_DIR
from mcp_evalserver.runtime.limits import Limiters
from mcp_evalserver.runtime.sandboxes import SandboxPool, TrajectorySandbox
from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.spec.campaign import Limits, Task
from mcp_evalserver.spec.submission import Submission
from testsupport.repos import GIT, make_git_repo

# pytest and the pure-Python packages it imports, copied into each test repository (excluded
# from git): a workspace sees the instance directory but not the test run's venv, which may
# sit under /tmp (private in every workspace) or /root (masked).
PYTEST_DEPS_DIR = ".pytest-deps"
PYTEST_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py.py")
#: Runs pytest inside a workspace of a `git_repo` with the system Python. It adds to
#: PYTHONPATH rather than replacing it: strict mode's plugin is found there.
PYTHON_PYTEST = (
    f"PYTHONPATH={PYTEST_DEPS_DIR}${{PYTHONPATH:+:$PYTHONPATH}} /usr/bin/python3 -m pytest"
)


def _vendored(dist_info: str) -> bool:
    """Whether a `<name>-<version>.dist-info` belongs to a vendored package (pluggy reads it)."""
    return dist_info.split("-")[0].lower() in PYTEST_PACKAGES


def git_repo(path: Path, files: dict[str, str]) -> Path:
    """A directory holding `files`, committed as the base of a git repository.

    pytest is vendored into `PYTEST_DEPS_DIR` (git-excluded), so `PYTHON_PYTEST` works there.
    """
    path.mkdir(parents=True)
    site_packages = Path(pytest.__file__).parents[1]
    metadata = [p.name for p in site_packages.glob("*.dist-info") if _vendored(p.name)]
    for name in (*PYTEST_PACKAGES, *metadata):
        source = site_packages / name
        target = path / PYTEST_DEPS_DIR / name
        if source.is_dir():
            # With its bytecode (ignored by another Python): a workspace's writes die with it,
            # so each pytest run there compiled pytest anew, 0.96 -> 0.42 s a run at load 7.
            shutil.copytree(source, target)
        elif source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return make_git_repo(path, files, excluded=[f"/{PYTEST_DEPS_DIR}/"])


def diff_of(repo: Path, files: dict[str, str], *, reverse: bool = False) -> str:
    """The patch that turns the repo's base into one with `files` written (repo unchanged);
    with `reverse`, the patch that turns such a repo back into the base."""
    originals = {name: (repo / name).read_text() for name in files if (repo / name).exists()}
    try:
        for name, text in files.items():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text(text)
        subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
        return subprocess.run(
            ["git", "diff", "--cached", *(["-R"] if reverse else [])],
            cwd=repo,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        subprocess.run(["git", "reset", "-q"], cwd=repo, check=True)
        for name in files:
            if name in originals:
                (repo / name).write_text(originals[name])
            else:
                (repo / name).unlink()


class Scoring:
    """Scores submissions of tasks in fresh workspaces of a live local backend."""

    def __init__(self, pool: SandboxPool, campaign_dir: Path) -> None:
        self.pool = pool
        self.campaign_dir = campaign_dir
        self.limiters = Limiters(Limits())
        self._steps = 0

    def sandbox(self, task: Task) -> TrajectorySandbox:
        """A fresh step's sandbox of `task` (its workspace is made on first use)."""
        self._steps += 1
        return TrajectorySandbox(self.pool, task, f"eval-{self._steps}", self.limiters.provisioning)

    async def score(
        self,
        scorer: Scorer,
        task: Task,
        submission: Submission,
        sandbox: TrajectorySandbox | None = None,
    ) -> ScoreResult:
        """Scores in `sandbox` (closed after), else in a fresh one."""
        sandbox = sandbox or self.sandbox(task)
        context = ScoringContext(
            campaign_id="c",
            trajectory_id=f"{task.id}@0",
            task=task,
            submission=submission,
            campaign_dir=self.campaign_dir,
            limiters=self.limiters,
            sandbox=sandbox,
        )
        try:
            with anyio.fail_after(120):
                return await scorer.score(context)
        finally:
            await sandbox.aclose()

    def artifact(self, ref: dict[str, str]) -> str:
        assert ref["path"].startswith(f"{ARTIFACTS_DIR}/")
        return (self.campaign_dir / ref["path"]).read_text()


@asynccontextmanager
async def scoring_in_workspaces(campaign_dir: Path) -> AsyncIterator[Scoring]:
    campaign_dir.mkdir(parents=True, exist_ok=True)
    async with SandboxPool() as pool:
        yield Scoring(pool, campaign_dir)
