"""How a figure reads in Markdown (reports, comparisons, leaderboards, sweeps): one way each,
`-` where there is no figure."""

from __future__ import annotations

from typing import Any


def percent(value: float | None) -> str:
    """A rate (0..1) as a percentage with one decimal."""
    return "-" if value is None else f"{100 * value:.1f}%"


def p_value(value: float | None, *, digits: int = 3) -> str:
    """A p-value to `digits` significant digits."""
    return "-" if value is None else f"{value:.{digits}g}"


def seconds(value: float | None) -> str:
    """A duration in seconds, to the hundredth."""
    return "-" if value is None else f"{value:.2f}s"


def interval(interval: dict[str, Any] | None, *, signed: bool = False) -> str:
    """A confidence interval (`confidence`, `low`, `high`, `method`) of rates, or with `signed`
    of differences in percentage points."""
    if interval is None:
        return "no interval"
    level = f"{100 * interval['confidence']:.0f}%"
    if signed:
        low, high = 100 * interval["low"], 100 * interval["high"]
        return f"{level} CI {low:+.1f} to {high:+.1f} points, {interval['method']}"
    return (
        f"{level} CI {percent(interval['low'])}–{percent(interval['high'])}, {interval['method']}"
    )
