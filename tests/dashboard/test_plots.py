"""The dashboard's plots keep what a reader can see, not every point."""

from __future__ import annotations

import itertools

from mcp_evalserver.server.dashboard import plots


def test_a_long_line_is_thinned_to_evenly_spaced_points_ending_with_the_last() -> None:
    points = [(float(x), float(x)) for x in range(10_001)]
    kept = plots.thinned(points, 500)
    assert len(kept) <= 501
    assert kept[0] == points[0]
    assert kept[-1] == points[-1]
    # The smallest step that keeps at most 500, then the last point (closer than a step).
    steps = {b[0] - a[0] for a, b in itertools.pairwise(kept[:-1])}
    assert steps == {21.0}
    svg = plots.line({"finished": kept}, title="t", x_label="x", y_label="y", step=True)
    assert svg is not None
    assert svg.count(",") < 2 * len(kept) + 10  # a step line: two vertices per point


def test_a_short_line_keeps_every_point() -> None:
    points = [(0.0, 0.0), (1.0, 1.0), (2.5, 2.0)]
    assert plots.thinned(points, 500) == points
    assert plots.thinned([], 500) == []
