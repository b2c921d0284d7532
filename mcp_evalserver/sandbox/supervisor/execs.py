"""Commands in a workspace: exec, and diff (git, run as the trajectory). The supervisor's side:
the request goes to the workspace's holder, whose runner forks the command (exec_init.py)."""

from __future__ import annotations

import array
import base64
import os
import signal
import socket
import time
from typing import Any

from .exec_init import DEFAULT_PATH, encode_exec_request, exec_message
from .jobs import Job
from .protocol import DiffArgs, DiffResult, ExecArgs, ExecResult, SupervisorError, error_type
from .state import Supervisor
from .workspace import Workspace


# --- operations ------------------------------------------------------------------------------
def exec_(sup: Supervisor, req_id: int, args: ExecArgs) -> None:
    ws = sup.workspace(args)
    argv = [str(a) for a in args["argv"]]
    if not argv:
        raise SupervisorError("InvalidInput", "argv is empty")
    env = {str(k): str(v) for k, v in (args.get("env") or {}).items()}
    refuse_nul("argv", argv)
    refuse_nul(
        "env", [*env, *env.values(), str(args.get("cwd") or ""), str(args.get("user") or "")]
    )
    if any(not key or "=" in key for key in env):
        raise SupervisorError("InvalidInput", "an env name is empty or holds '=': fix it")
    stdin_b64 = args.get("stdin_b64")
    stdin = base64.b64decode(stdin_b64) if stdin_b64 else None
    job = spawn_sandboxed(
        sup, req_id, ws, argv, env, args.get("cwd"), float(args["timeout"]),
        int(args.get("output_cap") or 1 << 20), stdin, args.get("user"),
        bool(args.get("report")),
    )  # fmt: skip

    def finish(job: Job) -> ExecResult:
        outcome = exec_result(job)
        result: ExecResult = {
            "exit_code": outcome["exit_code"],
            "stdout": outcome["stdout"],  # raw after the reply's line, as every bytes value
            "stderr": outcome["stderr"],
            "stdout_truncated": outcome["stdout_truncated"],
            "stderr_truncated": outcome["stderr_truncated"],
            "duration_s": outcome["duration_s"],
            "timed_out": outcome["timed_out"],
        }
        if job.report is not None:
            report, truncated = job.report_data.result()
            result["report"] = report
            result["report_truncated"] = truncated
            result["report_writers"] = len(job.report_writers)
        return result

    job.finish = finish


def exec_result(job: Job) -> dict[str, Any]:
    """What the command did (its output as bytes), from the job that ran it.

    Raises:
        SupervisorError: it could not be run, or its workspace lost its holder meanwhile.
    """
    messages = job.messages()
    for msg in messages:
        if "error" in msg and not job.timed_out:
            raise SupervisorError(error_type(msg.get("kind")), msg["error"])
    raw = next((m["status"] for m in messages if "status" in m), job.status)
    if raw is None:  # its parent was killed before reporting
        code = -signal.SIGKILL
    else:
        code = os.WEXITSTATUS(raw) if os.WIFEXITED(raw) else -os.WTERMSIG(raw)
    # A SIGKILL not ours (timeout, cancel, destroy): its parent died before reporting, or the
    # holder's runner outlived a dead holder long enough to report the SIGKILL its death gave
    # the workspace's processes. Either way not the command's doing, so not a result: the
    # trajectory's workspace is lost.
    ws = None if job.killed or code != -signal.SIGKILL else job.ws
    if ws is not None and (raw is None or ws.holder_gone()):
        lost = f"workspace {ws.name!r} lost its holder while a command ran"
        raise SupervisorError("InfrastructureError", lost)
    (out, out_trunc), (err, err_trunc) = job.output()
    return {
        "exit_code": code, "stdout": out, "stderr": err,
        "stdout_truncated": out_trunc, "stderr_truncated": err_trunc,
        "duration_s": time.monotonic() - job.started, "timed_out": job.timed_out,
    }  # fmt: skip


#: Who commits in a workspace unless its repository or the command says (`git commit` fails
#: without an identity, and a sandbox has no e-mail domain to guess one from). A variable, not
#: a config file: nothing is written, so nothing reaches the diff. Git reads `EMAIL` only after
#: `user.email`, and the name from the passwd entry after `user.name`: an agent's own
#: `git config` still wins.
GIT_IDENTITY = {"EMAIL": "agent@mcp-evalserver.invalid"}


def spawn_sandboxed(
    sup: Supervisor,
    req_id: int,
    ws: Workspace,
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    timeout: float,
    cap: int,
    stdin: bytes | None,
    user: str | None = None,
    report: bool = False,
) -> Job:
    """Starts `argv` in the workspace (see holders.Holder). With `report`, the command also gets
    the write end of a unix stream socket at fd REPORT_FD: a channel whose bytes only we
    read, that no path in the view names (a socket cannot be opened through /proc), which
    a process can hold only by inheriting it (pidfd_getfd is denied), and whose writers
    the kernel names (SO_PASSCRED). Not a file in the view: any process of the run could
    replace one after the tests wrote it. Not a pipe: /proc/PID/fd/N reopens a pipe, and
    its bytes carry no writer. What it cannot stop: the process it was meant for (pytest)
    and anything that process runs in itself can write to it; the reader decides whom
    to believe (strict grading: exactly one writer, which announced itself first)."""
    cfg, limits = sup.cfg, ws.limits
    full_env = {"PATH": DEFAULT_PATH, "HOME": "/root", "LANG": "C.UTF-8",
                "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory",
                "GIT_CONFIG_VALUE_0": "*", **GIT_IDENTITY}  # fmt: skip
    if user:
        del full_env["HOME"]  # the user's own, from the view's passwd (see exec_init.sandbox_init)
    full_env.update({str(k): str(v) for k, v in env.items()})
    workdir = cfg["workdir"]
    target = os.path.join(workdir, cwd) if cwd else workdir
    enforced = sup.cgroups.limits() if sup.cgroups else {"pids": False, "memory": False}
    have = {"pids": enforced["pids"], "memory": enforced["memory"]}
    # In our own user namespace every sandboxed process is one (namespace, uid), so
    # RLIMIT_NPROC caps them together: shared by the instance, but the host is safe.
    have["nproc"] = bool(cfg.get("userns")) and not have["pids"]

    request = {"argv": argv, "env": full_env, "cwd": target, "limits": limits, "have": have}
    request["user"] = str(user) if user else None
    if ws.ctl is None:
        raise SupervisorError("NotFound", f"workspace {ws.name!r} is being destroyed")
    encoded = encode_exec_request(request)
    message, in_memfd = exec_message(req_id, encoded, bool(stdin), report)
    # One pipe per exec: its runner relays the command's output on it, with its status (the
    # command's own pipes are the runner's to make). Both ends non-blocking: the runner waits
    # on a full pipe itself (exec_init.write_all), and no fcntl is needed here.
    info, theirs_info = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    theirs = [theirs_info]
    stdin_w = -1
    if stdin:
        stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
        theirs.append(stdin_r)
    ours: socket.socket | None = None
    if report:
        ours, end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        ours.shutdown(socket.SHUT_WR)  # nothing flows to the command
        theirs.append(end.detach())
    if in_memfd:  # argv may be larger than a socket message
        memfd = os.memfd_create("exec-request", os.MFD_CLOEXEC)
        theirs.append(memfd)
        os.write(memfd, encoded)
    try:
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", theirs))]
        ws.ctl.sendmsg([message], rights)
    except OSError as e:
        for fd in (info, stdin_w):
            if fd >= 0:
                os.close(fd)
        if ours is not None:
            ours.close()
        msg = f"workspace {ws.name!r} lost its holder ({e}); reset it or make another"
        raise SupervisorError("InfrastructureError", msg) from e
    finally:
        for fd in theirs:
            os.close(fd)
    job = Job(req_id, 0, None, ws)
    job.report = ours
    return sup.jobs.register_exec(job, info, stdin_w, timeout, cap, stdin)


def diff(sup: Supervisor, req_id: int, args: DiffArgs) -> None:
    """`git add -A` into a throwaway index, then a binary diff against the frozen base."""
    ws = sup.workspace(args)
    if sup.base is None:
        raise SupervisorError("Conflict", "the instance workdir is not a git repository")
    # Run as the trajectory: its .git/config is untrusted. Prefixes are pinned so that
    # diff.noprefix or mnemonicPrefix in that config cannot break `git apply`.
    script = (
        "set -e\nidx=$(mktemp /tmp/.evalserver-index.XXXXXX)\ntrap 'rm -f \"$idx\"' EXIT\n"
        "gitdir=$(git rev-parse --git-dir)\n"
        # -p keeps the index's mtime: git trusts an entry whose stat matches unless it is
        # "racily clean" against that mtime, so a fresh mtime would hide same-second edits.
        '[ -f "$gitdir/index" ] && cp -p "$gitdir/index" "$idx"\n'
        'export GIT_INDEX_FILE="$idx"\ngit add -A\n'
        "git -c core.quotepath=false diff --cached --binary --no-color --no-ext-diff "
        f"--no-textconv --src-prefix=a/ --dst-prefix=b/ {sup.base} --\n"
    )
    cap = int(args.get("max_bytes") or 64 << 20)
    timeout = float(args.get("timeout") or 300)
    job = spawn_sandboxed(sup, req_id, ws, ["/bin/sh", "-c", script], {}, None, timeout, cap, None)

    def finish(job: Job) -> DiffResult:
        result = exec_result(job)
        if result["timed_out"]:
            raise SupervisorError("Timeout", f"git diff did not finish in {timeout:g}s")
        if result["exit_code"] != 0:
            msg = result["stderr"].decode(errors="replace")[-2000:]
            raise SupervisorError("InfrastructureError", "git diff failed: " + msg)
        if result["stdout_truncated"]:
            raise SupervisorError("LimitExceeded", f"diff larger than {cap} bytes")
        return {"patch": result["stdout"]}

    job.finish = finish


def refuse_nul(what: str, strings: list[str]) -> None:
    """No program can be given a string with a NUL in it: refused here, as the caller's
    mistake, not failed later as the sandbox's."""
    if any("\0" in text for text in strings):
        raise SupervisorError("InvalidInput", f"{what} holds a NUL byte, which no program can take")
