"""Applying patches inside a workspace, by SWE-bench 5.0.2's fallback chain (see `grading`).

`git apply --verbose` → `git apply --verbose --3way` → `git apply --verbose --reject` →
`patch --batch --forward --fuzz=5 -p1 -i`, the tree reset between attempts
(`git checkout -- .`, `git clean -fd`); if all fail, a tree that already holds the patch
(`git apply --check --reverse`) counts as applied. Every command's output is kept for the
evaluation log, never for the text that is graded: a patch names its own files, and git
prints those names.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from mcp_evalserver.sandbox.base import Workspace
from mcp_evalserver.scoring.swebench.grading import (
    APPLY_PATCH_FAIL,
    PATCH_RESET_COMMANDS,
    patch_already_applied_check,
    patch_apply_attempts,
)

#: Where evaluation files go inside a workspace: private to it on every backend.
EVAL_DIR = "/tmp/mcp-evalserver-eval"
_COMMAND_TIMEOUT_S = 120.0
_DIFF_TARGET = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


@dataclass(frozen=True)
class PatchApplied:
    """Whether a patch went in, by which command, and what the attempts printed."""

    applied: bool
    command: str | None
    log: str


async def apply_patch(workspace: Workspace, patch: str, name: str = "patch.diff") -> PatchApplied:
    """Applies `patch` in the workspace's workdir by the fallback chain.

    Raises:
        SandboxUnavailable: the instance is gone.
    """
    path = f"{EVAL_DIR}/{name}"
    # git and patch want a final newline; patches pasted into JSON often lose it.
    await workspace.write_file(path, patch if patch.endswith("\n") else patch + "\n")
    log: list[str] = []
    for number, attempt in enumerate(patch_apply_attempts(path)):
        if number:
            for reset in PATCH_RESET_COMMANDS:
                await workspace.exec(list(reset), timeout=_COMMAND_TIMEOUT_S)
        result = await workspace.exec(attempt, timeout=_COMMAND_TIMEOUT_S)
        command = shlex.join(attempt)
        log.append(f"$ {command}\n{result.stdout}{result.stderr}exit {result.exit_code}\n")
        if result.ok:
            return PatchApplied(True, command, "".join(log))
    check = await workspace.exec(patch_already_applied_check(path), timeout=_COMMAND_TIMEOUT_S)
    if check.ok:
        return PatchApplied(True, "already applied", "".join(log))
    log.append(f"{APPLY_PATCH_FAIL}\n")
    return PatchApplied(False, None, "".join(log))


def patched_files(patch: str) -> list[str]:
    """The paths a git-style patch touches (both sides of a rename), in order, unique."""
    seen: dict[str, None] = {}
    for match in _DIFF_TARGET.finditer(patch):
        seen.setdefault(match.group(1))
        seen.setdefault(match.group(2))
    return list(seen)


async def restore_files(workspace: Workspace, paths: list[str]) -> None:
    """Puts `paths` back as the base commit has them (removed if it has not), like SWE-bench's
    eval script does before it applies the test patch, so a submission cannot pre-empt it.

    Raises:
        SandboxUnavailable: the instance is gone.
    """
    if not paths:
        return
    quoted = " ".join(shlex.quote(p) for p in paths)
    script = (
        f"for f in {quoted}; do "
        'git cat-file -e "HEAD:$f" 2>/dev/null && git checkout -q HEAD -- "$f" || rm -rf -- "$f"; '
        "done"
    )
    await workspace.exec(script, timeout=_COMMAND_TIMEOUT_S)
