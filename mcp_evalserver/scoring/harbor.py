"""The `harbor` scorer: a Harbor task's own verifier, run after the agent is done.

Two modes, per campaign (`scorer.verify`):

- `in_place` (Harbor's meaning): the verifier runs in the agent's own workspace, with every
  file it changed anywhere (and, once they outlive a call, what it left running). When that
  workspace is gone (a resume, a retried evaluation) it is restored from the agent's files,
  which the runner exported when the agent was done: processes are then gone. What the agent
  could have done to decide the reward instead of the task's code (a planted reward, a
  `bash` or `python3` of its own on the PATH, a conftest.py or *.pth, the dynamic linker's
  configuration: `harbor_files`) is recorded as `details.evidence` on the verdict.
- `fresh` (tamper-proof): a new workspace of the task's image receives the agent's whole
  filesystem change (every path, mode, owner, symlink, deletion, nested repository) less
  those same suspicious files (`details.dropped`); only processes stay behind. Without the
  agent's files (an agent that used no workspace) the diff of the workdir is applied,
  less the files that configure a test runner.

Either way `/tests` and `/logs/verifier` are removed and made anew, the task's tests/ copied
in, and `bash /tests/test.sh` runs from the workdir within `[verifier] timeout_sec`, with the
sandbox's own PATH and `PYTHONSAFEPATH=1`. The reward is what it wrote to
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
from mcp_evalserver.sandbox.base import Workspace
from mcp_evalserver.scoring.base import AgentState, Scorer, ScoreResult, ScoringContext
from mcp_evalserver.scoring.command import reward_verdict, store_log, unresolved_with_log
from mcp_evalserver.scoring.harbor_files import VERIFIER_PATH, Changes, suspicious, without
from mcp_evalserver.scoring.swebench.patching import apply_patch
from mcp_evalserver.scoring.swebench.strict import TEST_INFRASTRUCTURE
from mcp_evalserver.spec.harbor import TESTS_DIR, VERIFIER_LOGS, HarborTask, decoded, harbor_of

#: Files that configure Python or pytest when found beside the code (strict mode's list, `*.pth`
#: among them) and stand-ins for pytest's modules: the agent's versions are left out of the
#: patch, so the verifier sees the image's.
PROTECTED_NAMES = (*TEST_INFRASTRUCTURE, "pytest.py", "py.py")
#: Package directories that stand in for pytest's own when found first on `sys.path`.
PROTECTED_DIRS = frozenset({"_pytest", "pytest", "pluggy"})
#: A verifier's mode as a Harbor task names it ([verifier] environment_mode) and as ours.
_TASK_MODES = {"shared": "in_place", "separate": "fresh"}
#: How long a planted process has to show itself writing into /logs/verifier.
_WATCH_S = 0.3
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

    def __init__(self, threshold: float = 1.0, verify: str = "in_place") -> None:
        self.threshold = threshold
        self.verify = verify

    def check_tasks(self, tasks: Any) -> None:
        plain = [task.id for task in tasks if harbor_of(task.metadata) is None]
        if plain:
            raise InvalidInput(
                f"the harbor scorer grades Harbor task directories; these tasks are not: "
                f"{', '.join(plain[:10])}"
            )
        for task in tasks:
            wanted = harbor_of(task.metadata).verifier_environment_mode  # type: ignore[union-attr]
            if wanted is not None and _TASK_MODES[wanted] != self.verify:
                raise InvalidInput(
                    f"task {task.id} says [verifier] environment_mode = {wanted!r}, which is "
                    f"`verify: {_TASK_MODES[wanted]!r}` here; this campaign's scorer has "
                    f"`verify: {self.verify!r}`: set the scorer's `verify` to "
                    f"{_TASK_MODES[wanted]!r} or run the task in another campaign"
                )

    def agent_state(self, task: Any) -> AgentState:
        return "workspace" if self.verify == "in_place" else "files"

    async def score(self, context: ScoringContext) -> ScoreResult:
        harbor = harbor_of(context.task.metadata)
        if harbor is None:
            return ScoreResult.unresolved(
                "not_harbor", "the task is not a Harbor task directory", outcome="error"
            )
        log: list[str] = []
        details: dict[str, Any] = {"mode": self.verify}
        evidence: dict[str, Any] = {}
        if self.verify == "in_place":
            workspace = await self._agent_box(context, details, evidence)
        else:
            workspace = await self._fresh_box(context, details)
        if workspace is None:
            patch, dropped = without_protected(context.submission.patch or "")
            if dropped:
                details["dropped"] = dropped
            workspace = await context.sandbox.workspace()
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
        if self.verify == "in_place":
            # Made empty just now: anything there a moment later, a process of the agent's wrote.
            early = await workspace.exec(f"sleep {_WATCH_S}; ls -A {VERIFIER_LOGS}", timeout=60)
            if early.stdout.split():
                evidence["written_before_the_verifier_ran"] = early.stdout.split()[:20]
        for name, data in decoded(harbor.tests).items():
            mode = 0o755 if f"tests/{name}" in harbor.executable else 0o644
            await workspace.write_file(f"{TESTS_DIR}/{name}", data, mode=mode)
        env = {**harbor.verifier_env, "PATH": VERIFIER_PATH, "PYTHONSAFEPATH": "1"}
        command = f"bash {shlex.quote(TESTS_DIR + '/test.sh')}"
        result = await workspace.exec(command, timeout=harbor.verifier_timeout_s, env=env)
        log.append(f"$ {command}\n{result.stdout}{result.stderr}exit {result.exit_code}\n")
        details.update(exit_code=result.exit_code, duration_s=round(result.duration_s, 6))
        if evidence:
            details["evidence"] = evidence
        if result.timed_out:
            return await unresolved_with_log(
                context,
                log,
                details,
                "timeout",
                f"the verifier ran past [verifier] timeout_sec = {harbor.verifier_timeout_s:g}s",
            )
        try:
            rewards = await _read_rewards(workspace, harbor)
        except (InvalidInput, NotFound) as exc:
            return await unresolved_with_log(
                context, log, details, "no_reward", str(exc), outcome="error"
            )
        if self.verify == "in_place":
            await workspace.exec(f"sleep {_WATCH_S}", timeout=60)
            try:
                later = await _read_rewards(workspace, harbor)
            except (InvalidInput, NotFound) as exc:
                later = {"unreadable": str(exc)}  # type: ignore[dict-item]
            if later != rewards:
                evidence["reward_changed_after_the_verifier_exited"] = [str(later)[:200]]
                details["evidence"] = evidence
        reward = rewards.get("reward", sum(rewards.values()) / len(rewards))
        details.update(reward=reward, rewards=rewards, log=await store_log(context, log))
        return reward_verdict(reward, self.threshold, details)

    async def _suspicious(self, context: ScoringContext, files: bytes) -> Changes:
        """The agent's changes that could decide the reward, compared with a fresh workspace
        of the image (a sandbox of its own, closed here)."""
        probe = context.sandbox.part(99)
        try:
            image = await probe.workspace()
            return await suspicious(files, image, PROTECTED_NAMES, PROTECTED_DIRS)
        finally:
            await probe.aclose()

    async def _agent_box(
        self, context: ScoringContext, details: dict[str, Any], evidence: dict[str, Any]
    ) -> Workspace | None:
        """in_place: the agent's own workspace, else one restored from its files, else None
        (a fresh one with its workdir diff); what it changed that could decide the reward
        goes into `evidence`."""
        files = context.agent_files
        if files is not None:
            changes = await self._suspicious(context, files)
            evidence.update(changes.evidence())
            if changes.unchecked:
                evidence["paths_not_compared_with_the_image"] = [str(changes.unchecked)]
        else:  # nothing to compare with the image: say so rather than find nothing
            details["evidence_not_checked"] = _no_files(context)
        if context.in_agent_workspace:
            details["workspace"] = "the agent's own"
            return await context.sandbox.workspace()
        if files is not None:
            details["workspace"] = (
                "restored from the agent's files (its workspace was gone: a resume or a "
                "retried evaluation); processes it left did not survive"
            )
            await context.sandbox.start_at(files)
            return await context.sandbox.workspace()
        details["workspace"] = _no_files(context)
        return None

    async def _fresh_box(
        self, context: ScoringContext, details: dict[str, Any]
    ) -> Workspace | None:
        """fresh: a new workspace holding the agent's files less the suspicious ones, or None
        (a fresh one with its workdir diff) when there are no files."""
        files = context.agent_files
        if files is None:
            details["workspace"] = _no_files(context)
            return None
        dropped = (await self._suspicious(context, files)).all()
        if dropped:
            details["dropped"] = sorted(dropped)[:200]
        details["workspace"] = "fresh, with the agent's whole filesystem change"
        await context.sandbox.start_at(without(files, dropped))
        return await context.sandbox.workspace()


def _no_files(context: ScoringContext) -> str:
    why = context.agent_files_missing or "the agent used no workspace"
    return f"fresh, with the agent's workdir diff only ({why})"


async def _read_rewards(workspace: Workspace, harbor: HarborTask) -> dict[str, float]:
    """The verifier's rewards: reward.txt as `{"reward": x}`, else reward.json.

    Raises:
        NotFound: the verifier wrote neither file.
        InvalidInput: a file that is not a number (or a flat object of numbers) in [0, 1];
            the message names the file and the field.
    """
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
