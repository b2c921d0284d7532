"""Benchmark of the dashboard: server time of its pages over a 10,000-trajectory ledger.

Run `python bench/dashboard.py`. Runs a real campaign of 2,000 answer tasks x 5 samples
through the engine (every trajectory with a transcript artifact), serves the product's HTTP
app with uvicorn on loopback, and times HTTP round trips (an upper bound of the server's time)
of the campaigns list, the campaign page (first page, and a later page sorted by pass rate), a
trajectory page and the campaign's JSON. `cold` is the first request after the server started
(the campaigns list reads and replays the whole ledger, the campaign page computes the
report and its bootstrap); `warm` is the median of the next requests (the dashboard follows
the ledger and reuses the figures until it grows). The pages are timed side by side on fresh
servers over the same ledger: first with the bootstrap's textbook resampler forced (`plain`,
what it did before the counts resampler), then with the resampler it chooses; last, the
campaign page as a fresh server's very first request (reading the ledger too). Prints a
table and writes bench/results/dashboard.json; the load average is recorded beside the
figures (this machine is shared: figures are noisy).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python bench/dashboard.py`, this directory comes first on sys.path and bench/mcp.py
# would shadow the `mcp` package: the repository root takes its place.
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [str(_BENCH.parent), *(p for p in sys.path if Path(p or ".").resolve() != _BENCH)]

import logging  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import anyio  # noqa: E402
import httpx2  # noqa: E402
import uvicorn  # noqa: E402

from bench.common import LoadRecord, describe_load, write_results  # noqa: E402
from mcp_evalserver.agents.base import Agent, Submission, TrajectoryContext  # noqa: E402
from mcp_evalserver.campaigns import CampaignRunner, CampaignStore  # noqa: E402
from mcp_evalserver.scoring import resampling  # noqa: E402
from mcp_evalserver.server.http import build_http_app, listening_socket  # noqa: E402
from mcp_evalserver.spec import CampaignSpec, Limits, Task  # noqa: E402

TASKS = 2000
SAMPLES = 5
WARM_REQUESTS = 15
TOKEN = "bench-token-0123456789abcdef"
TARGET_MS = 200.0
DEFAULT_VALUES_PER_LEVEL = resampling.VALUES_PER_LEVEL


class ScriptedAgent(Agent):
    """Answers right for a task-dependent share of samples, with a short transcript."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        number = int(context.task.id[1:])
        right = (number + context.sample) % 5 < number % 5 + 1
        answer = context.task.answer if right else "wrong"
        transcript = [
            {"role": "user", "content": context.task.prompt},
            {"tool": "sandbox_exec", "command": "python3 solve.py", "exit_code": 0},
            {"role": "assistant", "content": f"The answer is {answer}."},
        ]
        return Submission(answer=answer, transcript=transcript)


async def _campaign(state_dir: Path) -> str:
    spec = CampaignSpec(
        name="bench-dashboard",
        tasks=[Task(id=f"t{n}", prompt=f"task {n}", answer=str(n)) for n in range(TASKS)],
        samples=SAMPLES,
        agent={"type": "noop"},
        limits=Limits(concurrency=200, per_instance=200, scoring=200),
    )
    store = CampaignStore(state_dir)
    campaign_id = await store.create(spec, "bench-dashboard")
    state = await CampaignRunner(store, campaign_id, agent=ScriptedAgent()).run()
    assert state.done_count == TASKS * SAMPLES, "every trajectory must finish"
    return campaign_id


async def _time(client: httpx2.AsyncClient, path: str) -> float:
    return (await _time_with_cpu(client, path))[0]


async def _time_with_cpu(client: httpx2.AsyncClient, path: str) -> tuple[float, float]:
    """Wall time of the round trip and the CPU time this process spent meanwhile (the
    server's work plus the client's small share), both in ms: under load the CPU time is
    the steadier figure, and close to what the wall time is on an idle machine."""
    started, started_cpu = time.perf_counter(), time.process_time()
    response = await client.get(path)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    assert response.status_code == 200, (path, response.status_code, response.text[:300])
    return elapsed * 1000, cpu * 1000


async def _serve_and_time(
    state_dir: Path, pages: dict[str, str], *, warm_requests: int
) -> dict[str, dict[str, float]]:
    """A fresh server (nothing read yet): each page once (cold), then `warm_requests` each."""
    figures: dict[str, dict[str, float]] = {}
    sock = listening_socket("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    app = build_http_app(state_dir, host="127.0.0.1", token=TOKEN)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    headers = {"authorization": f"Bearer {TOKEN}"}
    async with (
        anyio.create_task_group() as group,
        httpx2.AsyncClient(base_url=base, headers=headers, timeout=120) as client,
    ):
        group.start_soon(server.serve, [sock])
        try:
            for name, path in pages.items():
                wall, cpu = await _time_with_cpu(client, path)
                figures[name] = {"cold_ms": wall, "cold_cpu_ms": cpu}
            for name, path in pages.items():
                if warm_requests:
                    warm = [await _time(client, path) for _ in range(warm_requests)]
                    figures[name]["warm_p50_ms"] = statistics.median(warm)
                    figures[name]["warm_max_ms"] = max(warm)
        finally:
            server.should_exit = True
    sock.close()
    return figures


async def main() -> dict[str, Any]:
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as temporary:
        state_dir = Path(temporary)
        started = time.perf_counter()
        campaign_id = await _campaign(state_dir)
        campaign_s = time.perf_counter() - started
        ledger_bytes = (state_dir / "campaigns" / campaign_id / "ledger.jsonl").stat().st_size
        # Cold: each page is the first of its kind on a fresh server; the campaigns list
        # reads the ledger, the campaign page then computes the report (and its bootstrap).
        pages = {
            "campaigns list": "/",
            "campaign page": f"/campaigns/{campaign_id}",
            "campaign page 7, by pass rate": f"/campaigns/{campaign_id}?sort=pass_rate&page=7",
            "trajectory page": f"/campaigns/{campaign_id}/trajectories/t1234@3",
            "campaign JSON": f"/api/campaigns/{campaign_id}",
        }
        # Side by side on the same ledger: the textbook resampler (what the bootstrap did
        # before the counts resampler) forced, then the resampler the product chooses.
        runs: dict[str, dict[str, dict[str, float]]] = {}
        for resampler, values_per_level in (("plain", sys.maxsize), ("chosen", None)):
            resampling.VALUES_PER_LEVEL = values_per_level or DEFAULT_VALUES_PER_LEVEL
            runs[resampler] = await _serve_and_time(state_dir, pages, warm_requests=WARM_REQUESTS)
        # A bookmark opened on a fresh server: the campaign page's request also reads the
        # whole ledger.
        first = {"campaign page, first request": pages["campaign page"]}
        runs["chosen"].update(await _serve_and_time(state_dir, first, warm_requests=0))
    return {
        "trajectories": TASKS * SAMPLES,
        "tasks": TASKS,
        "samples": SAMPLES,
        "ledger_bytes": ledger_bytes,
        "campaign_run_s": round(campaign_s, 2),
        "target_ms": TARGET_MS,
        "pages": {
            resampler: {k: {m: round(v, 1) for m, v in f.items()} for k, f in figures.items()}
            for resampler, figures in runs.items()
        },
    }


if __name__ == "__main__":
    load = LoadRecord()
    results = load.finish(anyio.run(main))
    print(
        f"dashboard over {results['trajectories']} trajectories ({results['tasks']} tasks x "
        f"{results['samples']}; ledger {results['ledger_bytes'] / 1e6:.1f} MB; campaign ran in "
        f"{results['campaign_run_s']} s); HTTP round trips on loopback, target "
        f"< {TARGET_MS:.0f} ms; bootstrap resampler: plain (before) vs chosen (counts here)"
    )
    plain, chosen = results["pages"]["plain"], results["pages"]["chosen"]
    columns = ("cold_ms", "cold_cpu_ms", "warm_p50_ms")
    print(f"{'':32}" + "".join(f"{c:>22}" for c in columns))
    print(f"{'page':32}" + f"{'plain':>13} {'chosen':>8}" * len(columns))
    for name, figure in chosen.items():
        before = plain.get(name, {})
        print(
            f"{name:32}"
            + "".join(
                f"{before.get(c, float('nan')):>13.1f} {figure.get(c, float('nan')):>8.1f}"
                for c in columns
            )
        )
    print(describe_load(results))
    write_results("dashboard", results)
    sys.exit(0)
