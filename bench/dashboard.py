"""Benchmark of the dashboard: server time of its pages over a 10,000-trajectory ledger.

Run `python bench/dashboard.py`. Runs a real campaign of 2,000 answer tasks x 5 samples
through the engine (every trajectory with a transcript artifact), then times each page on its
own freshly started server (`mcp-evalserver --http`, a separate process, as a person runs it):
the campaigns list, the campaign page (first page, and a later page sorted by pass rate), a
trajectory page and the campaign's JSON.

`cold` is the page as that server's very first request (nothing of the campaign read yet; the
templates are compiled when the server starts); `warm` is the median of the next
`WARM_REQUESTS` requests of the same page on the same server. Times are HTTP round trips on
loopback (wall, an upper bound of the server's time) and the server process's CPU time over
the request (from /proc, in 10 ms clock ticks). Each page is timed side by side in two ways:

- `ledger`: no summary beside the ledger (it is deleted before each server starts): the server
  reads and replays the whole ledger and computes the report, as every cold page did before
  summaries, and as the first page of a campaign ever shown still does (it writes the summary;
  the server's background summarising starts on the same campaign at once, and the page waits
  for it);
- `summary`: the summary the `ledger` runs wrote is there and matches the ledger byte for byte:
  the campaign page comes from it, the trajectory page from a replay of that trajectory's
  records.

Prints a table and writes bench/results/dashboard.json; the load average is recorded beside the
figures (this machine is shared: figures are noisy).
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.dashboard` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2

from bench.common import (
    LoadRecord,
    child_running,
    describe_load,
    process_cpu_seconds,
    write_results,
)
from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.server.dashboard.summaries import SUMMARY_FILE
from mcp_evalserver.spec.campaign import CampaignSpec, Limits, Task
from mcp_evalserver.spec.submission import Submission
from testsupport.servers import http_server

TASKS = 2000
SAMPLES = 5
WARM_REQUESTS = 15
TOKEN = "bench-token-0123456789abcdef"
TARGET_MS = 200.0
MODES = ("ledger", "summary")


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


async def _time_page(state_dir: Path, path: str) -> dict[str, float]:
    """One fresh server: the page once (cold), then `WARM_REQUESTS` times (warm)."""
    async with (
        http_server(state_dir, "--no-resume-running", token=TOKEN) as url,
        httpx2.AsyncClient(
            base_url=url.removesuffix("/mcp"),
            headers={"authorization": f"Bearer {TOKEN}"},
            timeout=120,
        ) as client,
    ):
        server = child_running("--http")

        async def timed() -> tuple[float, float]:
            started, started_cpu = time.perf_counter(), process_cpu_seconds(server)
            response = await client.get(path)
            elapsed = (time.perf_counter() - started) * 1000
            cpu = (process_cpu_seconds(server) - started_cpu) * 1000
            assert response.status_code == 200, (path, response.status_code, response.text[:300])
            return elapsed, cpu

        cold, cold_cpu = await timed()
        warm = [await timed() for _ in range(WARM_REQUESTS)]
    return {
        "cold_ms": cold,
        "cold_cpu_ms": cold_cpu,
        "warm_p50_ms": statistics.median(w for w, _ in warm),
        "warm_cpu_p50_ms": statistics.median(c for _, c in warm),
        "warm_max_ms": max(w for w, _ in warm),
    }


async def main() -> dict[str, Any]:
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as temporary:
        state_dir = Path(temporary)
        started = time.perf_counter()
        campaign_id = await _campaign(state_dir)
        campaign_s = time.perf_counter() - started
        directory = state_dir / "campaigns" / campaign_id
        ledger_bytes = (directory / "ledger.jsonl").stat().st_size
        pages = {
            "campaigns list": "/",
            "campaign page": f"/campaigns/{campaign_id}",
            "campaign page 7, by pass rate": f"/campaigns/{campaign_id}?sort=pass_rate&page=7",
            "trajectory page": f"/campaigns/{campaign_id}/trajectories/t1234@3",
            "campaign JSON": f"/api/campaigns/{campaign_id}",
        }
        runs: dict[str, dict[str, dict[str, float]]] = {mode: {} for mode in MODES}
        for mode in MODES:
            for name, path in pages.items():
                if mode == "ledger":
                    (directory / SUMMARY_FILE).unlink(missing_ok=True)
                runs[mode][name] = await _time_page(state_dir, path)
            if mode == "ledger":
                # The campaign page's cold request wrote it (the last `ledger` run did too).
                assert (directory / SUMMARY_FILE).is_file(), "no summary was written"
        summary_bytes = (directory / SUMMARY_FILE).stat().st_size
    return {
        "trajectories": TASKS * SAMPLES,
        "tasks": TASKS,
        "samples": SAMPLES,
        "ledger_bytes": ledger_bytes,
        "summary_bytes": summary_bytes,
        "campaign_run_s": round(campaign_s, 2),
        "target_ms": TARGET_MS,
        "pages": {
            mode: {k: {m: round(v, 1) for m, v in f.items()} for k, f in figures.items()}
            for mode, figures in runs.items()
        },
    }


if __name__ == "__main__":
    load = LoadRecord()
    results = load.finish(anyio.run(main))
    print(
        f"dashboard over {results['trajectories']} trajectories ({results['tasks']} tasks x "
        f"{results['samples']}; ledger {results['ledger_bytes'] / 1e6:.1f} MB, summary "
        f"{results['summary_bytes'] / 1e6:.1f} MB; campaign ran in {results['campaign_run_s']} "
        f"s); each page on a fresh `mcp-evalserver --http`: cold = its first request, warm = "
        f"median of the next {WARM_REQUESTS}; wall = HTTP round trip on loopback, cpu = the "
        f"server's CPU time (10 ms ticks); target < {TARGET_MS:.0f} ms; ledger = no summary "
        "beside the ledger (before), summary = with it"
    )
    columns = ("cold_ms", "cold_cpu_ms", "warm_p50_ms", "warm_cpu_p50_ms")
    print(f"{'':32}" + "".join(f"{c:>20}" for c in columns))
    print(f"{'page':32}" + f"{'ledger':>11} {'summary':>8}" * len(columns))
    ledger, summary = results["pages"]["ledger"], results["pages"]["summary"]
    for name, figure in summary.items():
        before = ledger[name]
        print(f"{name:32}" + "".join(f"{before[c]:>11.1f} {figure[c]:>8.1f}" for c in columns))
    print(describe_load(results))
    write_results("dashboard", results)
    sys.exit(0)
