"""The `command` scorer: a command judges the submission inside a fresh workspace.

The patch is applied first (fallback chain, `patching`); a patch that does not apply is
`failed` (status `patch_apply_failed`). The answer is the command's stdin and the content of
`$MCP_EVALSERVER_ANSWER_FILE`. Resolved when the command exits 0, or, with a reward file, when
the number the command wrote there reaches the threshold (the number is the score). A missing
or malformed reward is the evaluation's error; a command that runs past `timeout_s` (with the
submission's code in it) is the submission's failure (status `timeout`, outcome `failed`), as
for the tests scorer. The command's output is stored as an
artifact, named in `details.log`.
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal

from mcp_evalserver.errors import InvalidInput, LimitExceeded, NotFound
from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.scoring.swebench.patching import EVAL_DIR, apply_patch

ANSWER_FILE_ENV = "MCP_EVALSERVER_ANSWER_FILE"


@dataclass(eq=False)
class CommandScorer(Scorer):
    """Runs a shell command after applying the patch; its exit code or reward file decides."""

    command: str
    _: KW_ONLY
    reward_file: str | None = None
    threshold: float = 1.0
    timeout_s: float = 600.0
    apply_patch: bool = True

    async def score(self, context: ScoringContext) -> ScoreResult:
        workspace = await context.sandbox.workspace()
        log: list[str] = []
        details: dict[str, Any] = {}
        patch = context.submission.patch
        if self.apply_patch and patch and patch.strip():
            applied = await apply_patch(workspace, patch)
            log.append(applied.log)
            details["apply_command"] = applied.command
            if not applied.applied:
                return await unresolved_with_log(
                    context, log, details, "patch_apply_failed", "the patch did not apply"
                )
        answer = context.submission.answer or ""
        answer_file = f"{EVAL_DIR}/answer.txt"
        await workspace.write_file(answer_file, answer)
        result = await workspace.exec(
            self.command, timeout=self.timeout_s, stdin=answer, env={ANSWER_FILE_ENV: answer_file}
        )
        log.append(f"$ {self.command}\n{result.stdout}{result.stderr}exit {result.exit_code}\n")
        details.update(exit_code=result.exit_code, duration_s=round(result.duration_s, 6))
        if result.timed_out:
            return await unresolved_with_log(
                context, log, details, "timeout", f"the command ran past {self.timeout_s:g}s"
            )
        if self.reward_file is None:
            details["log"] = await store_log(context, log)
            if result.exit_code == 0:
                return ScoreResult(
                    resolved=True,
                    score=1.0,
                    status="resolved",
                    explanation="exit 0",
                    details=details,
                )
            return ScoreResult.unresolved(
                "failed", f"exit {result.exit_code}: {_tail(result.stderr or result.stdout)}",
                details=details,
            )  # fmt: skip
        try:
            reward = await _read_reward(context, self.reward_file)
        except (InvalidInput, LimitExceeded, NotFound) as exc:
            return await unresolved_with_log(
                context, log, details, "no_reward", str(exc), outcome="error"
            )
        details.update(reward=reward, log=await store_log(context, log))
        return reward_verdict(reward, self.threshold, details)


def reward_verdict(reward: float, threshold: float, details: dict[str, Any]) -> ScoreResult:
    """Resolved when the reward reaches the threshold; the reward is the score either way
    (the command scorer's reward file and a Harbor verifier's reward are judged alike)."""
    if reward >= threshold:
        return ScoreResult(
            resolved=True,
            score=reward,
            status="resolved",
            explanation=f"reward {reward:g} >= {threshold:g}",
            details=details,
        )
    return ScoreResult.unresolved(
        "failed", f"reward {reward:g} < {threshold:g}", score=reward, details=details
    )


async def _read_reward(context: ScoringContext, path: str) -> float:
    """The number in the reward file.

    Raises:
        NotFound: the command wrote no reward file.
        InvalidInput: the file does not hold one number in [0, 1].
        LimitExceeded: the file is larger than 4 KiB.
    """
    workspace = await context.sandbox.workspace()
    try:
        text = (await workspace.read_file(path, max_bytes=4096)).decode(errors="replace")
    except NotFound as exc:
        raise NotFound(f"the command wrote no reward file at {path}") from exc
    try:
        reward = float(text.strip())
    except ValueError as exc:
        raise InvalidInput(f"reward file {path} holds {text.strip()[:40]!r}, not a number") from exc
    if not math.isfinite(reward) or not 0.0 <= reward <= 1.0:
        raise InvalidInput(f"reward {reward} in {path} is outside [0, 1]")
    return reward


async def store_log(context: ScoringContext, log: list[str]) -> dict[str, Any]:
    """Stores the scorer's log as the trajectory's `.log` artifact; returns its reference."""
    return await context.store_artifact("".join(log).encode(errors="replace"), ".log")


async def unresolved_with_log(
    context: ScoringContext,
    log: list[str],
    details: dict[str, Any],
    status: str,
    explanation: str,
    *,
    outcome: Literal["failed", "error", "infra_error"] = "failed",
) -> ScoreResult:
    """`ScoreResult.unresolved` for a scorer that stops early: its log so far is kept too."""
    details["log"] = await store_log(context, log)
    return ScoreResult.unresolved(status, explanation, outcome=outcome, details=details)


def _tail(text: str, limit: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]
