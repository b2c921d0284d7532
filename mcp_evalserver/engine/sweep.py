"""The concurrency sweep: a smoke campaign per concurrency level, to find a provider's ceiling.

"Run a 20-task smoke at concurrency 1, 10, 50, 100, plot error rate against throughput; the
right number is where the error rate starts to climb." Each level is a real, recorded campaign
(`<sweep>-c<level>`: the spec's first `tasks` tasks, `concurrency` and `per_endpoint` set to the
level), run one after the other so they do not compete. Running the same sweep id again
resumes: finished levels are kept as they are, an interrupted one resumes. Then
`<state>/sweeps/<id>/sweep.json` holds the figures per level and the recommendation, and
`sweep.png` the plot (with the `plot` extra).

A level is healthy when its error rate (task and infrastructure errors over finished
trajectories) stays within `ERROR_MARGIN` of the best level's, and the endpoint refused (429,
5xx, timeouts) at most `REFUSAL_SHARE` of its calls. The knee is the first unhealthy level; the
recommendation is the healthy level just below it.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from mcp_evalserver.agents.command import EndpointFactory
from mcp_evalserver.engine.formatting import percent
from mcp_evalserver.engine.parts import check_spec
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.state import INFRA_OUTCOMES, CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.sandboxes import SandboxPool
from mcp_evalserver.spec.campaign import CampaignSpec

SWEEPS_DIR = "sweeps"
PLAN_FILE = "plan.json"
SWEEP_FILE = "sweep.json"
PLOT_FILE = "sweep.png"
LOADS_FILE = "loads.json"
DEFAULT_LEVELS = (1, 10, 50, 100)
#: A level's error rate may exceed the best level's by this much and still be healthy.
ERROR_MARGIN = 0.02
#: The share of a level's calls the endpoint may refuse (429, 5xx, timeouts) while healthy.
REFUSAL_SHARE = 0.01

LevelStarted = Callable[[int, str], Awaitable[None]]


def sweeps_dir(store: CampaignStore) -> Path:
    return store.state_dir / SWEEPS_DIR


def parse_levels(text: str) -> list[int]:
    """`1,10,50` as levels, ascending, each once.

    Raises:
        InvalidInput: not a comma-separated list of positive integers.
    """
    try:
        levels = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as exc:
        raise InvalidInput(f"levels {text!r}: give positive integers, e.g. 1,10,50,100") from exc
    if not levels or levels[0] < 1:
        raise InvalidInput(f"levels {text!r}: give positive integers, e.g. 1,10,50,100")
    return levels


def plan_sweep(
    store: CampaignStore,
    spec: CampaignSpec,
    *,
    levels: Sequence[int] = DEFAULT_LEVELS,
    tasks: int = 20,
    samples: int | None = None,
    sweep_id: str | None = None,
) -> dict[str, Any]:
    """Writes a new sweep's plan (or returns an existing sweep's, to resume it).

    Raises:
        InvalidInput: bad levels, task count or id; or the id exists with another plan.
    """
    if sweep_id is None:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        sweep_id = f"{spec.name}-sweep-{stamp}-{secrets.token_hex(2)}"
    elif not sweep_id.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise InvalidInput(f"sweep id {sweep_id!r}: use letters, digits, '-', '_', '.'")
    if tasks < 1 or not levels or min(levels) < 1:
        raise InvalidInput("a sweep needs at least one task and levels of 1 or more")
    directory = sweeps_dir(store) / sweep_id
    if (directory / PLAN_FILE).is_file():
        plan: dict[str, Any] = json.loads((directory / PLAN_FILE).read_text())
        return plan
    chosen = spec.task_list()[:tasks]
    plan = {
        "id": sweep_id,
        "levels": sorted(set(levels)),
        "tasks": [task.id for task in chosen],
        # A fixed count: adaptive sampling would give each level a campaign of another size.
        "samples": samples or spec.initial_samples,
        "campaigns": {str(level): f"{sweep_id}-c{level}" for level in sorted(set(levels))},
        "spec": spec.model_copy(update={"tasks": chosen}).model_dump(mode="json"),
    }
    directory.mkdir(parents=True, exist_ok=True)
    _write(directory / PLAN_FILE, json.dumps(plan, indent=1))
    return plan


def level_spec(plan: dict[str, Any], level: int) -> CampaignSpec:
    """The campaign of one level: the plan's tasks, `concurrency` and `per_endpoint` = level."""
    spec = CampaignSpec.model_validate(plan["spec"])
    limits = spec.limits.model_copy(
        update={
            "concurrency": level,
            # A fixed limit: an adaptive one would hide the ceiling the sweep looks for.
            "per_endpoint": level,
            "per_instance": max(spec.limits.per_instance, level),
        }
    )
    return spec.model_copy(update={"limits": limits, "samples": plan["samples"]})


async def run_sweep(
    store: CampaignStore,
    plan: dict[str, Any],
    *,
    sandboxes: SandboxPool | None = None,
    on_level: LevelStarted | None = None,
    trajectory_endpoints: EndpointFactory | None = None,
) -> dict[str, Any]:
    """Runs (or resumes) every level's campaign, then writes sweep.json and sweep.png.

    `trajectory_endpoints` serves a `command` agent's endpoints (see `CampaignRunner`).

    Raises:
        InvalidInput: the spec's agent or scorer cannot be built.
        Conflict: another process runs one of the level campaigns.
    """
    directory = sweeps_dir(store) / plan["id"]
    for level in plan["levels"]:
        campaign_id = plan["campaigns"][str(level)]
        if on_level is not None:
            await on_level(level, campaign_id)
        scorer = None  # a level created before: its runner builds it from its ledger
        if not (store.directory(campaign_id) / "ledger.jsonl").is_file():
            spec = level_spec(plan, level)
            scorer = check_spec(spec)
            await store.create(spec, campaign_id, scorer=scorer)
        # A finished level is measured as it is: resuming it would retry its infrastructure
        # failures and change what the sweep measures.
        if store.load(campaign_id).status != "finished":
            await CampaignRunner(
                store,
                campaign_id,
                scorer=scorer,
                sandboxes=sandboxes,
                trajectory_endpoints=trajectory_endpoints,
            ).run()
            # Figures measured here are only as good as the machine was quiet: keep its load.
            loads = _read_json(directory / LOADS_FILE) or {}
            loads[str(level)] = list(os.getloadavg())
            _write(directory / LOADS_FILE, json.dumps(loads))
    result = summarise(store, plan)
    plotted = await anyio.to_thread.run_sync(write_plot, result, directory / PLOT_FILE)
    if not plotted:
        result["plot"] = None
        result["plot_missing"] = "install the `plot` extra (matplotlib) to draw sweep.png"
    _write(directory / SWEEP_FILE, json.dumps(result, indent=1))
    return result


def summarise(store: CampaignStore, plan: dict[str, Any]) -> dict[str, Any]:
    """sweep.json: the figures of each level and which level to use, with the reason."""
    rows = [level_figures(store.load(plan["campaigns"][str(lv)]), lv) for lv in plan["levels"]]
    loads = _read_json(sweeps_dir(store) / plan["id"] / LOADS_FILE) or {}
    for row in rows:
        row["load_average"] = loads.get(str(row["level"]))
    recommended, knee, reason = recommend(rows)
    return {
        "id": plan["id"],
        "levels": rows,
        "recommended": recommended,
        "knee": knee,
        "reason": reason,
        "tasks": len(plan["tasks"]),
        "samples": plan["samples"],
        "criteria": {"error_margin": ERROR_MARGIN, "refusal_share": REFUSAL_SHARE},
        "load_average": list(os.getloadavg()),
        "plot": PLOT_FILE,
    }


def level_figures(state: CampaignState, level: int) -> dict[str, Any]:
    """Throughput, error rates, refusals, latency and token rate of one level's campaign."""
    finished = [t for t in state.trajectories.values() if t.done]
    outcomes = Counter(str(t.outcome) for t in finished)
    count = len(finished)
    task_errors = outcomes["error"] + outcomes["timeout"]
    infra_errors = sum(outcomes[o] for o in INFRA_OUTCOMES)
    calls: Counter[str] = Counter()
    for counts in state.endpoint_calls.values():
        calls.update(counts)
    requests = sum(calls.values())
    http_429 = calls["HTTP 429"]
    http_5xx = sum(n for how, n in calls.items() if how.startswith("HTTP 5"))
    refused = requests - calls["ok"]
    tokens = sum(
        (t.usage or {}).get("input_tokens", 0) + (t.usage or {}).get("output_tokens", 0)
        for t in finished
    )
    latency = build_report(state)["summary"]["latency"]
    seconds = state.run_s
    return {
        "level": level,
        "campaign": state.id,
        "trajectories": count,
        "outcomes": dict(sorted(outcomes.items())),
        "duration_s": round(seconds, 3),
        "throughput_per_min": count / seconds * 60 if seconds > 0 else None,
        # Past the ceiling, failed trajectories end fast and inflate the raw throughput.
        "good_throughput_per_min": (count - task_errors - infra_errors) / seconds * 60
        if seconds > 0
        else None,
        "task_error_rate": task_errors / count if count else None,
        "infra_error_rate": infra_errors / count if count else None,
        "error_rate": (task_errors + infra_errors) / count if count else None,
        "pass_rate": outcomes["resolved"] / count if count else None,
        "requests": requests,
        "http_429": http_429,
        "http_5xx": http_5xx,
        "refused": refused,
        "refusal_share": refused / requests if requests else 0.0,
        "latency_p50_s": latency["p50_s"],
        "latency_p95_s": latency["p95_s"],
        "tokens_per_s": tokens / seconds if seconds > 0 else None,
    }


def recommend(rows: Sequence[dict[str, Any]]) -> tuple[int, int | None, str]:
    """The level to use, the knee (first unhealthy level, if any) and why, in a sentence."""
    best = min((r["error_rate"] or 0.0) for r in rows)

    def healthy(row: dict[str, Any]) -> bool:
        return (row["error_rate"] or 0.0) <= best + ERROR_MARGIN and row[
            "refusal_share"
        ] <= REFUSAL_SHARE

    knee = next((r for r in rows if not healthy(r)), None)
    if knee is None:
        top = rows[-1]
        return (
            top["level"],
            None,
            f"no level up to {top['level']} raised errors or refusals "
            f"({_describe(top)}); the ceiling is higher: sweep higher levels to find it",
        )
    below = [r for r in rows if r["level"] < knee["level"]]
    if not below:
        return (
            knee["level"],
            knee["level"],
            f"already the lowest level {knee['level']} is unhealthy ({_describe(knee)}); "
            "lower the concurrency further or check the endpoint",
        )
    chosen = below[-1]
    return (
        chosen["level"],
        knee["level"],
        f"{chosen['level']} is the highest level before errors climb ({_describe(chosen)}); "
        f"at {knee['level']}: {_describe(knee)}",
    )


def _describe(row: dict[str, Any]) -> str:
    throughput = row["throughput_per_min"]
    return (
        f"error rate {percent(row['error_rate'])} (task {percent(row['task_error_rate'])}, "
        f"infrastructure {percent(row['infra_error_rate'])}), {row['http_429']} 429s and "
        f"{row['http_5xx']} 5xx in {row['requests']} calls, "
        + ("-" if throughput is None else f"{throughput:.1f}")
        + " trajectories/min"
    )


def plot_series(result: dict[str, Any]) -> dict[str, Any]:
    """What sweep.png draws: x = concurrency; throughput on the left axis, rates (%) right."""
    rows = result["levels"]

    def series(key: str, scale: float = 1.0) -> list[float | None]:
        return [None if r[key] is None else r[key] * scale for r in rows]

    return {
        "x": [r["level"] for r in rows],
        "throughput": series("throughput_per_min"),
        "good_throughput": series("good_throughput_per_min"),
        "rates": {
            "task error rate": series("task_error_rate", 100.0),
            "infrastructure error rate": series("infra_error_rate", 100.0),
            "refused calls (429/5xx)": series("refusal_share", 100.0),
        },
        "recommended": result["recommended"],
        "knee": result["knee"],
    }


def write_plot(result: dict[str, Any], path: Path) -> bool:
    """Draws sweep.png (headless); False when matplotlib (the `plot` extra) is missing."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure = sweep_figure(result)
    try:
        scratch = path.with_suffix(".tmp.png")
        figure.savefig(scratch, dpi=100)
        os.replace(scratch, path)
    finally:
        pyplot.close(figure)
    return True


def sweep_figure(result: dict[str, Any]) -> Any:
    """The matplotlib figure of a sweep (needs the `plot` extra)."""
    from matplotlib import pyplot

    data = plot_series(result)
    figure, throughput_axis = pyplot.subplots(figsize=(8, 4.5))
    throughput_axis.set_xscale("log")
    throughput_axis.set_xlabel("concurrency (trajectories and calls in flight)")
    throughput_axis.set_ylabel("throughput (trajectories/min)")
    throughput_axis.plot(
        data["x"], _nan(data["throughput"]), "o-", color="tab:blue", label="throughput"
    )
    throughput_axis.plot(
        data["x"],
        _nan(data["good_throughput"]),
        "o--",
        color="tab:cyan",
        label="throughput without errors",
    )
    throughput_axis.set_xticks(data["x"], [str(x) for x in data["x"]])
    throughput_axis.minorticks_off()
    rate_axis = throughput_axis.twinx()
    rate_axis.set_ylabel("rate (%)")
    rate_axis.set_ylim(-2, 102)
    styles = (("s--", "tab:purple"), ("^--", "tab:orange"), ("x:", "tab:brown"))
    for (label, values), (style, color) in zip(data["rates"].items(), styles, strict=True):
        rate_axis.plot(data["x"], _nan(values), style, color=color, label=label)
    throughput_axis.axvline(
        data["recommended"],
        color="tab:green",
        linewidth=2,
        label=f"recommended: {data['recommended']}",
    )
    if data["knee"] is not None and data["knee"] != data["recommended"]:
        throughput_axis.axvline(
            data["knee"],
            color="tab:red",
            linestyle=":",
            label=f"knee: errors climb at {data['knee']}",
        )
    lines = throughput_axis.get_legend_handles_labels()
    rates = rate_axis.get_legend_handles_labels()
    rate_axis.legend(lines[0] + rates[0], lines[1] + rates[1], loc="upper left", fontsize=8)
    throughput_axis.set_title(f"concurrency sweep {result['id']}", fontsize=10)
    figure.tight_layout()
    return figure


def _nan(values: Sequence[float | None]) -> list[float]:
    return [float("nan") if v is None else v for v in values]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write(path: Path, text: str) -> None:
    scratch = path.with_suffix(".tmp")
    scratch.write_text(text)
    os.replace(scratch, path)
