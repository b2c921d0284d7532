"""Benchmark of the `evalserver` Inspect sandbox against Inspect's own `local` sandbox.

Run `python bench/inspect_sandbox.py` as root (not `inspect.py`: run as a script, that name
would shadow the standard library's `inspect`). The example task
(examples/inspect/sandbox_task.py: a mock-model turn, then commands and file writes in the
sandbox, a scorer that reads them back) runs through `inspect eval` on the command line in this
one run, side by side: with `evalserver` sandboxes (local backend: a copy-on-write workspace per
sample of one shared instance, own pid/net namespaces, capabilities dropped) and with Inspect's
`local` sandbox (a temporary directory per sample, no isolation at all: the floor). Inspect's
docker sandbox needs Docker Compose, which this machine does not have. Prints a table and
writes bench/results/inspect_sandbox.json.

- wall_per_sample_ms: the eval's wall time (process start to exit) over its samples.
- sample_p50_ms, sample_p95_ms: each sample's own `total_time` from the Inspect log (sandbox
  set-up, solver, scorer, clean-up; at default concurrency it includes waiting for the CPU).
Each sandbox runs twice: `--max-samples 1` (`*_serial`: one sample's latency) and Inspect's
default concurrency.
Figures are noisy on a shared machine: the load average is recorded beside them.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from inspect_ai.log import read_eval_log

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "inspect_sandbox.json"
TASK = REPO / "examples" / "inspect" / "sandbox_task.py"
SAMPLES, EPOCHS = 20, 2


def run_eval(sandbox: str, log_dir: Path, *extra: str) -> dict[str, Any]:
    """One `inspect eval` of the example task; its figures."""
    inspect = Path(sys.executable).with_name("inspect")
    started = time.monotonic()
    done = subprocess.run(
        [str(inspect), "eval", f"{TASK}@sandbox_task", "-T", f"sandbox={sandbox}",
         "-T", f"samples={SAMPLES}", "--epochs", str(EPOCHS), "--log-dir", str(log_dir),
         "--log-format", "json", "--display", "none", *extra],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"inspect eval failed ({sandbox}):\n{done.stderr[-3000:]}")
    (log_file,) = log_dir.glob("*.json")
    log = read_eval_log(str(log_file))
    samples = log.samples or []
    times = sorted(float(s.total_time or 0.0) * 1000 for s in samples)
    correct = sum(1 for s in samples if s.scores and next(iter(s.scores.values())).value == "C")
    return {
        "samples": len(samples),
        "correct": correct,
        "wall_s": round(wall, 2),
        "wall_per_sample_ms": round(wall * 1000 / max(1, len(samples)), 1),
        "sample_p50_ms": round(statistics.median(times), 1),
        "sample_p95_ms": round(times[max(0, round(0.95 * len(times)) - 1)], 1),
    }


def main() -> None:
    if os.geteuid() != 0:
        raise SystemExit("bench/inspect_sandbox.py needs root (the local backend's namespaces)")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="evs-bench-inspect-") as tmp:
        root = Path(tmp)
        (root / "instance").mkdir()
        config = root / "evalserver.yaml"
        config.write_text("path: instance\nsetup:\n  - echo base > base.txt\n")
        # One sample at a time (each sample's own latency), then Inspect's default concurrency.
        results = {
            "evalserver_serial": run_eval(str(config), root / "es-1", "--max-samples", "1"),
            "inspect_local_serial": run_eval("local", root / "local-1", "--max-samples", "1"),
            "evalserver": run_eval(str(config), root / "es"),
            "inspect_local": run_eval("local", root / "local"),
        }
    report = {
        "task": "examples/inspect/sandbox_task.py",
        "samples_per_run": SAMPLES * EPOCHS,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        **results,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    header = ("samples", "correct", "wall/sample ms", "p50 ms", "p95 ms")
    print(f"{'sandbox':<22}" + "".join(f"{h:>16}" for h in header))
    for name, row in results.items():
        keys = ("samples", "correct", "wall_per_sample_ms", "sample_p50_ms", "sample_p95_ms")
        print(f"{name:<22}" + "".join(f"{row[k]:>16}" for k in keys))
    print(f"load average before {report['load_before']}, after {report['load_after']}")
    print(f"wrote {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
