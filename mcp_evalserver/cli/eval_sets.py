"""Evaluation sets on the command line: `run SET.json` (a spec with `agents`), `resume SET_ID`
and `report SET_ID` act on every agent's campaign of the set and print its leaderboard."""

from __future__ import annotations

import argparse
import json
import signal
import sys

import anyio

from mcp_evalserver.cli.endpoints import serve_trajectory
from mcp_evalserver.engine.eval_sets import EvalSet, EvalSetStore, run_set
from mcp_evalserver.engine.leaderboard import build_leaderboard, render_leaderboard_markdown
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.spec.eval_set import is_eval_set, read_spec_data


def dispatch_eval_set(args: argparse.Namespace, store: CampaignStore) -> int | None:
    """Runs `run`, `resume` or `report` when they name a set; None otherwise.

    Raises:
        EvalServerError: an invalid set spec (nothing recorded), or a campaign that fails.
    """
    sets = EvalSetStore(store)
    if args.command == "run":
        data = read_spec_data(args.spec)
        if not is_eval_set(data):
            return None
        evalset = anyio.run(sets.create, data, args.spec.parent, args.campaign_id)
        print(f"evaluation set {evalset.id} ({sets.path(evalset.id)})", file=sys.stderr)
        return _run(sets, evalset, args.ray)
    if args.command == "resume" and sets.exists(args.campaign_id):
        return _run(sets, sets.load(args.campaign_id), args.ray)
    if args.command == "report" and sets.exists(args.campaign_id):
        board = build_leaderboard(evalset := sets.load(args.campaign_id), sets.states(evalset))
        text = (
            json.dumps(board, indent=2) + "\n"
            if args.format == "json"
            else render_leaderboard_markdown(board)
        )
        if args.out is None:
            sys.stdout.write(text)
        else:
            args.out.write_text(text, encoding="utf-8")
        return 0
    return None


def _run(sets: EvalSetStore, evalset: EvalSet, ray_address: str | None) -> int:
    runners: list[CampaignRunner] = []

    async def supervise() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(_cancel_on_signal, runners)
            await run_set(
                sets,
                evalset,
                ray_address=ray_address,
                trajectory_endpoints=serve_trajectory,
                on_runner=lambda _agent, runner: runners.append(runner),
            )
            group.cancel_scope.cancel()

    anyio.run(supervise)
    states = sets.states(evalset)
    print(render_leaderboard_markdown(build_leaderboard(evalset, states)), end="")
    if any(state.status == "cancelled" for state in states.values()):
        print(f"cancelled; continue with `mcp-evalserver resume {evalset.id}`", file=sys.stderr)
        return 130
    return 0


async def _cancel_on_signal(runners: list[CampaignRunner]) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            for runner in runners:
                runner.cancel()
            return
