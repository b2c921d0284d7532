"""Real sandbox backends whose instance provisionings are counted (tests and benches)."""

from __future__ import annotations

from typing import Any

from mcp_evalserver.runtime.sandboxes import make_backend
from mcp_evalserver.sandbox.base import Backend, Instance, InstanceSpec


class CountingBackends:
    """A `SandboxPool(backends=...)` factory: real backends, each provisioning counted by
    instance key, and the kinds of backend made."""

    def __init__(self) -> None:
        self.provisioned: list[str] = []
        self.backends: set[str] = set()

    def __call__(self, name: Any, address: str) -> Backend:
        backend = make_backend(name, address)
        self.backends.add(name)
        real = backend.instance

        async def instance(spec: InstanceSpec) -> Instance:
            self.provisioned.append(spec.key)
            return await real(spec)

        backend.instance = instance  # type: ignore[method-assign]
        return backend
