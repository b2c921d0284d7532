"""Benchmark of the docker sandbox: supervisor workspaces against the usual Docker ways.

Run `python bench/sandbox.py` (as root on a fresh machine: it starts the engine and builds the
base image through scripts/ensure-docker.sh). One instance holds a real PyPI project, Django's
sdist (about 6,900 files, committed as a git repository at /testbed); every figure is measured
in this one run, side by side, on this machine. Prints a table and writes
bench/results/sandbox.json.

- workspace_create_p50_ms: a copy-on-write workspace created and its first `true` answered,
  one every CREATE_PACE_S (as a campaign starts trajectories: the supervisor keeps
  READY_WORKSPACES workspaces built ahead, and builds the next ones once it has had nothing to
  do for a moment); workspace_create_back_to_back_p50_ms: the same asked one after another
  with no pause, faster than workspaces are built ahead, so after the first few each is built
  when asked; workspace_create_burst_p50_ms: BURST such creates asked at once;
  fresh_container_p50_ms: `docker run --rm <image> true` (a container per trajectory);
  copy_p50_ms: `cp -a` of the project (a copy per trajectory), timed inside the sandbox.
- exec_overhead_p50_ms: `true` through the supervisor; docker_exec_p50_ms: `true` by
  `docker exec` (the SDK's `exec_run`); exec_floor_p50_ms: the kernel's floor, a bare
  `posix_spawn` + wait of `true` by a process already inside a workspace's namespaces (mount,
  net, ipc, uts, its chroot, and one pid namespace made once), timed inside the container;
  exec_vs_floor = exec_overhead_p50_ms / exec_floor_p50_ms (target <= 2).
- exec_cpu_ms: CPU time per `true` through the supervisor, summed over everything that works
  for it: this process (the client), the instance container's cgroup (supervisor, holder, the
  exec's init and the command) and the container's shim relaying the supervisor's stream
  (dockerd relays it too, but a shared engine's CPU time is not ours to count);
  exec_cpu_client_ms, exec_cpu_sandbox_ms, exec_cpu_engine_ms split it. exec_floor_cpu_ms:
  the same for the floor's spawns. On a shared machine a wall-clock figure moves with
  everyone else's work (two busy CPUs make every wakeup wait); CPU time moves much less, so
  exec_cpu_vs_floor = exec_cpu_ms / exec_floor_cpu_ms compares designs where exec_vs_floor
  cannot.
- throughput_64_per_s, docker_exec_throughput_64_per_s: `true` commands per second with 64 in
  flight.
- checkpoint_p50_ms, fork_p50_ms: with 1,000 files of the project changed in a parent workspace,
  `checkpoint()` after one more change, and `fork()` of its current state (a checkpoint of the
  parent plus the new workspace); fork_at_checkpoint_p50_ms: a fork at an existing checkpoint
  (the n branches of `fork_trajectory`); fork_copy_p50_ms: `cp -a` of that same workspace's
  /testbed. The same figures on a small repository (small_*) show whether they are flat in
  the repository's size.
- keep_checkpoint_p50_ms, start_from_kept_p50_ms, kept_bytes: what `fork_trajectory` pays
  once per call so that its branches can start again after a crash: `export_checkpoint()` of
  that 1,000-file checkpoint (a tar of the changed files, kept with the ledger), and a
  workspace started from it (`workspace_from_archive`, what a resumed branch does).
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.sandbox` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import json
import os
import secrets
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from bench.common import (
    LoadRecord,
    describe_load,
    p50,
    p95,
    proc_stat,
    process_cpu_seconds,
    write_results,
)
from mcp_evalserver.sandbox.base import Instance, InstanceSpec, Workspace
from mcp_evalserver.sandbox.docker import DockerBackend
from mcp_evalserver.sandbox.docker_engine import DockerEngine
from mcp_evalserver.sandbox.supervised import SupervisedInstance
from mcp_evalserver.sandbox.supervisor.workspaces import READY_WORKSPACES, SPARE_HOLDERS

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "bench"
PROJECT = "django==5.2.19"
CREATES, BURST, FRESH_CONTAINERS, COPIES = 30, 16, 15, 5
CREATE_PACE_S = 0.02
EXECS, DOCKER_EXECS, FLOOR_SPAWNS = 300, 50, 300
IN_FLIGHT, THROUGHPUT_COMMANDS, DOCKER_THROUGHPUT_COMMANDS = 64, 1280, 320
FORKS, CHANGED_FILES, KEEPS = 30, 1000, 10
SMALL_REPO_SETUP = (
    "mkdir -p /testbed && cd /testbed && git init -q && printf 'x\\n' > README",
    "git add -A && git -c user.email=b@b -c user.name=bench commit -qm base",
)


# Run by `python3 -c` inside the instance container, as root: finds the command with argv[1]
# in its command line, joins its namespaces and root (the view: the same as its exec's init,
# which is non-dumpable, so its /proc entries are closed even to root without CAP_SYS_PTRACE),
# makes one pid namespace, and in it times argv[2] `posix_spawn`s of `true`, each waited for.
# Prints {"ms": the milliseconds of each, "cpu_ms": CPU per spawn, its own and the children's}.
FLOOR_SCRIPT = r"""
import ctypes, json, os, resource, sys, time
libc = ctypes.CDLL(None, use_errno=True)
marker, count = sys.argv[1].encode(), int(sys.argv[2])
def cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return f.read()
    except OSError:
        return b""
me = str(os.getpid())
(marked,) = [p for p in os.listdir("/proc") if p.isdigit() and p != me and marker in cmdline(p)]
command = int(marked)
root = os.open("/proc/%d/root" % command, os.O_RDONLY | os.O_DIRECTORY)
for ns in ("ipc", "uts", "net", "mnt"):
    fd = os.open("/proc/%d/ns/%s" % (command, ns), os.O_RDONLY)
    if libc.setns(fd, 0) != 0:
        sys.exit("setns %s: %s" % (ns, os.strerror(ctypes.get_errno())))
    os.close(fd)
os.fchdir(root)
os.chroot(".")
os.chdir("/")
if libc.unshare(0x20000000) != 0:
    sys.exit("unshare: " + os.strerror(ctypes.get_errno()))
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    times = []
    env = {"PATH": "/usr/bin:/bin"}
    cpu = time.process_time()
    for _ in range(count):
        t = time.perf_counter()
        child = os.posix_spawn("/bin/true", ["true"], env)
        os.waitpid(child, 0)
        times.append((time.perf_counter() - t) * 1000)
    spawned = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() - cpu + spawned.ru_utime + spawned.ru_stime
    os.write(w, json.dumps({"ms": times, "cpu_ms": cpu * 1000 / count}).encode())
    os._exit(0)
os.close(w)
data = b""
while True:
    chunk = os.read(r, 1 << 16)
    if not chunk:
        break
    data += chunk
os.waitpid(pid, 0)
print(data.decode())
"""


async def exec_floor(engine: DockerEngine, container: str, ws: Workspace) -> dict[str, Any]:
    """Bare spawns of `true` inside `ws`'s namespaces (FLOOR_SCRIPT): their milliseconds
    ("ms") and the CPU milliseconds per spawn ("cpu_ms")."""
    marker = f"{secrets.randbelow(10**9) + 10**9}.5"  # a sleep no one else runs
    async with anyio.create_task_group() as group:
        group.start_soon(ws.exec, f"exec sleep {marker}")
        argv = ["python3", "-I", "-S", "-c", FLOOR_SCRIPT, marker, str(FLOOR_SPAWNS)]
        for _ in range(100):  # until the marked sleep runs
            done = await engine.exec(container, argv)
            if done.exit_code == 0 or "ValueError" not in done.output:
                break
        group.cancel_scope.cancel()
    if done.exit_code != 0:
        raise RuntimeError(f"the floor's script failed ({done.exit_code}): {done.output}")
    measured: dict[str, Any] = json.loads(done.output.strip().splitlines()[-1])
    return measured


class CpuMeter:
    """CPU seconds spent for a supervised instance: this process, the instance container's
    cgroup, and the container's shim, which relays the supervisor's stream. dockerd relays it
    too, but its CPU time is every engine user's on a shared machine: not counted.
    """

    def __init__(self, engine: DockerEngine, container: str) -> None:
        pid = int(engine.client.containers.get(container).attrs["State"]["Pid"])
        self.shim = int(proc_stat(pid)[1])  # its parent
        self.cgroup = cgroup_cpu_file(pid)

    def sample(self) -> dict[str, float]:
        return {
            "client": time.process_time(),
            "sandbox": cgroup_cpu_seconds(self.cgroup),
            "engine": process_cpu_seconds(self.shim),
        }


def cgroup_cpu_file(pid: int) -> Path:
    """The file that counts the CPU time of `pid`'s cgroup (v1 cpuacct, else v2)."""
    unified = None
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            for mount in ("cpuacct", "cpu,cpuacct"):
                found = Path("/sys/fs/cgroup", mount, path.lstrip("/"), "cpuacct.usage")
                if found.exists():
                    return found
        if controllers == "":
            unified = Path("/sys/fs/cgroup", path.lstrip("/"), "cpu.stat")
    if unified is None or not unified.exists():
        raise RuntimeError(f"no CPU accounting for the cgroup of process {pid}")
    return unified


def cgroup_cpu_seconds(path: Path) -> float:
    text = path.read_text()
    if path.name == "cpuacct.usage":
        return int(text) / 1e9
    usage = next(line for line in text.splitlines() if line.startswith("usage_usec "))
    return int(usage.split()[1]) / 1e6


def base_image() -> str:
    """Starts the engine and builds the base image when needed; returns the image's tag."""
    script = "scripts/ensure-docker.sh" if os.geteuid() == 0 else "sandbox_images/build-base.sh"
    done = subprocess.run(
        ["bash", str(REPO / script)], cwd=REPO, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"bench: {script} failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def project_tree() -> Path:
    """The project's sdist from PyPI, unpacked once into .cache/bench (never committed)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    name, _, version = PROJECT.partition("==")
    unpacked = CACHE / f"{name}-{version}"
    if unpacked.is_dir():
        return unpacked
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-binary",
            ":all:",
            "--no-deps",
            "-d",
            str(CACHE),
            PROJECT,
        ],
        check=True,
    )
    sdist = next(CACHE.glob(f"{name}-{version}.tar.gz"))
    with tarfile.open(sdist) as tar:
        tar.extractall(CACHE, filter="data")
    return unpacked


def project_image(engine: DockerEngine, base: str, tree: Path) -> tuple[str, int]:
    """An image with the project committed at /testbed; built once per base and project."""
    files = sum(1 for p in tree.rglob("*") if p.is_file())
    tag = f"mcp-evalserver/bench-{tree.name.lower()}:{base.rpartition(':')[2]}"
    if engine.client.images.list(name=tag):
        return tag, files
    with tempfile.TemporaryDirectory() as context:
        subprocess.run(["cp", "-a", f"{tree}/.", f"{context}/testbed"], check=True)
        (Path(context) / "Dockerfile").write_text(
            f"FROM {base}\nCOPY testbed/ /testbed/\n"
            "RUN cd /testbed && git init -q && git add -A "
            "&& git -c user.email=b@b -c user.name=bench commit -qm base && git status >/dev/null\n"
        )
        engine.client.images.build(path=context, tag=tag, network_mode="none", rm=True)
    return tag, files


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await fn()
    return (time.perf_counter() - started) * 1000


async def copies_ms(ws: Workspace) -> list[float]:
    """`cp -a` of the workspace's /testbed, COPIES times, timed inside the sandbox (so the
    figure is the copy alone)."""
    copies = []
    for i in range(COPIES):
        result = await ws.exec(
            f"s=$(date +%s%N); cp -a /testbed /tmp/copy{i}; e=$(date +%s%N); "
            f"rm -rf /tmp/copy{i}; echo $(( (e - s) / 1000 ))",
            timeout=600,
        )
        assert result.exit_code == 0, result.stderr
        copies.append(int(result.stdout) / 1000)
    return copies


async def measure(engine: DockerEngine, instance: Instance, image: str) -> dict[str, float]:
    assert isinstance(instance, SupervisedInstance), "the bench image must run the supervisor"
    container = instance.info["container"]
    figures: dict[str, float] = {}

    creates: list[float] = []
    created: list[Workspace] = []

    async def create(i: int) -> None:
        ws = await instance.workspace(f"create-{i}")
        assert (await ws.exec("true")).exit_code == 0
        created.append(ws)

    for i in range(CREATES):
        creates.append(await timed(lambda: create(i)))  # noqa: B023 (awaited at once)
    for ws in created:
        await ws.destroy()
    figures["workspace_create_back_to_back_p50_ms"] = p50(creates)
    created.clear()
    paced: list[float] = []
    for i in range(CREATES):
        await anyio.sleep(CREATE_PACE_S)
        paced.append(await timed(lambda: create(i + 2 * CREATES + BURST)))  # noqa: B023
    for ws in created:
        await ws.destroy()
    created.clear()
    figures["workspace_create_p50_ms"] = p50(paced)
    # Asked all at once: more than the supervisor keeps prepared, so most wait for a spare.
    burst: list[float] = []
    async with anyio.create_task_group() as group:
        for i in range(BURST):

            async def one(i: int = i) -> None:
                burst.append(await timed(lambda: create(i + CREATES)))

            group.start_soon(one)
    for ws in created:
        await ws.destroy()
    figures["workspace_create_burst_p50_ms"] = p50(burst)
    figures["spares_prepared"] = SPARE_HOLDERS
    figures["workspaces_prepared"] = READY_WORKSPACES

    def fresh_container() -> None:
        engine.client.containers.run(image, ["true"], remove=True, network_mode="none")

    fresh = [
        await timed(lambda: anyio.to_thread.run_sync(fresh_container))
        for _ in range(FRESH_CONTAINERS)
    ]
    figures["fresh_container_p50_ms"] = p50(fresh)

    ws = await instance.workspace("bench")
    figures["copy_p50_ms"] = p50(await copies_ms(ws))

    meter = CpuMeter(engine, container)
    before = meter.sample()
    execs = [await timed(lambda: ws.exec("true")) for _ in range(EXECS)]
    after = meter.sample()
    figures["exec_overhead_p50_ms"] = p50(execs)
    parts = {part: (after[part] - before[part]) * 1000 / EXECS for part in after}
    figures.update({f"exec_cpu_{part}_ms": ms for part, ms in parts.items()})
    figures["exec_cpu_ms"] = sum(parts.values())
    floor = await exec_floor(engine, container, ws)
    figures["exec_floor_p50_ms"] = p50(floor["ms"])
    figures["exec_floor_cpu_ms"] = floor["cpu_ms"]
    figures["exec_vs_floor"] = figures["exec_overhead_p50_ms"] / figures["exec_floor_p50_ms"]
    figures["exec_cpu_vs_floor"] = figures["exec_cpu_ms"] / figures["exec_floor_cpu_ms"]
    docker_container = engine.client.containers.get(container)
    docker_execs = [
        await timed(lambda: anyio.to_thread.run_sync(docker_container.exec_run, ["true"]))
        for _ in range(DOCKER_EXECS)
    ]
    figures["docker_exec_p50_ms"] = p50(docker_execs)

    workspaces = [await instance.workspace(f"flight-{i}") for i in range(8)]

    async def supervisor_worker(n: int) -> None:
        for k in range(THROUGHPUT_COMMANDS // IN_FLIGHT):
            await workspaces[(n + k) % len(workspaces)].exec(["true"])

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for n in range(IN_FLIGHT):
            tg.start_soon(supervisor_worker, n)
    figures["throughput_64_per_s"] = THROUGHPUT_COMMANDS / (time.perf_counter() - started)

    threads = anyio.CapacityLimiter(IN_FLIGHT)

    async def docker_worker() -> None:
        for _ in range(DOCKER_THROUGHPUT_COMMANDS // IN_FLIGHT):
            await anyio.to_thread.run_sync(docker_container.exec_run, ["true"], limiter=threads)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(IN_FLIGHT):
            tg.start_soon(docker_worker)
    elapsed = time.perf_counter() - started
    figures["docker_exec_throughput_64_per_s"] = DOCKER_THROUGHPUT_COMMANDS / elapsed

    print(
        f"  (p95: workspace create {p95(creates):.1f} ms, exec {p95(execs):.2f} ms, "
        f"docker exec {p95(docker_execs):.1f} ms, fresh container {p95(fresh):.0f} ms)"
    )
    return figures


async def measure_forks(instance: Instance, prefix: str = "") -> dict[str, float]:
    """Checkpoint and fork of a workspace with CHANGED_FILES changed files, beside `cp -a`."""
    parent = await instance.workspace("fork-parent")
    # The project's first files get a line each; a repository with fewer gets new files.
    change = (
        f"cd /testbed && find . -path ./.git -prune -o -type f -print | head -n {CHANGED_FILES} "
        '| xargs sh -c \'for f; do echo "# changed" >> "$f"; done\' _; '
        f"seq $(git status --porcelain | wc -l) {CHANGED_FILES - 1} | "
        "while read -r i; do echo $i > new$i.txt; done"
    )
    done = await parent.exec(change, timeout=600)
    assert done.exit_code == 0, done.stderr
    changed = await parent.exec("git status --porcelain | wc -l")
    assert int(changed.stdout) >= CHANGED_FILES, changed.stdout

    checkpoints, forks, at_checkpoint, children = [], [], [], []
    for i in range(FORKS):
        await parent.exec(f"echo {i} > step.txt")  # something to freeze each time
        checkpoints.append(await timed(parent.checkpoint))
    for i in range(FORKS):
        await parent.exec(f"echo {i} > step.txt")

        async def fork(i: int = i) -> None:
            children.append(await parent.fork(f"fork-{i}"))

        forks.append(await timed(fork))
    checkpoint = await parent.checkpoint()
    for i in range(FORKS):

        async def branch(i: int = i) -> None:
            children.append(await parent.fork(f"branch-{i}", checkpoint=checkpoint))

        at_checkpoint.append(await timed(branch))
    seen = await children[-1].exec("git status --porcelain | wc -l")
    assert int(seen.stdout) >= CHANGED_FILES, "a fork must see the parent's changes"
    keeps, starts, kept = [], [], [b""]
    for i in range(KEEPS):

        async def keep() -> None:
            kept[0] = await parent.export_checkpoint(checkpoint)

        keeps.append(await timed(keep))
        await parent.exec(f"echo {i} > step.txt")

        async def start(i: int = i) -> None:
            children.append(await instance.workspace_from_archive(f"kept-{i}", kept[0]))

        starts.append(await timed(start))
    seen = await children[-1].exec("git status --porcelain | wc -l")
    assert int(seen.stdout) >= CHANGED_FILES, "a kept checkpoint must hold the parent's changes"
    for child in children:
        await child.destroy()
    copies = await copies_ms(parent)
    await parent.destroy()
    print(
        f"  ({prefix or 'large '}forks p95: checkpoint {p95(checkpoints):.1f} ms, fork "
        f"{p95(forks):.1f} ms, fork at a checkpoint {p95(at_checkpoint):.1f} ms; max "
        f"{max(checkpoints + forks + at_checkpoint):.0f} ms: a squash of old layers)"
    )
    return {
        f"{prefix}checkpoint_p50_ms": p50(checkpoints),
        f"{prefix}fork_p50_ms": p50(forks),
        f"{prefix}fork_at_checkpoint_p50_ms": p50(at_checkpoint),
        f"{prefix}fork_copy_p50_ms": p50(copies),
        f"{prefix}keep_checkpoint_p50_ms": p50(keeps),
        f"{prefix}start_from_kept_p50_ms": p50(starts),
        f"{prefix}kept_bytes": float(len(kept[0])),
    }


def report(figures: dict[str, Any], project: str, files: int) -> None:
    f = figures
    rows = [
        (
            f"workspace create + first true, every {CREATE_PACE_S * 1000:.0f} ms",
            f["workspace_create_p50_ms"],
            "ms p50",
        ),
        ("the same, back to back", f["workspace_create_back_to_back_p50_ms"], "ms p50"),
        (f"the same, {BURST} asked at once", f["workspace_create_burst_p50_ms"], "ms p50"),
        ("fresh container (docker run --rm)", f["fresh_container_p50_ms"], "ms p50"),
        (f"cp -a of the project ({files} files)", f["copy_p50_ms"], "ms p50"),
        ("exec `true` through the supervisor", f["exec_overhead_p50_ms"], "ms p50"),
        ("floor: spawn `true` inside the namespaces", f["exec_floor_p50_ms"], "ms p50"),
        ("CPU per exec `true` (all processes)", f["exec_cpu_ms"], "ms"),
        ("  of it: this client", f["exec_cpu_client_ms"], "ms"),
        ("  of it: the container (supervisor, exec)", f["exec_cpu_sandbox_ms"], "ms"),
        ("  of it: the shim relaying the stream", f["exec_cpu_engine_ms"], "ms"),
        ("CPU per spawn of the floor", f["exec_floor_cpu_ms"], "ms"),
        ("exec CPU / the floor's CPU", f["exec_cpu_vs_floor"], "x"),
        ("exec `true` by docker exec", f["docker_exec_p50_ms"], "ms p50"),
        ("supervisor, 64 in flight", f["throughput_64_per_s"], "cmd/s"),
        ("docker exec, 64 in flight", f["docker_exec_throughput_64_per_s"], "cmd/s"),
        (f"checkpoint, {CHANGED_FILES} files changed", f["checkpoint_p50_ms"], "ms p50"),
        (f"fork, {CHANGED_FILES} files changed", f["fork_p50_ms"], "ms p50"),
        ("fork at an existing checkpoint", f["fork_at_checkpoint_p50_ms"], "ms p50"),
        ("cp -a of that workspace's /testbed", f["fork_copy_p50_ms"], "ms p50"),
        ("keep that checkpoint (export, per fork)", f["keep_checkpoint_p50_ms"], "ms p50"),
        ("start a workspace from the kept one", f["start_from_kept_p50_ms"], "ms p50"),
        ("kept checkpoint size", f["kept_bytes"] / 1e6, "MB"),
        ("checkpoint, small repository", f["small_checkpoint_p50_ms"], "ms p50"),
        ("fork, small repository", f["small_fork_p50_ms"], "ms p50"),
    ]
    print(f"\nsandbox benchmark: one instance holding {project} ({files} files)")
    print(f"{describe_load(figures)}\n")
    for label, value, unit in rows:
        print(f"  {label:<42} {value:>10.2f} {unit}")
    create_x = f["fresh_container_p50_ms"] / f["workspace_create_p50_ms"]
    exec_x = f["docker_exec_p50_ms"] / f["exec_overhead_p50_ms"]
    flight_x = f["throughput_64_per_s"] / f["docker_exec_throughput_64_per_s"]
    checks = [
        (f"workspace create p50 <= 2 ms ({f['workspace_create_p50_ms']:.1f})",
         f["workspace_create_p50_ms"] <= 2),
        (f"workspace create >= 15x faster than a fresh container ({create_x:.1f}x)",
         create_x >= 15),
        (f"exec overhead p50 <= 10 ms ({f['exec_overhead_p50_ms']:.2f})",
         f["exec_overhead_p50_ms"] <= 10),
        (f"exec >= 5x faster than docker exec ({exec_x:.1f}x)", exec_x >= 5),
        (f"exec within 2x of the floor ({f['exec_vs_floor']:.1f}x)", f["exec_vs_floor"] <= 2),
        (f"throughput at 64 in flight >= 2,000/s ({f['throughput_64_per_s']:.0f})",
         f["throughput_64_per_s"] >= 2000),
        (f"throughput at 64 in flight >= 5x docker exec's ({flight_x:.1f}x)", flight_x >= 5),
        (f"checkpoint p50 <= 10 ms ({f['checkpoint_p50_ms']:.1f})", f["checkpoint_p50_ms"] <= 10),
        (f"fork p50 <= 10 ms ({f['fork_p50_ms']:.1f})", f["fork_p50_ms"] <= 10),
        (f"fork flat in repository size ({f['fork_p50_ms']:.1f} vs small "
         f"{f['small_fork_p50_ms']:.1f} ms)", f["fork_p50_ms"] <= 1.5 * f["small_fork_p50_ms"]),
    ]  # fmt: skip
    print("\ntargets:")
    for text, met in checks:
        print(f"  [{'met' if met else 'MISSED'}] {text}")


async def main() -> None:
    load = LoadRecord()
    base = base_image()
    tree = project_tree()
    async with DockerBackend() as backend:
        engine = backend.engine
        image, files = await anyio.to_thread.run_sync(project_image, engine, base, tree)
        spec = InstanceSpec(image=image, key=f"bench-{os.getpid()}")
        with anyio.fail_after(300):
            instance = await backend.instance(spec)
        figures = await measure(engine, instance, image)
        figures.update(await measure_forks(instance))
        await instance.aclose()
        small = InstanceSpec(image=base, key=f"bench-small-{os.getpid()}", setup=SMALL_REPO_SETUP)
        with anyio.fail_after(300):
            small_instance = await backend.instance(small)
        figures.update(await measure_forks(small_instance, "small_"))
    results = load.finish(figures)
    written = write_results("sandbox", results)
    report(results, tree.name, files)
    print(f"\nwrote {written.relative_to(REPO)}")


if __name__ == "__main__":
    anyio.run(main)
