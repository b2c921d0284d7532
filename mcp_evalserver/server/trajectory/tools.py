"""The workspace tools of one trajectory: exec, read, write, diff, checkpoints, and building a
submission.

Shared by the two ways a program outside the engine acts as an agent: an MCP client holding a
claim (`ExternalTrajectories`) and a `command` agent's program on its scoped endpoint
(`ScopedTrajectory`). They differ only in how they find the trajectory, and in how they fork and
submit. Each method is named after the tool it serves (`agents.tool_table`): the MCP server
finds it by that name.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager
from typing import Any, Protocol

from pydantic import ValidationError

from mcp_evalserver.agents import file_text
from mcp_evalserver.agents.tool_table import (
    DEFAULT_OUTPUT_CHARS,
    LISTED_FILES,
    MAX_OUTPUT_CHARS,
    SEARCH_HITS,
)
from mcp_evalserver.errors import Conflict, InvalidInput, NotFound
from mcp_evalserver.runtime import tracing
from mcp_evalserver.runtime.pricing import Meter
from mcp_evalserver.sandbox.base import DEFAULT_WORKDIR, Workspace
from mcp_evalserver.server.models import (
    Checkpoint,
    Diff,
    ExecOutput,
    FileContent,
    FileEdited,
    FileList,
    FileWritten,
    Restored,
    SearchMatches,
    Submitted,
    UsageReported,
)
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.submission import ModelUsage, Submission

_DIFF_FILE = re.compile(r"^diff --git a/(.*) b/", re.MULTILINE)
_EMPTY_SUBMISSION = (
    "the submission is empty: no change in the workspace against the base commit and no "
    "answer. It is scored as it is (a task that needs a fix fails)"
)


class WorkspaceSource(Protocol):
    """Where a trajectory's workspace comes from (`TrajectorySandbox`, or a workspace another
    process made: server/front)."""

    @property
    def available(self) -> bool: ...

    async def workspace(self) -> Workspace: ...


class ToolContext(Protocol):
    """What the tools read of a trajectory (a `TrajectoryContext` is one)."""

    @property
    def campaign_id(self) -> str: ...

    @property
    def trajectory_id(self) -> str: ...

    @property
    def task(self) -> Task: ...

    @property
    def sandbox(self) -> WorkspaceSource: ...

    @property
    def meter(self) -> Meter | None: ...


class TrajectoryTools:
    """The workspace tools that act alike on every surface, on one trajectory's workspace."""

    def __init__(self, context: ToolContext) -> None:
        self.context = context

    @property
    def workdir(self) -> str | None:
        """Where commands start and relative paths resolve; None for answer-only tasks."""
        task = self.context.task
        return task.workdir or task.path or (DEFAULT_WORKDIR if task.image else None)

    async def sandbox_exec(
        self,
        command: str,
        timeout_s: float,
        stdin: str | None = None,
        max_output_chars: int = DEFAULT_OUTPUT_CHARS,
    ) -> ExecOutput:
        """Runs a shell command in the workspace; each stream keeps its head and tail within
        `max_output_chars`.

        Raises:
            InvalidInput: empty command, bad cwd, or the task has no workspace.
            SandboxUnavailable: the instance is gone.
        """
        if not command.strip():
            raise InvalidInput("`command` is empty: give a shell command such as `ls -la`")
        # A byte cap: the text it keeps is at most as many characters.
        cap = max(1, min(max_output_chars, MAX_OUTPUT_CHARS))
        with self._traced("sandbox_exec", command=command, timeout_s=timeout_s) as span:
            workspace = await self.workspace()
            result = await workspace.exec(command, timeout=timeout_s, stdin=stdin, output_cap=cap)
            tracing.command_result(
                span, result.exit_code, result.duration_s, timed_out=result.timed_out
            )
        # The tool's output is the fields of the sandbox's result it names (the report is
        # ignored as extra): from a dict, a third of `from_attributes` and a setattr after.
        return ExecOutput.model_validate({**result.__dict__, "timeout_s": timeout_s})

    async def read_file(
        self,
        path: str,
        offset: int = 1,
        limit: int = file_text.DEFAULT_LINES,
        max_bytes: int | None = None,
    ) -> FileContent:
        """Reads lines `offset..offset+limit-1` of a text file, at most `max_bytes` bytes of
        them (default `file_text.DEFAULT_READ_BYTES`): an answer that stops early gives the
        next offset.

        Raises:
            NotFound: no such file.
            InvalidInput: not a regular file, a binary file, `offset` past its end, or the
                task has no workspace.
            LimitExceeded: the file is larger than the file tools load (16 MiB).
        """
        try:
            with self._traced("read_file", path=path):
                data = await file_text.load(await self.workspace(), path)
        except NotFound as exc:
            raise NotFound(
                f"{exc} (relative paths start at {self.workdir}; list files with sandbox_exec, "
                "e.g. `ls -la` or `git ls-files`)"
            ) from exc
        budget = file_text.DEFAULT_READ_BYTES if max_bytes is None else max_bytes
        return FileContent.of(path, file_text.read_lines(data, path, offset, limit, budget))

    async def write_file(self, path: str, content: str) -> FileWritten:
        """Writes a file in the workspace (parents created).

        Raises:
            InvalidInput: the path is outside the workspace (or leads out of the workdir) or
                a directory, or the task has no workspace.
        """
        self._refuse_climbing_out(path)
        data = content.encode()
        try:
            with self._traced("write_file", path=path, size=len(data)):
                previous = await (await self.workspace()).write_file(path, data)
        except InvalidInput as exc:
            raise InvalidInput(
                f"{exc}: only the workspace is writable; write under {self.workdir} (or use a "
                "relative path)"
            ) from exc
        return FileWritten(path=path, size=len(data), previous_bytes=previous)

    async def edit_file(
        self, path: str, old_text: str, new_text: str, replace_all: bool = False
    ) -> FileEdited:
        """Replaces the one occurrence of `old_text` in a file with `new_text` (every one with
        `replace_all`); an empty `old_text` creates a file that does not exist.

        Raises:
            InvalidInput: 0 matches (the message names the closest line), several without
                `replace_all` (their count and lines), a binary file, a path that leads out
                of the workdir, or the task has no workspace.
            NotFound: no such file.
            LimitExceeded: the file is larger than the file tools load (16 MiB).
        """
        self._refuse_climbing_out(path)
        with self._traced("edit_file", path=path):
            workspace = await self.workspace()
            done = await file_text.edit(workspace, path, old_text, new_text, replace_all)
        return FileEdited.of(path, done)

    def _refuse_climbing_out(self, path: str) -> None:
        """A relative path that leads out of the workdir lands where no diff sees it.

        Raises:
            InvalidInput: it does; the message gives the path to use.
        """
        target = file_text.outside_workdir(path, self.workdir)
        if target is not None:
            name = target.rsplit("/", 1)[-1]
            raise InvalidInput(
                f"{path!r} leads out of the workdir {self.workdir} (to {target}): a file there "
                f"is in no diff and may be lost. Write under the workdir (e.g. {name!r}); to "
                f"write outside it on purpose, give the absolute path ({target})"
            )

    async def search(self, pattern: str, path: str = ".", glob: str | None = None) -> SearchMatches:
        """Lines matching a regular expression in the workspace's text files (the first
        `SEARCH_HITS`).

        Raises:
            InvalidInput: an invalid pattern (named with its position) or glob, a path that
                is not a file or directory, or the task has no workspace.
            NotFound: no such path.
            Timeout: the search took longer than 30 s.
            Conflict: the workspace cannot search (an image without python3).
        """
        with self._traced("search", pattern=pattern, path=path, glob=glob):
            try:
                found = await (await self.workspace()).search(
                    pattern, path=path, glob=glob or None, max_hits=SEARCH_HITS
                )
            except NotFound as exc:
                raise NotFound(f"{exc} (relative paths start at {self.workdir})") from exc
        return SearchMatches.model_validate(found, from_attributes=True)

    async def list_files(self, path: str = ".", glob: str = "**/*") -> FileList:
        """Files under a directory of the workspace whose path matches `glob` (the first
        `LISTED_FILES`).

        Raises:
            InvalidInput: a malformed glob, a path that is not a directory, or the task has
                no workspace.
            NotFound: no such directory.
            Timeout: the walk took longer than 30 s.
            Conflict: the workspace cannot list (an image without python3).
        """
        with self._traced("list_files", path=path, glob=glob):
            try:
                found = await (await self.workspace()).glob(
                    glob or "**/*", path=path, max_entries=LISTED_FILES
                )
            except NotFound as exc:
                raise NotFound(f"{exc} (relative paths start at {self.workdir})") from exc
        return FileList.model_validate(found, from_attributes=True)

    async def get_diff(self) -> Diff:
        """The workspace's changes against the base commit.

        Raises:
            InvalidInput: the task has no workspace.
            Conflict: the workdir is not a git repository.
        """
        patch = await (await self.workspace()).diff()
        return Diff(patch=patch, files=_DIFF_FILE.findall(patch))

    async def checkpoint(self) -> Checkpoint:
        """Freezes the workspace's files now.

        Raises:
            InvalidInput: the task has no workspace.
            Conflict: a command is running in it.
        """
        checkpoint_id = await (await self.workspace()).checkpoint()
        return Checkpoint(checkpoint_id=checkpoint_id)

    async def restore(self, checkpoint_id: str) -> Restored:
        """Returns the workspace's files to `checkpoint_id`.

        Raises:
            InvalidInput: the task has no workspace.
            NotFound: no such checkpoint (the message lists the known ones).
            Conflict: a command is running in it.
        """
        await (await self.workspace()).restore(checkpoint_id)
        return Restored(checkpoint_id=checkpoint_id)

    async def report_usage(
        self,
        model: str | None,
        input_tokens: int,
        cached_input_tokens: int,
        output_tokens: int,
        requests: int,
        cost_usd: float | None,
    ) -> UsageReported:
        """Records model calls the agent made (a `model_usage` record of source `reported`).

        Raises:
            InvalidInput: a figure is negative or absurd, or the campaign has a budget and the
                cost is unknown (no `cost_usd`, no price for `model`).
            Conflict: nothing records usage for this trajectory.
        """
        try:
            usage = ModelUsage(
                model=model,
                input_tokens=input_tokens,
                cached_input_tokens=cached_input_tokens,
                output_tokens=output_tokens,
                requests=requests,
                cost_usd=cost_usd,
            )
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in error["loc"]) or "usage"
            raise InvalidInput(f"report_usage: {where}: {error['msg']}") from exc
        meter = self.context.meter
        if meter is None:
            raise Conflict(
                f"trajectory {self.context.trajectory_id} records no usage here; nothing to do"
            )
        priced = await meter(usage, "reported")
        return UsageReported(
            trajectory_id=self.context.trajectory_id,
            cost_usd=priced.cost_usd,
            priced_by=priced.priced_by,
        )

    def _traced(self, name: str, **arguments: Any) -> AbstractContextManager[tracing.SpanLike]:
        """The `execute_tool` span of one call, in the trajectory's trace (when traced)."""
        where = (self.context.campaign_id, self.context.trajectory_id)
        return tracing.tool(name, arguments=arguments, trajectory_of=where)

    def require_workspace(self) -> None:
        """Raises InvalidInput when the task has no workspace (nothing to checkpoint)."""
        if not self.context.sandbox.available:
            raise InvalidInput(
                f"task {self.context.task.id} has no workspace (it names no `image` or `path`): "
                "there is nothing to checkpoint or fork"
            )

    async def prepare_submission(self, answer: str | None) -> tuple[Submission, Submitted]:
        """What handing in now means: the workspace's diff (when it has one) and the answer.

        Raises:
            Conflict: the workdir is not a git repository and no answer was given.
            InvalidInput: nothing to submit (no workspace and no answer).
        """
        patch: str | None = None
        if self.context.sandbox.available:
            try:
                patch = await (await self.workspace()).diff() or None
            except Conflict:
                if answer is None:
                    raise  # not a git repository: only an answer can be handed in
        elif answer is None:
            raise InvalidInput(f"task {self.context.task.id} has no workspace: submit an `answer`")
        submitted = Submitted(
            campaign_id=self.context.campaign_id,
            trajectory_id=self.context.trajectory_id,
            answer=answer,
            patch_bytes=len(patch.encode()) if patch else 0,
            files=_DIFF_FILE.findall(patch or ""),
            warning=_EMPTY_SUBMISSION if patch is None and answer is None else None,
        )
        return Submission(answer=answer, patch=patch), submitted

    async def workspace(self) -> Workspace:
        """The trajectory's workspace.

        Raises:
            InvalidInput: the task names no environment.
        """
        sandbox = self.context.sandbox
        if not sandbox.available:
            raise InvalidInput(
                f"task {self.context.task.id} has no workspace (it names no `image` or `path`): "
                "there is nothing to run or edit; submit an `answer` instead"
            )
        return await sandbox.workspace()
