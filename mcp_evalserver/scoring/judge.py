"""The `llm_judge` scorer: a rubric of requirements, each judged by its own model call.

Calls go to an OpenAI-compatible chat-completions endpoint through the `openai` client. All
requirements of one trajectory are judged concurrently, at most `concurrency` at once (and at
most `limits.per_endpoint` across the campaign). The judge must answer a JSON object
`{"fulfilled": true|false, "reason": "..."}` (a bare YES or NO is accepted too).

A call refused for load or lost to the network (429, 5xx, connection) is retried with backoff
(`endpoint_calls.py`); past `retry_attempts` requests the scoring is an `InfrastructureError`,
which the runner retries: the endpoint's weather is never a verdict on the submission. A call
the endpoint rejects outright (another 4xx), or an answer that cannot be read, leaves that
requirement unfulfilled with its error; the others still count. When no requirement got a verdict
at all the endpoint is taken to be down: `InfrastructureError` too.

Verdicts are cached in the campaign's artifacts (`artifacts/judge-<key>.json`, key = sha256 of
the prompt version, model, task prompt, requirement and submission), so re-scoring a campaign
asks the model nothing it has answered before. Errors are not cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import anyio
import openai
from openai.types.chat import ChatCompletionMessageParam

from mcp_evalserver.errors import InfrastructureError, InvalidInput
from mcp_evalserver.runtime.adaptive import EndpointLimiter
from mcp_evalserver.runtime.artifacts import ARTIFACTS_DIR
from mcp_evalserver.runtime.atomic_files import write_atomically
from mcp_evalserver.runtime.endpoint_calls import (
    call_usage,
    call_with_retries,
    describe_completion,
    model_client,
    traced_chat,
)
from mcp_evalserver.runtime.endpoints import model_endpoint
from mcp_evalserver.runtime.limits import RetryPolicy
from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.spec.matchers import parse_json

#: Changing the judge's instructions must not reuse verdicts given under the old ones.
PROMPT_VERSION = "1"
SYSTEM_PROMPT = (
    "You grade one requirement of a submission to a task. Reply with only a JSON object: "
    '{"fulfilled": true or false, "reason": "one sentence"}. Judge the requirement alone; '
    "when the submission does not show that it is met, it is not fulfilled."
)
_YES_NO = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)


@dataclass(frozen=True)
class RequirementVerdict:
    """The judge's verdict on one requirement (or the error that stands for it)."""

    requirement: str
    fulfilled: bool
    reason: str = ""
    error: str | None = None
    cached: bool = False


class LlmJudgeScorer(Scorer):
    """Grades a submission against a rubric with an OpenAI-compatible model."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        rubric: list[str] | None = None,
        threshold: float = 1.0,
        concurrency: int = 4,
        timeout_s: float = 120.0,
        temperature: float = 0.0,
        retry_attempts: int = 6,
        retry_base_delay_s: float = 1.0,
        retry_max_delay_s: float = 60.0,
    ) -> None:
        """Remembers the endpoint; nothing is called until a trajectory is scored.

        Raises:
            InvalidInput: no endpoint and no API key (the OpenAI default needs one).
        """
        endpoint = model_endpoint(base_url)
        self.base_url = endpoint.url
        self.api_key = (os.environ.get(api_key_env) or None) if api_key_env is not None else None
        if self.api_key is None and endpoint.chosen_by == "default":
            raise InvalidInput(
                f"llm_judge: set ${api_key_env} (or give `base_url` of a local endpoint)"
                if api_key_env is not None
                else "llm_judge: OpenAI's endpoint needs a key: name its variable in "
                "`api_key_env` (or give `base_url` of a local endpoint)"
            )
        self.model = model
        self.rubric = list(rubric or [])
        self.threshold = threshold
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.temperature = temperature
        self.policy = RetryPolicy(retry_attempts, retry_base_delay_s, retry_max_delay_s)

    async def score(self, context: ScoringContext) -> ScoreResult:
        rubric = [*self.rubric, *_task_rubric(context)]
        if not rubric:
            return ScoreResult.unresolved(
                "no_rubric",
                f"task {context.task.id}: give the scorer a `rubric` or the task metadata.rubric",
                outcome="error",
            )
        submission = _submission_text(context)
        if not submission:
            return ScoreResult.unresolved("empty", "the submission has neither answer nor patch")
        verdicts: list[RequirementVerdict | None] = [None] * len(rubric)
        bound = anyio.CapacityLimiter(self.concurrency)
        endpoint = context.limiters.endpoint(self.base_url)
        async with model_client(self.base_url, self.api_key, timeout=self.timeout_s) as client:
            # A requirement whose endpoint stays down must not cancel the others: what they get
            # is cached, so the runner's retry of this scoring asks only what is missing.
            down: list[InfrastructureError] = []

            async def judge(index: int, requirement: str) -> None:
                async with bound:
                    try:
                        verdicts[index] = await self._judge_cached(
                            client, endpoint, context, requirement, submission
                        )
                    except InfrastructureError as exc:
                        down.append(exc)

            async with anyio.create_task_group() as group:
                for index, requirement in enumerate(rubric):
                    group.start_soon(judge, index, requirement)
        if down:
            raise InfrastructureError(
                f"llm_judge: {len(down)} of {len(rubric)} requirement(s) got no verdict: {down[0]}"
            )
        done = [v for v in verdicts if v is not None]
        return self._result(done)

    def _result(self, verdicts: list[RequirementVerdict]) -> ScoreResult:
        answered = [v for v in verdicts if v.error is None]
        if not answered:
            raise InfrastructureError(
                f"the judge answered none of {len(verdicts)} requirement(s); first error: "
                f"{verdicts[0].error}"
            )
        fulfilled = sum(v.fulfilled for v in verdicts)
        share = fulfilled / len(verdicts)
        details = {
            "model": self.model,
            "fulfilled": fulfilled,
            "requirements": [asdict(v) for v in verdicts],
            "errors": sum(v.error is not None for v in verdicts),
        }
        explanation = f"{fulfilled}/{len(verdicts)} requirements fulfilled"
        unmet = [v for v in verdicts if not v.fulfilled]
        if unmet:
            explanation += f"; first unmet: {unmet[0].requirement[:80]}"
        if share >= self.threshold:
            return ScoreResult(
                resolved=True, score=share, status="resolved", explanation=explanation,
                details=details,
            )  # fmt: skip
        return ScoreResult.unresolved("failed", explanation, score=share, details=details)

    async def _judge_cached(
        self,
        client: openai.AsyncOpenAI,
        endpoint: EndpointLimiter,
        context: ScoringContext,
        requirement: str,
        submission: str,
    ) -> RequirementVerdict:
        key = hashlib.sha256(
            json.dumps(
                [PROMPT_VERSION, self.model, context.task.prompt, requirement, submission]
            ).encode()
        ).hexdigest()
        path = context.campaign_dir / ARTIFACTS_DIR / f"judge-{key}.json"
        cached = await anyio.to_thread.run_sync(_read_cache, path)
        if cached is not None:
            return RequirementVerdict(
                requirement, bool(cached["fulfilled"]), str(cached.get("reason", "")), cached=True
            )
        verdict = await self._judge(client, endpoint, context, requirement, submission)
        if verdict.error is None:
            entry = {"model": self.model, "requirement": requirement, **asdict(verdict)}
            await anyio.to_thread.run_sync(_write_cache, path, entry)
        return verdict

    async def _judge(
        self,
        client: openai.AsyncOpenAI,
        endpoint: EndpointLimiter,
        context: ScoringContext,
        requirement: str,
        submission: str,
    ) -> RequirementVerdict:
        user = (
            f"Task:\n{context.task.prompt}\n\nSubmission:\n{submission}\n\n"
            f"Requirement:\n{requirement}"
        )
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user},
        ]
        with traced_chat(self.base_url, self.model, messages) as span:
            try:
                response = await call_with_retries(
                    endpoint,
                    lambda: client.chat.completions.create(
                        model=self.model,
                        messages=cast("list[ChatCompletionMessageParam]", messages),
                        temperature=self.temperature,
                    ),
                    policy=self.policy,
                    on_retry=lambda reason, delay: span.add_event(
                        "retry", {"reason": reason, "delay_s": round(delay, 3)}
                    ),
                )
            except openai.OpenAIError as exc:
                span.set_attribute("error.type", type(exc).__name__)
                return RequirementVerdict(requirement, False, error=f"{type(exc).__name__}: {exc}")
            describe_completion(span, response)
        if context.meter is not None:
            await context.meter(call_usage(self.model, response), "judge")
        content = response.choices[0].message.content if response.choices else None
        return _read_verdict(requirement, content or "")


def _read_verdict(requirement: str, content: str) -> RequirementVerdict:
    """The verdict in the judge's reply; an unreadable reply is an error verdict."""
    try:
        data = parse_json(content)
    except InvalidInput:
        data = None
    if isinstance(data, dict) and isinstance(data.get("fulfilled"), bool):
        return RequirementVerdict(requirement, data["fulfilled"], str(data.get("reason", "")))
    word = _YES_NO.match(content)
    if word:
        return RequirementVerdict(requirement, word.group(1).lower() == "yes", content.strip())
    return RequirementVerdict(
        requirement, False, error=f"unreadable verdict: {content.strip()[:120]!r}"
    )


def _task_rubric(context: ScoringContext) -> list[str]:
    rubric = context.task.metadata.get("rubric", [])
    if isinstance(rubric, str):
        return [rubric]
    return [str(item) for item in rubric] if isinstance(rubric, list) else []


def _submission_text(context: ScoringContext) -> str:
    parts = []
    if context.submission.answer:
        parts.append(context.submission.answer)
    if context.submission.patch:
        parts.append(f"Patch:\n{context.submission.patch}")
    return "\n\n".join(parts)


def _read_cache(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) and "fulfilled" in data else None


def _write_cache(path: Path, entry: dict[str, Any]) -> None:
    # A crash leaves the old cache or the new entry, never half of one.
    write_atomically(path, json.dumps(entry).encode())
