"""The `harbor` scorer: a Harbor task's own verifier, run where the agent never was.

Grading happens in a fresh workspace of the task's instance, never the agent's: the agent's
processes, and every file it wrote outside the workdir (a reward file planted in
/logs/verifier, a `bash` or `python` put on the PATH), stay in its own workspace, which is gone
by then. What crosses over is the diff of the workdir, less the files that configure a test
runner (conftest.py, pytest.ini, sitecustomize.py, ...: `PROTECTED_NAMES`). Then `/tests` and
`/logs/verifier` are removed and made anew, the task's tests/ copied in, and
`bash /tests/test.sh` runs from the workdir within `[verifier] timeout_sec`, with the sandbox's
own PATH (no directory of the workdir on it) and `PYTHONSAFEPATH=1` (Python puts no script or
working directory first on `sys.path`). The reward is what it wrote to
`/logs/verifier/reward.txt` (a number) or `reward.json` (a flat object of numbers: its
`reward`, else their mean). See docs/design/isolation.md for what this does not exclude.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
import shlex
from pathlib import PurePosixPath
from typing import Any

from mcp_evalserver.errors import InvalidInput, NotFound
from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.scoring.command import reward_verdict, store_log, unresolved_with_log
from mcp_evalserver.scoring.swebench.patching import apply_patch
from mcp_evalserver.scoring.swebench.strict import TEST_INFRASTRUCTURE
from mcp_evalserver.spec.harbor import TESTS_DIR, VERIFIER_LOGS, HarborTask, decoded, harbor_of

#: Files that configure Python or pytest when found beside the code (strict mode's list, `*.pth`
#: among them) and stand-ins for pytest's modules: the agent's versions are left out of the
#: patch, so the verifier sees the image's.
PROTECTED_NAMES = (*TEST_INFRASTRUCTURE, "pytest.py", "py.py")
#: Package directories that stand in for pytest's own when found first on `sys.path`.
PROTECTED_DIRS = frozenset({"_pytest", "pytest", "pluggy"})
VERIFIER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: A file's header in a git diff; git quotes a path with unusual characters ("a/x\ty").
_SECTION = re.compile(r'^diff --git "?a/(.+?)"? "?b/(.+?)"?$', re.MULTILINE)


def without_protected(patch: str) -> tuple[str, list[str]]:
    """The patch less the sections that touch a protected file, and those files' paths."""
    starts = [m.start() for m in _SECTION.finditer(patch)]
    if not starts:
        return patch, []
    kept, dropped = [patch[: starts[0]]], []
    for start, end in zip(starts, [*starts[1:], len(patch)], strict=True):
        section = patch[start:end]
        match = _SECTION.match(section)
        assert match is not None
        paths = {match.group(1), match.group(2)}
        if any(_protected(p) for p in paths):
            dropped.append(match.group(2))
        else:
            kept.append(section)
    return "".join(kept), dropped


def _protected(path: str) -> bool:
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    if any(part in PROTECTED_DIRS for part in parts[:-1]):
        return True
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in PROTECTED_NAMES)


class HarborScorer(Scorer):
    """Runs a Harbor task's tests/test.sh after the agent is done; the reward is the score."""

    def __init__(self, threshold: float = 1.0) -> None:
        self.threshold = threshold

    def check_tasks(self, tasks: Any) -> None:
        plain = [task.id for task in tasks if harbor_of(task.metadata) is None]
        if plain:
            raise InvalidInput(
                f"the harbor scorer grades Harbor task directories; these tasks are not: "
                f"{', '.join(plain[:10])}"
            )

    async def score(self, context: ScoringContext) -> ScoreResult:
        harbor = harbor_of(context.task.metadata)
        if harbor is None:
            return ScoreResult.unresolved(
                "not_harbor", "the task is not a Harbor task directory", outcome="error"
            )
        workspace = await context.sandbox.workspace()
        log: list[str] = []
        details: dict[str, Any] = {}
        patch, dropped = without_protected(context.submission.patch or "")
        if dropped:
            details["dropped"] = dropped
        if patch.strip():
            applied = await apply_patch(workspace, patch)
            log.append(applied.log)
            if not applied.applied:
                return await unresolved_with_log(
                    context, log, details, "patch_apply_failed", "the patch did not apply"
                )
        fresh = f"rm -rf {TESTS_DIR} {VERIFIER_LOGS} && mkdir -p {TESTS_DIR} {VERIFIER_LOGS}"
        made = await workspace.exec(fresh, timeout=60)
        if not made.ok:
            raise RuntimeError(f"could not make {TESTS_DIR} and {VERIFIER_LOGS}: {made.stderr}")
        for name, data in decoded(harbor.tests).items():
            mode = 0o755 if f"tests/{name}" in harbor.executable else 0o644
            await workspace.write_file(f"{TESTS_DIR}/{name}", data, mode=mode)
        env = {**harbor.verifier_env, "PATH": VERIFIER_PATH, "PYTHONSAFEPATH": "1"}
        command = f"bash {shlex.quote(TESTS_DIR + '/test.sh')}"
        result = await workspace.exec(command, timeout=harbor.verifier_timeout_s, env=env)
        log.append(f"$ {command}\n{result.stdout}{result.stderr}exit {result.exit_code}\n")
        details.update(exit_code=result.exit_code, duration_s=round(result.duration_s, 6))
        if result.timed_out:
            return await unresolved_with_log(
                context,
                log,
                details,
                "timeout",
                f"the verifier ran past [verifier] timeout_sec = {harbor.verifier_timeout_s:g}s",
            )
        try:
            rewards = await _read_rewards(context, harbor)
        except (InvalidInput, NotFound) as exc:
            return await unresolved_with_log(
                context, log, details, "no_reward", str(exc), outcome="error"
            )
        reward = rewards.get("reward", sum(rewards.values()) / len(rewards))
        details.update(reward=reward, rewards=rewards, log=await store_log(context, log))
        return reward_verdict(reward, self.threshold, details)


async def _read_rewards(context: ScoringContext, harbor: HarborTask) -> dict[str, float]:
    """The verifier's rewards: reward.txt as `{"reward": x}`, else reward.json.

    Raises:
        NotFound: the verifier wrote neither file.
        InvalidInput: a file that is not a number (or a flat object of numbers) in [0, 1];
            the message names the file and the field.
    """
    workspace = await context.sandbox.workspace()
    text_path, json_path = f"{VERIFIER_LOGS}/reward.txt", f"{VERIFIER_LOGS}/reward.json"
    try:
        text = (await workspace.read_file(text_path, max_bytes=4096)).decode(errors="replace")
    except NotFound:
        pass
    else:
        return {"reward": _number(text_path, "its content", text.strip())}
    try:
        raw = (await workspace.read_file(json_path, max_bytes=65536)).decode(errors="replace")
    except NotFound as exc:
        raise NotFound(
            f"the verifier ({harbor.directory}/tests/test.sh) wrote neither {text_path} "
            f"nor {json_path}"
        ) from exc
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise InvalidInput(f"{json_path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not data:
        raise InvalidInput(f"{json_path} must hold a flat object of numbers, not {raw[:60]!r}")
    return {str(key): _number(json_path, f"field {key!r}", value) for key, value in data.items()}


def _number(path: str, field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidInput(f"{path}: {field} is {json.dumps(value)[:40]}, not a number")
    try:
        number = float(value)
    except ValueError as exc:
        raise InvalidInput(f"{path}: {field} is {str(value)[:40]!r}, not a number") from exc
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise InvalidInput(f"{path}: {field} is {number}, outside [0, 1]")
    return number
