"""Campaign B against campaign A on the tasks both scored: the paired figures and tests, and
the difference they can detect; as a JSON-ready dict and as Markdown."""

from __future__ import annotations

from typing import Any

from mcp_evalserver.engine.formatting import interval, p_value, percent
from mcp_evalserver.engine.report import CONFIDENCE, RESAMPLES, SEED, clusters_of, verdicts
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.scoring.stats.comparison import compare_campaigns
from mcp_evalserver.scoring.stats.paired import paired_tests
from mcp_evalserver.scoring.stats.power import (
    TaskCounts,
    detectable_difference,
    variance_components,
)
from mcp_evalserver.scoring.stats.summary import Verdict, task_stats

#: The power at which `compare` states the difference its campaigns can detect.
POWER = 0.8


def build_comparison(
    a: CampaignState, b: CampaignState, *, cluster_by: str | None = None
) -> dict[str, Any]:
    """Campaign B against campaign A on the tasks both scored (differences are B minus A).

    Beside the bootstrap, permutation and sign tests (`compare_campaigns`): `tests`, the
    clustered t test, McNemar's exact test and the cluster permutation test with the one that
    answers and why; `power`, the difference these campaigns detect at 80% power.

    Raises:
        InvalidInput: no task has the field `cluster_by`.
    """
    verdicts_a, verdicts_b = verdicts(a), verdicts(b)
    comparison = compare_campaigns(
        verdicts_a, verdicts_b, confidence=CONFIDENCE, resamples=RESAMPLES, seed=SEED
    )
    counts_a, counts_b = _counts(verdicts_a), _counts(verdicts_b)
    shared = sorted(counts_a.keys() & counts_b.keys())
    field, labels, missing = clusters_of(b, cluster_by, shared)
    tests = paired_tests(
        verdicts_a,
        verdicts_b,
        comparison,
        labels,
        cluster_field=field,
        tasks_without_field=missing,
        confidence=CONFIDENCE,
        resamples=RESAMPLES,
        seed=SEED,
    )
    power: dict[str, Any] | None = None
    difference = tests.difference
    if difference is not None and difference.standard_error is not None:
        components = variance_components(counts_a, counts_b, labels)
        power = {
            "power": POWER,
            "alpha": 1 - CONFIDENCE,
            # From the mean difference's clustered standard error, t with G - 1 df.
            "detectable_difference": detectable_difference(
                difference.standard_error, difference.clusters - 1, 1 - CONFIDENCE, POWER
            ),
            "correlation": components.correlation,
            "between_task_variance": components.between_task,
            "within_task_variance": components.within_task,
        }
    return {
        "a": a.id,
        "b": b.id,
        **comparison.model_dump(mode="json"),
        "tests": tests.model_dump(mode="json"),
        "power": power,
    }


def _counts(found: list[Verdict]) -> dict[str, TaskCounts]:
    return {
        s.task_id: TaskCounts(successes=s.successes, attempts=s.attempts)
        for s in task_stats(found)
        if s.attempts
    }


def render_comparison_markdown(comparison: dict[str, Any]) -> str:
    """The paired comparison as a person reads it."""
    difference = comparison["mean_difference"]
    lines = [
        f"# {comparison['b']} vs {comparison['a']}",
        "",
        f"- shared tasks: {comparison['shared_tasks']}"
        f" (only in A: {len(comparison['only_in_a'])}, only in B: {len(comparison['only_in_b'])})",
        f"- mean pass rate: A {percent(comparison['mean_a'])}, B {percent(comparison['mean_b'])}",
        "- difference B − A: **"
        + ("-" if difference is None else f"{100 * difference:+.1f} points")
        + f"** ({interval(comparison['difference_ci'], signed=True)})",
        f"- B wins {comparison['wins']}, loses {comparison['losses']},"
        f" ties {comparison['ties']} task(s)",
        f"- paired permutation test p = {p_value(comparison['permutation_p_value'])}"
        f" ({'exact' if comparison['permutation_exact'] else 'Monte Carlo'});"
        f" sign test p = {p_value(comparison['sign_test_p_value'])}",
    ]
    tests = comparison.get("tests")
    if tests and tests["difference"] is not None:
        clustered = tests["difference"]
        if clustered["standard_error"] is not None:
            lines.append(
                f"- clustered: SE {100 * clustered['standard_error']:.1f} points,"
                f" {100 * clustered['confidence']:.0f}% CI {100 * clustered['low']:+.1f} to"
                f" {100 * clustered['high']:+.1f} points over {clustered['clusters']} cluster(s);"
                f" t test p = {p_value(tests['clustered_t_p_value'])}"
                + (f" (**{clustered['warning']}**)" if clustered["warning"] else "")
            )
        if (mcnemar := tests["mcnemar"]) is not None:
            lines.append(
                f"- McNemar's exact test: only A resolved {mcnemar['only_a_resolved']}, only B"
                f" {mcnemar['only_b_resolved']}; p = {p_value(mcnemar['p_value'])}"
            )
        if tests["cluster_permutation_p_value"] is not None:
            lines.append(
                "- permutation test over clusters p ="
                f" {p_value(tests['cluster_permutation_p_value'])}"
                f" ({'exact' if tests['cluster_permutation_exact'] else 'Monte Carlo'})"
            )
    if tests and tests["answered_by"] is not None:
        lines.append(
            f"- **answered by {tests['answered_by'].replace('_', ' ')}: p ="
            f" {p_value(tests['p_value'])}**, because {tests['reason']}"
        )
    if (power := comparison.get("power")) is not None:
        lines.append(
            f"- detectable difference at {100 * power['power']:.0f}% power:"
            f" {100 * power['detectable_difference']:.1f} points"
            f" (alpha {power['alpha']:g}"
            + (
                f"; task pass rates correlate {power['correlation']:.2f} between the two"
                if power["correlation"] is not None
                else ""
            )
            + "; `plan` says how many tasks and samples a smaller one needs)"
        )
    return "\n".join(lines) + "\n"
