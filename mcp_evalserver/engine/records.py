"""The ledger's records: one pydantic model per kind, joined in one union discriminated by `kind`.

A line of `ledger.jsonl` is the envelope (`v`, `seq`, `ts`, `kind`, `campaign`, `trajectory`)
then the payload, in the order the fields are declared here: the models are the file format,
and the JSONL is byte for byte what the writer wrote before they existed (a fixture written by
that code, `tests/engine/fixtures/`, proves it). Three rules keep it so:

- A field whose writer leaves it out when it has no value (the `node` of a step run on one
  machine, `start` or `start_missing`, a rescore's `scorer`) is declared `absent_when_none`:
  None is never written for it. Every other field is written, null included.
- Fields nobody reads as a document of ours (a spec, a score, a submission's artifact refs,
  an error) stay JSON objects: their own models validate them where they are used (the spec
  by `replay`, a rescore's scorer by its `ScorerConfig`).
- Records are tolerant the way replay always was: a field that replay never required has a
  default, and fields a record does not declare (written by a newer version) are ignored
  (`extra="ignore"`), as replay ignored them. A kind this version does not know becomes an
  `OtherRecord`, kept whole (`extra="allow"`), which replay counts and otherwise leaves alone.

The writer stamps the envelope (`seq`, `ts`, `campaign`): a record is made without it, e.g.
`Generated(trajectory=tid, attempt=1, submission=..., usage=None, duration_s=0.2)`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import json
import operator
from collections.abc import Iterator
from typing import Annotated, Any, Literal, NotRequired, TypeVar

import pydantic_core
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from mcp_evalserver.errors import LedgerCorrupt

LEDGER_VERSION = 1
#: The envelope fields a record read from a ledger must hold (the others have defaults).
_READ_ENVELOPE = frozenset({"seq", "ts", "kind"})

Outcome = Literal["resolved", "failed", "error", "timeout", "infra_error", "budget_exhausted"]


def _none(value: Any) -> bool:
    return value is None


def absent_when_none(default: Any = None) -> Any:
    """A field its writer leaves out of the line when it is None (never `null` on disk)."""
    return Field(default=default, exclude_if=_none)


class LedgerRecordBase(BaseModel):
    """The envelope every record carries; the writer fills `v`, `seq`, `ts` and `campaign`."""

    # Fields a record does not declare (a newer version's) are ignored, as replay always
    # ignored them; keeping them costs every record of every replay a dict of its own.
    model_config = ConfigDict(extra="ignore", frozen=True)

    v: int = LEDGER_VERSION
    seq: int = -1
    ts: float = 0.0
    kind: str
    campaign: str = ""
    trajectory: str | None = None


class CampaignCreated(LedgerRecordBase):
    """The first record: the resolved spec (tasks loaded); every trajectory starts pending."""

    kind: Literal["campaign_created"] = "campaign_created"
    spec: dict[str, Any]


class RunStarted(LedgerRecordBase):
    """A process began (or resumed) running the campaign."""

    kind: Literal["run_started"] = "run_started"
    pid: int | None = None
    resumed: bool = False


class CampaignCancelled(LedgerRecordBase):
    """Cancelled until a `run_started` resumes it: asked by a person or its process stopped."""

    kind: Literal["campaign_cancelled"] = "campaign_cancelled"
    done: int | None = None
    # Records written before `by` existed were all asked for (replay reads None so).
    by: Literal["request", "shutdown"] | None = absent_when_none()


class LedgerRepaired(LedgerRecordBase):
    """A torn tail of `dropped_bytes` was cut when the ledger was reopened."""

    kind: Literal["ledger_repaired"] = "ledger_repaired"
    dropped_bytes: int = 0


class AttemptStarted(LedgerRecordBase):
    """pending -> generating (attempt n)."""

    kind: Literal["attempt_started"] = "attempt_started"
    attempt: int


class Generated(LedgerRecordBase):
    """generating -> generated: the submission's answer and artifacts, the model usage."""

    kind: Literal["generated"] = "generated"
    attempt: int | None = None
    submission: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    duration_s: float | None = None
    node: str | None = absent_when_none()


class StepFailed(LedgerRecordBase):
    """A generation or scoring attempt that failed: final, or to be tried again."""

    outcome: Outcome | None = None
    final: bool = False
    error: dict[str, Any] | None = None
    duration_s: float | None = None
    node: str | None = absent_when_none()


class GenerationFailed(StepFailed):
    """generating -> pending, or -> done with outcome error, timeout or infra_error."""

    kind: Literal["generation_failed"] = "generation_failed"


class ScoringStarted(LedgerRecordBase):
    """generated -> scoring."""

    kind: Literal["scoring_started"] = "scoring_started"


class Scored(LedgerRecordBase):
    """scoring -> done, with the outcome the score names."""

    kind: Literal["scored"] = "scored"
    score: dict[str, Any]
    duration_s: float | None = None
    node: str | None = absent_when_none()


class ScoringFailed(StepFailed):
    """scoring -> generated, or -> done with outcome infra_error, error or timeout."""

    kind: Literal["scoring_failed"] = "scoring_failed"


class RescoreRequested(LedgerRecordBase):
    """The named finished generations go back to generated; optionally a new scorer."""

    kind: Literal["rescore_requested"] = "rescore_requested"
    trajectories: list[str] = []
    scorer: dict[str, Any] | None = absent_when_none()


class RetryRequested(LedgerRecordBase):
    """The named trajectories that ended in an infrastructure failure run again."""

    kind: Literal["retry_requested"] = "retry_requested"
    trajectories: list[str] = []


class InstanceReprovisioned(LedgerRecordBase):
    """An instance was found dead and provisioned again (health)."""

    kind: Literal["instance_reprovisioned"] = "instance_reprovisioned"
    backend: str | None = None
    instance: str | None = None
    task: str | None = None
    reason: str | None = None


class EndpointLimitChanged(LedgerRecordBase):
    """An adaptive per-endpoint limit changed (a resume starts from the last)."""

    kind: Literal["endpoint_limit"] = "endpoint_limit"
    endpoint: str
    previous: int
    limit: int
    reason: str | None = None
    retry_after_s: float | None = None


class EndpointCalls(LedgerRecordBase):
    """A run's calls per model endpoint, by how they went ("ok", "HTTP 429", ...)."""

    kind: Literal["endpoint_calls"] = "endpoint_calls"
    calls: dict[str, dict[str, int]] = {}


class JudgeCalibrated(LedgerRecordBase):
    """The judge's agreement with human labels (`calibrate`), for the report."""

    kind: Literal["judge_calibrated"] = "judge_calibrated"
    calibration: dict[str, Any] = {}


class TrajectoryBranched(LedgerRecordBase):
    """A new trajectory (`<parent>.<n>`) forked from `parent` at its workspace's checkpoint."""

    kind: Literal["trajectory_branched"] = "trajectory_branched"
    parent: str | None = None
    checkpoint: str | None = None


class CheckpointKept(LedgerRecordBase):
    """The checkpoint the named branches forked at, kept as the artifact `start`; or why not."""

    kind: Literal["checkpoint_kept"] = "checkpoint_kept"
    trajectories: list[str] = []
    checkpoint: str | None = None
    start: dict[str, Any] | None = absent_when_none()
    start_missing: str | None = absent_when_none()


class BranchRestarted(LedgerRecordBase):
    """A branch attempt without its fork began at its `checkpoint`, or `clean` (`reason`)."""

    kind: Literal["branch_restarted"] = "branch_restarted"
    source: Literal["checkpoint", "clean"] | None = None
    checkpoint: str | None = absent_when_none()
    reason: str | None = absent_when_none()


class ModelUsageRecorded(LedgerRecordBase):
    """Model calls made for a trajectory, and what they cost (None: unknown, never a guess).

    `source`: the agent's own calls, the judge's (scoring), or usage the agent's program
    `reported` through its endpoint. The ledger's total cost is the sum of these records.
    """

    kind: Literal["model_usage"] = "model_usage"
    source: Literal["agent", "judge", "reported"] = "agent"
    model: str | None = None
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    cost_usd: float | None = None
    #: Whose figure `cost_usd` is: the provider's own, or the price table's.
    priced_by: Literal["provider", "table"] | None = None


class BudgetExhausted(LedgerRecordBase):
    """pending or generating -> done with outcome budget_exhausted: the budget was spent."""

    kind: Literal["budget_exhausted"] = "budget_exhausted"
    spent_usd: float | None = None
    budget_usd: float | None = None


class BudgetSet(LedgerRecordBase):
    """The budget is now `budget_usd` (None: none); the named trajectories, stopped at the
    budget before, go back to pending."""

    kind: Literal["budget_set"] = "budget_set"
    budget_usd: float | None = None
    trajectories: list[str] = []


class SamplesPlanned(LedgerRecordBase):
    """Adaptive sampling: `added` more samples per task (`<task>@<n>` onwards, pending), and why.

    Made from the graded outcomes of every trajectory planned before it, all finished: the
    interval's `half_width` then (`interval` names which), per task what it had (`basis`:
    resolved / graded) and why it got more (`reasons`), and the half-width the new samples
    are expected to bring (`predicted_half_width`).
    """

    kind: Literal["samples_planned"] = "samples_planned"
    round: int
    added: dict[str, int]
    half_width: float
    predicted_half_width: float | None = None
    target_half_width: float
    interval: str
    basis: dict[str, list[int]] = {}
    reasons: dict[str, str] = {}


class SamplingStopped(LedgerRecordBase):
    """Adaptive sampling is over: the interval is as narrow as asked, or every task is at max."""

    kind: Literal["sampling_stopped"] = "sampling_stopped"
    reason: Literal["target_reached", "max_reached"]
    half_width: float | None = None
    target_half_width: float
    interval: str | None = None
    #: Trajectories planned in all (what the campaign ran, against tasks x max).
    planned: int = 0


class OtherRecord(LedgerRecordBase):
    """A kind this version does not know (a newer version wrote it): kept whole, not fatal."""

    model_config = ConfigDict(extra="allow", frozen=True)


KnownRecord = (
    CampaignCreated
    | RunStarted
    | CampaignCancelled
    | LedgerRepaired
    | AttemptStarted
    | Generated
    | GenerationFailed
    | ScoringStarted
    | Scored
    | ScoringFailed
    | RescoreRequested
    | RetryRequested
    | InstanceReprovisioned
    | EndpointLimitChanged
    | EndpointCalls
    | JudgeCalibrated
    | TrajectoryBranched
    | CheckpointKept
    | BranchRestarted
    | ModelUsageRecorded
    | BudgetExhausted
    | BudgetSet
    | SamplesPlanned
    | SamplingStopped
)
KNOWN_KINDS: dict[str, type[LedgerRecordBase]] = {
    model.model_fields["kind"].default: model for model in KnownRecord.__args__
}
_OTHER = "other"


def _tag(value: Any) -> str | None:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    if not isinstance(kind, str):
        return None
    return kind if kind in KNOWN_KINDS else _OTHER


LedgerRecord = Annotated[
    Annotated[CampaignCreated, Tag("campaign_created")]
    | Annotated[RunStarted, Tag("run_started")]
    | Annotated[CampaignCancelled, Tag("campaign_cancelled")]
    | Annotated[LedgerRepaired, Tag("ledger_repaired")]
    | Annotated[AttemptStarted, Tag("attempt_started")]
    | Annotated[Generated, Tag("generated")]
    | Annotated[GenerationFailed, Tag("generation_failed")]
    | Annotated[ScoringStarted, Tag("scoring_started")]
    | Annotated[Scored, Tag("scored")]
    | Annotated[ScoringFailed, Tag("scoring_failed")]
    | Annotated[RescoreRequested, Tag("rescore_requested")]
    | Annotated[RetryRequested, Tag("retry_requested")]
    | Annotated[InstanceReprovisioned, Tag("instance_reprovisioned")]
    | Annotated[EndpointLimitChanged, Tag("endpoint_limit")]
    | Annotated[EndpointCalls, Tag("endpoint_calls")]
    | Annotated[JudgeCalibrated, Tag("judge_calibrated")]
    | Annotated[TrajectoryBranched, Tag("trajectory_branched")]
    | Annotated[CheckpointKept, Tag("checkpoint_kept")]
    | Annotated[BranchRestarted, Tag("branch_restarted")]
    | Annotated[ModelUsageRecorded, Tag("model_usage")]
    | Annotated[BudgetExhausted, Tag("budget_exhausted")]
    | Annotated[BudgetSet, Tag("budget_set")]
    | Annotated[SamplesPlanned, Tag("samples_planned")]
    | Annotated[SamplingStopped, Tag("sampling_stopped")]
    | Annotated[OtherRecord, Tag(_OTHER)],
    Discriminator(_tag),
]
"""Any record of a ledger: match on it (`case Scored(score=score): ...`)."""

_ONE = TypeAdapter[LedgerRecord](LedgerRecord)
_MANY = TypeAdapter[list[LedgerRecord]](list[LedgerRecord])
_Record = TypeVar("_Record", bound=LedgerRecordBase)


def _built(
    model: type[_Record],
    values: dict[str, Any],
    fields_set: set[str],
    extra: dict[str, Any] | None = None,
) -> _Record:
    """The record of `values` already checked against `model` (what `model_construct` makes,
    without its walk over the fields): every declared field, in declared order, and no other.
    """
    record = object.__new__(model)
    _set = object.__setattr__
    _set(record, "__dict__", values)
    _set(record, "__pydantic_fields_set__", fields_set)
    _set(record, "__pydantic_extra__", extra)
    _set(record, "__pydantic_private__", None)
    return record


def _typed_dict(name: str, fields: dict[str, Any]) -> Any:
    """A TypedDict made at run time (of a model's fields)."""
    make: Any = TypedDict
    return make(name, fields)


class _LineShape:
    """How a line of a known kind becomes its record without building a model in pydantic-core.

    pydantic-core checks a line against a TypedDict of the model's own fields (the model's
    annotations: one declaration) about as fast as it parses JSON into dicts, while building
    model instances costs it three times that. The envelope's `seq`, `ts` and `kind` are
    required there, so a line without them is refused as `parse_record` refuses it.
    """

    def __init__(self, model: type[LedgerRecordBase]) -> None:
        self.model = model
        fields = model.model_fields
        self.line = _typed_dict(
            f"{model.__name__}Line",
            {
                name: info.annotation
                if info.is_required() or name in _READ_ENVELOPE
                else NotRequired.__getitem__(info.annotation)
                for name, info in fields.items()
            },
        )
        # Declared order, each field's default (a required one is always in the line).
        self.template = {name: info.default for name, info in fields.items()}
        # pydantic gives each record a copy of a default it could change (`[]`, `{}`).
        self.mutable = tuple(
            (name, info.default)
            for name, info in fields.items()
            if isinstance(info.default, list | dict | set)
        )
        # One set of field names for every record that holds the same fields (nearly all of a
        # kind do), not one each: a record is then two objects for the cycle collector to
        # visit on every pass, as a dict of main's was one. pydantic copies a record's set
        # before it changes it (`model_copy`), and nothing else changes one.
        self.all_fields = set(fields)
        self.size = len(fields)
        # The fields a writer leaves out when None come last in every kind: a line without
        # any of them (a step run on one machine has no `node`) gets them appended, in order.
        absent = [name for name, info in fields.items() if info.exclude_if is _none]
        self.absent = {name: fields[name].default for name in absent}
        self.fields_without_absent = self.all_fields - set(absent)
        if list(fields)[len(fields) - len(absent) :] != absent:
            raise TypeError(f"{model.__name__}: declare its absent_when_none fields last")
        self.fields_sets: dict[tuple[str, ...], set[str]] = {}

    def record(self, line: dict[str, Any]) -> LedgerRecordBase:
        """The record of a checked line that leaves out some of its kind's fields."""
        keys = tuple(line)
        fields_set = self.fields_sets.get(keys)
        if fields_set is None:
            fields_set = self.fields_sets[keys] = set(keys)
        values = self.template.copy()
        values.update(line)
        for name, default in self.mutable:
            if name not in line:
                values[name] = copy.deepcopy(default)
        return _built(self.model, values, fields_set)


_SHAPES = {kind: _LineShape(model) for kind, model in KNOWN_KINDS.items()}
# Every line of the known kinds, checked from JSON in one pass with no Python call per line
# (a ledger of known kinds is every ledger this version wrote).
_LINES: Any = list[  # type: ignore[misc]
    Annotated[
        functools.reduce(operator.or_, (shape.line for shape in _SHAPES.values())),
        Field(discriminator="kind"),
    ]
]
_KNOWN_LINES = TypeAdapter[list[dict[str, Any]]](_LINES)


def parse_record(raw: Any) -> LedgerRecord:
    """The record of one decoded ledger line.

    Raises:
        LedgerCorrupt: it is no object, lacks `seq`, `ts` or `kind`, or lacks (or garbles) a
            field its kind has; the message names its seq and kind.
    """
    try:
        record = _ONE.validate_python(raw)
    except ValidationError as exc:
        raise _garbled(raw, _describe(exc)) from exc
    _check_envelope(record, raw)
    return record


def parse_records(raws: list[Any]) -> list[LedgerRecord]:
    """`parse_record` of each, in one validation (the one that fails is then found alone).

    Raises:
        LedgerCorrupt: as `parse_record`, for the first record that is.
    """
    try:
        records = _MANY.validate_python(raws)
    except ValidationError:
        return [parse_record(raw) for raw in raws]
    for record, raw in zip(records, raws, strict=True):
        _check_envelope(record, raw)
    return records


def parse_json_lines(array: bytes) -> list[LedgerRecord] | None:
    """The records of a JSON array of ledger lines, or None when it is not one (not JSON, an
    item not an object, a record that `parse_record` refuses): read them one by one then, to
    name the bad one.
    """
    try:
        lines = _KNOWN_LINES.validate_json(array)
    except ValidationError:
        # Not JSON, not objects, or not only the kinds this version knows: the tolerant path.
        try:
            raws = pydantic_core.from_json(array)
        except ValueError:
            return None
        if type(raws) is not list or any(type(r) is not dict for r in raws):
            return None
        try:
            return parse_records(raws)
        except LedgerCorrupt:
            return None
    # `_built` written out in the loop, for the line that holds every field of its kind (as
    # the writer writes them: the checked dict is already in declared order): a call per
    # record cost this loop four times what it costs written out, the most of a replay's time.
    records: list[LedgerRecord] = []
    append = records.append
    new, set_ = object.__new__, object.__setattr__
    shapes = _SHAPES
    for line in lines:
        shape = shapes[line["kind"]]
        if len(line) == shape.size:
            fields_set = shape.all_fields
        elif len(line) + len(shape.absent) == shape.size and shape.absent.keys().isdisjoint(line):
            line.update(shape.absent)
            fields_set = shape.fields_without_absent
        else:
            append(shape.record(line))  # type: ignore[arg-type]
            continue
        record: Any = new(shape.model)
        set_(record, "__dict__", line)
        set_(record, "__pydantic_fields_set__", fields_set)
        set_(record, "__pydantic_extra__", None)
        set_(record, "__pydantic_private__", None)
        append(record)
    return records


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pauses Python's cycle collector while a whole ledger's records are made.

    Records hold no reference cycles, but each is two new objects or more: over a
    100,000-record ledger the collector ran hundreds of times, each pass over the growing
    heap, and cost more than the decoding. Paused, it runs once afterwards. Only the pause
    that found it enabled enables it again (another thread's pause may overlap).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def record_json(record: LedgerRecordBase) -> dict[str, Any]:
    """The record as the JSON object its ledger line holds (keys in the ledger's order).

    What `model_dump` gives, made from the fields as they are (declared order, the values
    themselves: no record holds a model), several times faster on the writer's path.
    """
    absent = _absent_when_none(type(record))
    found = {k: v for k, v in record.__dict__.items() if v is not None or k not in absent}
    if record.__pydantic_extra__:
        found.update(record.__pydantic_extra__)
    return found


def encode(record: LedgerRecordBase) -> bytes:
    """The record's ledger line (with its line break)."""
    if record.__pydantic_extra__ or _absent_when_none(type(record)):
        fields = record_json(record)
    else:
        fields = record.__dict__  # every field written, as it is: no copy to make
    return _encode_json(fields).encode() + b"\n"


# What `json.dumps(..., separators=(",", ":"), ensure_ascii=False)` writes, without making
# an encoder for each line.
_encode_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


@functools.cache
def _absent_when_none(model: type[LedgerRecordBase]) -> frozenset[str]:
    return frozenset(name for name, info in model.model_fields.items() if info.exclude_if is _none)


def stamp(record: _Record, seq: int, ts: float, campaign: str) -> _Record:
    """The record with the envelope the writer gives it (the record itself is left as it was).

    `model_copy(update=...)` without its generic copying: the writer stamps every record.
    """
    values = record.__dict__.copy()
    values.update(v=LEDGER_VERSION, seq=seq, ts=ts, campaign=campaign)
    extra = record.__pydantic_extra__
    return _built(
        type(record),
        values,
        record.model_fields_set | _STAMPED,
        extra.copy() if extra is not None else None,
    )


_STAMPED = frozenset({"v", "seq", "ts", "campaign"})


def _check_envelope(record: LedgerRecordBase, raw: Any) -> None:
    if not record.model_fields_set >= _READ_ENVELOPE:
        missing = sorted(_READ_ENVELOPE - record.model_fields_set)
        raise _garbled(raw, f"KeyError: {', '.join(map(repr, missing))}")


def _garbled(raw: Any, detail: str) -> LedgerCorrupt:
    seq = raw.get("seq", "?") if isinstance(raw, dict) else "?"
    kind = raw.get("kind", "?") if isinstance(raw, dict) else "?"
    if kind == "campaign_created" and seq in (0, "?"):
        missing = [f for f in FIRST_RECORD_FIELDS if f not in raw]
        if missing:
            return first_record_lacks(missing)
    # Only an edited or damaged ledger gets here (ours are written whole): name the record,
    # not a validation error from deep inside a model.
    return LedgerCorrupt(
        f"ledger record seq {seq!r} ({kind!r}) lacks or garbles a field ({detail}); move the "
        "ledger aside and inspect it: a ledger is never rewritten"
    )


#: What the first record must hold for a campaign to be replayed at all.
FIRST_RECORD_FIELDS = ("spec", "campaign", "ts", "seq")


def first_record_lacks(missing: list[str]) -> LedgerCorrupt:
    return LedgerCorrupt(
        f"the ledger's campaign_created record lacks {', '.join(missing)}; move the "
        "ledger aside and inspect it: a ledger is never rewritten"
    )


def _describe(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"][1:] if part != _OTHER) or "record"
    return f"{where}: {error['msg']}"
