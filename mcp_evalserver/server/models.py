"""What the MCP tools return: pydantic models, so every result is also structured output."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from mcp_evalserver.scoring.stats.comparison import PairedComparison
from mcp_evalserver.scoring.stats.summary import CampaignSummary


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
    resolved: int
    pass_rate: float | None = Field(
        description="resolved / graded, infrastructure errors excluded; null before any grade."
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


class ClaimedTrajectory(BaseModel):
    """A trajectory this client now holds: name `claim_id` in every sandbox tool and `submit`."""

    claim_id: str
    campaign_id: str
    trajectory_id: str
    task_id: str
    prompt: str = Field(description="What to do.")
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


class Checkpoint(BaseModel):
    """A checkpoint of a trajectory's workspace: name it in `restore`."""

    checkpoint_id: str


class Restored(BaseModel):
    """The workspace's files are as they were at the checkpoint."""

    checkpoint_id: str


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


class BranchIds(BaseModel):
    """The trajectories a fork made; the agent's program runs again in each."""

    trajectory_ids: list[str]


class ExecOutput(BaseModel):
    """What a command did. A non-zero exit code is a result, not an error."""

    exit_code: int
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    duration_s: float


class FileContent(BaseModel):
    """A file read from the workspace."""

    path: str
    content: str = Field(description="UTF-8 text; undecodable bytes shown as U+FFFD.")
    size: int = Field(description="Size in bytes.")
    binary: bool = Field(description="Whether the bytes were not valid UTF-8.")


class FileWritten(BaseModel):
    """A file written in the workspace."""

    path: str
    size: int


class Diff(BaseModel):
    """Every change in the workspace against the task's base commit, as a git patch."""

    patch: str
    files: list[str] = Field(description="Paths the patch touches.")


class Submitted(BaseModel):
    """What was handed in; the trajectory is scored next and the claim is closed."""

    campaign_id: str
    trajectory_id: str
    answer: str | None
    patch_bytes: int
    files: list[str]


class UsageReported(BaseModel):
    """What reported model calls cost, as the campaign counts them."""

    trajectory_id: str
    cost_usd: float | None = Field(description="US dollars; null: unknown (no price for it).")
    priced_by: Literal["provider", "table"] | None = Field(
        description="Whose figure: the provider's cost you gave, or the campaign's price table."
    )


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
