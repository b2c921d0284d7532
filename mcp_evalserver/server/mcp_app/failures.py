"""Failures as MCP clients read them: every tool error says what went wrong and what next."""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from mcp.server.mcpserver.exceptions import ResourceError, ToolError

from mcp_evalserver.errors import EvalServerError

logger = logging.getLogger(__name__)

_P = ParamSpec("_P")
_R = TypeVar("_R")


def tool_errors(fn: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    """Turns every failure into a tool error whose text says what went wrong and what next."""

    @functools.wraps(fn)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await fn(*args, **kwargs)
        except EvalServerError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc
        except TimeoutError as exc:
            raise ToolError("Timeout: the server gave up waiting; try again") from exc
        except Exception as exc:
            reference = secrets.token_hex(4)
            logger.exception("tool %s failed unexpectedly (reference %s)", fn.__name__, reference)
            raise ToolError(
                f"internal error (reference {reference}): {type(exc).__name__}. The server logged "
                "the details under that reference and keeps serving; retry, or report it."
            ) from exc

    return wrapper


@contextmanager
def resource_errors() -> Iterator[None]:
    """Our errors as resource errors; their text says what went wrong and what next."""
    try:
        yield
    except EvalServerError as exc:
        raise ResourceError(str(exc)) from exc
