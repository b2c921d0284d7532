"""A campaign's report (`report.build_report`) as Markdown, a person's reading of it."""

from __future__ import annotations

from typing import Any

from mcp_evalserver.engine.costs import cost_lines
from mcp_evalserver.engine.formatting import interval, percent, seconds
from mcp_evalserver.engine.validation import render_validation_markdown


def render_markdown(report: dict[str, Any]) -> str:
    """A report a person reads: the headline figures, then one row per task."""
    summary = report["summary"]
    latency = summary["latency"]
    lines = [
        f"# Campaign {report['campaign']}",
        "",
        f"- status: **{report['status_text']}** ({report['done']}/{report['trajectories']} done,"
        f" {report['runs']} run(s)"
        + (f", rescored {report['rescores']} time(s)" if report["rescores"] else "")
        + f"; agent `{report['agent']}`, scorer `{report['scorer']}`"
        + "".join(
            f", {count} graded in mode `{mode}`"
            for mode, count in report.get("grading_modes", {}).items()
        )
        + ")",
        f"- pass rate: **{percent(report['pass_rate'])}** ({report['resolved']}/"
        f"{report['graded']} graded trajectories; infrastructure errors excluded)"
        + (
            f"; Wilson {interval(summary['wilson_ci'])}" if summary["wilson_ci"] is not None else ""
        ),
        f"- mean pass rate over tasks: **{percent(summary['mean_pass_rate'])}**"
        f" ({interval(summary['mean_pass_rate_ci'])} over {summary['tasks_scored']} task(s))",
    ]
    if (clustered := report.get("mean_pass_rate_clustered")) is not None:
        lines.append(clustered_line(clustered))
    if evidence := report.get("evidence"):
        flagged = sum(row["resolved"] for row in evidence.values())
        lines.append(
            f"- **tampering evidence** on {len(evidence)} trajectory(ies), {flagged} of them "
            "resolved: "
            + "; ".join(
                f"`{tid}`: {', '.join(row['evidence'])}" for tid, row in list(evidence.items())[:10]
            )
        )
    if summary["pass_at_k"]:
        lines.append("- pass@k: " + _by_k(summary["pass_at_k"]))
        lines.append("- pass^k: " + _by_k(summary["pass_hat_k"]))
    lines += [
        f"- infrastructure errors: {summary['infra_errors']}"
        f" ({percent(summary['infra_error_rate'])} of finished trajectories; excluded from"
        f" every rate) · task errors (error, timeout): {percent(summary['task_error_rate'])}"
        " of attempts",
        "- outcomes: " + ", ".join(f"{k} {v}" for k, v in report["outcomes"].items()),
    ]
    health = report["infrastructure"]
    if health["failed_attempts"] or health["instances_reprovisioned"]:
        causes = ", ".join(f"{k} {v}" for k, v in health["failed_attempts_by_cause"].items())
        lines.append(
            f"- infrastructure faults survived: {health['failed_attempts']} failed attempt(s)"
            f" in {health['trajectories_hit']} trajectory(ies)"
            + (f" ({causes})" if causes else "")
            + f"; {health['instances_reprovisioned']} instance(s) re-provisioned"
            + (
                f"; {health['retried_by_resume']} retried by resume"
                if health["retried_by_resume"]
                else ""
            )
        )
    retries = report.get("retries")
    if retries and retries["retried"]:
        lines.append(
            f"- retried after an infrastructure failure: {retries['retried']} graded"
            f" trajectory(ies) pass {percent(retries['retried_pass_rate'])}, the other"
            f" {retries['not_retried']} {percent(retries['not_retried_pass_rate'])}"
            + (
                f" (their tasks' other samples: {percent(e)})"
                if (e := retries["retried_expected_from_their_tasks"]) is not None
                else ""
            )
            + (f"; **{retries['note']}**" if retries["flagged"] else f"; {retries['note']}")
        )
    for caller, endpoint in report.get("model_endpoints", {}).items():
        lines.append(f"- {caller} sends its model calls to {endpoint}")
    for endpoint, limit in report.get("endpoint_limits", {}).items():
        lines.append(
            f"- adaptive limit for {endpoint}: **{limit['limit']}** calls in flight"
            f" ({limit['changes']} change(s), {limit['decreases']} decrease(s); ranged"
            f" {limit['lowest']}–{limit['highest']}"
            + (f"; refused at {limit['congested_at'][-5:]}" if limit["congested_at"] else "")
            + ")"
        )
    if (calibration := report.get("judge_calibration")) is not None:
        lines.append(calibration_line(calibration))
    if report["score_statuses"]:
        statuses = ", ".join(f"{k} {v}" for k, v in report["score_statuses"].items())
        partial = report["partially_resolved"]
        lines.append(
            f"- scoring statuses: {statuses}"
            + (f" ({partial} partially resolved, not counted)" if partial else "")
        )
    lines.append(
        f"- latency per trajectory: p50 {seconds(latency['p50_s'])},"
        f" p95 {seconds(latency['p95_s'])} (generation p50"
        f" {seconds(report['phases']['generation']['p50_s'])}, scoring p50"
        f" {seconds(report['phases']['scoring']['p50_s'])}); throughput"
        f" {_rate(latency['throughput_per_s'])}"
    )
    if "cost" in report:
        lines += cost_lines(report["cost"])
    elif summary["input_tokens"] is not None or summary["cost_usd"] is not None:
        cost = summary["cost_usd"]
        lines.append(
            f"- tokens: {summary['input_tokens'] or 0} in, {summary['output_tokens'] or 0} out"
            + (f"; cost ${cost:.4f}" if cost is not None else "")
        )
    if report.get("nodes"):
        lines.append(
            "- where it ran: "
            + "; ".join(
                f"node {node[:12]} {len(row['instances'])} instance(s),"
                f" {row['trajectories']} trajectories ({row['generated']} "
                f"generated, {row['scored']} scored, {row['failed_steps']} failed steps)"
                for node, row in report["nodes"].items()
            )
        )
    if report["flaky_graders"]:
        flaky = ", ".join(
            f"{f['task_id']} ({f['kind']}, {f['passes']}/{f['runs']})"
            for f in report["flaky_graders"]
        )
        lines.append(f"- **flaky graders** (gold did not always pass): {flaky}")
    elif report["flaky_graders"] is not None:
        lines.append("- graders: every gold solution passed every time")
    lines += [
        "",
        "| task | samples | resolved | pass rate | pass@1 | infra errors |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for task_id, row in report["tasks"].items():
        lines.append(
            f"| {task_id} | {row['samples']} | {row['resolved']} | {percent(row['pass_rate'])}"
            f" | {percent(row['pass_at_k'].get('1'))} | {row['infra_errors']} |"
        )
    if (sampling := report.get("sampling")) is not None:
        lines += ["", *sampling_lines(sampling)]
    if ignored := report.get("ignored_tests"):
        lines += ["", "Tests graded neither way (`scorer.ignore_tests`):", ""]
        lines += [
            f"- {task}: " + ", ".join(f"`{t}`" for t in tests) for task, tests in ignored.items()
        ]
    if (validation := report.get("validation")) is not None:
        lines += ["", render_validation_markdown(validation).rstrip("\n")]
    if (trees := report.get("branches")) is not None:
        best = trees["best_of_branches"]
        lines += [
            "",
            f"Branches (forked trajectories; a root and its branches count once, resolved when"
            f" any is): best of branches {best['resolved']}/{best['roots']} roots"
            f" ({percent(best['pass_rate'])})",
            "",
            "| root | branches | resolved branches | root resolved |",
            "|---|---:|---:|---|",
        ]
        clean = []
        for tree in trees["roots"]:
            verdict = ("yes" if tree["resolved"] else "no") if tree["finished"] else "running"
            lines.append(
                f"| {tree['root']} | {len(tree['branches'])} | {tree['resolved_branches']} of"
                f" {len(tree['branches'])} | {verdict} |"
            )
            clean += [b for b in tree["branches"] if b.get("started_clean")]
        if clean:
            lines += [
                "",
                "Branches restarted from a clean copy of their task, not their checkpoint:",
            ]
            lines += [f"- {b['trajectory']}: {b['started_clean']}" for b in clean]
    return "\n".join(lines) + "\n"


def sampling_lines(sampling: dict[str, Any]) -> list[str]:
    """Adaptive sampling as a person reads it: where it stands or why it stopped, then how
    many samples each task got and why."""
    target = f"±{100 * sampling['target_half_width']:.1f} points"
    rounds = len(sampling["rounds"])
    planned = f"{sampling['planned']} trajectories planned of at most {sampling['most']}"
    stopped = sampling["stopped"]
    if stopped is None:
        head = f"under way after {rounds} round(s), {planned}; target {target}"
    else:
        width = stopped["half_width"]
        why = (
            f"the interval ({stopped['interval']}) reached ±{100 * width:.1f} points, within"
            f" the target {target}"
            if stopped["reason"] == "target_reached"
            else f"every task reached max ({sampling['max']}); the interval is"
            + ("" if width is None else f" ±{100 * width:.1f} points")
            + f" against a target of {target}"
        )
        head = f"stopped after {rounds} round(s) because {why}; {planned}"
    lines = [
        f"Adaptive sampling (min {sampling['min']}, max {sampling['max']}): {head}",
        "",
        "| task | samples | why |",
        "|---|---:|---|",
    ]
    for task_id, row in sampling["tasks"].items():
        lines.append(f"| {task_id} | {row['samples']} | {'; '.join(row['why'])} |")
    return lines


def clustered_line(clustered: dict[str, Any]) -> str:
    """The mean pass rate's cluster-robust standard error and interval, in one line."""
    if clustered["cluster_field"] is None:
        grouping = f"{clustered['clusters']} clusters: each task its own"
    else:
        grouping = f"{clustered['clusters']} clusters by `{clustered['cluster_field']}`"
        if clustered["tasks_without_field"]:
            grouping += f", {clustered['tasks_without_field']} task(s) without it alone"
    if clustered["standard_error"] is None:
        figures = "no standard error"
    else:
        figures = (
            f"SE {100 * clustered['standard_error']:.1f} points,"
            f" {100 * clustered['confidence']:.0f}% CI {percent(clustered['low'])}–"
            f"{percent(clustered['high'])}, t with {clustered['degrees_of_freedom']} df"
        )
    warning = f"; **{clustered['warning']}**" if clustered["warning"] else ""
    return f"- clustered standard error: {figures} ({grouping}){warning}"


def calibration_line(calibration: dict[str, Any]) -> str:
    """The judge's calibration against human labels, in one line."""

    def estimate(name: str) -> str:
        found = calibration[name]
        if found["value"] is None:
            return f"{name} undefined (no spread)"
        interval = (
            f" ({100 * found['confidence']:.0f}% CI {found['low']:.2f}–{found['high']:.2f})"
            if found["low"] is not None
            else ""
        )
        return f"{name} {found['value']:.2f}{interval}"

    verdict = "yes" if calibration["clears"] else "no"
    if calibration["clears"] and not calibration["clears_with_confidence"]:
        verdict += " (its interval reaches below)"
    return (
        f"- judge calibration ({calibration['pairs']} labelled {calibration['unit']}s):"
        f" {estimate('spearman')}, {estimate('kendall')}, agreement"
        f" {percent(calibration['agreement'])} at threshold {calibration['threshold']:g};"
        f" clears {calibration['target']:.2f}: **{verdict}**"
    )


def _by_k(values: dict[str, float]) -> str:
    return ", ".join(f"k={k} {percent(v)}" for k, v in values.items())


def _rate(per_second: float | None) -> str:
    return "-" if per_second is None else f"{60 * per_second:.1f} trajectories/min"
