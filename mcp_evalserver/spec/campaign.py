"""The campaign model: one pydantic schema for MCP tools, spec files and the CLI.

A campaign is tasks × samples × one agent configuration × one scorer, with limits. Tasks accept
SWE-bench instance fields exactly as they are published (`instance_id`, `FAIL_TO_PASS` as a JSON
string, ...), so a SWE-bench JSONL file is a valid task file. One rule for every way tasks come
in (a spec, a task file, `import-predictions`): a field a task does not know is kept in its
`metadata` (published datasets add columns), and the task file's loader says which were.
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.spec.agents import AgentConfig, NoopAgentConfig
from mcp_evalserver.spec.harbor import harbor_task_rows, is_harbor_source
from mcp_evalserver.spec.host_paths import HostPath
from mcp_evalserver.spec.prices import ModelPrice, read_price_file
from mcp_evalserver.spec.scorers import ExactScorerConfig, ScorerConfig, TestsScorerConfig
from mcp_evalserver.spec.swebench_repos import TASK_FILE, TASKS_DIR, read_task_repo
from mcp_evalserver.spec.validation_errors import describe_validation_error

__all__ = ["describe_validation_error"]  # re-exported: the spec's readers import it from here

_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-/]*")
#: Names a task accepts as given, the SWE-bench aliases included.
_ALIASES = {"instance_id": "id", "problem_statement": "prompt"}

logger = logging.getLogger(__name__)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _json_list(value: Any) -> Any:
    """SWE-bench publishes test lists as JSON strings; accept those as well as lists."""
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else []
        except json.JSONDecodeError as exc:
            raise ValueError(f"expected a JSON list of test names, got {value[:60]!r}") from exc
    return value


def _refuse_a_misspelt_field(name: str) -> None:
    """Keeping every unknown field would turn `promt` into a task with no prompt: a field that
    is nearly the name of a task field is an error, anything else is the dataset's own column."""
    known = {field.lower(): field for field in [*Task.model_fields, *_ALIASES]}
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.85)
    if close:
        raise ValueError(
            f"unknown task field {name!r}: did you mean {known[close[0]]!r}? (fields that "
            "resemble no task field are kept in `metadata`)"
        )


class Task(BaseModel):
    """One problem: an environment, a prompt, an evaluation and optionally a gold solution."""

    # Not `forbid`: a field a task does not know goes to `metadata` (below), so the schema
    # must not tell clients that such a field is refused.
    model_config = ConfigDict(extra="ignore")

    id: str = Field(description="Unique task id; `instance_id` is accepted as an alias.")
    prompt: str = Field("", description="What the agent is asked to do (`problem_statement`).")
    # Environment.
    image: str | None = Field(None, description="Container image of the instance (docker).")
    path: str | None = Field(None, description="Directory of the instance (local backend).")
    workdir: str | None = Field(
        None, description="Where the repository lives: default /testbed in an image, else `path`."
    )
    setup: list[str] = Field(default_factory=list, description="Commands run once per instance.")
    paths: list[HostPath] = Field(
        default_factory=list,
        description="Host paths a local instance's view shows besides `path`, read-only unless "
        '`"writable": true` (then copy-on-write per trajectory). A string is a read-only path.',
    )
    network: bool = Field(
        False,
        description="Whether trajectories may reach the network, from a namespace of their own "
        "(docker backend on a bridge network; refused elsewhere).",
    )
    capabilities: Literal["none", "container"] | None = Field(
        None,
        description="What root may do in a workspace: `none`, or `container` (Docker's default "
        "capabilities: chown, setuid, port 80, raw sockets; no mounts). Default: `container` "
        "for a Harbor task, else `none`.",
    )
    # SWE-bench fields, as published.
    repo: str | None = None
    base_commit: str | None = None
    patch: str | None = Field(None, description="Gold patch (what the oracle agent applies).")
    test_patch: str | None = None
    FAIL_TO_PASS: list[str] = Field(default_factory=list)
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    hints_text: str | None = None
    created_at: str | None = None
    version: str | None = None
    environment_setup_commit: str | None = None
    difficulty: str | None = None
    # Answer tasks (exact / regex / json scorers).
    answer: str | None = Field(None, description="Gold answer (what the oracle agent submits).")
    eval_script: str | None = Field(None, description="Command that runs the tests.")
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _swe_bench_aliases(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            if "instance_id" in data:
                instance_id = data.pop("instance_id")
                data.setdefault("id", instance_id)
            if "problem_statement" in data:
                statement = data.pop("problem_statement")
                data.setdefault("prompt", statement)
            # Once, not per key: the class property costs ~1 us a call, 20+ keys per task.
            fields = cls.model_fields
            extra = {k: v for k, v in data.items() if k not in fields}
            for name in extra:
                _refuse_a_misspelt_field(name)
            if extra:
                # Kept, not refused: the task's own `metadata` wins over a same-named field.
                metadata = data.get("metadata")
                kept = {**extra, **metadata} if isinstance(metadata, dict) else extra
                data = {k: v for k, v in data.items() if k not in extra} | {"metadata": kept}
        return data

    @field_validator("id")
    @classmethod
    def _id_is_safe(cls, value: str) -> str:
        # fullmatch: `$` would also accept a trailing newline, which then lands in every
        # trajectory id, log line and report row made from it.
        if not _ID_PATTERN.fullmatch(value) or "@" in value or ".." in value:
            raise ValueError(
                "task ids may hold letters, digits, '.', '_', '-', '/' (no '@', no '..')"
            )
        return value

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _test_lists(cls, value: Any) -> Any:
        return _json_list(value)

    @field_validator("setup", mode="before")
    @classmethod
    def _setup_as_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("paths", mode="before")
    @classmethod
    def _paths_as_entries(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"path": entry} if isinstance(entry, str) else entry for entry in value]
        return value

    @property
    def instance_key(self) -> str:
        """Tasks with the same environment share one instance (and its concurrency limit)."""
        key: list[Any] = [self.image, self.path, self.workdir, self.setup, self.base_commit]
        if self.paths:  # (only then: keys of tasks without are those older ledgers hold)
            key.append([entry.model_dump() for entry in self.paths])
        return json.dumps(key)


class AutoLimit(_Strict):
    """An adaptive limit (AIMD, see `adaptive.py`): grows while calls succeed, shrinks on
    429, 5xx, timeouts and connection failures. `"auto"` is this with its defaults."""

    mode: Literal["auto"] = "auto"
    min: int = Field(1, ge=1, description="Never below this many calls in flight.")
    max: int = Field(256, ge=1, description="Never above this many.")
    start: int | None = Field(None, ge=1, description="First limit (default: `min`).")

    @model_validator(mode="after")
    def _bounds_ordered(self) -> AutoLimit:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        if self.start is not None and not self.min <= self.start <= self.max:
            raise ValueError(f"start ({self.start}) is outside min..max ({self.min}..{self.max})")
        return self


class Limits(_Strict):
    """How much runs at once and how long anything may take."""

    concurrency: int = Field(8, ge=1, le=10_000, description="Trajectories in flight at once.")
    per_instance: int = Field(
        4, ge=1, description="Generations in flight per instance (tasks with an environment)."
    )
    per_endpoint: Annotated[int, Field(ge=1)] | AutoLimit = Field(
        16,
        description='Concurrent calls per model endpoint, or "auto" (optionally {"mode": "auto", '
        '"min": 1, "max": 64}): found by AIMD while the campaign runs, each change recorded.',
    )
    provisioning: int = Field(2, ge=1, description="Instances being provisioned at once.")
    instances: int | None = Field(
        None,
        ge=1,
        description="Instances alive at once (the instance budget); when reached, the least "
        "recently used idle instance is closed to make room. Default: what this machine's "
        "memory and free disk hold, fixed when the campaign is created.",
    )
    instance_disk_mb: float = Field(
        1024.0,
        ge=0,
        description="Estimated disk per instance alive (its workspaces' files), for the "
        "preflight that refuses a campaign its disk cannot hold.",
    )
    image_disk_mb: float = Field(
        2048.0,
        ge=0,
        description="Estimated disk per distinct image (docker tasks), counted once however "
        "many tasks share it, for the same preflight.",
    )

    @field_validator("per_endpoint", mode="before")
    @classmethod
    def _auto_shorthand(cls, value: Any) -> Any:
        return {"mode": "auto"} if value == "auto" else value

    scoring: int = Field(4, ge=1, description="Evaluations in flight at once.")
    trajectory_timeout_s: float = Field(1800.0, gt=0, description="Wall clock per generation.")
    scoring_timeout_s: float = Field(1800.0, gt=0, description="Wall clock per evaluation.")
    max_attempts: int = Field(
        5,
        ge=1,
        description="Tries per phase and per cause of infrastructure error (the error's type); "
        "a resume gives every cause its tries again.",
    )
    retry_base_delay_s: float = Field(
        2.0, ge=0, description="First backoff delay after an infrastructure error; doubles, ±50%."
    )
    retry_max_delay_s: float = Field(
        60.0, ge=0, description="Longest backoff delay (before jitter)."
    )
    budget_usd: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="US dollars the campaign's model calls may cost. Once the ledger's total "
        "reaches it no trajectory starts, those generating end as `budget_exhausted` (not "
        "graded), and `resume` with a larger budget continues them. Every call must then have "
        "a price (a provider's cost, or its model in the price table).",
    )


class HostSandboxConfig(_Strict):
    """Instances on the machine that runs the campaign: `path` on local, `image` on docker."""

    type: Literal["host"] = "host"


class RaySandboxConfig(_Strict):
    """Instances on the worker nodes of a Ray cluster (needs `pip install 'mcp-evalserver[ray]'`).

    Each node hosts its instances with its own backend, chosen per task as on one machine (a
    `path` on local, an `image` on docker); nodes offer `sandbox_slots`, one per instance.
    """

    type: Literal["ray"] = "ray"
    address: str = Field(
        "auto",
        min_length=1,
        description="The cluster: `auto` (this machine's node's cluster), the head's `HOST:PORT`, "
        "or `ray://...` (Ray Client).",
    )


SandboxConfig = Annotated[HostSandboxConfig | RaySandboxConfig, Field(discriminator="type")]


class AdaptiveSamples(_Strict):
    """Adaptive sampling: `min` samples per task, then more where a task's outcomes disagree,
    until the mean pass rate's interval is as narrow as asked or every task is at `max`.

    The interval is the report's: the cluster-robust one when the tasks are clustered (by
    `cluster_by`, else by `repo` when every task has one), otherwise the bootstrap over tasks.
    """

    min: int = Field(2, ge=1, le=1000, description="Samples every task gets first.")
    max: int = Field(16, ge=1, le=1000, description="Samples no task goes beyond.")
    target_half_width: float = Field(
        description="Stop once the 95% interval of the mean pass rate is at most this wide on "
        "each side (0.03: within 3 points).",
    )
    cluster_by: str | None = Field(
        None,
        min_length=1,
        description="The task field (an attribute or a `metadata` key) whose values cluster "
        "the tasks for the interval; default `repo` when every task has one.",
    )

    @field_validator("target_half_width")
    @classmethod
    def _target_reachable(cls, value: float) -> float:
        if not 0 < value < 0.5:
            raise ValueError(
                f"target_half_width must be above 0 and below 0.5 (half the width of the mean "
                f"pass rate's interval, e.g. 0.03 for 3 points either side); got {value}"
            )
        return value

    @model_validator(mode="after")
    def _bounds_ordered(self) -> AdaptiveSamples:
        if self.min > self.max:
            raise ValueError(
                f"min ({self.min}) is above max ({self.max}): give min <= max, or an integer "
                "`samples` for a fixed count"
            )
        return self


def _samples_kind(value: Any) -> str:
    return "adaptive" if isinstance(value, dict | AdaptiveSamples) else "fixed"


Samples = Annotated[
    Annotated[Annotated[int, Field(ge=1, le=1000)], Tag("fixed")]
    | Annotated[AdaptiveSamples, Tag("adaptive")],
    Discriminator(_samples_kind),
]


class CampaignSpec(_Strict):
    """What to run. Tasks may be inline, a JSONL/JSON file or a SWE-bench task repository."""

    name: str = Field("campaign", description="A label; the campaign id starts with it.")
    tasks: list[Task] | str = Field(
        description="Inline tasks, or the path of a JSONL/JSON task file, of a SWE-bench task "
        "repository (a folder holding sweb.yaml), or of a Harbor task directory (or a folder of "
        "them)."
    )
    samples: Samples = Field(
        1,
        description='Trajectories per task: a number, or adaptive sampling (`{"min": 2, '
        '"max": 16, "target_half_width": 0.03}`): more samples where outcomes disagree, until '
        "the mean pass rate's interval is that narrow or every task is at max.",
    )
    agent: AgentConfig = Field(default_factory=NoopAgentConfig)
    scorer: ScorerConfig = Field(default_factory=ExactScorerConfig)
    limits: Limits = Field(default_factory=Limits)
    sandbox: SandboxConfig | None = Field(
        None, description="Where instances run; default: the server's choice (`--ray`) or here."
    )
    prices: dict[str, ModelPrice] | str | None = Field(
        None,
        description="US dollars per million tokens by model (`input`, `cached_input`, "
        "`output`), over the shipped table and $MCP_EVALSERVER_PRICES: inline, or the path of "
        'a price file ({"models": {...}}); recorded inline with the campaign.',
    )

    @field_validator("name")
    @classmethod
    def _name_is_safe(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", value):
            raise ValueError("use 1-64 letters, digits, '.', '_' or '-'")
        return value

    @model_validator(mode="after")
    def _task_ids_unique(self) -> CampaignSpec:
        if isinstance(self.tasks, list):
            seen: set[str] = set()
            for task in self.tasks:
                if task.id in seen:
                    raise ValueError(f"task id {task.id!r} appears twice")
                seen.add(task.id)
        return self

    @property
    def adaptive(self) -> AdaptiveSamples | None:
        """The adaptive sampling settings, or None for a fixed number of samples."""
        return self.samples if isinstance(self.samples, AdaptiveSamples) else None

    @property
    def initial_samples(self) -> int:
        """Samples every task gets from the start (all of them, unless adaptive)."""
        return self.samples.min if isinstance(self.samples, AdaptiveSamples) else self.samples

    @property
    def max_samples(self) -> int:
        """The most samples a task can get."""
        return self.samples.max if isinstance(self.samples, AdaptiveSamples) else self.samples

    def resolved(self, base_dir: Path | None = None) -> CampaignSpec:
        """Returns this spec with a task file replaced by its tasks (what the ledger records).

        Raises:
            InvalidInput: the task file is missing, unreadable or holds an invalid task, or
                the price file is not one.
        """
        resolved = self
        if isinstance(self.prices, str):
            prices = Path(self.prices)
            if not prices.is_absolute() and base_dir is not None:
                prices = base_dir / prices
            resolved = resolved.model_copy(update={"prices": read_price_file(prices)})
        scorer = self.scorer
        if isinstance(scorer, TestsScorerConfig) and isinstance(scorer.ignore_tests, str):
            ignore = read_ignore_file(_relative_to(Path(scorer.ignore_tests), base_dir))
            scorer = scorer.model_copy(update={"ignore_tests": ignore})
            resolved = resolved.model_copy(update={"scorer": scorer})
        if isinstance(self.tasks, list):
            return resolved
        path = Path(self.tasks)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return resolved.model_copy(update={"tasks": load_tasks(path)})

    def task_list(self) -> list[Task]:
        """The tasks of a resolved spec."""
        if not isinstance(self.tasks, list):
            raise InvalidInput("the spec's task file has not been loaded; call resolved() first")
        return self.tasks


def extra_task_fields(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The fields of raw task records that a task does not know (kept as its metadata)."""
    known = set(Task.model_fields) | set(_ALIASES)
    return sorted({key for row in rows for key in row if key not in known})


def note_extra_task_fields(rows: Iterable[Mapping[str, Any]], source: object) -> None:
    """Says (a warning on stderr or in the server's log) which fields went to metadata."""
    extra = extra_task_fields(rows)
    if extra:
        logger.warning(
            "%s: %s %s not task field(s); kept in each task's `metadata`",
            source,
            ", ".join(extra),
            "is" if len(extra) == 1 else "are",
        )


def _relative_to(path: Path, base_dir: Path | None) -> Path:
    return base_dir / path if not path.is_absolute() and base_dir is not None else path


def read_ignore_file(path: Path) -> dict[str, list[str]]:
    """A file of tests to grade neither way: `{"task id": ["test id", ...], ...}`.

    Raises:
        InvalidInput: unreadable, not JSON, or not that shape.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInput(f"cannot read scorer.ignore_tests file {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise InvalidInput(f"scorer.ignore_tests file {path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not all(
        isinstance(tests, list) and all(isinstance(t, str) for t in tests)
        for tests in data.values()
    ):
        raise InvalidInput(
            f"scorer.ignore_tests file {path}: expected "
            '{"task id": ["test id", ...]} (what `mcp-evalserver validate --write-ignore` writes)'
        )
    return {str(task): list(tests) for task, tests in data.items()}


def trajectory_id(task_id: str, sample: int) -> str:
    """Deterministic, so a resumed campaign names the same trajectories."""
    return f"{task_id}@{sample}"


def load_tasks(path: Path) -> list[Task]:
    """Reads tasks from a JSONL file (one object per line), a JSON list, a SWE-bench task
    repository (a folder holding `sweb.yaml`; see `swebench_repos`), or a Harbor task
    directory or a folder of them (`harbor`).

    Raises:
        InvalidInput: the file is missing, not JSON, or a task is invalid (line and field named).
    """
    if is_harbor_source(path):
        rows = _harbor_rows(path)
    elif path.is_dir():
        rows = _task_repo_rows(path)
    else:
        rows = _task_file_rows(path)
    note_extra_task_fields((row for _, row in rows if isinstance(row, dict)), path)
    tasks: list[Task] = []
    for where, row in rows:
        try:
            tasks.append(Task.model_validate(row))
        except ValidationError as exc:
            described = describe_validation_error(exc, task_json_schema())
            raise InvalidInput(f"{path} {where}: {described}") from exc
    if not tasks:
        raise InvalidInput(f"{path} holds no tasks")
    try:
        CampaignSpec(tasks=tasks)
    except ValidationError as exc:
        raise InvalidInput(f"{path}: {describe_validation_error(exc)}") from exc
    return tasks


def _task_repo_rows(path: Path) -> list[tuple[str, Any]]:
    return [(f"{TASKS_DIR}/{row['instance_id']}/{TASK_FILE}", row) for row in read_task_repo(path)]


def _harbor_rows(path: Path) -> list[tuple[str, Any]]:
    return [(row["metadata"]["harbor"]["directory"], row) for row in harbor_task_rows(path)]


def _task_file_rows(path: Path) -> list[tuple[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read task file {path}: {exc.strerror}") from exc
    stripped = text.lstrip()
    rows: list[tuple[str, Any]]
    try:
        if stripped.startswith("["):
            rows = [(f"item {i}", row) for i, row in enumerate(json.loads(text))]
        else:
            rows = [
                (f"line {n}", json.loads(line))
                for n, line in enumerate(text.splitlines(), start=1)
                if line.strip()
            ]
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path} is not JSON or JSONL: {exc}") from exc
    return rows


def parse_spec(data: Any, base_dir: Path | None = None) -> CampaignSpec:
    """Validates a spec (dict or JSON text) and loads its task file.

    Raises:
        InvalidInput: naming the field and the reason.
    """
    return validate_spec(data).resolved(base_dir)


def validate_spec(data: Any) -> CampaignSpec:
    """Validates a spec (dict or JSON text) without loading its task file.

    Raises:
        InvalidInput: one part per problem, `field.path: what was wrong (the choices)`.
    """
    _note_inline_extra_fields(data)
    try:
        if isinstance(data, str | bytes):
            return CampaignSpec.model_validate_json(data)
        return CampaignSpec.model_validate(data)
    except ValidationError as exc:
        described = describe_validation_error(exc, spec_json_schema())
        raise InvalidInput(f"invalid campaign spec: {described}") from exc


def _note_inline_extra_fields(data: Any) -> None:
    """The note `load_tasks` gives for a task file, for tasks written in the spec itself."""
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except ValueError:
            return  # validation names the JSON error
    tasks = data.get("tasks") if isinstance(data, dict) else None
    if isinstance(tasks, list):
        note_extra_task_fields((t for t in tasks if isinstance(t, dict)), "the spec's tasks")


def load_spec(path: Path) -> CampaignSpec:
    """Reads a spec file; a relative task file path is taken relative to the spec file.

    Raises:
        InvalidInput: the file is missing, not JSON, or invalid.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read spec file {path}: {exc.strerror}") from exc
    return parse_spec(text, base_dir=path.parent)


@functools.cache
def spec_json_schema() -> dict[str, Any]:
    """The JSON schema of a campaign spec (what spec files and the MCP tools accept).

    Cached: do not change what it returns.
    """
    return CampaignSpec.model_json_schema()


@functools.cache
def task_json_schema() -> dict[str, Any]:
    """The JSON schema of one task (cached: do not change what it returns)."""
    return Task.model_json_schema()


def nested_configs(config: BaseModel, at: str) -> Iterator[tuple[str, BaseModel]]:
    """`config` and every config nested in it (a combined scorer's parts), each with its place
    in the spec (`scorer.scorers[1]`)."""
    yield at, config
    for name in type(config).model_fields:
        value = getattr(config, name)
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        for index, item in items:
            if isinstance(item, BaseModel):
                yield from nested_configs(
                    item, f"{at}.{name}" if index is None else f"{at}.{name}[{index}]"
                )
