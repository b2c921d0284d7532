"""Scorer configurations: one discriminated union, the `scorer` field of a campaign spec.

Adding a scorer kind = its config class here, added to `ScorerConfig`, and its builder in
`scoring/factory.py`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mcp_evalserver.spec.transcript_checks import TrajectoryAssertion


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExactScorerConfig(_Strict):
    """The submitted answer equals the task's `answer` after normalisation.

    Both sides: Unicode NFC, ends stripped, whitespace runs collapsed; case folded unless
    `case_sensitive`.
    """

    type: Literal["exact"] = "exact"
    case_sensitive: bool = True


class RegexScorerConfig(_Strict):
    """The stripped answer matches a regular expression (`pattern`, else the task's `answer`)."""

    type: Literal["regex"] = "regex"
    pattern: str | None = Field(None, description="Default: each task's `answer` is its pattern.")
    mode: Literal["fullmatch", "search"] = "fullmatch"
    ignore_case: bool = False
    dotall: bool = False


class JsonScorerConfig(_Strict):
    """The answer parsed as JSON (one Markdown fence allowed) equals the task's `answer` JSON."""

    type: Literal["json"] = "json"
    subset: bool = Field(False, description="Objects in the answer may carry extra keys.")


class CommandScorerConfig(_Strict):
    """Runs a command in a fresh workspace of the task's instance, after applying the patch.

    Resolved when the command exits 0, or, with `reward_file`, when the number it writes there
    (0..1) reaches `threshold`. The answer is on the command's stdin and in
    `$MCP_EVALSERVER_ANSWER_FILE`.
    """

    type: Literal["command"] = "command"
    command: str = Field(description="Shell command, run from the task's workdir.")
    reward_file: str | None = Field(None, description="e.g. /tmp/reward: a float in [0, 1].")
    threshold: float = Field(1.0, ge=0.0, le=1.0, description="Reward needed to resolve.")
    timeout_s: float = Field(600.0, gt=0, description="Past it: status timeout (failed).")
    apply_patch: bool = Field(True, description="Apply the submission's patch first.")


class TestsScorerConfig(_Strict):
    """SWE-bench grading: apply the patch and the `test_patch`, run the tests, grade the log.

    The tests run the task's `eval_script`, else `test_command`, else pytest over the files
    named by FAIL_TO_PASS and PASS_TO_PASS.
    """

    __test__ = False  # not a pytest test class, despite the name

    type: Literal["tests"] = "tests"
    parser: str = Field(
        "auto",
        description="Log parser name (see scoring/logparsers.py); `auto`: the task's "
        "`metadata.log_parser` (SWE-bench 5 instances), else SWE-bench's parser for its `repo`, "
        "else `pytest`.",
    )
    test_command: str | None = Field(None, description="Used when a task has no eval_script.")
    timeout_s: float = Field(
        1800.0, gt=0, description="Past it: status timeout, the submission's failure."
    )
    output_cap: int = Field(8 << 20, ge=1 << 10, description="Bytes of test log kept per stream.")
    strict: bool = Field(
        False,
        description="Grade from pytest's JUnit report, not the log, sent by strict mode's "
        "pytest plugin on the sandbox's private report channel (never a file), with "
        "conftest.py, pytest configuration and the test ids' files restored from the instance "
        "(scoring/strict.py); the test command must append to PYTHONPATH, not replace it. "
        "false: exactly SWE-bench 5.0.2.",
    )
    grade_empty: bool = Field(
        False,
        description="Run the tests on an empty submission too (validation's no-op runs); "
        "default: an empty patch is graded `empty`, nothing run.",
    )
    ignore_tests: dict[str, list[str]] | str | None = Field(
        None,
        description="Tests graded neither way, by task id (`validate --write-ignore` writes "
        "them): inline, or the path of such a JSON file; recorded inline with the campaign and "
        "named in every verdict and report that used them.",
    )


class HarborScorerConfig(_Strict):
    """A Harbor task's own verifier: tests/ copied in after the agent is done, tests/test.sh
    run within `[verifier] timeout_sec`; the reward it writes to /logs/verifier/reward.txt or
    reward.json is the score."""

    type: Literal["harbor"] = "harbor"
    threshold: float = Field(1.0, ge=0.0, le=1.0, description="Reward needed to resolve.")
    verify: Literal["in_place", "fresh"] = Field(
        "in_place",
        description="in_place (Harbor's): in the agent's own workspace, tampering found "
        "recorded as details.evidence; fresh: in a new one with the agent's file changes "
        "less what could fake the reward.",
    )


class LlmJudgeScorerConfig(_Strict):
    """Each rubric requirement judged by its own call to an OpenAI-compatible endpoint.

    The rubric is `rubric` plus the task's `metadata.rubric`. Resolved when the share of
    fulfilled requirements reaches `threshold`; a failed call leaves its requirement
    unfulfilled (with the error). Verdicts are cached in the campaign's artifacts.
    """

    type: Literal["llm_judge"] = "llm_judge"
    model: str
    base_url: str | None = Field(None, description="Default: $OPENAI_BASE_URL, else OpenAI.")
    api_key_env: str | None = Field(
        "OPENAI_API_KEY",
        description="Variable holding the API key; null: an endpoint needing none.",
    )
    rubric: list[str] = Field(default_factory=list)
    threshold: float = Field(1.0, ge=0.0, le=1.0)
    concurrency: int = Field(4, ge=1, le=64, description="Requirements judged at once.")
    timeout_s: float = Field(120.0, gt=0, description="Per call.")
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    retry_attempts: int = Field(
        6, ge=1, description="Requests per call on 429/5xx/connection failure before an "
        "infrastructure error (never a verdict).",
    )  # fmt: skip
    retry_base_delay_s: float = Field(1.0, ge=0.0, description="Backoff: base·2^(n-1), ±50%.")
    retry_max_delay_s: float = Field(60.0, ge=0.0, description="Cap on one wait (Retry-After too).")


class PythonScorerConfig(_Strict):
    """A scorer written in Python, loaded from `module:factory`; `factory(options)` returns it."""

    type: Literal["python"] = "python"
    factory: str = Field(description="Import path `package.module:callable`.")
    options: dict[str, Any] = Field(default_factory=dict)


class TrajectoryScorerConfig(_Strict):
    """Assertions over the recorded tool calls (see `scoring/transcript_checks.py`).

    Resolved when every assertion holds; the score is the share that hold. A submission
    without a transcript (external agents) is the evaluation's error, not a failure.
    """

    type: Literal["trajectory"] = "trajectory"
    assertions: list[TrajectoryAssertion] = Field(min_length=1)


class AllOfScorerConfig(_Strict):
    """Resolved when every scorer resolves (e.g. the tests pass AND the trajectory is sane)."""

    type: Literal["all_of"] = "all_of"
    scorers: list[ScorerConfig] = Field(min_length=1)


class AnyOfScorerConfig(_Strict):
    """Resolved when at least one scorer resolves."""

    type: Literal["any_of"] = "any_of"
    scorers: list[ScorerConfig] = Field(min_length=1)


class WeightedPart(_Strict):
    scorer: ScorerConfig
    weight: float = Field(1.0, gt=0)


class WeightedScorerConfig(_Strict):
    """The weighted mean of the scorers' scores; resolved when it reaches `threshold`."""

    type: Literal["weighted"] = "weighted"
    parts: list[WeightedPart] = Field(min_length=1)
    threshold: float = Field(1.0, ge=0.0, le=1.0)


ScorerConfig = Annotated[
    ExactScorerConfig
    | RegexScorerConfig
    | JsonScorerConfig
    | CommandScorerConfig
    | TestsScorerConfig
    | HarborScorerConfig
    | LlmJudgeScorerConfig
    | PythonScorerConfig
    | TrajectoryScorerConfig
    | AllOfScorerConfig
    | AnyOfScorerConfig
    | WeightedScorerConfig,
    Field(discriminator="type"),
]

# The combinations hold scorer configs themselves: resolve the forward references now.
for _combined in (AllOfScorerConfig, AnyOfScorerConfig, WeightedPart, WeightedScorerConfig):
    _combined.model_rebuild()
