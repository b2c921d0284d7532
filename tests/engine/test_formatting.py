"""The one way each figure reads in Markdown (reports, comparisons, leaderboards, sweeps)."""

from __future__ import annotations

from mcp_evalserver.engine.formatting import interval, p_value, percent, seconds


def test_a_missing_figure_reads_as_a_dash_in_every_format() -> None:
    assert [percent(None), p_value(None), seconds(None)] == ["-", "-", "-"]
    assert interval(None) == "no interval"


def test_rates_read_as_percentages_with_one_decimal_and_durations_to_the_hundredth() -> None:
    assert percent(0.12345) == "12.3%"
    assert percent(1.0) == "100.0%"
    assert seconds(1.234) == "1.23s"


def test_p_values_keep_three_significant_digits_unless_told_more() -> None:
    assert p_value(0.0123456) == "0.0123"
    assert p_value(0.0123456, digits=4) == "0.01235"


def test_an_interval_of_rates_reads_in_percent_and_one_of_differences_in_signed_points() -> None:
    found = {"confidence": 0.95, "low": 0.1, "high": 0.25, "method": "bootstrap"}
    assert interval(found) == "95% CI 10.0%–25.0%, bootstrap"
    difference = {"confidence": 0.95, "low": -0.05, "high": 0.125, "method": "bootstrap"}
    assert interval(difference, signed=True) == "95% CI -5.0 to +12.5 points, bootstrap"
