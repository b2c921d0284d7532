"""Cluster-robust standard errors of a mean over tasks.

Tasks are rarely independent draws: SWE-bench's tasks come in repositories, and tasks of one
repository succeed or fail together. The mean of per-task values is an OLS fit on a constant;
its cluster-robust (CR1, Liang-Zeger) variance is

    V = G / (G - 1) * sum over clusters g of (sum of (y_i - mean) over g)**2 / n**2

with n tasks in G clusters (statsmodels' `cov_type="cluster"`, whose (n - 1) / (n - k) factor
is 1 for a constant). The interval uses Student's t with G - 1 degrees of freedom, which holds
its coverage down to about 20 clusters; below that it is too narrow and the figures say so.
Without a cluster field every task is its own cluster, and this is the ordinary standard
error of a mean over tasks (samples of one task are already averaged into its value).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.stats.distributions import t_quantile, t_two_sided_p

#: Fewer clusters than this and a cluster-robust interval undercovers (Cameron and Miller,
#: 2015): the figures carry a warning.
MIN_CLUSTERS = 20


class ClusteredMean(BaseModel):
    """A mean over tasks with its cluster-robust standard error and t interval."""

    model_config = ConfigDict(frozen=True)

    mean: float
    standard_error: float | None
    low: float | None
    high: float | None
    confidence: float
    method: str = "cluster_robust_t"
    degrees_of_freedom: int
    tasks: int
    clusters: int
    #: The task field that made the clusters (`repo`, a metadata key), None: each task alone.
    cluster_field: str | None
    #: Tasks without that field (each is a cluster of its own).
    tasks_without_field: int = 0
    largest_cluster: int
    warning: str | None


def cluster_robust_mean(
    values: Mapping[str, float],
    clusters: Mapping[str, str] | None = None,
    *,
    confidence: float = 0.95,
    cluster_field: str | None = None,
    tasks_without_field: int = 0,
) -> ClusteredMean:
    """Mean of per-task `values` (task id -> value) with its CR1 standard error.

    `clusters`: task id -> cluster label; a task it does not name is a cluster of its own.

    Raises:
        InvalidInput: no values, or confidence outside (0, 1).
    """
    if not values:
        raise InvalidInput("a clustered mean needs at least one task")
    if not 0 < confidence < 1:
        raise InvalidInput(f"confidence must be strictly between 0 and 1; got {confidence}")
    labels = clusters or {}
    n = len(values)
    mean = math.fsum(values.values()) / n
    sums: dict[str, list[float]] = defaultdict(list)
    for task_id, value in values.items():
        sums[labels.get(task_id, f"\0task:{task_id}")].append(value - mean)
    g = len(sums)
    largest = max(len(members) for members in sums.values())
    se = cluster_standard_error(list(sums.values()), n)
    warning = None
    if g < 2:
        warning = "a single cluster: no standard error can be estimated across clusters"
    elif g < MIN_CLUSTERS:
        warning = (
            f"only {g} clusters: a cluster-robust interval undercovers below {MIN_CLUSTERS};"
            " read it as rough"
        )
    low = high = None
    if se is not None:
        half = t_quantile(1 - (1 - confidence) / 2, g - 1) * se
        low, high = mean - half, mean + half
    return ClusteredMean(
        mean=mean,
        standard_error=se,
        low=low,
        high=high,
        confidence=confidence,
        degrees_of_freedom=max(0, g - 1),
        tasks=n,
        clusters=g,
        cluster_field=cluster_field,
        tasks_without_field=tasks_without_field,
        largest_cluster=largest,
        warning=warning,
    )


def cluster_standard_error(residuals_by_cluster: Sequence[Sequence[float]], n: int) -> float | None:
    """CR1 standard error of a mean from its residuals grouped by cluster (None: one cluster)."""
    g = len(residuals_by_cluster)
    if g < 2:
        return None
    meat = math.fsum(math.fsum(r) ** 2 for r in residuals_by_cluster)
    return math.sqrt(g / (g - 1) * meat) / n


def clustered_t_test(
    values: Mapping[str, float], clusters: Mapping[str, str] | None = None
) -> tuple[float | None, float | None]:
    """(t statistic, two-sided p) of H0: the mean of `values` is 0, with G - 1 df."""
    figures = cluster_robust_mean(values, clusters)
    if figures.standard_error is None:
        return None, None
    if figures.standard_error == 0:
        return None, 1.0 if figures.mean == 0 else 0.0
    statistic = figures.mean / figures.standard_error
    return statistic, t_two_sided_p(statistic, figures.degrees_of_freedom)


def task_clusters(
    fields: Mapping[str, Mapping[str, object]], cluster_by: str | None
) -> tuple[str | None, dict[str, str], int]:
    """(field used, task id -> cluster label, tasks without it) from each task's fields.

    `fields`: task id -> its fields (`repo` and its `metadata` merged). With `cluster_by`
    None, `repo` when every task has one, else no clusters (each task alone).
    """
    if cluster_by is None:
        if fields and all(row.get("repo") not in (None, "") for row in fields.values()):
            cluster_by = "repo"
        else:
            return None, {}, 0
    labels = {}
    for task_id, row in fields.items():
        value = row.get(cluster_by)
        if value is not None and value != "":
            labels[task_id] = str(value)
    return cluster_by, labels, len(fields) - len(labels)
