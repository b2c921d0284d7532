"""The worker's CPU per call of this checkout against another's (`--base DIR`), side by side.

Run `python bench/worker_ab.py --base DIR` as root (workspaces need namespaces and overlayfs).
For each checkout it starts two `--http --workers 1` servers (one with no campaign, for the
trivial call `list_campaigns`; one with an external campaign of a small repository, whose 32
sessions each hold a claim), then measures in `--rounds` interleaved rounds, the two checkouts
one after the other for each tool and the order reversed every other round: the trivial call,
`read_file` and `sandbox_exec` (bench/front_ratios.py's TOOLS), `--calls` per session each.
It prints and writes bench/results/worker_ab.json: per tool and checkout the median of the
server's own CPU per call (`workers_cpu_ms`: the server process, not its sandbox), the ratio
new / base, and each checkout's `read_file` and `sandbox_exec` extra over its trivial call,
with the load (1 minute) at each round's start.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.worker_ab`
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import LoadRecord, child_running, describe_load, write_results
from bench.front_ratios import TOOLS, Calls, bench_repo, claimed_sessions, plain_calls, port_of
from testsupport.servers import REPO, http_server

MEASURED = ("trivial", "read_file", "sandbox_exec")


async def targets_of(
    stack: contextlib.AsyncExitStack, root: Path, name: str, repo: Path, checkout: Path
) -> dict[str, Calls]:
    """The measured calls of `checkout`'s servers (named `name` under `root`), held until
    `stack` closes."""
    trivial_state, state = root / f"trivial-{name}", root / f"state-{name}"
    trivial_url = await stack.enter_async_context(
        http_server(trivial_state, workers=1, repo=checkout)
    )
    targets = {
        "trivial": await plain_calls(
            stack, port_of(trivial_url), child_running(str(trivial_state)), "list_campaigns"
        )
    }
    url = await stack.enter_async_context(
        http_server(state, "--allow-paths", str(root), workers=1, repo=checkout)
    )
    sessions, claims = await claimed_sessions(stack, url, repo)
    server = child_running(str(state))
    for tool in MEASURED[1:]:
        arguments = [{"claim_id": claim, **TOOLS[tool][0]} for claim in claims]
        targets[tool] = Calls(sessions, tool, arguments, server)
    return targets


async def run(base: Path, rounds: int, calls_per_client: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="evs-bench-ab-") as tmp:
        root = Path(tmp)
        repo = bench_repo(root / "repo")
        async with contextlib.AsyncExitStack() as stack:
            sides = {
                "base": await targets_of(stack, root, "base", repo, base),
                "new": await targets_of(stack, root, "new", repo, REPO),
            }
            measured: dict[str, dict[str, list[float]]] = {
                side: {tool: [] for tool in MEASURED} for side in sides
            }
            loads = []
            for number in range(rounds):
                loads.append(os.getloadavg()[0])
                order = ["base", "new"] if number % 2 == 0 else ["new", "base"]
                for tool in MEASURED:
                    for side in order:
                        figures = await sides[side][tool].measure(calls_per_client)
                        measured[side][tool].append(figures["workers_cpu_ms"])
                print(f"round {number + 1}/{rounds} (load {loads[-1]:.2f}): "
                      + ", ".join(f"{side} {tool} {measured[side][tool][-1]:.3f} ms"
                                  for side in sides for tool in MEASURED),
                      file=sys.stderr)  # fmt: skip
    median = {
        side: {tool: statistics.median(values) for tool, values in tools.items()}
        for side, tools in measured.items()
    }
    return {
        "workers_cpu_ms": median,
        "new_vs_base": {tool: median["new"][tool] / median["base"][tool] for tool in MEASURED},
        "extra_over_trivial_ms": {
            side: {tool: median[side][tool] - median[side]["trivial"] for tool in MEASURED[1:]}
            for side in median
        },
        "rounds": measured,
        "load_average_by_round": loads,
        "base": str(base),
        "calls_per_round": calls_per_client * len(sides["new"]["trivial"].sessions),
    }


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("bench/worker_ab.py needs root (workspaces use namespaces and overlayfs)")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds (default 8)")
    parser.add_argument(
        "--calls", type=int, default=40, help="calls per session per measure (32 sessions)"
    )
    arguments = parser.parse_args()
    load = LoadRecord()
    results = load.finish(asyncio.run(run(arguments.base, arguments.rounds, arguments.calls)))
    write_results("worker_ab", results)
    print(json.dumps({k: results[k] for k in ("workers_cpu_ms", "new_vs_base")}, indent=2))
    print(describe_load(results))
