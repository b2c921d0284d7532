"""Git repositories as task instances: a directory whose one commit, `base`, holds some files."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

#: git with an identity of its own, so that committing needs no global configuration.
GIT = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]

#: calc.py of the stock task: `add` subtracts until a patch fixes it.
BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"


def make_git_repo(path: Path, files: Mapping[str, str], *, excluded: Iterable[str] = ()) -> Path:
    """Writes `files` under `path` (made if missing) and commits them as `base` in a new repository.

    `excluded` are .git/info/exclude patterns: files there (such as vendored tools) stay
    uncommitted and out of every diff.
    """
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    subprocess.run(["git", "init", "-q", "."], cwd=path, check=True)
    with open(path / ".git" / "info" / "exclude", "a") as exclude:
        exclude.writelines(f"{pattern}\n" for pattern in excluded)
    subprocess.run([*GIT, "add", "-A"], cwd=path, check=True)
    subprocess.run([*GIT, "commit", "-qm", "base"], cwd=path, check=True)
    return path


def git_repo(path: Path, content: str = BUGGY) -> Path:
    """A new committed repository holding calc.py: the instance of a local-backend task."""
    path.mkdir(parents=True)
    return make_git_repo(path, {"calc.py": content})
