"""`--http --workers N`: N processes serving one port, and the parent that keeps them.

How they share the port: SO_REUSEPORT. Each worker binds and listens on the port itself and
the kernel spreads new connections over the listeners by their address hash: no process in
the data path, no thundering herd, and an even spread of the long-lived connections MCP
clients hold (a parent handing out accepted connections would add a process to every
connection and be the one thing that cannot die). The parent binds the port first without
listening (so `--port 0` picks one port for all, and the port stays reserved while workers
restart), forks the workers, prints the URL once all of them listen, and starts a new worker
in place of one that dies. A worker that dies takes the connections it held (their clients
reconnect and land on the others); the connections waiting in its queue are reset. A worker
dies with its parent (`PR_SET_PDEATHSIG`): a parent SIGKILLed must not leave workers serving
beside the server restarted in its place, that nothing would ever restart or stop.

A worker that fails leaves its reason in the run directory and the parent says it, once: at
start-up as the server's own error (the workers fail alike: N copies of one reason would bury
it), later beside the restart.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from mcp_evalserver.errors import EvalServerError, InvalidInput, sole_error
from mcp_evalserver.server.front.worker_config import WorkerConfig
from mcp_evalserver.server.transport.http import bound_socket

#: The most workers `--workers` takes by default.
DEFAULT_MAX_WORKERS = 8
#: How long the workers may take to listen.
START_TIMEOUT_S = 120.0
PR_SET_PDEATHSIG = 1


def default_workers() -> int:
    """One per CPU this process may run on, at most `DEFAULT_MAX_WORKERS`."""
    return max(1, min(len(os.sched_getaffinity(0)), DEFAULT_MAX_WORKERS))


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port` with SO_REUSEPORT that does not listen: it holds the
    port (the one chosen, with port 0) for the workers, and takes no connection itself.

    Raises:
        InvalidInput: the address cannot be bound.
    """
    return bound_socket(host, port, reuse_port=True)


def serve_workers(
    host: str,
    port: int,
    workers: int,
    run_worker: Callable[[WorkerConfig, int, Callable[[], None]], None],
) -> int:
    """Runs `workers` forked workers on one port until SIGTERM or SIGINT; returns an exit
    status. `run_worker(config, port, ready)` serves in a worker and calls `ready` once it
    listens and its app has started.

    Raises:
        InvalidInput: the address cannot be bound, or the workers could not start.
    """
    reserved = reserve_port(host, port)
    bound = reserved.getsockname()[1]
    run_dir = Path(tempfile.mkdtemp(prefix="mcp-evalserver-"))
    server = secrets.token_hex(6)
    ready_r, ready_w = os.pipe()
    parent = os.getpid()
    children: dict[int, tuple[int, float]] = {}  # pid -> (index, started)
    stopping = False

    def spawn(index: int) -> None:
        _failure_file(run_dir, index).unlink(missing_ok=True)  # the reason of the one it replaces
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                _die_with(parent)
                os.close(ready_r)
                reserved.close()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                config = WorkerConfig(index, workers, run_dir, server)
                run_worker(config, bound, functools.partial(_say_ready, ready_w))
                code = 0
            except BaseException as exc:
                with contextlib.suppress(OSError):  # the parent is gone with its run directory
                    _failure_file(run_dir, index).write_text(_reason(exc))
            finally:
                sys.stderr.flush()
                os._exit(code)
        children[pid] = (index, time.monotonic())
        if stopping:  # SIGTERM came during the fork, before stop() could see this one
            os.kill(pid, signal.SIGTERM)

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for index in range(workers):
            spawn(index)
        _wait_ready(ready_r, workers, children, run_dir)
        display = f"[{host}]" if ":" in host else host
        # Scripts read the URL as the last word of the first line: keep it so.
        print(f"mcp-evalserver: serving MCP at http://{display}:{bound}/mcp", file=sys.stderr)
        print(f"mcp-evalserver: dashboard at http://{display}:{bound}/", file=sys.stderr)
        print(f"mcp-evalserver: {workers} workers on that port (SO_REUSEPORT)", file=sys.stderr)
        sys.stderr.flush()
        while children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            index, started = children.pop(pid, (-1, 0.0))
            if stopping or index < 0:
                continue
            reason = _failure(run_dir, index)
            print(
                f"mcp-evalserver: worker {index} (pid {pid}) died ({_describe(status)})"
                + (f": {reason}" if reason else "")
                + "; starting another",
                file=sys.stderr,
                flush=True,
            )
            if time.monotonic() - started < 1.0:
                time.sleep(1.0)  # one that dies at once must not spin the machine
            if not stopping:  # a SIGTERM during that pause: nothing would stop a new one
                spawn(index)
    finally:
        stop(signal.SIGTERM, None)
        for pid in list(children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(ready_r)
        os.close(ready_w)
        reserved.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


def _die_with(parent: int) -> None:
    """Makes this forked worker get SIGKILL when `parent` (the thread that forked it: the
    parent's only one) dies. SIGKILL, not SIGTERM: a graceful shutdown could hang on what the
    dead parent left, and a SIGKILLed worker is a case the workers already survive (the ledger
    is durable, the driver lease passes on, its sandbox ends with the pipes it held).

    Raises:
        OSError: the kernel refused the setting.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl(PR_SET_PDEATHSIG): {os.strerror(error)}")
    # The parent may have died between the fork and the prctl: then no signal ever comes.
    if os.getppid() != parent:
        os._exit(1)


def _say_ready(ready_w: int) -> None:
    os.write(ready_w, b"r")


def _wait_ready(
    ready_r: int, workers: int, children: dict[int, tuple[int, float]], run_dir: Path
) -> None:
    """Waits until `workers` workers said they listen and loaded their app.

    Raises:
        InvalidInput: a worker died first (the message is its reason), or they took longer
            than `START_TIMEOUT_S`.
    """
    deadline = time.monotonic() + START_TIMEOUT_S
    count = 0
    os.set_blocking(ready_r, False)
    while count < workers:
        with contextlib.suppress(BlockingIOError):
            count += len(os.read(ready_r, workers))
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                index = children[pid][0]
                raise InvalidInput(
                    _failure(run_dir, index)
                    or f"worker {index} exited during start-up ({_describe(status)}) without "
                    "saying why: run with --workers 1 to see it in this process"
                )
        if time.monotonic() > deadline:
            raise InvalidInput(f"the workers did not listen within {START_TIMEOUT_S:g}s")
        time.sleep(0.02)


def _failure_file(run_dir: Path, index: int) -> Path:
    return run_dir / f"worker-{index}.failed"


def _reason(exc: BaseException) -> str:
    """What a worker's failure tells the operator: one of our errors says what is wrong and
    what to do; anything else is a bug, whose traceback goes to stderr."""
    error = sole_error(exc)
    if isinstance(error, EvalServerError):
        return str(error)
    traceback.print_exception(error)
    return f"{type(error).__name__}: {error} (a bug: its traceback is above)"


def _failure(run_dir: Path, index: int) -> str | None:
    """The reason worker `index` left as it failed (taken: said once), or None."""
    path = _failure_file(run_dir, index)
    try:
        reason = path.read_text()
    except FileNotFoundError:
        return None
    path.unlink()
    return reason


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
