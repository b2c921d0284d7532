"""The project's error hierarchy.

Lower-layer errors (OSError, docker.errors, pydantic.ValidationError, ...) are translated into
these at the boundary of the module that meets them, so callers catch a small documented tree.
A command that exits non-zero is data (an `ExecResult`), never an exception.

    EvalServerError
    ├── InvalidInput          bad spec or argument, path outside the workspace
    ├── NotFound              unknown campaign, trajectory, task, artifact
    ├── Conflict              wrong state: command after submit, campaign finished
    ├── LedgerCorrupt         a ledger line before the end cannot be read
    ├── LimitExceeded         a declared limit was hit (output cap, disk cap, pids)
    ├── Timeout               a deadline passed
    └── InfrastructureError   not the task's fault: retried with backoff by the scheduler
        └── SandboxUnavailable the instance or its supervisor is gone or cannot be provisioned
"""

from __future__ import annotations

from types import TracebackType

#: What `__exit__` and `__aexit__` receive: the exception that ended the `with` block (three
#: Nones when none did). Spelled `*exc_info: *ExcInfo`, it passes on as it came.
ExcInfo = tuple[type[BaseException] | None, BaseException | None, TracebackType | None]


class EvalServerError(Exception):
    """Base of every error this project raises on purpose.

    The message is written for a person (or a model) and says what to do next.
    """

    # The errno name ("EACCES", "EISDIR", ...) when a failed system call in the sandbox was
    # the cause: lets an adapter raise the matching OSError without parsing the message.
    errno_name: str | None = None


class InvalidInput(EvalServerError):
    """The input is wrong; the message names the field and why."""


class NotFound(EvalServerError):
    """An id or path names nothing; the message says how to list what exists."""


class Conflict(EvalServerError):
    """The request is valid but the object is not in a state that allows it."""


class LedgerCorrupt(EvalServerError):
    """A ledger line other than the last cannot be parsed; the message names the line."""


class LimitExceeded(EvalServerError):
    """A configured limit (output bytes, disk, processes, memory) was reached."""


class Timeout(EvalServerError):
    """A deadline passed before the work finished."""


class InfrastructureError(EvalServerError):
    """Something outside the task failed (engine, container, network); worth retrying."""


class SandboxUnavailable(InfrastructureError):
    """The sandbox (instance, supervisor, engine) is down or cannot be provisioned."""


def sole_error(error: BaseException) -> BaseException:
    """The one exception that nested exception groups carry, else `error` itself.

    A task group wraps what its tasks raise; a caller that expects one of ours unwraps it here
    so a person sees the one-line message, not a group's traceback.
    """
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error
