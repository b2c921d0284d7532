"""A `docker exec -i` session as an `anyio.abc.ByteStream`.

Docker hijacks the HTTP connection of `POST /exec/{id}/start`; with `tty=False` everything the
process writes arrives multiplexed, each chunk behind an 8-byte header (stream id, 3 zero bytes,
big-endian length), while what we send is the process's raw stdin. `DockerExecStream` gives the
caller stdout only, as a plain byte stream, and hands stderr to a callback (and keeps its tail
for error messages). The socket belongs to anyio, so reading needs no thread; only the blocking
Docker SDK calls that open the session run in a worker thread.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.abc

from mcp_evalserver.errors import SandboxUnavailable

__all__ = ["DockerExecStream", "open_exec_stream"]

_HEADER = struct.Struct(">BxxxL")
_STDOUT, _STDERR = 1, 2
_STDERR_TAIL_BYTES = 8192

_log = logging.getLogger(__name__)


def _log_stderr(data: bytes) -> None:
    _log.warning("exec stderr: %s", data.decode("utf-8", "replace").rstrip())


class DockerExecStream(anyio.abc.ByteStream):
    """Stdout (received) and stdin (sent) of one `docker exec -i` process.

    `receive` returns stdout bytes only; stderr chunks go to `on_stderr` and the last few KiB
    stay in `stderr_tail`. `send_eof` closes the process's stdin. `exit_code` asks the engine
    how the process ended (None while it runs).
    """

    def __init__(
        self,
        stream: anyio.abc.SocketStream,
        *,
        api: Any,
        exec_id: str,
        sdk_socket: Any,
        pending: bytes = b"",
        on_stderr: Callable[[bytes], None] = _log_stderr,
    ) -> None:
        self._stream = stream
        self._api = api
        self.exec_id = exec_id
        # The SDK's own socket object holds the original file descriptor (anyio has a dup):
        # kept so it is closed by us, at a known time, not by the garbage collector.
        self._sdk_socket = sdk_socket
        self._frames = bytearray(pending)
        self._stdout = bytearray()
        self._on_stderr = on_stderr
        self._stderr_tail = bytearray()
        self._eof = False

    @property
    def stderr_tail(self) -> str:
        """The last few KiB the process wrote to stderr, for error messages."""
        return self._stderr_tail.decode("utf-8", "replace")

    def _parse_frames(self) -> None:
        while len(self._frames) >= _HEADER.size:
            kind, length = _HEADER.unpack_from(self._frames)
            end = _HEADER.size + length
            if len(self._frames) < end:
                return
            payload = bytes(self._frames[_HEADER.size : end])
            del self._frames[:end]
            if kind == _STDOUT:
                self._stdout += payload
            elif kind == _STDERR and payload:
                self._stderr_tail += payload
                del self._stderr_tail[:-_STDERR_TAIL_BYTES]
                self._on_stderr(payload)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while not self._stdout:
            if self._eof:
                raise anyio.EndOfStream
            self._parse_frames()
            if self._stdout:
                break
            try:
                self._frames += await self._stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                # Whatever is left is a torn frame: the process died mid-write.
                self._eof = True
        chunk = bytes(self._stdout[:max_bytes])
        del self._stdout[:max_bytes]
        return chunk

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()
        # The SDK's socket is shared by its HTTP response, buffered reader and SocketIO; it
        # only really closes once all of them have let go.
        response = getattr(self._sdk_socket, "_response", None)
        if response is not None:
            response.close()
        self._sdk_socket.close()
        sock = getattr(self._sdk_socket, "_sock", None)
        if isinstance(sock, socket.socket):
            sock.close()

    async def exit_code(self) -> int | None:
        """The process's exit code, or None while it still runs."""
        info = await anyio.to_thread.run_sync(self._api.exec_inspect, self.exec_id)
        code = info.get("ExitCode")
        return None if info.get("Running") else (int(code) if code is not None else None)


class _UnsupportedTransport(Exception):
    pass


def _start_exec(
    api: Any,
    container_id: str,
    cmd: Sequence[str],
    user: str,
    workdir: str | None,
    environment: Mapping[str, str] | None,
) -> tuple[str, Any, socket.socket, bytes]:
    """Blocking part: create and start the exec, take the socket away from the SDK."""
    exec_id: str = api.exec_create(
        container_id,
        list(cmd),
        stdin=True,
        stdout=True,
        stderr=True,
        user=user,
        workdir=workdir,
        environment=dict(environment) if environment else None,
    )["Id"]
    sdk_socket = api.exec_start(exec_id, socket=True)
    raw = getattr(sdk_socket, "_sock", sdk_socket)
    if not isinstance(raw, socket.socket) or isinstance(raw, ssl.SSLSocket):
        # TLS (tcp+tls) and ssh engines hand back wrappers anyio cannot own as a plain socket.
        with contextlib.suppress(Exception):
            sdk_socket.close()
        raise _UnsupportedTransport(type(raw).__name__)
    # The SDK read the HTTP 101 headers through a buffered reader, which may already hold the
    # first frames. A non-blocking peek returns them (or b"") without waiting for more.
    pending = b""
    reader = getattr(getattr(getattr(sdk_socket, "_response", None), "raw", None), "_fp", None)
    buffered = getattr(reader, "fp", None)
    raw.setblocking(False)
    if buffered is not None and getattr(buffered, "raw", None) is sdk_socket:
        try:
            pending = buffered.peek()
            buffered.read(len(pending))
        except BlockingIOError:
            pending = b""
    raw.setblocking(True)
    return exec_id, sdk_socket, raw.dup(), pending


async def open_exec_stream(
    api: Any,
    container_id: str,
    cmd: Sequence[str],
    *,
    user: str = "root",
    workdir: str | None = None,
    environment: Mapping[str, str] | None = None,
    on_stderr: Callable[[bytes], None] = _log_stderr,
) -> DockerExecStream:
    """Start `cmd` in a running container with stdin attached and return its byte stream.

    Args:
        api: a `docker.APIClient` (`docker.from_env().api`).
        container_id: the running container.
        cmd: the command, as an argument list.
        user, workdir, environment: as for `docker exec`.
        on_stderr: called with each stderr chunk (default: logged as a warning).

    Raises:
        SandboxUnavailable: the engine refused to start the exec (container gone, not running).
    """
    import docker.errors

    try:
        exec_id, sdk_socket, sock, pending = await anyio.to_thread.run_sync(
            _start_exec, api, container_id, cmd, user, workdir, environment
        )
    except _UnsupportedTransport as exc:
        raise SandboxUnavailable(
            f"the Docker engine's exec stream arrived as a {exc}, not a plain socket: the "
            "docker backend supports unix:// and plain tcp:// engines (reach a TLS or ssh "
            "engine through a local unix socket, e.g. "
            "`ssh -L /tmp/docker.sock:/var/run/docker.sock host`)"
        ) from exc
    except docker.errors.NotFound as exc:
        raise SandboxUnavailable(
            f"container {container_id[:12]} is gone ({exc.explanation}); "
            "its instance must be provisioned again"
        ) from exc
    except docker.errors.APIError as exc:
        raise SandboxUnavailable(
            f"docker exec into {container_id[:12]} failed: {exc.explanation or exc}"
        ) from exc
    except OSError as exc:  # requests' ConnectionError is an OSError: the engine went away
        raise SandboxUnavailable(
            f"lost the Docker engine while starting an exec: {exc}; "
            "check it with `docker info` (start it with `bash scripts/ensure-docker.sh` as root)"
        ) from exc
    stream = await anyio.abc.SocketStream.from_socket(sock)
    return DockerExecStream(
        stream,
        api=api,
        exec_id=exec_id,
        sdk_socket=sdk_socket,
        pending=pending,
        on_stderr=on_stderr,
    )
