"""Instances for images that cannot host the supervisor (no python3 >= 3.8).

The slow, classic way (what SWE-bench and Inspect do for every task): setup runs once in a
container that is then committed to an image; each workspace is its own container started from
that image, without SYS_ADMIN, with the task's network setting and the spec's memory and pids
limits; every command is one `docker exec`. Creating a workspace costs a container start
(~300 ms here) and each command ~70 ms instead of ~1 ms, and the per-workspace disk cap is not
enforced; `instance.info` says so.

A command's timeout restarts the workspace's container: that kills every process in it, detached
ones included, and keeps its files.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import (
    ExecRequest,
    ExecResult,
    FileEntry,
    FindsElsewhere,
    Instance,
    InstanceSpec,
)
from mcp_evalserver.sandbox.docker_engine import ContainerLimits, DockerEngine
from mcp_evalserver.sandbox.docker_stream import open_exec_stream
from mcp_evalserver.sandbox.supervisor import finder
from mcp_evalserver.sandbox.supervisor.protocol import error_type

__all__ = ["ContainerWorkspace", "PerTrajectoryInstance"]

NOTE = (
    "image has no python3 >= 3.8, so the supervisor cannot run in it: one container per "
    "trajectory from a committed instance image (workspace create ~300 ms, ~70 ms per command, "
    "no per-workspace disk cap); add python3 to the image for millisecond workspaces"
)
# Lists a directory as NUL-separated (name, kind, size) triples with POSIX sh and wc only.
_LIST = r"""
cd -- "$1" || exit 2
for f in .* *; do
  [ "$f" = . ] || [ "$f" = .. ] && continue
  [ -e "$f" ] || [ -L "$f" ] || continue
  if [ -L "$f" ]; then k=symlink; s=0
  elif [ -d "$f" ]; then k=dir; s=0
  elif [ -f "$f" ]; then k=file; s=$(wc -c < "$f")
  else k=other; s=0; fi
  printf '%s\0%s\0%s\0' "$f" "$k" "$s"
done
"""
_READ = 'if [ -d "$1" ]; then exit 21; elif [ ! -e "$1" ]; then exit 2; fi; exec cat -- "$1"'
# search and glob: the supervisor's own finder.py, run as a script by the image's python3 when
# it has one (too old for the supervisor, maybe not for this); exit 127 when it has none.
_FIND = 'command -v python3 >/dev/null 2>&1 || exit 127; exec python3 -I -S -c "$1" "$2"'
FIND_TIMEOUT_S = finder.TIMEOUT_S
# Prints the size of the file it replaces (nothing when there was none).
_WRITE = (
    'case "$1" in */*) mkdir -p -- "${1%/*}" || exit 1;; esac; '
    '[ -f "$1" ] && wc -c < "$1"; cat > "$1" || exit 1'
)


class _Capped:
    """Keeps the first and last `cap // 2` bytes of a stream; notes whether bytes were lost."""

    def __init__(self, cap: int) -> None:
        self.head_cap, self.tail_cap = cap - cap // 2, cap // 2
        self.head, self.tail = bytearray(), bytearray()
        self.truncated = False

    def feed(self, data: bytes) -> None:
        room = self.head_cap - len(self.head)
        self.head += data[:room]
        rest = data[room:]
        if rest:
            self.tail += rest
            if len(self.tail) > self.tail_cap:
                self.truncated = True
                del self.tail[: len(self.tail) - self.tail_cap]

    def text(self) -> str:
        return bytes(self.head + self.tail).decode("utf-8", "replace")

    def data(self) -> bytes:
        return bytes(self.head + self.tail)


async def _run(
    engine: DockerEngine,
    container: str,
    argv: Sequence[str],
    *,
    timeout: float,  # noqa: ASYNC109 (the timeout restarts the container, not just the wait)
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    output_cap: int = 1 << 20,
    user: str = "root",
) -> tuple[ExecResult, bytes]:
    """One command by `docker exec`; returns the result and the (capped) raw stdout."""
    started = time.monotonic()
    stdout, stderr = _Capped(output_cap), _Capped(output_cap)
    stream = await open_exec_stream(
        engine.api, container, argv, user=user, workdir=cwd, environment=env, on_stderr=stderr.feed
    )
    timed_out = False
    async with stream:
        with anyio.move_on_after(timeout) as scope:
            async with anyio.create_task_group() as tg:

                async def feed() -> None:
                    if stdin:
                        await stream.send(stdin)
                    await stream.send_eof()

                tg.start_soon(feed)
                async for chunk in stream:
                    stdout.feed(chunk)
        if scope.cancelled_caught:
            timed_out = True
            # Kills every process of the workspace, setsid/nohup children included.
            await engine.call("restart a timed-out workspace", engine.api.restart, container, 0)
        code = await stream.exit_code()
    result = ExecResult(
        exit_code=-9 if timed_out or code is None else code,
        stdout=stdout.text(),
        stderr=stderr.text(),
        stdout_truncated=stdout.truncated,
        stderr_truncated=stderr.truncated,
        duration_s=time.monotonic() - started,
        timed_out=timed_out,
    )
    return result, stdout.data()


class PerTrajectoryInstance(Instance):
    """A committed instance image; each workspace is a container of its own."""

    def __init__(
        self, engine: DockerEngine, spec: InstanceSpec, image: str, base: str | None
    ) -> None:
        self.spec = spec
        self.engine = engine
        self.image = image
        self._base = base
        self.info: dict[str, Any] = {"mode": "container-per-trajectory", "note": NOTE}
        self.workspaces: dict[str, ContainerWorkspace] = {}
        self.closed = False

    @classmethod
    async def provision(
        cls, engine: DockerEngine, spec: InstanceSpec, container: str
    ) -> PerTrajectoryInstance:
        """Runs the setup in `container`, commits it as the instance image, removes it.

        Raises:
            InfrastructureError: setup failed (the message ends with its output).
            SandboxUnavailable: the engine failed.
        """
        try:
            await engine.exec(container, ["mkdir", "-p", spec.workdir])
            script = "set -e\n" + "\n".join(spec.setup) + "\n"
            script += "if git rev-parse --git-dir >/dev/null 2>&1; then git status >/dev/null; fi"
            setup, _ = await _run(
                engine,
                container,
                ["/bin/sh", "-c", script],
                timeout=spec.setup_timeout_s,
                cwd=spec.workdir,
            )
            if not setup.ok:
                tail = (setup.stdout + setup.stderr)[-4000:]
                raise errors.InfrastructureError(f"setup failed: {tail}")
            head, out = await _run(
                engine, container, ["git", "rev-parse", "HEAD"], timeout=60, cwd=spec.workdir
            )
            base = out.decode().strip() if head.exit_code == 0 else None
            image = await engine.commit(container, f"mcp-evalserver/instance-{spec.key}", spec.key)
        finally:
            with anyio.CancelScope(shield=True):
                await engine.remove_container(container)
        return cls(engine, spec, image, base)

    @property
    def base_commit(self) -> str | None:
        return self._base

    @property
    def dead(self) -> str | None:
        # Each workspace is a container of its own: a lost one fails its trajectory alone.
        return "the instance was closed" if self.closed else None

    async def workspace(self, name: str) -> ContainerWorkspace:
        if self.closed:
            raise errors.SandboxUnavailable("the instance was closed")
        if not name or "/" in name or name.startswith("."):
            raise errors.InvalidInput(f"workspace name {name!r} not allowed")
        if name in self.workspaces:
            raise errors.Conflict(f"workspace {name!r} exists")
        ws = ContainerWorkspace(self, name)
        self.workspaces[name] = ws
        try:
            await ws.start()
        except BaseException:
            self.workspaces.pop(name, None)
            raise
        return ws

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        with anyio.CancelScope(shield=True):
            for ws in list(self.workspaces.values()):
                await ws.destroy()
            await self.engine.remove_image(self.image)


@functools.cache
def _finder_source() -> str:
    return Path(finder.__file__).read_text()


class ContainerWorkspace(FindsElsewhere):
    """A workspace that is a whole container of its own."""

    def __init__(self, instance: PerTrajectoryInstance, name: str) -> None:
        self.instance = instance
        self.name = name
        self.container: str | None = None

    async def start(self) -> None:
        spec = self.instance.spec
        memory = spec.memory_bytes or 2 << 30
        self.container = await self.instance.engine.run_container(
            self.instance.image,
            instance_key=spec.key,
            role="trajectory",
            limits=ContainerLimits(memory=str(memory), pids=spec.pids_limit or 512),
            network=spec.network,
            sys_admin=False,
            store=None,
        )

    def _live(self) -> str:
        if self.container is None:
            raise errors.NotFound(f"workspace {self.name!r} was destroyed")
        return self.container

    def _path(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.instance.spec.workdir}/{path}"

    async def _exec(self, request: ExecRequest) -> ExecResult:
        # Its timeout is enforced by restarting the container (`_run`).
        if request.report:
            raise errors.Conflict(
                "this workspace runs commands by `docker exec` (the image has no python3 >= "
                "3.8 for the supervisor), which cannot give a command a private report "
                "channel; add python3 to the image, or grade without strict mode"
            )
        workdir, cwd = self.instance.spec.workdir, request.cwd
        result, _ = await _run(
            self.instance.engine,
            self._live(),
            request.argv,
            timeout=request.timeout,
            stdin=request.input,
            env=request.env,
            cwd=f"{workdir}/{cwd}" if cwd and not cwd.startswith("/") else (cwd or workdir),
            output_cap=request.output_cap,
            user=request.user or "root",
        )
        return result

    async def _shell(
        self, script: str, *args: str, stdin: bytes | None = None
    ) -> tuple[int, bytes]:
        result, out = await _run(
            self.instance.engine,
            self._live(),
            ["/bin/sh", "-c", script, "sh", *args],
            timeout=300,
            stdin=stdin,
            cwd=self.instance.spec.workdir,
            output_cap=1 << 30,
        )
        return result.exit_code, out

    async def read_file(self, path: str, *, max_bytes: int = 16 << 20) -> bytes:
        code, data = await self._shell(_READ, self._path(path))
        if code == 2:
            raise errors.NotFound(f"no file {path!r}")
        if code == 21:
            raise errors.InvalidInput(f"{path!r} is a directory")
        if code != 0:
            raise errors.InvalidInput(f"cannot read {path!r}")
        if len(data) > max_bytes:
            raise errors.LimitExceeded(f"{path!r} is larger than {max_bytes} bytes")
        return data

    async def write_file(
        self, path: str, data: bytes | str, *, mode: int | None = None
    ) -> int | None:
        raw = data.encode() if isinstance(data, str) else data
        target = self._path(path)
        code, out = await self._shell(_WRITE, target, stdin=raw)
        if code != 0:
            raise errors.InvalidInput(f"cannot write {path!r} (a directory, or read-only)")
        if mode is not None:
            await self._shell('chmod "$1" "$2"', f"{mode:o}", target)
        return int(out) if out.strip() else None

    async def list(self, path: str = ".") -> list[FileEntry]:
        code, out = await self._shell(_LIST, self._path(path))
        if code == 2:
            raise errors.NotFound(f"no directory {path!r}")
        fields = out.decode("utf-8", "surrogateescape").split("\0")[:-1]
        entries = [
            FileEntry(name=fields[i], kind=fields[i + 1], size=int(fields[i + 2] or 0))
            for i in range(0, len(fields) - 2, 3)
        ]
        return sorted(entries, key=lambda e: e.name)

    async def _find(self, op: str, **arguments: Any) -> Any:
        """finder.py's `op` in the workspace's container, by its python3; an alarm ends it
        inside the container (a timeout of `_run` would restart the whole workspace)."""
        request = json.dumps({"op": op, "alarm": FIND_TIMEOUT_S, **arguments})
        result, out = await _run(
            self.instance.engine,
            self._live(),
            ["/bin/sh", "-c", _FIND, "sh", _finder_source(), request],
            timeout=FIND_TIMEOUT_S + 30,
            cwd=self.instance.spec.workdir,
            output_cap=64 << 20,
        )
        if result.exit_code == 127:
            raise errors.Conflict(
                f"{op} needs python3 in the image, which has none (this workspace is a plain "
                "container: the image cannot host the supervisor); use sandbox_exec with "
                "grep -rn or find instead, or add python3 to the image"
            )
        if result.exit_code in (-14, 128 + 14):  # SIGALRM
            raise errors.Timeout(
                f"{op} did not finish within {FIND_TIMEOUT_S} s: a pattern that backtracks or "
                "a very large tree; simplify the pattern or narrow the path or glob"
            )
        try:
            answer = json.loads(out)
        except ValueError:
            raise errors.Conflict(
                f"{op}: the image's python3 cannot run it (it needs Python >= 3.7): "
                f"{result.stderr[-400:]}; use sandbox_exec with grep -rn or find instead"
            ) from None
        if "error" in answer:
            raise getattr(errors, error_type(answer.get("kind")))(str(answer["error"]))
        return answer["result"]

    async def diff(self) -> str:
        base = self.instance.base_commit
        if base is None:
            raise errors.Conflict("the workdir is not a git repository: there is nothing to diff")
        # A throwaway index: the repository's own index stays as the instance left it.
        script = (
            "export GIT_INDEX_FILE=/tmp/.mcp-evalserver-diff-index; rm -f $GIT_INDEX_FILE; "
            'git read-tree "$1" && git add -A && git diff --cached --binary "$1"; '
            "code=$?; rm -f $GIT_INDEX_FILE; exit $code"
        )
        code, out = await self._shell(script, base)
        if code != 0:
            raise errors.InfrastructureError(f"git diff failed with exit code {code}")
        return out.decode("utf-8", "surrogateescape")

    async def end_processes(self) -> None:
        # Every process but the container's pid 1 and this shell itself (kill(2) skips both).
        await self._shell("kill -9 -1 2>/dev/null; true")

    async def reset(self) -> None:
        old = self._live()
        self.container = None
        await self.instance.engine.remove_container(old)
        await self.start()

    async def destroy(self) -> None:
        container, self.container = self.container, None
        self.instance.workspaces.pop(self.name, None)
        if container is not None:
            with anyio.CancelScope(shield=True):
                await self.instance.engine.remove_container(container)
