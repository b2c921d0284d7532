"""Concurrency sweeps run by the server in the background (the `sweep_concurrency` tool).

A sweep runs its level campaigns one after the other in the server's task group, over the
server's sandbox pool; `status` follows it (its level campaigns can also be followed with
`campaign_status`). A sweep not running here is read from its files, so a finished one stays
visible after a restart, and starting the same id again resumes it.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from mcp_evalserver.agents.command import EndpointFactory
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.engine.sweep import (
    PLAN_FILE,
    PLOT_FILE,
    SWEEP_FILE,
    plan_sweep,
    run_sweep,
    sweeps_dir,
)
from mcp_evalserver.errors import Conflict, EvalServerError, NotFound
from mcp_evalserver.runtime.sandboxes import SandboxPool
from mcp_evalserver.server.models import SweepStatus
from mcp_evalserver.server.privileges import Privileges
from mcp_evalserver.spec.campaign import CampaignSpec

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class _Sweep:
    plan: dict[str, Any]
    level: int | None = None
    finished: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    error: str | None = None


class Sweeps:
    """The sweeps of one server."""

    def __init__(
        self,
        store: CampaignStore,
        group: anyio.abc.TaskGroup,
        pool: SandboxPool,
        privileges: Privileges,
        trajectory_endpoints: EndpointFactory | None = None,
    ) -> None:
        self.store = store
        self._trajectory_endpoints = trajectory_endpoints
        self._privileges = privileges
        self._group = group
        self._pool = pool
        self._running: dict[str, _Sweep] = {}

    def start(
        self,
        spec: CampaignSpec,
        *,
        levels: list[int],
        tasks: int,
        samples: int | None,
        sweep_id: str | None,
    ) -> SweepStatus:
        """Plans the sweep (or finds it, to resume) and runs it in the background.

        Raises:
            InvalidInput: bad levels, task count or id; or the sweep to resume would send a key
                this server does not send for its clients.
            Conflict: the sweep is running here already.
        """
        plan = plan_sweep(
            self.store, spec, levels=levels, tasks=tasks, samples=samples, sweep_id=sweep_id
        )
        # A sweep to resume runs its recorded spec, not `spec` (admitted by the caller).
        self._privileges.admit_endpoints(
            CampaignSpec.model_validate(plan["spec"]), f"sweep {plan['id']}"
        )
        running = self._running.get(plan["id"])
        if running is not None and not running.finished.is_set():
            raise Conflict(f"sweep {plan['id']} is already running; follow it with sweep_status")
        sweep = self._running[plan["id"]] = _Sweep(plan)
        self._group.start_soon(self._drive, sweep)
        return self.status(plan["id"])

    async def wait(self, sweep_id: str, wait_s: float) -> SweepStatus:
        """Waits up to `wait_s` for the sweep to finish, then says where it stands."""
        sweep = self._running.get(sweep_id)
        if sweep is not None:
            with anyio.move_on_after(wait_s):
                await sweep.finished.wait()
        return self.status(sweep_id)

    def status(self, sweep_id: str) -> SweepStatus:
        """Where a sweep stands: running (which level), or its result.

        Raises:
            NotFound: no such sweep.
        """
        directory = sweeps_dir(self.store) / sweep_id
        sweep = self._running.get(sweep_id)
        if sweep is None and not (directory / PLAN_FILE).is_file():
            known = sorted(p.name for p in sweeps_dir(self.store).glob("*") if p.is_dir())
            hint = ", ".join(known[-10:]) or "none yet: start one with sweep_concurrency"
            raise NotFound(f"no sweep {sweep_id!r}; known: {hint}")
        plan = sweep.plan if sweep is not None else json.loads((directory / PLAN_FILE).read_text())
        result_file = directory / SWEEP_FILE
        result = json.loads(result_file.read_text()) if result_file.is_file() else None
        active = sweep is not None and not sweep.finished.is_set()
        plot = directory / PLOT_FILE
        return SweepStatus(
            sweep_id=plan["id"],
            active=active,
            levels=plan["levels"],
            campaigns={int(level): cid for level, cid in plan["campaigns"].items()},
            current_level=sweep.level if active and sweep is not None else None,
            error=sweep.error if sweep is not None else None,
            finished=result is not None and not active,
            recommended=result["recommended"] if result and not active else None,
            reason=result["reason"] if result and not active else None,
            figures=result["levels"] if result and not active else [],
            sweep_json=str(result_file) if result is not None else None,
            sweep_png=str(plot) if plot.is_file() else None,
        )

    def cancel_all(self) -> None:
        """Stops every sweep (the server is stopping); the same id resumes them later."""
        for sweep in self._running.values():
            sweep.scope.cancel()

    async def _drive(self, sweep: _Sweep) -> None:
        async def on_level(level: int, campaign_id: str) -> None:
            sweep.level = level

        try:
            with sweep.scope:
                await run_sweep(
                    self.store,
                    sweep.plan,
                    sandboxes=self._pool,
                    on_level=on_level,
                    trajectory_endpoints=self._trajectory_endpoints,
                )
        except EvalServerError as exc:
            sweep.error = str(exc)
            logger.warning("sweep %s stopped: %s", sweep.plan["id"], exc)
        except Exception as exc:
            reference = secrets.token_hex(4)
            sweep.error = f"internal error (reference {reference}): {type(exc).__name__}"
            logger.exception("sweep %s failed (reference %s)", sweep.plan["id"], reference)
        finally:
            sweep.finished.set()
