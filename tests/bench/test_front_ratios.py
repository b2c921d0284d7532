"""bench/front_ratios.py: issue 39's figures in interleaved rounds, robust to a shared load.

The arithmetic (medians, ratios of medians, targets) on rounds written here; the rounds'
order with targets that record it; and the whole `--ratios-only` run, quick, against real
servers (ours, the bare SDK's, this checkout as the base) and a real workspace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bench import front
from bench.front_ratios import TARGETS, Target, measure_rounds, summarize

REPO = Path(__file__).resolve().parents[2]
CALLS = ("bare_sdk_sse", "bare_sdk_json", "trivial", "read_file", "write_file")


def one_round(
    cpu_ms: dict[str, float], calls_per_s: float = 300.0, base: float = 150.0
) -> dict[str, Any]:
    """A round's figures: each target's whole CPU per call (`cpu_ms`), split 3:1 between the
    workers and the sandbox; ours and the base's `sandbox_exec` calls/s."""
    figures: dict[str, Any] = {"load_average": 1.0}
    for name, ms in cpu_ms.items():
        figures[name] = {
            "calls_per_s": calls_per_s,
            "cpu_ms": ms,
            "workers_cpu_ms": ms * 0.75,
            "sandbox_cpu_ms": ms * 0.25,
            "client_cpu_ms": 0.1,
        }
    figures["exec_floor"] = {"cpu_ms": cpu_ms.get("exec_floor", 0.5)}
    figures["base_sandbox_exec"] = dict(figures["sandbox_exec"], calls_per_s=base)
    return figures


QUIET = {"bare_sdk_sse": 1.6, "bare_sdk_json": 0.8, "trivial": 0.8, "read_file": 1.2,
         "write_file": 1.0, "sandbox_exec": 2.0, "exec_floor": 0.5}  # fmt: skip


def test_the_ratios_are_ratios_of_the_rounds_medians_and_every_round_is_kept() -> None:
    rounds = [
        one_round({**QUIET, "trivial": ms, "read_file": 1.5 * ms}, calls_per_s=rate)
        for ms, rate in ((0.6, 280.0), (0.8, 300.0), (1.0, 330.0))
    ]
    figures = summarize(rounds, base=Path("/base"))
    assert figures["trivial_cpu_ms"] == 0.8
    assert figures["cpu_ms_per_call"]["read_file"] == pytest.approx(
        {"workers": 0.9, "sandbox": 0.3, "total": 1.2}
    )
    assert figures["ratios"]["trivial_vs_bare_sdk_json"] == pytest.approx(1.0)
    assert figures["ratios"]["read_file_vs_trivial"] == pytest.approx(1.5)
    assert figures["ratios"]["sandbox_exec_vs_exec_floor"] == pytest.approx(4.0)
    assert figures["ratios"]["calls_per_s_1_worker_vs_base"] == pytest.approx(2.0)
    assert figures["base_calls_per_s_1_worker"]["new"] == [280.0, 300.0, 330.0]
    assert figures["ratios_by_round"]["trivial_vs_bare_sdk_json"] == pytest.approx(
        [0.75, 1.0, 1.25]
    )
    assert figures["ratios_spread"]["trivial_vs_bare_sdk_json"] == pytest.approx(0.5)
    assert figures["issue_rounds"] == rounds


def test_one_round_starved_by_the_load_moves_no_ratio() -> None:
    spiked = one_round({**QUIET, "sandbox_exec": 6.0, "trivial": 2.4}, base=50.0)
    rounds = [one_round(QUIET), one_round(QUIET), spiked, one_round(QUIET), one_round(QUIET)]
    assert (
        summarize(rounds, base=Path("/base"))["ratios"]
        == summarize([one_round(QUIET)], base=Path("/base"))["ratios"]
    )


def test_the_cpu_targets_are_at_most_and_the_calls_per_s_target_at_least() -> None:
    met = summarize([one_round({**QUIET, "sandbox_exec": 1.0})], base=Path("/base"))["met"]
    assert met == {
        "trivial_vs_bare_sdk_json": True,  # 1.0 <= 1.25
        "sandbox_exec_vs_exec_floor": True,  # 2.0 <= 2.5
        "read_file_vs_trivial": True,  # 1.5 <= 1.5
        "calls_per_s_1_worker_vs_base": True,  # 2.0 >= 1.5
    }
    slow = summarize([one_round(QUIET, calls_per_s=200.0)], base=Path("/base"))
    assert slow["met"]["sandbox_exec_vs_exec_floor"] is False  # 4.0 > 2.5
    assert slow["met"]["calls_per_s_1_worker_vs_base"] is False  # 1.33 < 1.5


def test_the_calls_per_s_the_cpu_allows_follow_the_cost_of_a_call_not_the_load() -> None:
    rounds = [one_round(QUIET, calls_per_s=rate) for rate in (150.0, 300.0, 600.0)]
    for measured in rounds:  # the base's worker spends twice our 1.5 ms a call
        measured["base_sandbox_exec"] |= {"workers_cpu_ms": 3.0, "cpu_ms": 4.0}
    figures = summarize(rounds, base=Path("/base"))
    assert figures["ratios_by_round"]["calls_per_s_1_worker_vs_base"] == [1.0, 2.0, 4.0]
    assert figures["ratios_by_round"]["calls_per_s_bound_1_worker_vs_base"] == (
        pytest.approx([2.0, 2.0, 2.0])
    )
    assert "calls_per_s_bound_1_worker_vs_base" not in figures["targets"]


def test_without_a_base_no_calls_per_s_ratio_or_target_is_written() -> None:
    figures = summarize([one_round(QUIET)], base=None)
    assert "calls_per_s_1_worker_vs_base" not in figures["ratios"]
    assert "calls_per_s_1_worker_vs_base" not in figures["targets"]
    assert "base_calls_per_s_1_worker" not in figures
    assert set(figures["targets"]) == set(TARGETS) - {"calls_per_s_1_worker_vs_base"}


@dataclass
class Recorded:
    """A target that notes when it was measured."""

    name: str
    order: list[str] = field(default_factory=list)

    async def measure(self, calls_per_client: int) -> dict[str, float]:
        self.order.append(self.name)
        return {"cpu_ms": 1.0}


@pytest.mark.anyio
async def test_each_round_measures_every_target_once_in_the_order_reversed_every_other() -> None:
    order: list[str] = []
    targets: dict[str, Target] = {name: Recorded(name, order) for name in ("a", "b", "c")}
    measured = await measure_rounds(targets, 3, calls_per_client=1)
    assert order == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert [sorted(r) for r in measured] == [["a", "b", "c", "load_average"]] * 3


@pytest.mark.anyio
@pytest.mark.root
@pytest.mark.slow
async def test_ratios_only_measures_every_target_each_round_and_names_what_it_left_out() -> None:
    figures = await front.main(held=0, quick=True, base=REPO, ratios_only=True, rounds=2)
    assert len(figures["issue_rounds"]) == 2
    for measured in figures["issue_rounds"]:
        assert set(measured) == {"load_average", *CALLS, "exec_floor", "sandbox_exec",
                                 "base_sandbox_exec"}  # fmt: skip
        assert all(measured[name]["cpu_ms"] > 0 for name in (*CALLS, "exec_floor"))
        assert measured["sandbox_exec"]["sandbox_cpu_ms"] > 0  # the supervisor and `true`s
    assert set(figures["ratios"]) == {
        *TARGETS,
        "write_file_vs_trivial",
        "calls_per_s_bound_1_worker_vs_base",
    }
    assert all(ratio > 0 for ratio in figures["ratios"].values())
    assert len(figures["base_calls_per_s_1_worker"]["base"]) == 2
    assert figures["not_measured"] == front.NOT_MEASURED_RATIOS_ONLY
    assert "calls_per_s_by_workers" not in figures
    assert "sessions_held" not in figures


@pytest.mark.anyio
@pytest.mark.root
@pytest.mark.slow
async def test_sessions_only_weighs_the_idle_sessions_and_measures_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(front, "IDLE_PERIOD_S", 1.0)
    figures = await front.main(held=12, quick=True, sessions_only=True)
    assert figures["sessions_held"] == 12
    assert figures["errors"] == 0, figures["error_samples"]
    # Weighed, though 2 sessions beyond the first 10 are within the PSS's own noise.
    assert figures["server_pss_mb_held"] > 0
    assert "server_kb_per_session" in figures
    assert figures["p99_probe_ms_held"] > 0
    assert "issue_rounds" not in figures
    assert "calls_per_s_by_workers" not in figures
