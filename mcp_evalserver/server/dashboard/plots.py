"""Small inline SVG plots, drawn on the server: no plotting library, no script, no network.

Each function returns the SVG markup of one plot (safe to insert into a page: every label is
escaped), or None when there is nothing to draw, so the template can say so instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

from markupsafe import Markup

WIDTH = 640
HEIGHT = 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 12, 24, 36


def _frame(body: list[str], title: str, y_label: str, x_label: str) -> Markup:
    inner_h = HEIGHT - _TOP - _BOTTOM
    parts = [
        f'<svg class="plot" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + inner_h}"/>',
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP + inner_h}" x2="{WIDTH - _RIGHT}" '
        f'y2="{_TOP + inner_h}"/>',
        f'<text class="label" x="{_LEFT + 4}" y="{HEIGHT - 6}">{escape(x_label)}</text>',
        f'<text class="label" x="4" y="12">{escape(y_label)}</text>',
        *body,
        "</svg>",
    ]
    return Markup("".join(parts))


def _y(value: float, top: float) -> float:
    """The y coordinate of `value` on an axis from 0 to `top`."""
    inner_h = HEIGHT - _TOP - _BOTTOM
    return _TOP + inner_h - (value / top if top else 0.0) * inner_h


def _ticks(top: float, fmt: str) -> list[str]:
    marks = []
    for fraction in (0.0, 0.5, 1.0):
        y = _y(top * fraction, top)
        marks.append(f'<line class="grid" x1="{_LEFT}" y1="{y:.1f}" x2="{WIDTH - _RIGHT}" '
                     f'y2="{y:.1f}"/>')  # fmt: skip
        text = fmt.format(top * fraction)
        marks.append(f'<text class="tick" x="{_LEFT - 4}" y="{y + 4:.1f}">{text}</text>')
    return marks


def bars(items: Sequence[tuple[str, float]], *, title: str, y_label: str) -> Markup | None:
    """One bar per item (value 0..1, e.g. a task's pass rate); the label is its tooltip."""
    if not items:
        return None
    inner_w = WIDTH - _LEFT - _RIGHT
    step = inner_w / len(items)
    width = max(step * 0.8, 0.5)
    body = _ticks(1.0, "{:.0%}")
    for index, (label, value) in enumerate(items):
        x = _LEFT + index * step + (step - width) / 2
        y = _y(value, 1.0)
        body.append(
            f'<rect class="bar" x="{x:.2f}" y="{y:.2f}" width="{width:.2f}" '
            f'height="{_y(0, 1.0) - y:.2f}"><title>{escape(label)}: {value:.0%}</title></rect>'
        )
    return _frame(body, title, y_label, f"{len(items)} tasks, lowest first")


def histogram(
    values: Sequence[float], *, bins: int = 20, title: str, x_label: str
) -> Markup | None:
    """Counts of `values` in equal-width bins between their minimum and maximum."""
    if not values:
        return None
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    counts = [0] * bins
    for value in values:
        counts[min(int((value - low) / span * bins), bins - 1)] += 1
    # An even axis top, so the middle tick is a whole count too.
    top = max(counts) + max(counts) % 2
    inner_w = WIDTH - _LEFT - _RIGHT
    step = inner_w / bins
    body = _ticks(top, "{:.3g}")
    for index, count in enumerate(counts):
        x = _LEFT + index * step
        y = _y(count, top)
        edge = low + span * index / bins
        body.append(
            f'<rect class="bar" x="{x + 1:.2f}" y="{y:.2f}" width="{step - 2:.2f}" '
            f'height="{_y(0, top) - y:.2f}"><title>{edge:.3g}–{edge + span / bins:.3g}: '
            f"{count}</title></rect>"
        )
    body.append(_x_range(f"{low:.3g}", f"{high:.3g}"))
    return _frame(body, title, "count", x_label)


def thinned(points: Sequence[tuple[float, float]], limit: int) -> list[tuple[float, float]]:
    """Every k-th point, k the smallest that keeps at most `limit` of them; and the last point."""
    every = max(1, math.ceil(len(points) / limit))
    kept = list(points[::every])
    if points and (len(points) - 1) % every:
        kept.append(points[-1])
    return kept


def line(
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    step: bool,
) -> Markup | None:
    """One line per named series of points (x ascending), on shared axes; `step` holds each
    value until the next point. A legend names the series when there are several."""
    shown = {name: points for name, points in series.items() if points}
    if not shown:
        return None
    everything = [point for points in shown.values() for point in points]
    x0 = min(x for x, _ in everything)
    x_span = (max(x for x, _ in everything) - x0) or 1.0
    top = _round_up(max(y for _, y in everything) or 1.0)
    inner_w = WIDTH - _LEFT - _RIGHT

    def x_of(x: float) -> float:
        return _LEFT + (x - x0) / x_span * inner_w

    body = _ticks(top, "{:.3g}")
    for index, (name, points) in enumerate(shown.items()):
        coordinates = []
        previous_y: float | None = None
        for x, y in points:
            if step and previous_y is not None:
                coordinates.append(f"{x_of(x):.1f},{_y(previous_y, top):.1f}")
            coordinates.append(f"{x_of(x):.1f},{_y(y, top):.1f}")
            previous_y = y
        colour = _COLOURS[index % len(_COLOURS)]
        body.append(
            f'<polyline class="line" style="stroke: {colour}" points="{" ".join(coordinates)}">'
            f"<title>{escape(name)}</title></polyline>"
        )
        if len(shown) > 1:
            body.append(
                f'<text class="legend" style="fill: {colour}" x="{WIDTH - _RIGHT}" '
                f'y="{_TOP + 12 * (index + 1)}">{escape(name)}</text>'
            )
    body.append(_x_range("0s", f"{x_span:.3g}s"))
    return _frame(body, title, y_label, x_label)


_COLOURS = ("#2f5bd3", "#c2410c", "#15803d", "#7e22ce", "#0e7490", "#a16207")


def _x_range(low: str, high: str) -> str:
    bottom = HEIGHT - _BOTTOM + 14
    return (
        f'<text class="tick" x="{_LEFT}" y="{bottom}">{escape(low)}</text>'
        f'<text class="tick end" x="{WIDTH - _RIGHT}" y="{bottom}">{escape(high)}</text>'
    )


def _round_up(value: float) -> float:
    """A round axis top at or above `value` (1, 2 or 5 times a power of ten)."""
    magnitude = 10 ** math.floor(math.log10(value))
    for factor in (1, 2, 5, 10):
        if value <= factor * magnitude:
            return float(factor * magnitude)
    return value
