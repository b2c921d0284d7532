"""Benchmark of a whole campaign: shared instances against a fresh container per trajectory.

Run `python bench/campaign.py` as root (it starts the engine and builds the base image through
scripts/ensure-docker.sh). The demo suite (15 tasks: real PyPI projects with injected bugs) is
built, and each task becomes an image (the base image, the task's repository at /testbed and a
venv holding the pinned pytest). A scripted agent that acts like a real one works every
trajectory: about 30 commands (reads, greps, a scratch edit, a test run, then the gold patch),
and the `tests` scorer grades it; 3 samples per task. The same campaign runs twice in this one
process, on the docker backend:

- shared: today's model, one long-lived container per task's instance and a copy-on-write
  workspace per trajectory, every command through the instance's supervisor;
- container: the model every peer uses, a fresh container per trajectory (and per evaluation)
  from a committed instance image, `docker exec` per command (the docker backend's
  container-per-trajectory path).

Prints the figures and writes bench/results/campaign.json: wall time, agent commands per second
(over the wall time) and the agent's command p50 per model, and campaign_speedup_vs_container =
container wall / shared wall (target >= 5). Beside them, the CPU each run took (cpu_s, from
/proc/stat) and its split: this process (driver_cpu_s), the engine's daemons and shims
(engine_cpu_s), and the rest, the instances' processes (instances_cpu_s: supervisors,
holders and the commands themselves). The shared run cannot finish faster than its instances'
CPU spread over every CPU (shared_wall_floor_s): container wall / that floor is the
speedup_ceiling_at_this_cpu this machine allows. The sandbox's own share of that CPU is small
(about 1.8 ms per command, bench/sandbox.py): the commands' work sets the ceiling. The load
average is recorded beside each run: the machine is shared, and figures under load are noisy.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.campaign` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench.common import (
    LoadRecord,
    describe_load,
    load_average,
    machine_cpu_seconds,
    named_processes_cpu_seconds,
    p50,
    write_results,
)
from bench.sandbox import base_image
from demo.build_suite import DEFAULT_CACHE, ensure_testenv, load_projects
from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.runtime.sandboxes import BackendName, SandboxPool
from mcp_evalserver.sandbox.base import Backend, Instance, InstanceSpec, Workspace
from mcp_evalserver.sandbox.docker import DockerBackend
from mcp_evalserver.sandbox.docker_engine import DockerEngine
from mcp_evalserver.sandbox.docker_fallback import PerTrajectoryInstance
from mcp_evalserver.scoring.swebench.patching import patched_files
from mcp_evalserver.spec.campaign import CampaignSpec, Limits, Task
from mcp_evalserver.spec.scorers import TestsScorerConfig
from mcp_evalserver.spec.submission import Submission

REPO = Path(__file__).resolve().parents[1]
SAMPLES = 3
# The demo's own limits; `--concurrency N` raises trajectories (and evaluations) in flight.
LIMITS = Limits(concurrency=4, per_instance=3, scoring=2, provisioning=2)
SCORER = TestsScorerConfig(timeout_s=300)
TARGET_SPEEDUP = 5.0
# The engine's own processes (their CPU is neither ours nor the commands'). Those that end
# during a run (a removed container's shim) take their time with them: counted in the rest.
ENGINE_PROCESSES = frozenset({"dockerd", "containerd", "containerd-shim-runc-v2"})


class ContainerPerTrajectoryBackend(DockerBackend):
    """The docker backend forced onto its container-per-trajectory path for every image."""

    async def _provision(self, spec: InstanceSpec, image: str) -> Instance:
        container = await self._instance_container(spec, image, supervised=False)
        instance = await PerTrajectoryInstance.provision(self.engine, spec, container)
        instance.info.update(container=container, image=image)
        return instance


class ScriptedAgent(Agent):
    """Acts like a coding agent on a demo task, then hands in the gold patch.

    About 30 commands per trajectory, timed one by one (`latencies_ms`): the repository's
    shape, reads of the files the fix touches in windows, greps for the functions it changes,
    a scratch reproduction script written, run and removed, one run of a failing test, then
    the gold patch applied with `git apply` and the workspace's diff submitted.
    """

    def __init__(self) -> None:
        self.latencies_ms: list[float] = []

    async def _timed(self, action: Any) -> Any:
        started = time.perf_counter()
        result = await action
        self.latencies_ms.append((time.perf_counter() - started) * 1000)
        return result

    async def _run(self, ws: Workspace, command: str, stdin: str | None = None) -> str:
        result = await self._timed(ws.exec(command, stdin=stdin, timeout=300))
        return str(result.stdout)

    async def generate(self, context: TrajectoryContext) -> Submission:
        task = context.task
        assert task.patch is not None, f"demo task {task.id} has no gold patch"
        ws = await context.sandbox.workspace()
        source = patched_files(task.patch)[0]
        test_file = task.FAIL_TO_PASS[0].split("::")[0]
        symbols = re.findall(r"^@@.*?def (\w+)", task.patch, re.M)[:2] or [Path(source).stem]
        for command in (
            "pwd",
            "ls -la",
            "git status --short",
            "git log --oneline -5",
            "find . -name '*.py' -not -path './.venv/*' | head -50",
            f"ls -la {shlex.quote(str(Path(source).parent))}",
            f"wc -l {shlex.quote(source)} {shlex.quote(test_file)}",
            f"grep -n 'def ' {shlex.quote(source)} | head -60",
        ):
            await self._run(ws, command)
        await self._timed(ws.read_file(source))
        for start in range(1, 241, 60):  # an agent reads a long file in windows
            await self._run(ws, f"sed -n '{start},{start + 59}p' {shlex.quote(source)}")
        for symbol in symbols:
            await self._run(ws, f"grep -rn {symbol} --include='*.py' . | grep -v .venv | head")
            await self._run(ws, f"grep -n -A25 'def {symbol}' {shlex.quote(source)}")
            await self._run(ws, f"grep -n {symbol} {shlex.quote(test_file)} | head -20")
        await self._timed(ws.read_file(test_file))
        await self._run(ws, f"sed -n '1,80p' {shlex.quote(test_file)}")
        # A scratch edit, as agents write reproduction scripts.
        repro = f"import sys\nprint('reproducing {task.id}', sys.version_info[:2])\n"
        await self._timed(ws.write_file("repro_issue.py", repro))
        await self._run(ws, ".venv/bin/python repro_issue.py")
        await self._run(ws, "rm repro_issue.py")
        test = shlex.quote(task.FAIL_TO_PASS[0])
        await self._run(ws, f".venv/bin/python -m pytest -q -x -p no:cacheprovider {test}")
        applied = await self._timed(ws.exec("git apply -", stdin=task.patch, timeout=60))
        if applied.exit_code != 0:
            raise RuntimeError(f"{task.id}: the gold patch did not apply: {applied.stderr}")
        await self._run(ws, "git diff --stat")
        await self._run(ws, "git status --short")
        patch = await self._timed(ws.diff())
        return Submission(patch=str(patch))


def demo_tasks() -> list[Task]:
    """The demo suite, built (or checked) by demo.build_suite."""
    subprocess.run([sys.executable, "-m", "demo.build_suite"], cwd=REPO, check=True)
    lines = (REPO / "demo" / "build" / "tasks.jsonl").read_text().splitlines()
    return [Task.model_validate_json(line) for line in lines if line.strip()]


def task_image(engine: DockerEngine, base: str, task: Task, testenv: Path) -> str:
    """An image holding `task`'s repository at /testbed with its venv; built once per input."""
    assert task.path is not None
    project = next(p for p in load_projects() if p.name == task.metadata["project"])
    key = hashlib.sha256(
        json.dumps([base, task.id, task.base_commit, project.import_paths]).encode()
    ).hexdigest()[:12]
    tag = f"mcp-evalserver/bench-demo-{task.id.lower()}:{key}"
    if engine.client.images.list(name=tag):
        return tag
    paths = " ".join(shlex.quote(f"/testbed/{p}".rstrip("/.")) for p in project.import_paths)
    with tempfile.TemporaryDirectory() as context:
        shutil.copytree(
            task.path, Path(context) / "testbed", ignore=shutil.ignore_patterns(".venv")
        )
        shutil.copytree(testenv, Path(context) / "testenv", ignore=shutil.ignore_patterns("bin"))
        (Path(context) / "Dockerfile").write_text(
            f"FROM {base}\nCOPY testbed/ /testbed/\nCOPY testenv/ /opt/testenv/\n"
            "RUN python3 -m venv --without-pip /testbed/.venv "
            "&& site=$(echo /testbed/.venv/lib/python3*/site-packages) "
            '&& cp -a /opt/testenv/. "$site"/ '
            f"&& printf '%s\\n' {paths} > \"$site/_demo_paths.pth\" "
            "&& cd /testbed && git status >/dev/null\n"
        )
        engine.client.images.build(path=context, tag=tag, network_mode="none", rm=True)
    return tag


def docker_task(task: Task, image: str) -> Task:
    """The task with its image instead of its host directory, its eval script moved along."""
    assert task.path is not None
    assert task.eval_script is not None
    return task.model_copy(
        update={
            "path": None,
            "image": image,
            "workdir": "/testbed",
            "eval_script": task.eval_script.replace(task.path, "/testbed"),
        }
    )


async def run_campaign(
    root: Path, name: str, tasks: list[Task], backend: type[DockerBackend], limits: Limits
) -> dict[str, Any]:
    """One campaign of `tasks` x SAMPLES on `backend`; its wall time and command figures."""
    store = CampaignStore(root / name)
    spec = CampaignSpec(
        name=name,
        tasks=tasks,
        samples=SAMPLES,
        scorer=SCORER,
        limits=limits,
    )
    agent = ScriptedAgent()

    def backends(kind: BackendName, address: str) -> Backend:
        assert kind == "docker", kind
        return backend()

    load_start = load_average()
    machine_start, driver_start = machine_cpu_seconds(), time.process_time()
    engine_start = named_processes_cpu_seconds(ENGINE_PROCESSES)
    started = time.perf_counter()
    async with SandboxPool(backends=backends) as pool:
        campaign = await store.create(spec)
        state = await CampaignRunner(store, campaign, agent=agent, sandboxes=pool).run()
    wall = time.perf_counter() - started
    machine = machine_cpu_seconds() - machine_start
    driver = time.process_time() - driver_start
    engine = named_processes_cpu_seconds(ENGINE_PROCESSES) - engine_start
    instances = machine - driver - engine
    resolved, total = state.count("resolved"), len(tasks) * SAMPLES
    if resolved != total:
        raise RuntimeError(f"{name}: only {resolved} of {total} trajectories resolved")
    commands = len(agent.latencies_ms)
    figures: dict[str, Any] = {
        "wall_s": wall,
        "trajectories": total,
        "commands": commands,
        "commands_per_trajectory": commands / total,
        "commands_per_s": commands / wall,
        "command_p50_ms": p50(agent.latencies_ms),
        "cpu_s": machine,
        "driver_cpu_s": driver,
        "engine_cpu_s": engine,
        # Everything else: the instances' processes (supervisor, holders, and above all the
        # commands themselves: the agent's and the scorer's test runs).
        "instances_cpu_s": instances,
        "load_average_start": load_start,
        "load_average_end": load_average(),
    }
    print(
        f"{name:>9}: {wall:7.1f} s wall, {commands} commands ({commands / wall:.1f}/s, p50 "
        f"{figures['command_p50_ms']:.1f} ms), {resolved}/{total} resolved, load "
        f"{load_start[0]:.1f} -> {figures['load_average_end'][0]:.1f}; CPU {machine:.1f} s "
        f"(instances {instances:.1f}, driver {driver:.1f}, engine {engine:.1f})",
        flush=True,
    )
    return figures


async def main(concurrency: int) -> dict[str, Any]:
    base = base_image()
    tasks = demo_tasks()
    testenv = ensure_testenv(DEFAULT_CACHE, lambda line: print(line, file=sys.stderr))
    engine = await DockerEngine.connect()
    try:
        images = [
            await anyio.to_thread.run_sync(task_image, engine, base, task, testenv)
            for task in tasks
        ]
    finally:
        await engine.aclose()
    on_docker = [docker_task(task, image) for task, image in zip(tasks, images, strict=True)]
    with tempfile.TemporaryDirectory(prefix="bench-campaign-") as tmp:
        limits = LIMITS.model_copy(
            update={"concurrency": concurrency, "scoring": max(LIMITS.scoring, concurrency // 2)}
        )
        shared = await run_campaign(Path(tmp), "shared", on_docker, DockerBackend, limits)
        container = await run_campaign(
            Path(tmp), "container", on_docker, ContainerPerTrajectoryBackend, limits
        )
    cpus = os.cpu_count() or 1
    # Were the engine and the driver free, the shared run would still need the CPU its
    # instances spent (the commands' own work, mostly; the sandbox's share is small), spread
    # over every CPU.
    wall_floor = shared["instances_cpu_s"] / cpus
    return {
        "shared_wall_floor_s": wall_floor,
        "speedup_ceiling_at_this_cpu": container["wall_s"] / wall_floor,
        "tasks": len(tasks),
        "samples": SAMPLES,
        "concurrency": concurrency,
        "shared": shared,
        "container": container,
        "campaign_speedup_vs_container": container["wall_s"] / shared["wall_s"],
        "commands_per_s_ratio": shared["commands_per_s"] / container["commands_per_s"],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=LIMITS.concurrency,
                        help="trajectories in flight (default: the demo's 4)")  # fmt: skip
    args = parser.parse_args()
    load = LoadRecord()
    results = load.finish(anyio.run(main, args.concurrency))
    written = write_results("campaign", results)
    speedup = results["campaign_speedup_vs_container"]
    verdict = "met" if speedup >= TARGET_SPEEDUP else "MISSED"
    print(f"campaign_speedup_vs_container: {speedup:.2f} (target >= {TARGET_SPEEDUP:g}: {verdict})")
    print(
        f"ceiling on {os.cpu_count()} CPUs: {results['speedup_ceiling_at_this_cpu']:.2f} (the "
        f"shared run's instances spent {results['shared']['instances_cpu_s']:.1f} CPU-s, so "
        f"it takes >= {results['shared_wall_floor_s']:.1f} s however cheap the engine and driver)"
    )
    print(describe_load(results))
    print(f"wrote {written.relative_to(REPO)}")
