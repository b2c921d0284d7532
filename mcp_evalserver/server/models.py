"""What the MCP tools return: pydantic models, so every result is also structured output.

A workspace tool's result also has `model_text()`: what a model reads of it (stdout as it was
printed, numbered file lines), sent as the answer's text while its JSON is the structured
content (server.mcp_app). A result whose text already carries a long field (an edit's
numbered region, a claim's prompt) publishes a smaller model (`Published`) instead of
repeating it: every byte of an answer is paid for on every call.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from mcp_evalserver.agents import file_text
from mcp_evalserver.agents.search_text import glob_text, search_text
from mcp_evalserver.sandbox.base import GlobResult, SearchResult
from mcp_evalserver.scoring.stats.comparison import PairedComparison
from mcp_evalserver.scoring.stats.summary import CampaignSummary

#: A part of an answer's text: `text[start:end]` (Python's slice, in characters).
TextSpan = tuple[int, int]


class InstanceReprovisioned(BaseModel):
    """An instance found dead (supervisor, container or engine gone) and provisioned again."""

    task: str | None
    instance: str | None
    backend: str | None
    reason: str | None
    ts: float | None


class SamplingProgress(BaseModel):
    """Adaptive sampling so far: the total is not known up front."""

    planned: int = Field(description="Trajectories planned so far (`trajectories` counts them).")
    most: int = Field(description="Trajectories if every task reached `max` samples.")
    rounds: int = Field(description="Rounds of extra samples planned so far.")
    half_width: float | None = Field(
        description="The mean pass rate's interval half-width at the last decision."
    )
    target_half_width: float
    stopped: str | None = Field(
        description="Why sampling stopped (`target_reached`, `max_reached`); null while it goes on."
    )


class CampaignStatus(BaseModel):
    """Where a campaign stands."""

    campaign_id: str
    name: str
    status: Literal["running", "finished", "cancelled"] = Field(
        description="From the ledger: `running` means unfinished and not cancelled."
    )
    active: bool = Field(description="Whether this server is running it right now.")
    interrupted: bool = Field(
        False,
        description="Unfinished and running nowhere: its process died or its server stopped "
        "(not cancelled by a person). Call resume to continue it.",
    )
    trajectories: int
    done: int
    phases: dict[str, int] = Field(description="Trajectories per phase (pending ... done).")
    outcomes: dict[str, int] = Field(description="Finished trajectories per outcome.")
    resolved: int = Field(
        description="Resolved samples, as the report counts them: a root and its forked "
        "branches once (resolved when any is)."
    )
    pass_rate: float | None = Field(
        description="resolved / graded samples (the report's), infrastructure errors "
        "excluded; null before any grade."
    )
    awaiting_client: int = Field(
        0, description="External trajectories waiting for claim_trajectory right now."
    )
    claimed: int = Field(0, description="External trajectories held by a client right now.")
    error: str | None = Field(None, description="Why the last run stopped early, if it did.")
    nodes: list[dict[str, Any]] | None = Field(
        None,
        description="While instances run on a Ray cluster: per node, its slots and the "
        "instances, workspaces and commands in flight on it (this server's, every campaign).",
    )
    status_text: str = Field(
        "",
        description="The status as a person reads it, e.g. 'finished with 2 infrastructure "
        "failures — resume to retry them'.",
    )
    infra_failures: int = Field(
        0, description="Trajectories whose last outcome is an infrastructure failure."
    )
    instances: int | None = Field(
        None,
        description="The instance budget: instances alive at once (`limits.instances`, fixed "
        "at creation from this machine's memory and disk unless the spec gives it; null for "
        "campaigns created before budgets).",
    )
    retrying: int = Field(
        0,
        description="Trajectories the last resume sent back because their last outcome was an "
        "infrastructure failure.",
    )
    reprovisioned: list[InstanceReprovisioned] = Field(
        default_factory=list,
        description="Instances found dead and provisioned again while it ran (last 20).",
    )
    model_endpoints: dict[str, str] = Field(
        default_factory=dict,
        description="Where each model caller (`agent`, `scorer`) sends its calls: its "
        "`base_url`, else $OPENAI_BASE_URL, else OpenAI's.",
    )
    endpoint_limits: dict[str, int] = Field(
        default_factory=dict,
        description='Adaptive per-endpoint limits now (`limits.per_endpoint: "auto"`).',
    )
    cost_usd: float | None = Field(
        None,
        description="What its model calls cost so far (US dollars); null when none was "
        "recorded or some cost is unknown (`unpriced_records`).",
    )
    spent_usd: float = Field(0.0, description="The cost of the calls whose cost is known.")
    unpriced_records: int = Field(
        0, description="Usage records of unknown cost (no provider figure, no price)."
    )
    cost_per_resolved_usd: float | None = Field(
        None, description="cost_usd / resolved trajectories."
    )
    budget_usd: float | None = Field(None, description="Its budget in force (`limits.budget_usd`).")
    budget_exhausted: int = Field(
        0, description="Trajectories the budget stopped (not graded); resume with a larger budget."
    )
    sampling: SamplingProgress | None = Field(
        None, description="Adaptive sampling's progress; null for a fixed number of samples."
    )
    next_step: str = Field(description="What to do next with this campaign.")


class CampaignList(BaseModel):
    """The campaigns under the server's state directory, newest last."""

    campaigns: list[CampaignStatus]
    total: int = Field(description="How many campaigns exist (the list may be shortened).")
    interrupted: list[str] = Field(
        default_factory=list,
        description="Listed campaigns that were interrupted: resume continues each.",
    )
    hint: str | None = Field(None, description="What to do about interrupted campaigns.")


@runtime_checkable
class ReadByModels(Protocol):
    """A result with a text of its own for a model to read."""

    def model_text(self) -> str: ...


@runtime_checkable
class Published(Protocol):
    """A result whose structured content is a smaller model than itself: what its text does
    not already say. `PUBLISHED` is that model (the tool's output schema)."""

    PUBLISHED: ClassVar[type[BaseModel]]

    def published(self, text: str) -> BaseModel:
        """The structured content that goes with `text` (this result's `model_text()`)."""
        ...


def published_model(returns: Any) -> Any:
    """The output schema of a tool that returns `returns`: its published model, if any."""
    return getattr(returns, "PUBLISHED", returns)


class _ClaimFields(BaseModel):
    claim_id: str
    campaign_id: str
    trajectory_id: str
    task_id: str
    workdir: str | None = Field(description="Where commands start; null for answer-only tasks.")
    has_workspace: bool = Field(description="Whether the sandbox tools can be used.")
    lease_s: float = Field(description="The claim lapses after this long without a call.")
    reclaimed: bool = Field(
        description="True when an earlier client held it: the workspace keeps its changes."
    )
    attempt: int = Field(description="Which generation attempt of the trajectory this is.")
    idempotency_key: str = Field(
        description="The same in every attempt (generation is at-least-once): deduplicate "
        "paid calls with it."
    )


class Claim(_ClaimFields):
    """A trajectory this client now holds: name `claim_id` in every sandbox tool and `submit`.
    The task's prompt is in the text content, where `prompt_at` says."""

    prompt_at: TextSpan = Field(
        description="[start, end] of the task's prompt in the text content."
    )


class ClaimedTrajectory(_ClaimFields):
    """A trajectory this client now holds: name `claim_id` in every sandbox tool and `submit`."""

    PUBLISHED: ClassVar[type[BaseModel]] = Claim

    prompt: str = Field(description="What to do.")

    def model_text(self) -> str:
        # Ids and the campaign a model does not need to act are in the structured content.
        where = (
            f"workdir {self.workdir}" if self.has_workspace else "no workspace: submit an answer"
        )
        lines = [f"claim_id: {self.claim_id}; {where}; lease {self.lease_s:g} s"]
        if self.reclaimed:
            lines.append("reclaimed: the workspace keeps what an earlier client changed")
        return "\n".join([*lines, "", self.prompt])

    def published(self, text: str) -> Claim:
        fields = self.model_dump(exclude={"prompt"})
        return Claim(**fields, prompt_at=(len(text) - len(self.prompt), len(text)))


class Checkpoint(BaseModel):
    """A checkpoint of a trajectory's workspace: name it in `restore`."""

    checkpoint_id: str

    def model_text(self) -> str:
        return f"checkpoint {self.checkpoint_id}: restore(checkpoint_id) returns the files to it"


class Restored(BaseModel):
    """The workspace's files are as they were at the checkpoint."""

    checkpoint_id: str

    def model_text(self) -> str:
        return f"the workspace's files are as they were at checkpoint {self.checkpoint_id}"


class Branches(BaseModel):
    """The new trajectories a fork made, each already claimed by this client."""

    branches: list[ClaimedTrajectory] = Field(
        description="One per branch: its own claim_id, trajectory_id `<parent>.<n>`, workspace."
    )
    waiting: list[str] = Field(
        default_factory=list,
        description="Branches made but not started yet: the campaign's limits (concurrency, "
        "per_instance) had no free slot. Claim them with claim_trajectory once one frees.",
    )

    def model_text(self) -> str:
        lines = [f"branch {b.trajectory_id}: claim_id {b.claim_id}" for b in self.branches]
        if self.waiting:
            lines.append("waiting (claim later): " + ", ".join(self.waiting))
        return "\n".join(lines)


class BranchIds(BaseModel):
    """The trajectories a fork made; the agent's program runs again in each."""

    trajectory_ids: list[str]

    def model_text(self) -> str:
        return "branches: " + ", ".join(self.trajectory_ids)


class _ExecFields(BaseModel):
    exit_code: int
    stdout_truncated: bool = Field(
        description="Longer than max_output_chars: its head and tail are kept."
    )
    stderr_truncated: bool
    timed_out: bool
    duration_s: float
    timeout_s: float | None = Field(None, description="The timeout it ran under.")


class ExecResult(_ExecFields):
    """What a command did. A non-zero exit code is a result, not an error. Its output is in
    the text content, each stream once: stdout is text[stdout_at[0]:stdout_at[1]]."""

    stdout_at: TextSpan = Field(description="[start, end] of stdout in the text content.")
    stderr_at: TextSpan = Field(description="[start, end] of stderr in the text content.")


class ExecOutput(_ExecFields):
    """What a command did. A non-zero exit code is a result, not an error."""

    PUBLISHED: ClassVar[type[BaseModel]] = ExecResult

    stdout: str
    stderr: str

    def model_text(self) -> str:
        """The exit code line, then stdout as printed, then stderr after a marker line."""
        return self._laid_out()[0]

    def published(self, text: str) -> ExecResult:
        _, stdout_at, stderr_at = self._laid_out()
        # From its fields as they are (stdout and stderr ignored as extra), as FileContent
        # does: a dump and a validation by keywords cost each command's answer twice this.
        return ExecResult.model_validate(
            {
                **self.__dict__,
                "duration_s": round(self.duration_s, 3),  # more digits say nothing
                "stdout_at": stdout_at,
                "stderr_at": stderr_at,
            }
        )

    def _laid_out(self) -> tuple[str, TextSpan, TextSpan]:
        """The text, and where each stream is in it (each exactly as printed)."""
        text = f"exit code {self.exit_code}"
        if self.timed_out:
            limit = f"{self.timeout_s:g}" if self.timeout_s is not None else "?"
            text += f": killed after {limit} s (timeout_s={limit}; up to 3,600)"
        spans: list[TextSpan] = []
        for name, stream, cut in (
            ("stdout", self.stdout, self.stdout_truncated),
            ("stderr", self.stderr, self.stderr_truncated),
        ):
            if stream and not text.endswith("\n"):
                text += "\n"
            if stream and (name == "stderr" or cut):
                note = " (over max_output_chars: head and tail kept)" if cut else ""
                text += f"--- {name}{note} ---\n"
            spans.append((len(text), len(text) + len(stream)))
            text += stream
        return text, spans[0], spans[1]


class FileRange(BaseModel):
    """Lines of a text file of the workspace: the text content shows them, numbered."""

    offset: int = Field(description="The number of the first line shown (1-based).")
    lines: int = Field(description="How many lines are shown.")
    total_lines: int = Field(description="How many lines the file has.")
    size: int = Field(description="The file's size in bytes.")
    next_offset: int | None = Field(
        description="Where to continue reading; null when the file's end is shown."
    )


class FileContent(FileRange):
    """Lines of a text file of the workspace."""

    # The lines are the text content's; a program that needs a file's bytes whole reads
    # them with a command (`cat`, `base64`).
    PUBLISHED: ClassVar[type[BaseModel]] = FileRange

    path: str
    content: str = Field(description="The lines shown, exactly as in the file.")

    @classmethod
    def of(cls, path: str, lines: file_text.Lines) -> FileContent:
        return cls(
            path=path,
            content=lines.text,
            offset=lines.first,
            lines=lines.count,
            total_lines=lines.total,
            size=lines.size,
            next_offset=lines.next_offset,
        )

    def model_text(self) -> str:
        """The lines numbered as `cat -n` does; a note when the file goes on."""
        lines = file_text.Lines(self.content, self.offset, self.lines, self.total_lines, self.size)
        return lines.shown(self.path)

    def published(self, text: str) -> FileRange:
        # From its fields as they are (the path and the content ignored as extra): a dump
        # first costs every read more. Not `from_attributes`: this is a FileRange already.
        return FileRange.model_validate(self.__dict__)


class FileWritten(BaseModel):
    """A file written in the workspace."""

    path: str
    size: int
    previous_bytes: int | None = Field(
        None, description="The size of the file it replaced; null: it created the file."
    )

    def model_text(self) -> str:
        if self.previous_bytes is None:
            return f"created {self.path} ({self.size:,} bytes)"
        return (
            f"replaced {self.path}: {self.previous_bytes:,} bytes before, {self.size:,} now "
            "(to change part of a file, use edit_file)"
        )


class EditDone(BaseModel):
    """An exact replacement done in a file of the workspace; the text content shows the
    edited lines, numbered."""

    replacements: int
    first_line: int = Field(description="The first line the new text occupies.")
    last_line: int
    size: int = Field(description="The file's size in bytes after the edit.")
    created: bool = Field(description="Whether the edit created the file.")


class FileEdited(EditDone):
    """An exact replacement done in a file of the workspace."""

    PUBLISHED: ClassVar[type[BaseModel]] = EditDone

    path: str
    region: str = Field(description="The edited lines with a few around them, numbered.")

    @classmethod
    def of(cls, path: str, edit: file_text.Edit) -> FileEdited:
        return cls(path=path, **dataclasses.asdict(edit))

    def model_text(self) -> str:
        edit = file_text.Edit(**self.model_dump(exclude={"path"}))
        return edit.shown(self.path)

    def published(self, text: str) -> EditDone:
        return EditDone.model_validate(self.model_dump(exclude={"path", "region"}))


class SearchMatches(SearchResult):
    """Lines of the workspace's text files that matched, first ones first."""

    def model_text(self) -> str:
        """`path:line:text` per hit, then how many were left out and how to narrow."""
        return search_text(self)


class FileList(GlobResult):
    """Files of the workspace whose path matched the glob, sorted."""

    def model_text(self) -> str:
        """One path per line, then how many were left out and how to narrow."""
        return glob_text(self)


class Diff(BaseModel):
    """Every change in the workspace against the task's base commit, as a git patch."""

    patch: str
    files: list[str] = Field(description="Paths the patch touches.")

    def model_text(self) -> str:
        return self.patch or "no changes against the base commit"


class HandedIn(BaseModel):
    """What was handed in; the trajectory is scored next and the claim is closed."""

    trajectory_id: str
    patch_bytes: int
    files: list[str] = Field(description="Paths the patch touches.")
    warning: str | None = Field(None, description="Something the submission likely lacks.")


class Submitted(HandedIn):
    """What was handed in; the trajectory is scored next and the claim is closed."""

    # The campaign and the answer are the caller's own: not sent back.
    PUBLISHED: ClassVar[type[BaseModel]] = HandedIn

    campaign_id: str
    answer: str | None

    def model_text(self) -> str:
        handed = f"{len(self.files)} files changed ({self.patch_bytes:,} bytes of patch)"
        if self.answer is not None:
            handed += " and an answer"
        text = f"submitted: {handed}; scored next"
        return f"{text}\nwarning: {self.warning}" if self.warning else text

    def published(self, text: str) -> HandedIn:
        return HandedIn.model_validate(self.model_dump(exclude={"campaign_id", "answer"}))


class UsageReported(BaseModel):
    """What reported model calls cost, as the campaign counts them."""

    trajectory_id: str
    cost_usd: float | None = Field(description="US dollars; null: unknown (no price for it).")
    priced_by: Literal["provider", "table"] | None = Field(
        description="Whose figure: the provider's cost you gave, or the campaign's price table."
    )

    def model_text(self) -> str:
        if self.cost_usd is None:
            return f"recorded for {self.trajectory_id}; cost unknown (no price for the model)"
        return f"recorded for {self.trajectory_id}: ${self.cost_usd:.6f} (by the {self.priced_by})"


class ScoringStatus(BaseModel):
    """Scoring progress and the campaign's statistics over what is scored so far."""

    campaign_id: str
    awaiting_scoring: int = Field(description="Generated, waiting for an evaluation slot.")
    scoring: int = Field(description="Being evaluated now.")
    scored: int = Field(description="Finished with a verdict (any outcome).")
    rescoring: int = Field(0, description="Trajectories this call sent back to be scored again.")
    summary: CampaignSummary | None = Field(description="Figures over finished trajectories.")
    note: str


class Comparison(BaseModel):
    """Campaign B against campaign A, paired by task; differences are B minus A."""

    campaign_a: str
    campaign_b: str
    comparison: PairedComparison
    markdown: str = Field(description="The comparison as a person reads it.")


class SweepStatus(BaseModel):
    """Where a concurrency sweep stands, and its result once finished."""

    sweep_id: str
    active: bool = Field(description="Whether this server is running it right now.")
    levels: list[int]
    campaigns: dict[int, str] = Field(
        description="The campaign of each level (follow one with campaign_status)."
    )
    current_level: int | None = Field(None, description="The level running now.")
    finished: bool = Field(description="Whether sweep.json holds every level's figures.")
    recommended: int | None = Field(None, description="The concurrency level to use.")
    reason: str | None = Field(None, description="Why that level, in a sentence.")
    figures: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Per level: throughput_per_min, error rates, http_429, http_5xx, latency "
        "p50/p95, tokens_per_s.",
    )
    sweep_json: str | None = None
    sweep_png: str | None = Field(None, description="The plot (with the `plot` extra).")
    error: str | None = Field(None, description="Why the sweep stopped early, if it did.")
