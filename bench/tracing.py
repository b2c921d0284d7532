"""What OpenTelemetry tracing costs a campaign: the engine's throughput off and on.

Run `python -m bench.tracing`. Writes bench/results/tracing.json. A campaign of oracle
trajectories (no sandbox, no model: the engine alone, where tracing's share is largest) runs
with tracing off and with it on, exporting to a real OTLP/HTTP receiver on loopback
(`testsupport/otlp.py`, in a process of its own, as a collector would be), in turns, several
rounds; each mode's median, and the time tracing added per span sent. Beside them: what a span
site costs when tracing is off (a context variable read), per call.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.tracing` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench.common import REPO, LoadRecord, describe_load, write_results
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.runtime import tracing
from mcp_evalserver.spec.campaign import CampaignSpec, Limits, Task

TRAJECTORIES = 1000
CONCURRENCY = 100
ROUNDS = 3
SITE_CALLS = 200_000


def _spec() -> CampaignSpec:
    return CampaignSpec(
        name="bench-tracing",
        tasks=[Task(id=f"t{n}", answer=str(n)) for n in range(TRAJECTORIES)],
        agent={"type": "oracle"},
        limits=Limits(concurrency=CONCURRENCY, per_instance=CONCURRENCY, scoring=CONCURRENCY),
    )


async def _campaign_s(state_dir: Path) -> float:
    store = CampaignStore(state_dir)
    campaign_id = await store.create(_spec())
    started = time.perf_counter()
    state = await CampaignRunner(store, campaign_id).run()
    elapsed = time.perf_counter() - started
    assert state.done_count == TRAJECTORIES
    return elapsed


def _site_ns() -> float:
    """What one `execute_tool` site costs with tracing off, in nanoseconds."""
    started = time.perf_counter_ns()
    for _ in range(SITE_CALLS):
        with tracing.tool("exec") as span:
            tracing.command_result(span, 0, 0.001)
    return (time.perf_counter_ns() - started) / SITE_CALLS


RECEIVER = """
import sys
from testsupport.otlp import receiving
with receiving() as receiver:
    print(receiver.url, flush=True)
    for line in sys.stdin:  # each line asks how many spans have arrived
        print(len(receiver.spans), flush=True)
"""


class _Receiver:
    """The OTLP/HTTP receiver in a child process: its URL and its count of spans."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.process = subprocess.Popen(
            [sys.executable, "-c", RECEIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env,
        )  # fmt: skip
        assert self.process.stdout is not None
        assert self.process.stdin is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        self.url = self.stdout.readline().strip()

    def spans(self) -> int:
        self.stdin.write("count\n")
        self.stdin.flush()
        return int(self.stdout.readline())

    def close(self) -> None:
        self.stdin.close()
        self.process.wait(timeout=30)


def main() -> None:
    load = LoadRecord()
    for name in [v for v in os.environ if v.startswith("OTEL_")]:
        del os.environ[name]
    off: list[float] = []
    on: list[float] = []
    spans = 0
    receiver = _Receiver()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for round_ in range(ROUNDS):
                os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
                off.append(anyio.run(_campaign_s, Path(scratch, f"off{round_}")))
                os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
                before = receiver.spans()
                on.append(anyio.run(_campaign_s, Path(scratch, f"on{round_}")))
                spans = receiver.spans() - before
    finally:
        os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        receiver.close()
    off_s, on_s = statistics.median(off), statistics.median(on)
    figures: dict[str, Any] = {
        "trajectories": TRAJECTORIES,
        "concurrency": CONCURRENCY,
        "off_s": off,
        "on_s": on,
        "off_trajectories_per_s": TRAJECTORIES / off_s,
        "on_trajectories_per_s": TRAJECTORIES / on_s,
        "on_vs_off": on_s / off_s,
        "spans_per_run": spans,
        "added_us_per_span": (on_s - off_s) / spans * 1e6,
        "off_site_ns": _site_ns(),
    }
    figures = load.finish(figures)
    written = write_results("tracing", figures)
    print(f"{TRAJECTORIES} trajectories at {CONCURRENCY} in flight, median of {ROUNDS} rounds:")
    print(f"  tracing off  {figures['off_trajectories_per_s']:8.0f} trajectories/s")
    print(f"  tracing on   {figures['on_trajectories_per_s']:8.0f} trajectories/s  ({spans} spans)")
    print(f"  on / off     {figures['on_vs_off']:8.2f}x the time")
    print(f"  added per span sent: {figures['added_us_per_span']:.0f} us")
    print(f"  a span site with tracing off: {figures['off_site_ns']:.0f} ns")
    print(describe_load(figures))
    print(f"wrote {written}")


if __name__ == "__main__":
    main()
