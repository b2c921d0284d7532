"""The `sweep` command: a smoke campaign per concurrency level, then the level to use.

Kept apart from `cli.py` like the scoring commands; `cli.py` adds it with `add_sweep_command`
and hands it the parsed arguments with `dispatch_sweep`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio

from mcp_evalserver.cli.endpoints import serve_trajectory
from mcp_evalserver.engine.formatting import percent
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.engine.sweep import (
    DEFAULT_LEVELS,
    PLOT_FILE,
    SWEEP_FILE,
    parse_levels,
    plan_sweep,
    run_sweep,
    sweeps_dir,
)
from mcp_evalserver.spec.campaign import load_spec


def add_sweep_command(commands: Any) -> None:
    """Adds `sweep` to the CLI's subcommands (`commands`, from `add_subparsers`)."""
    sweep = commands.add_parser(
        "sweep",
        help="run the spec's first tasks at several concurrency levels; plot throughput and "
        "error rates; recommend the level where errors start to climb",
    )
    sweep.add_argument("spec", type=Path, help="campaign spec (JSON); its agent and scorer")
    sweep.add_argument(
        "--levels",
        default=",".join(map(str, DEFAULT_LEVELS)),
        help="comma-separated concurrency levels (default %(default)s)",
    )
    sweep.add_argument("--tasks", type=int, default=20, help="first N tasks (default 20)")
    sweep.add_argument("--samples", type=int, help="trajectories per task (default: the spec's)")
    sweep.add_argument("--id", dest="sweep_id", help="sweep id; an existing one is resumed")


def dispatch_sweep(args: argparse.Namespace, store: CampaignStore) -> int | None:
    """Runs the sweep command; None when `args` is another command."""
    if args.command != "sweep":
        return None
    plan = plan_sweep(
        store,
        load_spec(args.spec),
        levels=parse_levels(args.levels),
        tasks=args.tasks,
        samples=args.samples,
        sweep_id=args.sweep_id,
    )
    directory = sweeps_dir(store) / plan["id"]
    print(f"sweep {plan['id']} ({directory})", file=sys.stderr)

    async def announce(level: int, campaign_id: str) -> None:
        print(f"level {level}: campaign {campaign_id}", file=sys.stderr)

    result = anyio.run(
        lambda: run_sweep(store, plan, on_level=announce, trajectory_endpoints=serve_trajectory)
    )
    print(render_sweep(result), end="")
    plot = directory / PLOT_FILE
    print(f"\n{directory / SWEEP_FILE}" + (f"\n{plot}" if plot.is_file() else ""), file=sys.stderr)
    return 0


def render_sweep(result: dict[str, Any]) -> str:
    """The sweep as a person reads it: one row per level, then the recommendation."""
    lines = [
        f"# Concurrency sweep {result['id']}",
        "",
        "| level | trajectories/min | without errors | error rate | task errors | infra errors |"
        " 429 | 5xx | p50 | p95 | tokens/s | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["levels"]:
        lines.append(
            f"| {row['level']} | {_number(row['throughput_per_min'])} |"
            f" {_number(row.get('good_throughput_per_min'))} |"
            f" {percent(row['error_rate'])} | {percent(row['task_error_rate'])} |"
            f" {percent(row['infra_error_rate'])} | {row['http_429']} | {row['http_5xx']} |"
            f" {_number(row['latency_p50_s'], 's')} | {_number(row['latency_p95_s'], 's')} |"
            f" {_number(row['tokens_per_s'])} |"
            f" {_number(row['load_average'][0]) if row.get('load_average') else '-'} |"
        )
    load = ", ".join(f"{x:.2f}" for x in result["load_average"])
    lines += [
        "",
        f"recommended concurrency: {result['recommended']}: {result['reason']}",
        f"(load: the 1-minute load average after each level ran; {load} when summarised)",
    ]
    return "\n".join(lines) + "\n"


def _number(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"
