"""Benchmark of the ray backend: the cost of an actor call, and throughput as nodes are added.

Run `python bench/scale.py` as root. It re-executes itself inside a loopback-only network
namespace (Ray may bind only to loopback here) and starts a real multi-node cluster on this
machine (`ray.cluster_utils.Cluster`: one raylet per node). Prints the figures and writes
bench/results/scale.json:

- remote_exec_overhead_p50_ms: `exec true` through the instance's actor on a worker node minus
  the same command on the node's own `local` backend (both p50, taken in turn, same machine);
  ray_actor_call_p50_ms: an actor call that does nothing, back to back. That is not the floor
  of an exec's overhead: between an exec's request and its reply every thread on Ray's path
  sleeps, and waking each again (driver loop, core worker threads on both sides, the actor's
  thread) costs more than a call that follows another at once. So, taken in turn with
  the above and paired per call (timestamps on one CLOCK_MONOTONIC, which every process here
  shares): exec_transit_p50_ms, the round trip of the instance actor's own `call("exec")`
  minus the time the node's backend took inside it (node_exec_p50_ms: that time, the same
  `exec true` as local_exec_p50_ms but on the node); ray_idle_call_overhead_p50_ms, the same
  for a bare threaded actor (no code of ours; ours is threaded too, see ray_node.py) that
  waits as long as a local `exec true` takes;
  and ours_over_ray_p50_ms, their difference: what our layers add to Ray's own call.
- throughput_{1,2,4}_per_s: sleep-bound trajectories per second through the real campaign runner
  (scheduler, ledger, agent, scorer) with 1, 2 and 4 worker nodes of SLOTS sandbox slots each.
  Each trajectory holds a workspace and runs a 2 s `sleep`: sleeping costs no CPU, so the
  cluster's capacity is measured, not this box's two cores. The work grows with the cluster
  (SLOTS instances per node, SAMPLES trajectories each, PER_INSTANCE at once per instance);
  instances are placed by a warm-up run first, so the figure is the campaign's, not Ray's
  worker start-up.
- scale_efficiency_4 = throughput(4) / (4 × throughput(1)); targets: overhead <= 2 ms,
  efficiency >= 0.9.

The load average is recorded beside each figure: the machine is shared, and figures under load
are noisy.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.scale` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.common import LoadRecord, describe_load, write_results
from testsupport.loopback import ensure_loopback_namespace

REPO = Path(__file__).resolve().parents[1]

SLOTS = 2
PER_INSTANCE = 4
SAMPLES = 8
SLEEP_S = 2.0
EXEC_ROUNDS = 300


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _repos(root: Path, count: int) -> list[str]:
    paths = []
    for number in range(count):
        path = root / f"repo{number}"
        path.mkdir(exist_ok=True)
        (path / "a.txt").write_text("hello\n")
        subprocess.run(["git", "init", "-q", str(path)], check=True)
        paths.append(str(path))
    return paths


class _BareActor:
    """A threaded actor (the kind `NodeHost` is) with no code of ours: Ray's own cost of a
    call that waits inside."""

    def hold(self, seconds: float) -> tuple[float, float]:
        started = time.monotonic()
        time.sleep(seconds)
        return started, time.monotonic()


def _timed_host_class() -> type:
    """The node's actor class with one more method: a workspace call and when it ran."""
    from mcp_evalserver.sandbox.ray_node import NodeHost, Reply

    class TimedHost(NodeHost):
        def timed_call(
            self, key: str, name: str, op: str, kwargs: dict[str, Any]
        ) -> tuple[Reply, float, float]:
            started = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process here
            reply = self.call(key, name, op, kwargs)
            return reply, started, time.monotonic()

    return TimedHost


async def exec_overhead(address: str, path: str) -> dict[str, float]:
    """p50 of `exec true` on the ray backend and on the local one, and Ray's floor, in turn."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from mcp_evalserver.sandbox.base import InstanceSpec
    from mcp_evalserver.sandbox.local import LocalBackend
    from mcp_evalserver.sandbox.ray import OPS_AT_ONCE, RayBackend

    spec = InstanceSpec(path=path)
    timings: dict[str, list[float]] = {
        "ray": [], "local": [], "ping": [], "transit": [], "node": [], "floor": []
    }  # fmt: skip
    async with RayBackend(address) as ray_backend, LocalBackend() as local_backend:
        instance = await ray_backend.instance(spec)
        remote = await instance.workspace("bench-ray")
        local = await (await local_backend.instance(spec)).workspace("bench-local")
        # Both on the instance's node, beside its actor (taking none of the node's slots).
        assert instance.placed is not None
        on_node = {
            "num_cpus": 0,
            "max_concurrency": OPS_AT_ONCE,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(instance.placed.node_id, False),
        }
        bare: Any = ray.remote(_BareActor).options(**on_node).remote()
        timed: Any = ray.remote(_timed_host_class()).options(**on_node).remote(1)
        await timed.start.remote(spec.key, spec.model_dump(mode="json"), "local")
        await timed.create.remote(spec.key, "bench-timed")
        exec_kwargs = {"cmd": "true", "timeout": 600.0, "output_cap": 1 << 20}
        hold_s = 0.0

        def timing(
            name: str, call: Callable[[], Awaitable[object]]
        ) -> Callable[[], Awaitable[None]]:
            """A step that times one `call` into `timings[name]`."""

            async def step() -> None:
                started = time.perf_counter()
                await call()
                timings[name].append(time.perf_counter() - started)

            return step

        ray_exec = timing("ray", lambda: remote.exec("true"))
        local_exec = timing("local", lambda: local.exec("true"))
        ping = timing("ping", instance.ping)

        async def transit() -> None:
            sent = time.monotonic()
            reply, began, ended = await timed.timed_call.remote(
                spec.key, "bench-timed", "exec", exec_kwargs
            )
            if reply[0] != "ok":
                raise RuntimeError(f"exec on the timed actor failed: {reply}")
            timings["transit"].append(time.monotonic() - sent - (ended - began))
            timings["node"].append(ended - began)

        async def floor() -> None:
            sent = time.monotonic()
            began, ended = await bare.hold.remote(hold_s)
            timings["floor"].append(time.monotonic() - sent - (ended - began))

        steps = [ray_exec, local_exec, ping, transit, floor]
        for _ in range(20):  # warm every path
            for step in steps:
                await step()
        hold_s = statistics.median(timings["local"])  # the bare actor waits as long as an exec
        for values in timings.values():
            values.clear()
        for round_number in range(EXEC_ROUNDS):
            shift = round_number % len(steps)  # each step in each position: no order effect
            for step in steps[shift:] + steps[:shift]:
                await step()
        for workspace in (remote, local):
            await workspace.destroy()
        await timed.shutdown.remote()
        for actor in (bare, timed):
            ray.kill(actor)
    p50_ms = {name: statistics.median(values) * 1000 for name, values in timings.items()}
    return {
        "ray_actor_call_p50_ms": p50_ms["ping"],
        "ray_exec_p50_ms": p50_ms["ray"],
        "local_exec_p50_ms": p50_ms["local"],
        "remote_exec_overhead_p50_ms": p50_ms["ray"] - p50_ms["local"],
        "exec_transit_p50_ms": p50_ms["transit"],
        "node_exec_p50_ms": p50_ms["node"],
        "ray_idle_call_overhead_p50_ms": p50_ms["floor"],
        "ours_over_ray_p50_ms": p50_ms["transit"] - p50_ms["floor"],
    }


async def throughput(address: str, paths: list[str], state_dir: Path) -> float:
    """Sleep-bound trajectories per second over these instances, once they are placed."""
    from mcp_evalserver.agents.base import Agent, TrajectoryContext
    from mcp_evalserver.engine.runner import CampaignRunner
    from mcp_evalserver.engine.store import CampaignStore
    from mcp_evalserver.runtime.sandboxes import SandboxPool
    from mcp_evalserver.spec.campaign import CampaignSpec, Limits, RaySandboxConfig, Task
    from mcp_evalserver.spec.submission import Submission

    class Sleeper(Agent):
        async def generate(self, context: TrajectoryContext) -> Submission:
            workspace = await context.sandbox.workspace()
            await workspace.exec(f"sleep {SLEEP_S}")
            return Submission(answer="ok")

    tasks = [Task(id=f"t{n}", path=path, answer="ok") for n, path in enumerate(paths)]
    store = CampaignStore(state_dir)

    def spec(samples: int) -> CampaignSpec:
        limits = Limits(
            concurrency=len(paths) * PER_INSTANCE,
            per_instance=PER_INSTANCE,
            provisioning=len(paths),
            scoring=len(paths) * PER_INSTANCE,
        )
        return CampaignSpec(
            name="scale",
            tasks=tasks,
            samples=samples,
            limits=limits,
            sandbox=RaySandboxConfig(address=address),
        )

    async with SandboxPool() as pool:
        warm = await store.create(spec(1))  # places every instance
        await CampaignRunner(store, warm, agent=Sleeper(), sandboxes=pool).run()
        measured = await store.create(spec(SAMPLES))
        started = time.perf_counter()
        state = await CampaignRunner(store, measured, agent=Sleeper(), sandboxes=pool).run()
        elapsed = time.perf_counter() - started
        resolved = state.count("resolved")
        if resolved != len(paths) * SAMPLES:
            raise RuntimeError(f"only {resolved} of {len(paths) * SAMPLES} trajectories resolved")
    return resolved / elapsed


def main() -> None:
    ensure_loopback_namespace()
    load = LoadRecord()
    import anyio

    from testsupport.ray_cluster import loopback_cluster

    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        root = Path(tmp)
        paths = _repos(root, 4 * SLOTS)
        with loopback_cluster(workers=1, slots=SLOTS) as cluster:
            figures |= anyio.run(exec_overhead, cluster.address, paths[0])
            figures["exec_load_average"] = _load()
            print(f"exec true p50: ray {figures['ray_exec_p50_ms']:.2f} ms, local "
                  f"{figures['local_exec_p50_ms']:.2f} ms, overhead "
                  f"{figures['remote_exec_overhead_p50_ms']:.2f} ms; Ray's own over an idle "
                  f"call {figures['ray_idle_call_overhead_p50_ms']:.2f} ms, ours over it "
                  f"{figures['ours_over_ray_p50_ms']:.2f} ms; on the node the exec took "
                  f"{figures['node_exec_p50_ms']:.2f} ms (load {_load()})")  # fmt: skip
            for nodes in (1, 2, 4):
                while len(cluster.workers) < nodes:
                    cluster.add_worker(SLOTS)
                rate = anyio.run(
                    throughput, cluster.address, paths[: nodes * SLOTS], root / f"state{nodes}"
                )
                figures[f"throughput_{nodes}_per_s"] = rate
                figures[f"throughput_{nodes}_load_average"] = _load()
                print(f"{nodes} node(s), {nodes * SLOTS * PER_INSTANCE} sleeps at once: "
                      f"{rate:.2f} trajectories/s (load {_load()})")  # fmt: skip
    figures["scale_efficiency_4"] = figures["throughput_4_per_s"] / (
        4 * figures["throughput_1_per_s"]
    )
    figures["setup"] = {
        "slots_per_node": SLOTS,
        "per_instance": PER_INSTANCE,
        "samples": SAMPLES,
        "sleep_s": SLEEP_S,
        "exec_rounds": EXEC_ROUNDS,
        "cpus": os.cpu_count(),
    }
    print(f"scale_efficiency_4: {figures['scale_efficiency_4']:.3f}")
    figures = load.finish(figures)
    print(describe_load(figures))
    print(f"wrote {write_results('scale', figures).relative_to(REPO)}")


if __name__ == "__main__":
    main()
