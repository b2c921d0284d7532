"""Benchmark of the campaign engine: scheduler speedup, ledger throughput, replay speed.

Run `python bench/scheduler.py`. Prints a table and writes bench/results/scheduler.json.
Every figure is measured in this one run, side by side, on this machine.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.scheduler` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench.common import LoadRecord, describe_load, write_results
from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.ledger import LEDGER_FILE, LedgerWriter, read_ledger
from mcp_evalserver.engine.records import AttemptStarted
from mcp_evalserver.engine.replay import replay
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.spec.campaign import CampaignSpec, Limits, Task, trajectory_id
from mcp_evalserver.spec.submission import Submission

TRAJECTORIES = 200
MODEL_LATENCY_S = 0.050
CONCURRENCY = (1, 10, 50, 100)


class WaitingAgent(Agent):
    """Stands in for a model: waits 50 ms, then answers correctly."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        await anyio.sleep(MODEL_LATENCY_S)
        return Submission(answer=context.task.answer)


def _spec(concurrency: int, tasks: int, samples: int = 1) -> CampaignSpec:
    return CampaignSpec(
        name=f"bench-{concurrency}",
        tasks=[Task(id=f"t{n}", answer=str(n)) for n in range(tasks)],
        samples=samples,
        agent={"type": "oracle"},
        limits=Limits(concurrency=concurrency, per_instance=concurrency, scoring=concurrency),
    )


async def campaign_wall(state_dir: Path, concurrency: int) -> float:
    store = CampaignStore(state_dir)
    campaign_id = await store.create(_spec(concurrency, TRAJECTORIES))
    runner = CampaignRunner(store, campaign_id, agent=WaitingAgent())
    started = time.perf_counter()
    state = await runner.run()
    wall = time.perf_counter() - started
    assert state.count("resolved") == TRAJECTORIES, "every trajectory must resolve"
    return wall


async def ledger_records_per_s(directory: Path, writers: int = 100, each: int = 100) -> float:
    async with await LedgerWriter.open(directory, "bench") as ledger:

        async def write(number: int) -> None:
            for index in range(each):
                await ledger.append(AttemptStarted(trajectory=f"t{number}@0", attempt=index))

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for number in range(writers):
                group.start_soon(write, number)
        elapsed = time.perf_counter() - started
    return writers * each / elapsed


def replay_seconds(directory: Path, records: int = 100_000) -> float:
    """Writes a 100k-record ledger, then times a replay.

    The campaign is SWE-bench Verified sized: 500 tasks x 50 samples, 4 records a trajectory.
    """
    tasks, samples = 500, 50
    trajectories = tasks * samples
    spec = _spec(1, tasks, samples).model_dump(mode="json")
    lines = [
        {"v": 1, "seq": 0, "ts": 0.0, "kind": "campaign_created", "campaign": "r", "spec": spec}
    ]
    for n in range(trajectories - 1):
        tid = trajectory_id(f"t{n // samples}", n % samples)
        base = {"v": 1, "ts": 0.0, "campaign": "r", "trajectory": tid}
        lines.append(base | {"kind": "attempt_started", "attempt": 1})
        lines.append(base | {"kind": "generated", "submission": {"answer": str(n // samples)}})
        lines.append(base | {"kind": "scoring_started"})
        lines.append(base | {"kind": "scored", "score": {"resolved": True, "score": 1.0}})
    for seq, line in enumerate(lines):
        line["seq"] = seq
    path = directory / LEDGER_FILE
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    started = time.perf_counter()
    state = replay(read_ledger(path).records)
    elapsed = time.perf_counter() - started
    assert state.count("resolved") == trajectories - 1
    return elapsed


async def main() -> dict[str, Any]:
    results: dict[str, Any] = {"trajectories": TRAJECTORIES, "model_latency_ms": 50}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as temporary:
        root = Path(temporary)
        walls = {c: await campaign_wall(root / f"c{c}", c) for c in CONCURRENCY}
        results["wall_s"] = {str(c): round(w, 4) for c, w in walls.items()}
        results["speedup"] = {str(c): round(walls[1] / w, 2) for c, w in walls.items()}
        results["speedup_50"] = round(walls[1] / walls[50], 2)
        ideal_50 = math.ceil(TRAJECTORIES / 50) * MODEL_LATENCY_S
        results["overhead_ms_per_trajectory_50"] = round(
            (walls[50] - ideal_50) / TRAJECTORIES * 1000, 3
        )
        results["ledger_records_per_s"] = round(await ledger_records_per_s(root / "ledger"))
        (root / "replay").mkdir()
        results["replay_100k_s"] = round(replay_seconds(root / "replay"), 3)
    return results


def report(results: dict[str, Any]) -> str:
    rows = [f"{'concurrency':>12} {'wall s':>9} {'speedup':>8} {'ideal s':>8}"]
    for c in CONCURRENCY:
        ideal = math.ceil(TRAJECTORIES / c) * MODEL_LATENCY_S
        rows.append(
            f"{c:>12} {results['wall_s'][str(c)]:>9.3f} {results['speedup'][str(c)]:>8.2f}"
            f" {ideal:>8.2f}"
        )
    rows += [
        f"speedup_50                     {results['speedup_50']:>10} (target >= 45)",
        f"overhead_ms_per_trajectory_50  {results['overhead_ms_per_trajectory_50']:>10}",
        f"ledger_records_per_s           {results['ledger_records_per_s']:>10} (target >= 5000)",
        f"replay_100k_s                  {results['replay_100k_s']:>10} (target < 2)",
    ]
    return "\n".join(rows)


if __name__ == "__main__":
    load = LoadRecord()
    figures = load.finish(anyio.run(main))
    written = write_results("scheduler", figures)
    print(report(figures))
    print(describe_load(figures))
    print(f"wrote {written}", file=sys.stderr)
