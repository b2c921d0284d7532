"""Cluster-robust standard errors of the mean over tasks: statsmodels' as reference, and the
interval's coverage by simulation."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import statsmodels.api as sm  # type: ignore[import-untyped]
from scipy import stats  # type: ignore[import-untyped]

from mcp_evalserver.scoring.stats.clustered import cluster_robust_mean, task_clusters
from mcp_evalserver.scoring.stats.distributions import (
    noncentral_t_cdf,
    t_cdf,
    t_quantile,
)


def clustered_tasks(
    rng: random.Random, clusters: int, samples: int = 3
) -> tuple[dict[str, float], dict[str, str]]:
    """Per-task pass rates of tasks in clusters of 1..8 that share a cluster effect; the true
    mean pass rate is 0.5."""
    values, labels = {}, {}
    for g in range(clusters):
        shared = rng.random()
        for j in range(rng.randint(1, 8)):
            chance = 0.7 * shared + 0.3 * rng.random()
            task = f"r{g}/t{j}"
            values[task] = sum(rng.random() < chance for _ in range(samples)) / samples
            labels[task] = f"repo{g}"
    return values, labels


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_clustered_error_and_interval_equal_statsmodels_cluster_robust_ols(
    seed: int,
) -> None:
    values, labels = clustered_tasks(random.Random(seed), clusters=9 + seed)
    ids = sorted(values)
    fit = sm.OLS(np.array([values[t] for t in ids]), np.ones(len(ids))).fit(
        cov_type="cluster",
        cov_kwds={"groups": np.array([int(labels[t].removeprefix("repo")) for t in ids])},
        use_t=True,
    )
    ours = cluster_robust_mean(values, labels)
    assert ours.mean == pytest.approx(float(fit.params[0]), abs=1e-12)
    assert ours.standard_error == pytest.approx(float(fit.bse[0]), rel=1e-9)
    low, high = fit.conf_int(0.05)[0]
    assert ours.low == pytest.approx(low, rel=1e-8)
    assert ours.high == pytest.approx(high, rel=1e-8)
    assert ours.degrees_of_freedom == fit.df_resid_inference == ours.clusters - 1


def test_without_clusters_the_error_is_the_ordinary_standard_error_of_the_mean() -> None:
    values = {f"t{i}": v for i, v in enumerate([0.0, 1.0, 0.5, 1.0, 0.25, 0.0, 1.0])}
    ours = cluster_robust_mean(values)
    assert ours.clusters == 7
    assert ours.standard_error == pytest.approx(stats.sem(list(values.values())))
    assert ours.warning is not None
    assert "only 7 clusters" in ours.warning


def test_a_single_cluster_has_no_standard_error_and_says_why() -> None:
    ours = cluster_robust_mean({"a": 1.0, "b": 0.0}, {"a": "x", "b": "x"})
    assert (ours.standard_error, ours.low, ours.clusters) == (None, None, 1)
    assert ours.warning is not None
    assert "single cluster" in ours.warning


def test_the_clustered_interval_covers_the_true_mean_95_percent_of_the_time() -> None:
    rng = random.Random(2024)
    runs, covered, covered_ignoring_clusters = 1500, 0, 0
    for _ in range(runs):
        values, labels = clustered_tasks(rng, clusters=25)
        clustered = cluster_robust_mean(values, labels)
        naive = cluster_robust_mean(values)
        assert clustered.low is not None
        assert clustered.high is not None
        assert naive.low is not None
        assert naive.high is not None
        covered += clustered.low <= 0.5 <= clustered.high
        covered_ignoring_clusters += naive.low <= 0.5 <= naive.high
    assert 0.93 <= covered / runs <= 0.97
    # The same interval that treats tasks as independent misses far more often.
    assert covered_ignoring_clusters / runs < 0.85


def test_repositories_cluster_tasks_unless_another_field_is_named() -> None:
    fields = {
        "a": {"repo": "django/django", "suite": "x"},
        "b": {"repo": "django/django", "suite": "y"},
        "c": {"repo": "sympy/sympy"},
    }
    assert task_clusters(fields, None) == (
        "repo", {"a": "django/django", "b": "django/django", "c": "sympy/sympy"}, 0,
    )  # fmt: skip
    assert task_clusters(fields, "suite") == ("suite", {"a": "x", "b": "y"}, 1)
    assert task_clusters({"a": {"repo": None}}, None) == (None, {}, 0)


def test_t_and_noncentral_t_agree_with_scipy() -> None:
    for df in (1, 2, 5, 19, 120, 5000):
        for x in (-6.0, -1.5, 0.0, 0.4, 2.0, 9.0):
            assert t_cdf(x, df) == pytest.approx(stats.t.cdf(x, df), abs=1e-11)
            for noncentrality in (0.0, 1.0, 3.5):
                reference = stats.nct.cdf(x, df, noncentrality)
                if math.isnan(reference):  # scipy gives up ~1e-19 deep in the far tail
                    assert noncentral_t_cdf(x, df, noncentrality) < 1e-15
                    continue
                assert noncentral_t_cdf(x, df, noncentrality) == pytest.approx(reference, abs=1e-6)
        for q in (0.001, 0.05, 0.5, 0.9, 0.975):
            assert t_quantile(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-9, abs=1e-10)
