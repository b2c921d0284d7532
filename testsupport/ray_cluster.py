"""A real multi-node Ray cluster on this machine: several raylets on loopback, one per "node".

Only inside a loopback-only network namespace (see loopback.py): the ray test group and
bench/scale.py run in one. Each worker node offers its own `sandbox_slots`; the head offers
none, so instances land on the workers only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp_evalserver.sandbox.shipping import SHIPPED_DIR_ENV
from testsupport.loopback import in_loopback_namespace, interfaces

SLOTS = "sandbox_slots"
# A killed node is known dead after 3 health checks missed in a row, half a second apart and
# the first at once (Ray's defaults: 5, 3 s apart, the first 5 s after the node joined: 15 to
# 20 s, which every node added after a kill waited out). Each check still has Ray's 10 s to
# answer, so a slow node on a loaded machine is not taken for a dead one.
HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
}


class LoopbackCluster:
    """A head and worker nodes; add or kill workers while a campaign runs."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.workers: list[Any] = []
        self._offers: dict[str, str] = {}  # node id -> the resource it was added to offer

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def add_worker(self, slots: int, resource: str = SLOTS) -> Any:
        """A new node offering `slots` of `resource` (tests use their own resource to own it)."""
        node = self.cluster.add_node(num_cpus=0, resources={resource: slots})
        self.cluster.wait_for_nodes()
        self.workers.append(node)
        self._offers[node.node_id] = resource
        return node

    def kill_worker(self, node: Any) -> None:
        """Kills the node's processes (raylet, object store, its workers), as a crash would."""
        self.cluster.remove_node(node, allow_graceful=False)
        self.workers.remove(node)

    def stop_workers_offering(self, resource: str) -> None:
        """Stops the nodes added to offer `resource` (a test's own, once it is done with them).

        Gracefully: the raylet tells the head it leaves, so the next node added need not wait
        for the head to find this one dead.
        """
        for node in [n for n in self.workers if self._offers.get(n.node_id) == resource]:
            self.cluster.remove_node(node, allow_graceful=True)
            self.workers.remove(node)

    @staticmethod
    def node_id(node: Any) -> str:
        return str(node.node_id)


@contextmanager
def worker_without(
    cluster: LoopbackCluster, hidden: Path, resource: str, slots: int = 1
) -> Iterator[subprocess.Popen[bytes]]:
    """A worker node (`ray start`) that cannot see `hidden`: an empty tmpfs covers it there.

    Its raylet and workers live in a mount namespace of their own, as on a machine that does
    not share the driver's disk; shipped directories are recorded inside the tmpfs too.
    """
    script = 'mount -t tmpfs tmpfs "$1" && shift && exec "$@"'
    ray_cli = str(Path(sys.executable).with_name("ray"))
    node = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "node",
         str(hidden), ray_cli, "start", "--block", "--address", cluster.address,
         "--num-cpus", "0", "--resources", json.dumps({resource: slots})],
        env={
            **os.environ,
            "MCP_EVALSERVER_SHIPPED_DIR": str(hidden / ".shipped"),
            # On SIGTERM Ray drains the node until it is idle, which ours (its actor stays)
            # never is: without this its stop took the whole 30 s drain timeout.
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        yield node
    finally:
        node.terminate()  # `ray start --block` stops its raylet and workers on SIGTERM
        try:
            node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait()


@contextmanager
def loopback_cluster(workers: int, slots: int) -> Iterator[LoopbackCluster]:
    """A running cluster of `workers` nodes with `slots` sandbox slots each."""
    if not in_loopback_namespace():
        raise RuntimeError(
            f"refusing to start Ray here: this namespace has {interfaces()}, not only `lo`; "
            "run the ray test group through pytest (it re-runs it under `unshare -n`)"
        )
    import ray
    from ray.cluster_utils import Cluster

    # The nodes' records (shipped directories, setups that ran) stay with this cluster.
    records = tempfile.TemporaryDirectory(prefix="ray-nodes-")
    os.environ[SHIPPED_DIR_ENV] = records.name
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "resources": {SLOTS: 0},
            "include_dashboard": False,
            "_system_config": HEALTH_CHECKS,
        },
    )
    under_test = LoopbackCluster(cluster)
    try:
        for _ in range(workers):
            under_test.add_worker(slots)
        yield under_test
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]
        records.cleanup()
