"""OpenCode's sessions as JSON lines, run inside the workspace after the CLI (stdlib only,
Python 3.8+).

`python3 opencode_sessions.py LAUNCHER` prints, for each session `opencode session list` lists
in the current directory (oldest first), a line `{"session": <its info>}`, then one line per
message (`{"info": ..., "parts": [...]}`): what `opencode export <id>` prints for it.

Each of those two commands is a start of OpenCode (seconds apiece, once per trajectory after
its last model call), so the sessions are read straight from OpenCode's SQLite database and
built as version 1.18.33 builds them: a session from its row (`Session.get`), a message from
its `data` with its id and session, a part likewise with its message too, JSON numbers as
JavaScript writes them. That layout is the pinned version's: a session written by another
version, a database elsewhere (`$OPENCODE_DB`), none at all, no `sqlite3` module or anything
else unexpected, and the sessions come from `LAUNCHER session list` and `LAUNCHER export`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # Python 3.8 in the workspace: no subscripted builtins at run time
    #: A session's info and its messages.
    Session = tuple[dict[str, Any], list[dict[str, Any]]]

#: The versions whose database this script reads as that version's `export` would print it.
KNOWN_VERSIONS = ("1.18.33",)
#: How many sessions `session list` lists at most.
LIST_LIMIT = 100
_ABSENT = object()


class Unknown(Exception):
    """The store is not one this script knows how to read: ask OpenCode instead."""


def database_path() -> str:
    """Where OpenCode keeps its database: `$XDG_DATA_HOME/opencode/opencode.db`."""
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(data, "opencode", "opencode.db")


def _number(value: Any) -> int | float:
    """A number as `JSON.parse(JSON.stringify(n))` gives it back: 2.0 is written 2."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise Unknown(f"a number column holds {value!r}")


def _json(text: str | None) -> Any:
    """A JSON column as drizzle reads it: NULL is null, else the parsed text."""
    return None if text is None else json.loads(text)


def _truthy(value: Any) -> bool:
    """JavaScript's truthiness: objects and arrays are true even when empty."""
    return isinstance(value, (dict, list)) or bool(value)


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    """`key: value ?? undefined`: JSON.stringify leaves undefined (here: null, absent) out."""
    if value is not None and value is not _ABSENT:
        target[key] = value


def _picked(source: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """`{k: source.k, ...}`: a key the source lacks is left out; a null is kept."""
    if not isinstance(source, dict):
        raise Unknown(f"expected an object, found {source!r}")
    return {key: source[key] for key in keys if key in source}


def session_info(row: Any) -> dict[str, Any]:
    """What `Session.get` makes of a `session` row, key for key, in its order."""
    info = {"id": row["id"], "slug": row["slug"], "projectID": row["project_id"]}
    _put(info, "workspaceID", row["workspace_id"])
    info["directory"] = row["directory"]
    _put(info, "path", row["path"])
    _put(info, "parentID", row["parent_id"])
    info["title"] = row["title"]
    _put(info, "agent", row["agent"])
    model = _json(row["model"])
    if _truthy(model):
        info["model"] = _picked(model, ("id", "providerID", "variant"))
    info["version"] = row["version"]
    counts = ("summary_additions", "summary_deletions", "summary_files")
    if any(row[name] is not None for name in counts):
        summary = {
            "additions": _number(row["summary_additions"] or 0),
            "deletions": _number(row["summary_deletions"] or 0),
            "files": _number(row["summary_files"] or 0),
        }
        _put(summary, "diffs", _json(row["summary_diffs"]))
        info["summary"] = summary
    info["cost"] = _number(row["cost"])
    info["tokens"] = {
        "input": _number(row["tokens_input"]),
        "output": _number(row["tokens_output"]),
        "reasoning": _number(row["tokens_reasoning"]),
        "cache": {
            "read": _number(row["tokens_cache_read"]),
            "write": _number(row["tokens_cache_write"]),
        },
    }
    if _truthy(row["share_url"]):
        info["share"] = {"url": row["share_url"]}
    _put(info, "metadata", _json(row["metadata"]))
    revert = _json(row["revert"])
    if _truthy(revert):
        kept = _picked(revert, ("messageID", "partID", "snapshot", "diff"))
        if not _truthy(kept.get("partID")):
            kept.pop("partID", None)
        info["revert"] = kept
    permission = _json(row["permission"])
    if _truthy(permission):
        if not isinstance(permission, list):
            raise Unknown(f"a session's permission is {permission!r}")
        info["permission"] = permission
    info["time"] = {
        "created": _number(row["time_created"]),
        "updated": _number(row["time_updated"]),
    }
    for name in ("compacting", "archived"):
        value = row["time_" + name]
        if value is not None:
            info["time"][name] = _number(value)
    return info


def _with_ids(data: str, **ids: str) -> dict[str, Any]:
    """`{...data, id, sessionID[, messageID]}`: an id the data holds keeps its place."""
    found = json.loads(data)
    if not isinstance(found, dict):
        raise Unknown(f"a row's data is {found!r}")
    found.update(ids)
    return found


def _contains(worktree: str, directory: str) -> bool:
    return directory == worktree or directory.startswith(worktree.rstrip("/") + "/")


def from_store(path: str, directory: str) -> list[Session]:
    """[(session info, messages)] as `session list` and `export` would give them.

    Raises:
        Unknown: the store is not the pinned version's, or not there.
    """
    if os.environ.get("OPENCODE_DB") or not os.path.isfile(path):
        raise Unknown(f"no database at {path}")
    try:
        import sqlite3
    except ImportError:
        raise Unknown("no sqlite3 module") from None
    try:
        # Read-only: the CLI has ended; its write-ahead log is read as it stands.
        connection = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise Unknown(str(exc)) from None
    try:
        connection.row_factory = sqlite3.Row
        # The project of this directory: the deepest project worktree holding it (a git
        # repository's top, else the "global" project at /), as OpenCode resolves it.
        projects = [
            row
            for row in connection.execute("SELECT id, worktree FROM project")
            if _contains(row["worktree"], directory)
        ]
        if not projects:
            raise Unknown(f"no project holds {directory}")
        project = max(projects, key=lambda row: len(row["worktree"]))["id"]
        rows = connection.execute(
            "SELECT * FROM session WHERE project_id = ? AND parent_id IS NULL "
            "ORDER BY time_updated DESC LIMIT ?",
            (project, LIST_LIMIT),
        ).fetchall()
        if any(row["version"] not in KNOWN_VERSIONS for row in rows):
            raise Unknown("a session of another version")
        found = []
        for row in sorted(rows, key=lambda row: row["time_created"]):
            messages = connection.execute(
                "SELECT id, session_id, data FROM message WHERE session_id = ? "
                "ORDER BY time_created, id",
                (row["id"],),
            ).fetchall()
            parts: dict[str, list[dict[str, Any]]] = {}
            for part in connection.execute(
                "SELECT id, message_id, session_id, data FROM part WHERE message_id IN "
                "(SELECT id FROM message WHERE session_id = ?) ORDER BY message_id, id",
                (row["id"],),
            ):
                parts.setdefault(part["message_id"], []).append(
                    _with_ids(
                        part["data"],
                        id=part["id"],
                        sessionID=part["session_id"],
                        messageID=part["message_id"],
                    )
                )
            found.append(
                (
                    session_info(row),
                    [
                        {
                            "info": _with_ids(m["data"], id=m["id"], sessionID=m["session_id"]),
                            "parts": parts.get(m["id"], []),
                        }
                        for m in messages
                    ],
                )
            )
        return found
    except (sqlite3.Error, ValueError, KeyError, TypeError, IndexError) as exc:
        raise Unknown(str(exc)) from None
    finally:
        connection.close()


def from_cli(launcher: str) -> list[Session]:
    """[(session info, messages)] as OpenCode's own `session list` and `export` print them."""

    def cli(*words: str) -> str:
        return subprocess.run(
            [launcher, *words],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        ).stdout

    listed = json.loads(cli("session", "list", "--format", "json") or "[]")
    found = []
    for session in sorted(listed, key=lambda s: s.get("created", 0)):
        exported = json.loads(cli("export", session["id"]))
        found.append((exported.get("info"), exported.get("messages", [])))
    return found


def main(launcher: str) -> None:
    try:
        sessions = from_store(database_path(), os.getcwd())
    except Unknown:
        sessions = from_cli(launcher)
    for info, messages in sessions:
        print(json.dumps({"session": info}))
        for message in messages:
            print(json.dumps(message))


if __name__ == "__main__":
    main(sys.argv[1])
