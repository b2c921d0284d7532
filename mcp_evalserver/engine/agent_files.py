"""The agent's box after it is done, for scorers that grade more than its submission.

A scorer says what it needs (`Scorer.agent_state`): the agent's files (every change anywhere:
an exported checkpoint of its workspace, kept as an artifact named by the `generated` record,
so a resume or a retried evaluation still has them), or also its workspace itself, kept alive
from generation to scoring in this run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_evalserver.engine.ledger import LedgerWriter
from mcp_evalserver.errors import EvalServerError
from mcp_evalserver.runtime.artifacts import read_artifact
from mcp_evalserver.runtime.sandboxes import TrajectorySandbox

#: The most an agent's files may weigh to be kept (an archive of what changed, not the image).
MAX_FILES_BYTES = 256 << 20


@dataclass(frozen=True)
class AgentFiles:
    """An exported checkpoint of the agent's workspace, or why there is none."""

    archive: bytes | None = None
    missing: str | None = None

    async def stored(self, ledger: LedgerWriter) -> dict[str, Any]:
        """The fields of the `generated` record's submission that keep these files: the
        archive as an artifact (written first, so the record never dangles), or why none."""
        if self.archive is not None:
            return {"files": (await ledger.put_artifact(self.archive, ".tar")).as_json()}
        return {} if self.missing is None else {"files_missing": self.missing}

    @classmethod
    def load(cls, directory: Path, submission: dict[str, Any]) -> AgentFiles:
        """The files a `generated` record's submission names (a resume, a retried
        evaluation); blocking: run it in a thread.

        Raises:
            NotFound, LedgerCorrupt: the artifact is missing or does not match its hash.
        """
        ref = submission.get("files")
        if ref:
            return cls(read_artifact(directory, ref))
        return cls(missing=submission.get("files_missing") or "its generation kept no files")


async def export_agent_files(sandbox: TrajectorySandbox) -> AgentFiles:
    """The agent's whole filesystem change, checkpointed and exported as it stands now."""
    workspace = sandbox.made
    if workspace is None:
        return AgentFiles(missing="the agent used no workspace")
    try:
        checkpoint = await workspace.checkpoint()
        return AgentFiles(await workspace.export_checkpoint(checkpoint, max_bytes=MAX_FILES_BYTES))
    except EvalServerError as exc:
        return AgentFiles(missing=f"its files could not be exported: {exc}"[:2000])


@dataclass
class KeptBoxes:
    """Per trajectory of a run: the agent's files not yet scored, and the agent's workspaces
    kept for scoring in them."""

    files: dict[str, AgentFiles] = field(default_factory=dict)
    sandboxes: dict[str, TrajectorySandbox] = field(default_factory=dict)

    async def discard(self, trajectory_id: str) -> None:
        """Closes the trajectory's kept workspace, if any (its scoring is over or never
        comes)."""
        self.files.pop(trajectory_id, None)
        sandbox = self.sandboxes.pop(trajectory_id, None)
        if sandbox is not None:
            await sandbox.aclose()
