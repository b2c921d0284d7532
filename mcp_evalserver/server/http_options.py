"""What every process serving over HTTP is told (`--http`'s options), as one object: the CLI
makes it, `http_server` passes it on, `http_app` builds the app from it.

A module of its own, importing nothing heavy: the CLI and `http_server` hold it before the
socket listens, and `http_app` (the MCP SDK, the engine) loads only after.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp_evalserver.server.privileges import Privileges
    from mcp_evalserver.server.tool_profiles import ToolProfile


def least_privileges() -> Privileges:
    """No plugins, no host paths, no key but the operator's own endpoints' (`Privileges`)."""
    from mcp_evalserver.server.privileges import Privileges

    return Privileges.for_http()


@dataclass(frozen=True)
class HttpOptions:
    """The bound `host`, the bearer `token`, what token holders may do (`privileges`, made as
    the app loads: the module that checks specs imports the campaign models), the other names
    the Host check accepts (`allowed_hosts`), the Ray cluster to place sandboxes on, whether
    to resume the campaigns left running, and the `tools` profile clients get."""

    host: str
    token: str
    privileges: Callable[[], Privileges] = least_privileges
    allowed_hosts: Sequence[str] = ()
    ray_address: str | None = None
    resume_running: bool = False
    tools: ToolProfile = "all"
