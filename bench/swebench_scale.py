"""A rehearsal at SWE-bench size: 500 instances x 4 samples, on the local backend and on Ray.

Run `python bench/swebench_scale.py` as root (`--instances N --samples K` for a smaller one).
It re-executes itself inside a loopback-only network namespace (Ray may bind only to loopback
here), makes N small real git repositories (each its own instance: a calc.py with a bug, a
README, a test), and runs the same campaign twice: on the local backend, then on a 4-node
loopback Ray cluster. The agent runs a few commands, edits calc.py (the right fix for most
trajectories, a wrong one for every fourth, so results differ by trajectory) and submits the
diff; the scorer is a `command` scorer (apply the patch in a fresh workspace, one grep).
Writes bench/results/swebench_scale.json:

- per backend: `trajectories` (finished), `wall_s`, `peak_instances_alive` (polled from the
  sandbox pool against the campaign's `limits.instances`), `peak_memory_mb` (PSS of every
  process of the run: this one and all its descendants, the Ray cluster's included, sampled
  every 2 s), `evictions` and `releases` (instances the pool closed to stay under the budget,
  and because their tasks were finished), `ray_node_evictions` (idle instances a full node
  released), `exactly_once` (every trajectory generated and scored exactly once in the ledger);
- `same_results`: the two campaigns' per-trajectory outcome and score are equal;
- `instance_mb_ray`: memory per instance on Ray beyond workspaces, (PSS of a node's actor and
  every process under it with 50 instances - with 1) / 49, on a node of its own; beside it the
  actor's PSS with one instance (what the old design paid per instance: ~85 MB).

The load average is recorded at the start and end and beside each campaign.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.swebench_scale` (_as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

from bench.common import (
    REPO,
    LoadRecord,
    descendants,
    describe_load,
    load_average,
    pss_bytes,
    write_results,
)
from testsupport.loopback import ensure_loopback_namespace
from testsupport.repos import BUGGY, make_git_repo

INSTANCES = 500
SAMPLES = 4
BUDGET = 32  # limits.instances: instances alive at once
CONCURRENCY = 16
PER_INSTANCE = 4
NODES = 4
SLOTS = 16  # per node: 64 in the cluster, twice the budget
MEMORY_PROBE = 50  # instances on one node for instance_mb_ray
SAMPLE_EVERY_S = 2.0


def make_repos(root: Path, count: int) -> list[str]:
    """`count` small committed repositories, each different (so each is its own instance)."""
    paths = []
    for number in range(count):
        files = {
            "calc.py": BUGGY,
            "README.md": f"# project {number}\n\n`add` is wrong.\n",
            "test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n",
        }
        paths.append(str(make_git_repo(root / f"repo{number:04d}", files)))
    return paths


def pss_mb(pids: list[int]) -> float:
    return pss_bytes(pids) / (1 << 20)


def _agent() -> Any:
    from mcp_evalserver.agents.base import Agent, TrajectoryContext
    from mcp_evalserver.spec.submission import Submission

    class FewCommands(Agent):
        """Looks around, edits calc.py, submits the diff; every fourth trajectory gets it wrong."""

        async def generate(self, context: TrajectoryContext) -> Submission:
            workspace = await context.sandbox.workspace()
            await workspace.exec("ls -a && git log --oneline -1")
            source = (await workspace.exec("cat calc.py")).stdout
            await workspace.exec(["grep", "-n", "return", "calc.py"])
            number = int(context.task.id.removeprefix("t"))
            wrong = (number + context.sample) % 4 == 0
            fixed = source.replace("a - b", "a * b" if wrong else "a + b")
            await workspace.write_file("calc.py", fixed)
            await workspace.exec("test -s calc.py && git status --short")
            return Submission(patch=await workspace.diff())

    return FewCommands()


def _ledger(state_dir: Path, campaign_id: str) -> list[dict[str, Any]]:
    from mcp_evalserver.engine.store import CampaignStore

    path = CampaignStore(state_dir).directory(campaign_id) / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def campaign(
    paths: list[str], samples: int, budget: int, state_dir: Path, address: str | None
) -> tuple[dict[str, Any], dict[str, tuple[str | None, str | None]]]:
    """Runs the campaign (on Ray at `address`, else locally); its figures and results."""
    from mcp_evalserver.engine.runner import CampaignRunner
    from mcp_evalserver.engine.store import CampaignStore
    from mcp_evalserver.runtime.sandboxes import BackendName, SandboxPool, make_backend
    from mcp_evalserver.sandbox.base import Backend
    from mcp_evalserver.sandbox.ray import RayBackend
    from mcp_evalserver.spec.campaign import CampaignSpec, Limits, RaySandboxConfig, Task
    from mcp_evalserver.spec.scorers import CommandScorerConfig

    tasks = [Task(id=f"t{n}", path=path) for n, path in enumerate(paths)]
    spec = CampaignSpec(
        name="swebench-scale",
        tasks=tasks,
        samples=samples,
        scorer=CommandScorerConfig(command="grep -q 'return a + b' calc.py", timeout_s=60),
        limits=Limits(
            concurrency=CONCURRENCY,
            per_instance=PER_INSTANCE,
            provisioning=4,
            scoring=CONCURRENCY,
            instances=budget,
            retry_base_delay_s=0.2,
        ),
        sandbox=RaySandboxConfig(address=address) if address else None,
    )
    store = CampaignStore(state_dir)
    campaign_id = await store.create(spec)
    peaks = {"alive": 0, "memory_mb": 0.0}
    me = os.getpid()
    made: list[Backend] = []

    def backends(name: BackendName, ray_address: str) -> Backend:
        made.append(make_backend(name, ray_address))
        return made[-1]

    async with SandboxPool(backends=backends) as pool, anyio.create_task_group() as group:

        async def watch_alive() -> None:
            while True:
                peaks["alive"] = max(peaks["alive"], pool.alive())
                await anyio.sleep(0.05)

        async def watch_memory() -> None:
            while True:
                used = await anyio.to_thread.run_sync(lambda: pss_mb(descendants(me)))
                peaks["memory_mb"] = max(peaks["memory_mb"], used)
                await anyio.sleep(SAMPLE_EVERY_S)

        group.start_soon(watch_alive)
        group.start_soon(watch_memory)
        started = time.perf_counter()
        state = await CampaignRunner(store, campaign_id, agent=_agent(), sandboxes=pool).run()
        wall_s = time.perf_counter() - started
        group.cancel_scope.cancel()
        node_evictions = sum(b.evictions for b in made if isinstance(b, RayBackend))
        closed = Counter(event.why for event in pool.closed)
    records = _ledger(state_dir, campaign_id)
    once = all(
        sorted(Counter(r["trajectory"] for r in records if r["kind"] == kind).items())
        == [(t, 1) for t in sorted(state.trajectories)]
        for kind in ("generated", "scored")
    )
    results: dict[str, tuple[str | None, str | None]] = {
        t.id: (t.outcome, (t.score or {}).get("status")) for t in state.trajectories.values()
    }
    figures: dict[str, Any] = {
        "trajectories": sum(t.outcome is not None for t in state.trajectories.values()),
        "resolved": state.count("resolved"),
        "wall_s": wall_s,
        "peak_instances_alive": peaks["alive"],
        "instance_budget": state.spec.limits.instances,
        "peak_memory_mb": peaks["memory_mb"],
        "evictions": closed["evicted"],
        "releases": closed["released"],
        "ray_node_evictions": node_evictions,
        "exactly_once": once,
        "status": state.status,
        "load_average_end": load_average(),
    }
    return figures, results


async def instance_memory(address: str, paths: list[str], resource: str) -> dict[str, float]:
    """Memory per instance on a node of its own: its actor's tree with 1 instance, then with
    one per path."""
    from mcp_evalserver.sandbox.base import InstanceSpec
    from mcp_evalserver.sandbox.ray import RayBackend

    async with RayBackend(address, slots_resource=resource) as backend:
        instances = [await backend.instance(InstanceSpec(path=paths[0]))]
        placed = instances[0].placed
        assert placed is not None
        actor = placed.pid
        await anyio.sleep(2)  # let the start-up settle (threads, imports) before measuring
        one = pss_mb(descendants(actor))
        for path in paths[1:]:
            instances.append(await backend.instance(InstanceSpec(path=path)))
        await anyio.sleep(2)
        many = pss_mb(descendants(actor))
        tree = len(descendants(actor))
        pids = {i.placed.pid for i in instances if i.placed is not None}
        assert pids == {actor}, f"instances on more than one actor: {pids}"
    return {
        "instance_mb_ray": (many - one) / (len(paths) - 1),
        "memory_probe_instances": len(paths),
        "node_actor_mb_with_1": one,
        "node_actor_mb_with_all": many,
        "node_processes_with_all": tree,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=INSTANCES)
    parser.add_argument("--samples", type=int, default=SAMPLES)
    parser.add_argument("--budget", type=int, default=BUDGET, help="limits.instances")
    parser.add_argument("--results", default="swebench_scale", help="bench/results/NAME.json")
    parser.add_argument("--skip-local", action="store_true", help="the Ray campaign only")
    args = parser.parse_args()
    ensure_loopback_namespace()
    load = LoadRecord()
    from testsupport.ray_cluster import loopback_cluster

    figures: dict[str, Any] = {
        "setup": {
            "instances": args.instances,
            "samples": args.samples,
            "instance_budget": args.budget,
            "concurrency": CONCURRENCY,
            "per_instance": PER_INSTANCE,
            "ray_nodes": NODES,
            "ray_slots_per_node": SLOTS,
        }
    }
    with tempfile.TemporaryDirectory(prefix="bench-swebench-scale-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        paths = make_repos(root / "repos", args.instances)
        figures["repos_made_s"] = time.perf_counter() - started
        print(f"{len(paths)} repositories in {figures['repos_made_s']:.1f} s")
        results: dict[str, dict[str, tuple[str | None, str | None]]] = {}
        if not args.skip_local:
            figures["local"] = {"load_average_start": load_average()}
            local, results["local"] = anyio.run(
                campaign, paths, args.samples, args.budget, root / "local", None
            )
            figures["local"] |= local
            print("local:", json.dumps(figures["local"]))
        with loopback_cluster(workers=NODES, slots=SLOTS) as cluster:
            cluster.add_worker(MEMORY_PROBE, "bench_memory")  # from the main thread (Ray's rule)
            probe = paths[:MEMORY_PROBE]
            figures |= anyio.run(instance_memory, cluster.address, probe, "bench_memory")
            print(f"instance_mb_ray: {figures['instance_mb_ray']:.2f} MB (load {load_average()})")
            figures["ray"] = {"load_average_start": load_average()}
            ray, results["ray"] = anyio.run(
                campaign, paths, args.samples, args.budget, root / "ray", cluster.address
            )
            figures["ray"] |= ray
            print("ray:", json.dumps(figures["ray"]))
    if "local" in results:
        figures["same_results"] = results["local"] == results["ray"]
        figures["trajectories_expected"] = args.instances * args.samples
    figures = load.finish(figures)
    print(describe_load(figures))
    print(f"wrote {write_results(args.results, figures).relative_to(REPO)}")


if __name__ == "__main__":
    main()
