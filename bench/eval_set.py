"""Benchmark of an evaluation set: three agents on shared instances against three campaigns.

Run `python bench/eval_set.py [--tasks N] [--samples K]` as root (it starts the Docker engine
and builds the base image through scripts/ensure-docker.sh). N small image tasks (the base image
with a repository made by `setup`, its own line per task, so each is its own container), K
samples, the `tests` scorer; three agents: `oracle` (the gold patch), `noop` (nothing) and
`fixer`, which reads the code in every task and fixes the even-numbered ones (`noop` submits
nothing, which the scorer fails without a container: only the other two provision). Run twice
on the docker backend:

- as one evaluation set (`run_set`: one campaign per agent on one sandbox pool, the set's
  limits shared, each task's container provisioned once for the three);
- as the same three campaigns run one after another, each on a pool of its own.

Writes bench/results/eval_set.json: `instances_provisioned_set` and
`instances_provisioned_separate` (counted from the backend: 1x and 3x the task count),
`wall_set_s`, `wall_separate_s` and `wall_ratio` (set / separate; target <= 0.6), whether both
runs resolved the same trajectories, and the load average at start and end.

`phases_set` and `phases_separate` say where each run's time goes, in seconds from its start:
per phase (`provision`: the backend making an instance; `generate` and `score`: a trajectory's
attempt to its generated / scored record, waits for slots and instances included; `close`: an
instance removed), how many, their summed time, and when the last one ended.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.eval_set` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import argparse
import shlex
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench.common import LoadRecord, describe_load, write_results
from bench.sandbox import base_image
from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.eval_sets import EvalSetStore, run_set
from mcp_evalserver.engine.ledger import LEDGER_FILE, read_ledger
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.runtime.sandboxes import SandboxPool
from mcp_evalserver.sandbox.base import Backend, Instance, InstanceSpec
from mcp_evalserver.spec.campaign import parse_spec
from mcp_evalserver.spec.eval_set import parse_eval_set
from mcp_evalserver.spec.submission import Submission
from testsupport.counting import CountingBackends

CODE = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = (
    "import unittest\n\nimport calc\n\n\nclass TestCalc(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(calc.add(2, 2), 4)\n"
)
CREATE = (
    "git init -q . && git config user.email b@b && git config user.name b",
    f"printf {shlex.quote(CODE)} > calc.py && printf {shlex.quote(TESTS)} > test_calc.py",
    "git add -A && git commit -qm base",
)
AGENTS = {
    "oracle": {"type": "oracle"},
    "noop": {"type": "noop"},
    "fixer": {"type": "python", "factory": "bench.eval_set:fixer"},
}


class Fixer(Agent):
    """Reads calc.py in its workspace, as an agent looks before it edits; fixes it in the
    even-numbered tasks and submits nothing for the others."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        workspace = await context.sandbox.workspace()
        await workspace.read_file("calc.py")
        if int(context.task.id.removeprefix("t")) % 2:
            return Submission()
        await workspace.write_file("calc.py", FIXED)
        return Submission(patch=await workspace.diff())


def fixer(options: dict[str, Any]) -> Agent:
    return Fixer()


def gold_patch(scratch: Path) -> str:
    scratch.mkdir()
    for command in CREATE:
        subprocess.run(["sh", "-c", command], cwd=scratch, check=True)
    (scratch / "calc.py").write_text(FIXED)
    return subprocess.run(
        ["git", "diff"], cwd=scratch, check=True, capture_output=True, text=True
    ).stdout


def set_spec(image: str, patch: str, tasks: int, samples: int) -> dict[str, Any]:
    return {
        "name": "bench",
        "tasks": [
            {
                "id": f"t{n}",
                "image": image,
                "setup": [*CREATE, f"echo {n} > .instance && git add -A && git commit -qm n"],
                "patch": patch,
                "FAIL_TO_PASS": ["test_add (test_calc.TestCalc)"],
            }
            for n in range(1, tasks + 1)
        ],
        "samples": samples,
        "agents": AGENTS,
        "scorer": {"type": "tests"},
        "limits": {"concurrency": 8},
    }


class TimedBackends(CountingBackends):
    """Counting backends that also time each provisioning and each instance's removal."""

    def __init__(self) -> None:
        super().__init__()
        self.started = time.time()
        self.spans: list[tuple[str, float, float]] = []

    def __call__(self, name: Any, address: str) -> Backend:
        backend = super().__call__(name, address)
        counted = backend.instance

        async def instance(spec: InstanceSpec) -> Instance:
            began = time.time()
            made = await counted(spec)
            self.spans.append(("provision", began, time.time()))
            close = made.aclose
            closed = False

            async def aclose() -> None:
                nonlocal closed
                began = time.time()
                await close()
                if not closed:  # the backend closes what the pool closed again, at once
                    closed = True
                    self.spans.append(("close", began, time.time()))

            made.aclose = aclose  # type: ignore[method-assign]
            return made

        backend.instance = instance  # type: ignore[method-assign]
        return backend

    def phases(self, store: CampaignStore, campaign_ids: list[str]) -> dict[str, Any]:
        """Per phase: how many, their summed seconds, when the last ended (from the start)."""
        spans = list(self.spans)
        for campaign_id in campaign_ids:
            spans += _ledger_spans(store.directory(campaign_id) / LEDGER_FILE)
        phases: dict[str, Any] = {}
        for phase in ("provision", "generate", "score", "close"):
            mine = [(began, ended) for name, began, ended in spans if name == phase]
            phases[phase] = {
                "n": len(mine),
                "sum_s": sum(ended - began for began, ended in mine),
                "last_end_s": max((e - self.started for _, e in mine), default=0.0),
            }
        return phases


def _ledger_spans(path: Path) -> list[tuple[str, float, float]]:
    """Each trajectory's generation and scoring, from its start record to its end record."""
    ends = {"generated": "attempt_started", "generation_failed": "attempt_started",
            "scored": "scoring_started", "scoring_failed": "scoring_started"}  # fmt: skip
    began: dict[tuple[str, str | None], float] = {}
    spans = []
    for record in read_ledger(path).records:
        trajectory = getattr(record, "trajectory", None)
        if record.kind in ("attempt_started", "scoring_started"):
            began[(record.kind, trajectory)] = record.ts
        elif record.kind in ends and (start := began.pop((ends[record.kind], trajectory), None)):
            spans.append(("generate" if ends[record.kind] == "attempt_started" else "score",
                          start, record.ts))  # fmt: skip
    return spans


def outcomes(states: dict[str, CampaignState]) -> dict[str, dict[str, str | None]]:
    return {
        agent: {tid: t.outcome for tid, t in sorted(state.trajectories.items())}
        for agent, state in states.items()
    }


Run = tuple[float, int, dict[str, Any], dict[str, Any]]


async def as_set(state_dir: Path, spec: dict[str, Any]) -> Run:
    sets = EvalSetStore(CampaignStore(state_dir))
    evalset = await sets.create(spec, None, "set")
    counting = TimedBackends()
    started = time.perf_counter()
    async with SandboxPool(backends=counting, sharers=len(AGENTS)) as pool:
        states = await run_set(sets, evalset, pool=pool)
    wall = time.perf_counter() - started
    assert counting.backends == {"docker"}, counting.backends
    phases = counting.phases(sets.campaigns, list(evalset.campaigns.values()))
    return wall, len(counting.provisioned), outcomes(states), phases


async def separately(state_dir: Path, spec: dict[str, Any]) -> Run:
    store = CampaignStore(state_dir)
    _, per_agent = parse_eval_set(spec)
    counting = TimedBackends()
    states: dict[str, CampaignState] = {}
    started = time.perf_counter()
    for agent, data in per_agent.items():
        campaign_id = await store.create(parse_spec(data, None), f"alone.{agent}")
        async with SandboxPool(backends=counting) as pool:
            await CampaignRunner(store, campaign_id, sandboxes=pool).run()
        states[agent] = store.load(campaign_id)
    wall = time.perf_counter() - started
    assert counting.backends == {"docker"}, counting.backends
    phases = counting.phases(store, [state.id for state in states.values()])
    return wall, len(counting.provisioned), outcomes(states), phases


async def main(tasks: int, samples: int) -> dict[str, Any]:
    image = base_image()
    load = LoadRecord()
    with tempfile.TemporaryDirectory(prefix="bench-eval-set-") as scratch:
        spec = set_spec(image, gold_patch(Path(scratch) / "gold"), tasks, samples)
        wall_set, provisioned_set, set_outcomes, phases_set = await as_set(
            Path(scratch) / "set", spec
        )
        wall_alone, provisioned_alone, alone_outcomes, phases_alone = await separately(
            Path(scratch) / "alone", spec
        )
    resolved = {
        agent: sum(o == "resolved" for o in by_trajectory.values())
        for agent, by_trajectory in set_outcomes.items()
    }
    return load.finish(
        {
            "tasks": tasks,
            "samples": samples,
            "agents": list(AGENTS),
            "resolved_by_agent": resolved,
            "same_outcomes": set_outcomes == alone_outcomes,
            "instances_provisioned_set": provisioned_set,
            "instances_provisioned_separate": provisioned_alone,
            "wall_set_s": wall_set,
            "wall_separate_s": wall_alone,
            "wall_ratio": wall_set / wall_alone,
            "phases_set": phases_set,
            "phases_separate": phases_alone,
        }
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=6, help="image tasks (default 6)")
    parser.add_argument("--samples", type=int, default=2, help="samples per task (default 2)")
    args = parser.parse_args()
    figures = anyio.run(main, args.tasks, args.samples)
    written = write_results("eval_set", figures)
    print(
        f"set: {figures['instances_provisioned_set']} containers, {figures['wall_set_s']:.1f} s;"
        f" separate: {figures['instances_provisioned_separate']} containers, "
        f"{figures['wall_separate_s']:.1f} s; wall ratio {figures['wall_ratio']:.2f} "
        f"(target <= 0.6); same outcomes: {figures['same_outcomes']}; "
        f"{describe_load(figures)} -> {written}"
    )
