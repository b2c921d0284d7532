"""How many instances a campaign may keep alive, and whether the disk holds them.

The budget (`limits.instances`) defaults to what this machine holds: its memory at
`INSTANCE_MEMORY_MB` per instance (a supervisor and a few workspaces) and its free disk at
`limits.instance_disk_mb` per instance. The preflight estimates a campaign's disk before
anything is recorded: each distinct image once (`limits.image_disk_mb`; instances with the same
environment are one instance, keyed by content) plus the instances alive at once, and refuses
a campaign whose estimate exceeds the free space, with the figures and what to change.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from mcp_evalserver.errors import LimitExceeded
from mcp_evalserver.spec.campaign import CampaignSpec, Limits, Task

#: Memory one instance takes beyond its workspaces' commands (a supervisor, its namespaces).
INSTANCE_MEMORY_MB = 256
#: Never more by default: a budget is a promise to the machine, not a target.
MAX_DEFAULT_INSTANCES = 256
MB = 1 << 20


def memory_bytes() -> int:
    """This machine's physical memory."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def free_disk_bytes(path: Path) -> int:
    """Free space on the filesystem holding `path` (its nearest existing parent)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def default_instances(limits: Limits, *, memory: int, free_disk: int) -> int:
    """The budget this machine's memory and free disk hold (at least 1)."""
    by_memory = memory // (INSTANCE_MEMORY_MB * MB)
    by_disk = (
        int(free_disk // (limits.instance_disk_mb * MB))
        if limits.instance_disk_mb
        else MAX_DEFAULT_INSTANCES
    )
    return max(1, min(by_memory, by_disk, MAX_DEFAULT_INSTANCES))


@dataclass(frozen=True)
class DiskEstimate:
    """What a campaign's instances and images take on disk at most, in MB."""

    images: int
    image_mb: float
    instances: int
    instance_mb: float

    @property
    def total_mb(self) -> float:
        return self.images * self.image_mb + self.instances * self.instance_mb


def estimate_disk(tasks: list[Task], limits: Limits, budget: int) -> DiskEstimate:
    """Each distinct image once; as many instances as are alive at once (the budget, or the
    distinct environments if fewer). Answer-only tasks take nothing."""
    images = {task.image for task in tasks if task.image is not None}
    environments = {task.instance_key for task in tasks if task.image or task.path}
    return DiskEstimate(
        images=len(images),
        image_mb=limits.image_disk_mb,
        instances=min(budget, len(environments)),
        instance_mb=limits.instance_disk_mb,
    )


def preflight(estimate: DiskEstimate, free_disk: int, where: Path) -> None:
    """Refuses a campaign whose estimated disk exceeds the free space at `where`.

    Raises:
        LimitExceeded: the estimate does not fit; the message has the figures and the fixes.
    """
    free_mb = free_disk / MB
    if estimate.total_mb <= free_mb:
        return
    raise LimitExceeded(
        f"not enough disk for this campaign: it needs about {estimate.total_mb:,.0f} MB "
        f"({estimate.images} image(s) × {estimate.image_mb:g} MB + {estimate.instances} "
        f"instance(s) alive at once × {estimate.instance_mb:g} MB) and {where} has "
        f"{free_mb:,.0f} MB free. Lower `limits.instances` (instances alive at once), correct "
        "`limits.instance_disk_mb` / `limits.image_disk_mb` if the estimate is too high, or "
        "free disk space"
    )


def governed(spec: CampaignSpec, state_dir: Path) -> CampaignSpec:
    """`spec` with its instance budget fixed (the machine's default when it states none),
    once the preflight has found the disk under `state_dir` big enough for it.

    Raises:
        LimitExceeded: the estimated disk exceeds the free space (figures in the message).
    """
    free = free_disk_bytes(state_dir)
    limits = spec.limits
    budget = limits.instances or default_instances(limits, memory=memory_bytes(), free_disk=free)
    preflight(estimate_disk(spec.task_list(), limits, budget), free, state_dir)
    if limits.instances == budget:
        return spec
    return spec.model_copy(update={"limits": limits.model_copy(update={"instances": budget})})
