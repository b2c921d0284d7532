"""What a validation campaign says of its tasks: the gold patch and the empty patch, each run
`runs` times on the task's one instance, read test by test.

A task is
- `broken` when its gold patch resolves in none of its runs;
- `trivial` when the empty patch resolves in any run (the tests pass without the fix);
- `flaky` when the gold patch resolves in some runs only, or a test's verdict differs between
  identical runs (the gold runs among themselves, the empty runs among themselves);
- `ok` otherwise; `pending` until every run has an outcome.

The flaky tests make the ignore list (`{"task id": [test ids]}`) that the `tests` scorer takes
as `ignore_tests`; the clean task file holds the `ok` and `flaky` tasks whose ignored tests
leave a FAIL_TO_PASS test to grade. Everything is read from the ledger's replay: a validation is
an ordinary campaign, resumed like one.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

from mcp_evalserver.engine.state import CampaignState, TrajectoryState
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.spec.agents import ValidationAgentConfig
from mcp_evalserver.spec.campaign import Task

Verdict = Literal["ok", "flaky", "broken", "trivial", "pending"]
#: The test lists of a SWE-bench report, and the two ways a run leaves a test.
_LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")
_WAYS = ("success", "failure")


def validation_runs(state: CampaignState) -> int:
    """The gold runs (and empty runs) per task of a validation campaign.

    Raises:
        InvalidInput: the campaign is not a validation.
    """
    agent = state.spec.agent
    if not isinstance(agent, ValidationAgentConfig):
        raise InvalidInput(
            f"campaign {state.id} is not a validation (its agent is {agent.type!r}); "
            "start one with `mcp-evalserver validate TASKS`"
        )
    return agent.runs


def validation_report(state: CampaignState) -> dict[str, Any]:
    """Per task: its verdict, gold and empty resolutions, and the tests behind the verdict
    (with the ids of the runs that showed each); the ignore list; counts by verdict.

    Raises:
        InvalidInput: the campaign is not a validation.
    """
    runs = validation_runs(state)
    by_task: dict[str, list[TrajectoryState]] = defaultdict(list)
    for trajectory in state.trajectories.values():
        by_task[trajectory.task_id].append(trajectory)
    tasks = {task.id: task for task in state.spec.task_list()}
    rows = {
        task_id: _task_row(
            tasks[task_id],
            sorted(by_task[task_id], key=lambda t: t.sample),
            runs,
            state.spec.max_samples,
        )
        for task_id in tasks
    }
    counts: dict[str, int] = defaultdict(int)
    for row in rows.values():
        counts[row["verdict"]] += 1
    return {
        "campaign": state.id,
        "runs": runs,
        "verdicts": dict(sorted(counts.items())),
        "tasks": rows,
        "ignore_tests": {t: row["ignore"] for t, row in rows.items() if row["ignore"]},
    }


def _task_row(
    task: Task, trajectories: list[TrajectoryState], runs: int, samples: int
) -> dict[str, Any]:
    gold = [t for t in trajectories if t.sample < runs]
    empty = [t for t in trajectories if t.sample >= runs]
    finished = len(trajectories) >= samples and all(t.outcome for t in trajectories)
    gold_resolved = sum(t.outcome == "resolved" for t in gold)
    empty_resolved = sum(t.outcome == "resolved" for t in empty)
    seen = {"gold": _test_runs(gold), "empty": _test_runs(empty)}
    flips = sorted(
        {
            test
            for side in seen.values()
            for test, ways in side.items()
            if ways["success"] and ways["failure"]
        }
    )
    evidence = {
        "fail_to_pass_failing_with_gold": _named(seen["gold"], "FAIL_TO_PASS", "failure"),
        "fail_to_pass_passing_without_fix": _named(seen["empty"], "FAIL_TO_PASS", "success"),
        "pass_to_pass_failing_on_base": _named(seen["empty"], "PASS_TO_PASS", "failure"),
        "flaky": {
            test: {
                side: {way: seen[side][test][way] for way in _WAYS if seen[side][test][way]}
                for side in seen
                if test in seen[side]
            }
            for test in flips
        },
    }
    verdict: Verdict
    if not finished:
        verdict = "pending"
    elif gold_resolved == 0:
        verdict = "broken"
    elif empty_resolved:
        verdict = "trivial"
    elif gold_resolved < len(gold) or flips:
        verdict = "flaky"
    else:
        verdict = "ok"
    fail_to_pass = set(task.FAIL_TO_PASS)
    # Ignoring every FAIL_TO_PASS test would leave nothing that needs the fix.
    cleanable = verdict == "ok" or (verdict == "flaky" and bool(fail_to_pass - set(flips)))
    rewards = sorted(t.score["score"] for t in gold if t.score and "score" in t.score)
    return {
        "verdict": verdict,
        "gold": {"resolved": gold_resolved, "runs": len(gold)},
        "empty": {"resolved": empty_resolved, "runs": len(empty)},
        "gold_score_range": [rewards[0], rewards[-1]] if rewards else None,
        "errors": {
            t.id: (t.score or {}).get("status") or (t.error or {}).get("message")
            for t in trajectories
            if t.outcome in ("error", "infra_error")
        },
        "tests": {name: value for name, value in evidence.items() if value},
        "ignore": flips if cleanable and verdict == "flaky" else [],
        "clean": cleanable,
    }


def _test_runs(trajectories: list[TrajectoryState]) -> dict[str, dict[str, list[str]]]:
    """By test id: the runs where it succeeded and where it failed, and under which list."""
    tests: dict[str, dict[str, list[str]]] = {}
    for trajectory in trajectories:
        status = ((trajectory.score or {}).get("details") or {}).get("tests_status") or {}
        for name in _LISTS:
            for way in _WAYS:
                for test in (status.get(name) or {}).get(way) or []:
                    entry = tests.setdefault(test, {"list": [], "success": [], "failure": []})
                    if name not in entry["list"]:
                        entry["list"].append(name)
                    entry[way].append(trajectory.id)
    return tests


def _named(tests: dict[str, dict[str, list[str]]], name: str, way: str) -> dict[str, list[str]]:
    return {
        test: runs[way]
        for test, runs in sorted(tests.items())
        if name in runs["list"] and runs[way]
    }


def clean_tasks(state: CampaignState, report: dict[str, Any]) -> list[Task]:
    """The tasks worth grading anyone with: `ok`, and `flaky` ones that keep a FAIL_TO_PASS
    test once their flaky tests are ignored (the ignore list goes with them)."""
    rows = report["tasks"]
    return [task for task in state.spec.task_list() if rows[task.id]["clean"]]


def render_validation_markdown(report: dict[str, Any]) -> str:
    """The validation as a person reads it: a line of counts, then one row per task."""
    counts = ", ".join(f"{count} {verdict}" for verdict, count in report["verdicts"].items())
    lines = [
        f"# Validation {report['campaign']}",
        "",
        f"- {len(report['tasks'])} task(s), gold and empty patch {report['runs']} time(s) "
        f"each: {counts}",
        "",
        "| task | verdict | gold resolves | empty resolves | tests |",
        "|---|---|---|---|---|",
    ]
    for task_id, row in report["tasks"].items():
        notes = []
        for kind, tests in row["tests"].items():
            for test, runs in tests.items():
                where = (
                    runs
                    if isinstance(runs, list)
                    else [
                        f"{side} {way}: {', '.join(ids)}"
                        for side, ways in runs.items()
                        for way, ids in ways.items()
                    ]
                )
                notes.append(f"{kind} `{test}` ({'; '.join(where)})")
        lines.append(
            f"| {task_id} | {row['verdict']} | {row['gold']['resolved']}/{row['gold']['runs']} "
            f"| {row['empty']['resolved']}/{row['empty']['runs']} | {'<br>'.join(notes)} |"
        )
    if report["ignore_tests"]:
        lines += ["", "Flaky tests to ignore (`scorer.ignore_tests`):", ""]
        lines += [
            f"- {task_id}: " + ", ".join(f"`{t}`" for t in tests)
            for task_id, tests in report["ignore_tests"].items()
        ]
    return "\n".join(lines) + "\n"
