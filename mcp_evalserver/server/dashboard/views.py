"""What each dashboard page shows, gathered from a campaign's replayed state and its ledger.

Pure data for the templates (dicts and lists, no HTML): the live pages and the static report
render the same contexts. The figures come from `report.build_report` and
`report.build_comparison`, the ones the Markdown report and the MCP tools give; the expensive
ones (the bootstrap) are cached per campaign until its ledger grows.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from markupsafe import Markup

from mcp_evalserver.engine.comparison import build_comparison
from mcp_evalserver.engine.eval_sets import EvalSetStore
from mcp_evalserver.engine.leaderboard import build_leaderboard
from mcp_evalserver.engine.records import record_json
from mcp_evalserver.engine.report import build_report, verdicts
from mcp_evalserver.engine.state import (
    INFRA_OUTCOMES,
    UNGRADED_OUTCOMES,
    CampaignState,
    TrajectoryState,
)
from mcp_evalserver.errors import EvalServerError, NotFound
from mcp_evalserver.runtime.artifacts import read_artifact
from mcp_evalserver.scoring.stats.summary import Verdict, wilson_interval
from mcp_evalserver.server.dashboard import plots
from mcp_evalserver.server.dashboard.ledgers import CampaignLedger, LedgerCache
from mcp_evalserver.spec.campaign import Task

#: Rows per page of the task and trajectory tables: a 10,000-trajectory campaign is paged.
PAGE_SIZE = 100
#: Up to this many tasks the pass-rate plot has a bar per task; beyond, a histogram.
MAX_TASK_BARS = 200
#: The throughput plot keeps at most about this many of its points (evenly spaced).
MAX_LINE_POINTS = 500
#: Longer texts in a transcript are folded: the head is shown, the rest behind a click.
FOLD_CHARS = 2000
#: The test log shown on a trajectory page is cut to its head and tail beyond this.
LOG_CHARS = 400_000

#: A report that took t seconds is reused up to this many t after its campaign moved on.
REPORT_STALENESS = 10.0

TASK_SORTS = ("task", "samples", "resolved", "pass_rate", "pass_at_1", "infra_errors", "cost_usd")


@dataclass(frozen=True)
class TableQuery:
    """How the task table is sorted, filtered and paged (from the page's query string)."""

    sort: str = "task"
    descending: bool = False
    text: str = ""
    flaky_only: bool = False
    page: int = 1
    outcome: str = ""
    trajectory_page: int = 1

    @classmethod
    def from_params(cls, params: dict[str, str]) -> TableQuery:
        sort = params.get("sort", "task")
        return cls(
            sort=sort if sort in TASK_SORTS else "task",
            descending=params.get("dir") == "desc",
            text=params.get("q", "")[:200],
            flaky_only=params.get("flaky") == "1",
            page=_positive(params.get("page")),
            outcome=params.get("outcome", "")[:40],
            trajectory_page=_positive(params.get("tpage")),
        )


def _positive(text: str | None) -> int:
    try:
        return max(1, int(text or 1))
    except ValueError:
        return 1


def report_of(ledger: CampaignLedger) -> dict[str, Any]:
    """The campaign's report (`report.build_report`), recomputed at most every 10x its cost."""
    summary = ledger.persisted()
    if summary is not None:
        return summary.report
    report: dict[str, Any] = _figures_of(ledger)["report"]
    return report


def _figures_of(ledger: CampaignLedger) -> dict[str, Any]:
    def store(state: CampaignState, figures: dict[str, Any]) -> None:
        ledger.store_summary(
            state,
            row=campaign_row(state),
            report=figures["report"],
            plots={name: None if p is None else str(p) for name, p in figures["plots"].items()},
            columns=list(TRAJECTORY_COLUMNS),
            trajectories=[_trajectory_values(t) for t in state.trajectories.values()],
        )

    figures: dict[str, Any] = ledger.cached(
        "figures", _figures, stale_factor=REPORT_STALENESS, then=store
    )
    return figures


def summarise_unsummarised(cache: LedgerCache) -> list[str]:
    """Writes the summary of each campaign that has none matching its ledger and that no page
    follows yet, newest first, then forgets its state (the summary serves its pages, so
    memory is not held for campaigns nobody views). Returns the ids summarised.

    A server runs it once as it starts, in the background: a campaign run by the CLI, or
    finished while no server ran, then shows its first page from the summary too. A ledger
    that cannot be read is left to its page, which says why.
    """
    summarised = []
    for campaign_id in cache.ids():
        try:
            ledger = cache.get(campaign_id)
            if ledger.persisted() is not None:
                continue
            with ledger.lock:
                if ledger.state is not None:
                    continue  # a page read it first and follows it
                _figures_of(ledger)
                ledger.forget()
        except EvalServerError:
            continue
        summarised.append(campaign_id)
    return summarised


def _figures(state: CampaignState) -> dict[str, Any]:
    """The report and the plots, from one list of verdicts (a good part of the cost)."""
    finished = verdicts(state)
    return {"report": build_report(state, finished=finished), "plots": _plots(state, finished)}


# The campaigns list.


def campaign_row(state: CampaignState) -> dict[str, Any]:
    """One line of the campaigns list: cheap (no bootstrap), polled every second."""
    outcomes: Counter[str] = Counter(t.outcome for t in state.trajectories.values() if t.outcome)
    done = sum(outcomes.values())
    graded = done - sum(outcomes[o] for o in UNGRADED_OUTCOMES)
    resolved = outcomes["resolved"]
    total = len(state.trajectories)
    interval = wilson_interval(resolved, graded) if graded else None
    return {
        "id": state.id,
        "name": state.spec.name,
        "status": state.status,
        "done": done,
        "total": total,
        "progress": done / total if total else 1.0,
        "resolved": resolved,
        "graded": graded,
        "pass_rate": resolved / graded if graded else None,
        "ci": interval.model_dump() if interval else None,
        "agent": state.spec.agent.type,
        "scorer": state.spec.scorer.type,
        "started": state.created_ts,
        "duration_s": state.last_ts - state.created_ts,
        "infra_errors": sum(outcomes[o] for o in INFRA_OUTCOMES),
        "budget_exhausted": outcomes["budget_exhausted"],
        "cost_usd": state.spend.cost_usd if state.spend.records else None,
    }


def campaign_rows(cache: LedgerCache) -> list[dict[str, Any]]:
    """Every campaign, newest first; an unreadable ledger is a row that says why."""
    rows = []
    for campaign_id in cache.ids():
        try:
            rows.append(_row_of(cache.get(campaign_id)))
        except EvalServerError as exc:
            rows.append({"id": campaign_id, "error": str(exc)})
    return rows


def _row_of(ledger: CampaignLedger) -> dict[str, Any]:
    summary = ledger.persisted()
    if summary is not None:
        return summary.row
    row: dict[str, Any] = ledger.cached("row", campaign_row)
    return row


# The campaign page.


def campaign_page(
    ledger: CampaignLedger, query: TableQuery, *, everything: bool = False
) -> dict[str, Any]:
    """The campaign page's context; `everything` puts every row on one page (static report).

    From the summary beside the ledger while it matches the ledger, else from the state.
    """
    summary = ledger.persisted()
    convert: Callable[[Any], dict[str, Any]] | None
    if summary is not None:
        report, row = summary.report, summary.row
        plots = {name: None if p is None else Markup(p) for name, p in summary.plots.items()}
        rows: list[Any] = summary.trajectories
        label_at = summary.columns.index("label")
        labels = [r[label_at] for r in rows]
        convert = partial(_as_row, summary.columns)
    else:
        state = ledger.refresh()
        figures = _figures_of(ledger)
        report, row, plots = figures["report"], _row_of(ledger), figures["plots"]
        rows = list(state.trajectories.values())
        labels = [_label(t) for t in rows]
        convert = _trajectory_row
    tasks = _task_rows(report)
    shown = [row for row in tasks if _matches(row, query)]
    key = "task" if query.sort == "task" else query.sort
    shown.sort(key=lambda row: _sort_key(row[key]), reverse=query.descending)
    trajectories = [
        t
        for t, label in zip(rows, labels, strict=True)
        if label == query.outcome or not query.outcome
    ]
    return {
        "campaign": ledger.id,
        "report": report,
        "row": row,
        "query": query,
        "tasks": _page(shown, query.page, everything),
        "tasks_total": len(tasks),
        "flaky_count": sum(1 for row in tasks if row["flaky"]),
        "trajectories": _page(trajectories, query.trajectory_page, everything, convert),
        "outcome_labels": sorted(set(labels)),
        "plots": plots,
    }


def _task_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    flaky_graders = {f["task_id"]: f for f in report.get("flaky_graders") or []}
    costs = (report.get("cost") or {}).get("tasks", {})
    rows = []
    for task_id, row in report["tasks"].items():
        # Mixed results over samples: the task (or its grader) does not decide the same way.
        mixed = 0 < row["resolved"] < row["graded"]
        rows.append(
            {
                "task": task_id,
                "samples": row["samples"],
                "resolved": row["resolved"],
                "graded": row["graded"],
                "pass_rate": row["pass_rate"],
                "pass_at_1": row["pass_at_k"].get("1"),
                "infra_errors": row["infra_errors"],
                "cost_usd": costs.get(task_id, {}).get("cost_usd"),
                # Recorded, but some of it at no known price: not the same as no cost at all.
                "cost_unknown": task_id in costs and costs[task_id]["cost_usd"] is None,
                "flaky": mixed or task_id in flaky_graders,
                "grader": flaky_graders.get(task_id),
            }
        )
    return rows


def _matches(row: dict[str, Any], query: TableQuery) -> bool:
    if query.flaky_only and not row["flaky"]:
        return False
    return query.text.lower() in row["task"].lower()


def _sort_key(value: Any) -> tuple[int, Any]:
    # Unknown figures (None) sort after known ones, whatever the direction.
    return (0, value) if value is not None else (1, 0)


def _page(
    items: list[Any], page: int, everything: bool, convert: Callable[[Any], Any] | None = None
) -> dict[str, Any]:
    """One page of `items` (all of them with `everything`), each through `convert`."""
    pages = 1 if everything else max(1, math.ceil(len(items) / PAGE_SIZE))
    page = min(page, pages)
    chosen = items if everything else items[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    if convert is not None:
        chosen = [convert(item) for item in chosen]
    return {"items": chosen, "page": page, "pages": pages, "total": len(items)}


def _label(trajectory: TrajectoryState) -> str:
    return trajectory.outcome or trajectory.phase


#: A row of the trajectory table (a summary keeps each as a list of values in this order).
TRAJECTORY_COLUMNS = (
    "id",
    "task",
    "sample",
    "label",
    "status",
    "attempts",
    "generation_s",
    "scoring_s",
)


def _trajectory_values(trajectory: TrajectoryState) -> list[Any]:
    score = trajectory.score or {}
    return [
        trajectory.id,
        trajectory.task_id,
        trajectory.sample,
        _label(trajectory),
        score.get("status"),
        trajectory.attempts,
        trajectory.generation_s,
        trajectory.scoring_s,
    ]


def _trajectory_row(trajectory: TrajectoryState) -> dict[str, Any]:
    return _as_row(TRAJECTORY_COLUMNS, _trajectory_values(trajectory))


def _as_row(columns: Sequence[str], values: list[Any]) -> dict[str, Any]:
    return dict(zip(columns, values, strict=True))


def _plots(state: CampaignState, finished: list[Verdict]) -> dict[str, Markup | None]:
    report_tasks: dict[str, list[bool]] = {}
    for t in state.trajectories.values():
        if t.done and t.outcome not in UNGRADED_OUTCOMES:
            report_tasks.setdefault(t.task_id, []).append(t.outcome == "resolved")
    rates = sorted(((task, sum(r) / len(r)) for task, r in report_tasks.items()), key=_rate)
    if len(rates) <= MAX_TASK_BARS:
        per_task = plots.bars(rates, title="pass rate per task", y_label="pass rate")
    else:
        per_task = plots.histogram(
            [rate for _, rate in rates], bins=10, title="pass rate per task", x_label="pass rate"
        )
    latencies = [v.latency_s for v in finished if v.latency_s is not None]
    ends = sorted(v.finished_at for v in finished if v.finished_at is not None)
    throughput = None
    if ends:
        start = min(v.started_at for v in finished if v.started_at is not None)
        points = [(0.0, 0.0)] + [(end - start, n) for n, end in enumerate(ends, 1)]
        # A point per finished trajectory would be 10,000 points in a plot ~700 px wide.
        points = plots.thinned(points, MAX_LINE_POINTS)
        throughput = plots.line(
            {"finished": points},
            title="finished trajectories over time",
            x_label="time since the first start",
            y_label="finished",
            step=True,
        )
    return {
        "per_task": per_task,
        "latency": plots.histogram(
            latencies, title="latency per trajectory", x_label="seconds (generation + scoring)"
        ),
        "throughput": throughput,
        "concurrency": _endpoint_limits_plot(state),
    }


def _rate(item: tuple[str, float]) -> tuple[float, str]:
    return item[1], item[0]


def _endpoint_limits_plot(state: CampaignState) -> Markup | None:
    """Each adaptive endpoint limit over time, from the history its records left."""
    changes = [c for entry in state.endpoint_limits.values() for c in entry.history]
    if not changes:
        return None
    first = min(c["ts"] for c in changes)
    series = {
        endpoint: [(c["ts"] - first, float(c["limit"])) for c in entry.history]
        for endpoint, entry in state.endpoint_limits.items()
    }
    return plots.line(
        series,
        title="adaptive concurrency limit",
        x_label="time since the first change",
        y_label="limit",
        step=True,
    )


# The trajectory page.


def set_page(cache: LedgerCache, set_id: str) -> dict[str, Any]:
    """An evaluation set's leaderboard: each agent's row links to its campaign's page.

    Raises:
        NotFound: no such set (the message lists those there are).
    """
    sets = EvalSetStore(cache.store)
    evalset = sets.load(set_id)
    states = {agent: cache.get(cid).refresh() for agent, cid in evalset.campaigns.items()}
    return {"board": build_leaderboard(evalset, states)}


def set_rows(cache: LedgerCache) -> list[dict[str, Any]]:
    """The state directory's sets, newest first: id, name and agents."""
    sets = EvalSetStore(cache.store)
    found = [sets.load(set_id) for set_id in reversed(sets.list_ids())]
    return [{"id": s.id, "name": s.name, "agents": list(s.campaigns)} for s in found]


def trajectory_page(ledger: CampaignLedger, trajectory_id: str) -> dict[str, Any]:
    """The trajectory page's context: prompt, transcript, patch, test log, records.

    Raises:
        NotFound: the campaign has no such trajectory.
    """
    state = ledger.trajectory_state(trajectory_id)
    trajectory = state.trajectories.get(trajectory_id)
    if trajectory is None:
        raise NotFound(f"campaign {ledger.id} has no trajectory {trajectory_id!r}")
    task = next(t for t in state.spec.task_list() if t.id == trajectory.task_id)
    directory = ledger.path.parent
    submission = trajectory.submission or {}
    score = trajectory.score or {}
    details = score.get("details") or {}
    transcript, transcript_error = _artifact_json(directory, submission.get("transcript"))
    patch, patch_error = _artifact_text(directory, submission.get("patch"))
    log, log_error = _artifact_text(directory, details.get("log"))
    tests = _tests(details.get("tests_status"), task)
    return {
        "campaign": ledger.id,
        "trajectory": trajectory,
        "task": task,
        "answer": submission.get("answer"),
        "empty": submission.get("empty"),
        "transcript": [_entry(e) for e in transcript] if isinstance(transcript, list) else None,
        "transcript_error": transcript_error,
        "patch": _diff_lines(patch) if patch is not None else None,
        "patch_error": patch_error,
        "score": score,
        "details": {k: v for k, v in details.items() if k not in ("log", "tests_status")},
        "tests": tests,
        "log": _log_lines(log, tests) if log is not None else None,
        "log_error": log_error,
        "records": [
            json.dumps(record_json(r), indent=2, ensure_ascii=False)
            for r in ledger.records_of(trajectory_id)
        ],
    }


def _artifact_text(directory: Path, ref: Any) -> tuple[str | None, str | None]:
    if not isinstance(ref, dict):
        return None, None
    try:
        return read_artifact(directory, ref).decode(errors="replace"), None
    except EvalServerError as exc:
        return None, str(exc)


def _artifact_json(directory: Path, ref: Any) -> tuple[Any, str | None]:
    text, error = _artifact_text(directory, ref)
    if text is None:
        return None, error
    try:
        return json.loads(text), None
    except ValueError as exc:
        return None, f"the transcript is not JSON: {exc}"


#: Fields of a message that hold what its agent keeps beside the conversation: mini-swe-agent's
#: `extra` (litellm's whole response object, the cost, the parsed actions). Shown folded.
RAW_FIELDS = frozenset({"extra"})


def _entry(entry: Any) -> dict[str, Any]:
    """One transcript entry: a heading, and its fields with long texts folded."""
    if not isinstance(entry, dict):
        return {"kind": "note", "heading": "entry", "fields": [_field("value", entry)]}
    if "role" in entry:
        kind, heading = "message", str(entry["role"])
    elif "tool" in entry:
        kind, heading = "tool", f"tool call: {entry['tool']}"
    elif "event" in entry:
        kind, heading = "event", f"event: {entry['event']}"
    else:
        kind, heading = "note", "entry"
    if entry.get("name") and kind == "message":
        heading += f" ({entry['name']})"
    skip = {"role", "tool", "event"}
    fields = [
        _field(k, v, raw=kind == "message" and k in RAW_FIELDS)
        for k, v in entry.items()
        if k not in skip and v is not None
    ]
    # What a person reads first: the message's text and calls, the raw objects after them.
    return {"kind": kind, "heading": heading, "fields": sorted(fields, key=lambda f: f["raw"])}


def _field(name: str, value: Any, *, raw: bool = False) -> dict[str, Any]:
    """A field's text; past `FOLD_CHARS` the rest folded, and all of it when `raw`."""
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    if raw:
        return {"name": name, "head": "", "rest": text, "raw": True}
    if len(text) <= FOLD_CHARS:
        return {"name": name, "head": text, "rest": "", "raw": False}
    return {"name": name, "head": text[:FOLD_CHARS], "rest": text[FOLD_CHARS:], "raw": False}


def _diff_lines(patch: str) -> list[tuple[str, str]]:
    """Each line of a unified diff with its class: file header, hunk, added, removed, context."""
    lines = []
    for line in patch.splitlines():
        if line.startswith(("diff --git", "index ", "--- ", "+++ ", "new file", "deleted file")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        lines.append((kind, line))
    return lines


def _tests(status: Any, task: Task) -> list[dict[str, str]]:
    """FAIL_TO_PASS and PASS_TO_PASS tests with their results, from the graded report."""
    found = []
    if isinstance(status, dict):
        for group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            results = status.get(group) or {}
            for verdict in ("success", "failure"):
                for name in results.get(verdict) or []:
                    found.append({"group": group, "name": str(name), "result": verdict})
        return found
    # Not graded (the patch did not apply, or another scorer): the tests that would count.
    for group, names in (("FAIL_TO_PASS", task.FAIL_TO_PASS), ("PASS_TO_PASS", task.PASS_TO_PASS)):
        found += [{"group": group, "name": name, "result": "not run"} for name in names]
    return found


def _log_lines(log: str, tests: list[dict[str, str]]) -> dict[str, Any]:
    """The test log, cut to its head and tail, each line marked with the test it names."""
    cut = 0
    if len(log) > LOG_CHARS:
        cut = len(log) - LOG_CHARS
        log = log[: LOG_CHARS // 2] + log[-LOG_CHARS // 2 :]
    marks = {t["name"]: f"{t['group']} {t['result']}" for t in tests}
    lines = []
    for line in log.splitlines():
        mark = ""
        if marks:
            for token in line.split():
                found = marks.get(token)
                if found is not None:
                    mark = found
                    break
        lines.append((mark, line))
    return {"lines": lines, "cut": cut}


# Comparing two campaigns.


def comparison_page(cache: LedgerCache, a: str, b: str) -> dict[str, Any]:
    """B against A: the paired comparison and each shared task's pass rates side by side.

    Raises:
        NotFound: either campaign does not exist.
        InvalidInput: the verdicts cannot be compared.
    """
    ledger_a, ledger_b = cache.get(a), cache.get(b)
    state_a, state_b = ledger_a.refresh(), ledger_b.refresh()
    figures = build_comparison(state_a, state_b)
    report_a: dict[str, Any] = report_of(ledger_a)
    report_b: dict[str, Any] = report_of(ledger_b)
    rows = []
    for task_id in sorted(set(report_a["tasks"]) | set(report_b["tasks"])):
        rate_a = report_a["tasks"].get(task_id, {}).get("pass_rate")
        rate_b = report_b["tasks"].get(task_id, {}).get("pass_rate")
        if rate_a is None or rate_b is None:
            verdict = "not shared"
        else:
            verdict = "win" if rate_b > rate_a else "loss" if rate_b < rate_a else "tie"
        rows.append({"task": task_id, "a": rate_a, "b": rate_b, "verdict": verdict})
    return {
        "a": report_a,
        "b": report_b,
        "figures": figures,
        "rows": rows,
    }
