"""Files as a coding agent reads and edits them: numbered line ranges and exact replacements.

What the MCP file tools (`server.trajectory.tools`) and the `openai` agent's function tools
(`agents.workspace_tools`) share, over any `Workspace`: `read_lines` pages a text file by lines
(a binary file is refused, never shown as mojibake), `edit` replaces one exact string (or every
one) and says, when it cannot, how many matched and where, or which line came closest.
"""

from __future__ import annotations

import difflib
import posixpath
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from operator import add as _add

from mcp_evalserver.errors import InvalidInput, LimitExceeded, NotFound
from mcp_evalserver.sandbox.base import Workspace

#: Lines a read shows unless told otherwise.
DEFAULT_LINES = 2000
#: Bytes of lines a read shows unless told otherwise.
DEFAULT_READ_BYTES = 256 << 10
#: The largest file the file tools load (a read shows a range of it; an edit rewrites it).
MAX_FILE_BYTES = 16 << 20
#: A line longer than this is clipped where a model reads it.
MAX_LINE_CHARS = 2000
#: Lines of context shown around an edit: enough to see it landed where meant (the edit itself
#: is the text the caller sent); each line more costs every edit's answer ~40 bytes.
_CONTEXT = 2
#: Lines an edit's answer shows at most.
_REGION_LINES = 40


@dataclass(frozen=True)
class Lines:
    """A range of a text file's lines."""

    text: str  #: the lines as they are in the file (newlines kept)
    first: int  #: the number of the first line shown (1-based)
    count: int  #: how many lines are shown
    total: int  #: how many lines the file has
    size: int  #: the file's size in bytes

    @property
    def next_offset(self) -> int | None:
        """Where the next read starts; None when the file's end was shown."""
        last = self.first + self.count - 1
        return last + 1 if last < self.total else None

    def shown(self, path: str) -> str:
        """What a model reads: the lines numbered as `cat -n` does; a note when the file goes
        on, with the offset to read next."""
        if self.total == 0:
            return f"({path} is empty)"
        text = numbered_text(self.text, self.first)
        if self.next_offset is not None:
            last = self.first + self.count - 1
            text += (
                f"\n[lines {self.first}-{last} of {self.total:,}; next: offset={self.next_offset}]"
            )
        return text


@dataclass(frozen=True)
class Edit:
    """An exact replacement done: where, and the lines around it as they are now."""

    replacements: int
    first_line: int  #: the first line the new text occupies
    last_line: int
    region: str  #: the edited lines with context, numbered
    size: int  #: the file's size after the edit
    created: bool

    def shown(self, path: str) -> str:
        """What a model reads: what was done, and the edited lines as they are now (not the
        path: the call named it, and every edit's answer would repeat it)."""
        done = "created" if self.created else f"edited ({self.replacements} replaced)"
        return f"{done}; lines {self.first_line}-{self.last_line} now:\n{self.region}"


def split_lines(text: str) -> list[str]:
    """The lines of `text`, each with its newline, as `cat -n` counts them: only "\\n" ends a
    line (a CRLF file's "\\r" stays part of it; a form feed is no line end)."""
    lines = text.split("\n")
    last = lines.pop()
    ended = list(map(_add, lines, repeat("\n", len(lines))))  # per line in C: files are long
    return [*ended, last] if last else ended


def line_count(text: str) -> int:
    """How many lines `split_lines(text)` has, without making them."""
    return text.count("\n") + (not text.endswith("\n") and bool(text))


def numbered(lines: list[str], first: int) -> str:
    """`lines` numbered from `first` as `cat -n` does; a line past `MAX_LINE_CHARS` is clipped
    with a note."""
    return numbered_text("".join(lines), first)


def numbered_text(text: str, first: int) -> str:
    """The lines of `text` (`split_lines`'s) numbered from `first`, as `numbered` does."""
    bodies = text.split("\n")
    if not bodies[-1]:
        bodies.pop()  # the last line ended with its newline
    if "\r" in text:  # a CRLF file reads as any other
        bodies = [body.removesuffix("\r") for body in bodies]
    if bodies and max(map(len, bodies)) > MAX_LINE_CHARS:
        bodies = list(map(_clipped, bodies))
    # The numbers (each with the newline before its line) and the lines, interleaved in one
    # list joined once: no string made per line, and the loops run in C (a read has many
    # lines; 4 KB of 64 lines: 14.3 -> 9.8 us, timeit beside the old way).
    parts = [""] * (2 * len(bodies))
    parts[0::2] = _line_starts(first, len(bodies))
    parts[1::2] = bodies
    if parts:
        parts[0] = parts[0][1:]  # the first line has no newline before it
    return "".join(parts)


#: The starts of files' first lines, made once: formatting the numbers is most of a read's work.
_STARTS: list[str] = []
_STARTS_KEPT = 10_000  # ~640 KB at most
_STARTS_GROWING = threading.Lock()


def _line_starts(first: int, n: int) -> list[str] | Iterator[str]:
    """The starts of lines `first..first+n-1` as `cat -n` prints them: a newline, the number
    and a tab."""
    if first + n > _STARTS_KEPT:
        return map("\n{:6d}\t".format, range(first, first + n))
    if len(_STARTS) < first + n:
        with _STARTS_GROWING:  # one grower at a time: each starts where the last ended
            _STARTS.extend(map("\n{:6d}\t".format, range(len(_STARTS), first + n)))
    return _STARTS[first : first + n]


def _clipped(body: str) -> str:
    if len(body) <= MAX_LINE_CHARS:
        return body
    left = len(body) - MAX_LINE_CHARS
    return f"{body[:MAX_LINE_CHARS]}... [line clipped: {left:,} more characters]"


def decode_text(data: bytes, path: str) -> str:
    """The file's text.

    Raises:
        InvalidInput: it is binary (a NUL byte, or not UTF-8): the message gives its size and
            how to look at it instead.
    """
    try:
        if b"\0" not in data[:8192]:
            return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    raise InvalidInput(
        f"{path} is a binary file ({len(data):,} bytes; not UTF-8 text): the file tools show "
        f"text only. Look at it with sandbox_exec, e.g. `file {path}` or `xxd {path} | head`"
    )


async def load(workspace: Workspace, path: str) -> bytes:
    """The whole file, up to `MAX_FILE_BYTES`.

    Raises:
        NotFound, InvalidInput: as `Workspace.read_file`.
        LimitExceeded: it is larger; the message says how to read a part of it.
    """
    try:
        return await workspace.read_file(path, max_bytes=MAX_FILE_BYTES)
    except LimitExceeded as exc:
        raise LimitExceeded(
            f"{path} is larger than {MAX_FILE_BYTES >> 20} MiB, more than the file tools load; "
            f"read a part with sandbox_exec, e.g. `sed -n '1,200p' {path}` ({exc})"
        ) from exc


#: What `numbered` adds to a line: its number and a tab.
NUMBER_CHARS = 7


def read_lines(
    data: bytes, path: str, offset: int, limit: int, max_bytes: int, *, per_line: int = 0
) -> Lines:
    """Lines `offset..offset+limit-1` of the file, stopping before `max_bytes` bytes of them,
    each counted `per_line` bytes longer (at least one line, however long).

    Raises:
        InvalidInput: binary, or `offset` past the end of the file.
    """
    text = decode_text(data, path)
    total = line_count(text)
    if offset > max(total, 1):
        raise InvalidInput(
            f"offset {offset} is past the end of {path} ({total:,} lines): read from "
            f"offset=1, or offset={max(total - 20, 1)} for its last lines"
        )
    if offset == 1 and limit >= total and len(data) + per_line * total <= max_bytes:
        return Lines(text, 1, total, total, len(data))  # the whole file: most reads
    shown: list[str] = []
    used = 0
    for line in split_lines(text)[offset - 1 : offset - 1 + limit]:
        used += len(line.encode()) + per_line
        if shown and used > max_bytes:
            break
        shown.append(line)
    return Lines("".join(shown), offset, len(shown), total, len(data))


def outside_workdir(path: str, workdir: str | None) -> str | None:
    """Where a relative `path` that climbs out of the workdir (`../x`) leads, or None when it
    stays in (absolute paths are taken as meant)."""
    if workdir is None or path.startswith("/"):
        return None
    target = posixpath.normpath(posixpath.join(workdir, path))
    inside = target == workdir or target.startswith(workdir.rstrip("/") + "/")
    return None if inside else target


async def edit(
    workspace: Workspace, path: str, old_text: str, new_text: str, replace_all: bool
) -> Edit:
    """Replaces `old_text` with `new_text` in the file: exactly one occurrence, or every one
    with `replace_all`. An empty `old_text` creates a file that does not exist.

    Raises:
        InvalidInput: no match, several without `replace_all` (the message gives the count and
            their lines, or the closest line), nothing to change, a binary file, or an empty
            `old_text` on a file with content.
        NotFound: no such file (and `old_text` is not empty).
        LimitExceeded: the file is larger than the file tools load.
    """
    if old_text == new_text:
        raise InvalidInput("old_text and new_text are the same: there is nothing to change")
    try:
        text = decode_text(await load(workspace, path), path)
    except NotFound:
        if old_text:
            raise NotFound(
                f"no file {path}: to create it, call edit_file with an empty old_text (or "
                "write_file); to find one, list files with sandbox_exec (`git ls-files`)"
            ) from None
        text = None
    if text is None or not old_text:
        if text:
            raise InvalidInput(
                f"{path} exists ({len(text.encode()):,} bytes): old_text must be the exact text "
                "to replace (an empty one only creates a new file); write_file replaces it whole"
            )
        await workspace.write_file(path, new_text)
        lines = split_lines(new_text)
        region = _region(lines, 1, len(lines))
        return Edit(1, 1, max(len(lines), 1), region, len(new_text.encode()), text is None)
    count = text.count(old_text)
    if count == 0 and "\r\n" in text and "\r" not in old_text:
        # A CRLF file, and text as a model writes it: its lines end as the file's do.
        crlf_old = old_text.replace("\n", "\r\n")
        if crlf_old in text:
            old_text, new_text = crlf_old, new_text.replace("\r\n", "\n").replace("\n", "\r\n")
            count = text.count(old_text)
    if count == 0:
        raise InvalidInput(_no_match(text, old_text, path))
    starts = _match_lines(text, old_text)
    if count > 1 and not replace_all:
        where = ", ".join(str(n) for n in starts[:20]) + (", ..." if count > 20 else "")
        raise InvalidInput(
            f"old_text occurs {count} times in {path} (lines {where}): add the lines around "
            "the one you mean so that it occurs once, or pass replace_all=true"
        )
    edited = text.replace(old_text, new_text)
    await workspace.write_file(path, edited)
    # Where the first and the last replacement lie in the new text.
    shift = new_text.count("\n") - old_text.count("\n")
    first = starts[0]
    last = starts[-1] + shift * (count - 1) + new_text.count("\n")
    if new_text.endswith("\n") and new_text:
        last -= 1
    lines = split_lines(edited)
    last = max(first, min(last, len(lines)))
    return Edit(count, first, last, _region(lines, first, last), len(edited.encode()), False)


def _match_lines(text: str, old_text: str) -> list[int]:
    """The line number where each occurrence of `old_text` starts."""
    found, start, line, counted = [], text.find(old_text), 1, 0
    while start != -1:
        line += text.count("\n", counted, start)
        counted = start
        found.append(line)
        start = text.find(old_text, start + len(old_text))
    return found


def _region(lines: list[str], first: int, last: int) -> str:
    """Lines `first..last` with context, numbered; a long region shows its two ends."""
    start, end = max(1, first - _CONTEXT), min(len(lines), last + _CONTEXT)
    if end - start + 1 <= _REGION_LINES:
        return numbered(lines[start - 1 : end], start)
    half = _REGION_LINES // 2
    head = numbered(lines[start - 1 : start - 1 + half], start)
    tail = numbered(lines[end - half : end], end - half + 1)
    return f"{head}\n   ...\t[{end - start + 1 - 2 * half} lines not shown]\n{tail}"


def _no_match(text: str, old_text: str, path: str) -> str:
    """Why `old_text` is not in `text`, with the line of the file that comes closest."""
    wanted = next((line.strip() for line in old_text.splitlines() if line.strip()), "")
    lines = [line.rstrip("\n") for line in split_lines(text)]
    scores = [
        (difflib.SequenceMatcher(None, wanted, line.strip()).ratio(), number)
        for number, line in enumerate(lines, 1)
        if line.strip()
    ]
    message = f"old_text is not in {path} (0 matches)"
    if scores and wanted:
        score, number = max(scores, key=lambda scored: (scored[0], -scored[1]))  # the first
        if score >= 0.5:
            closest = lines[number - 1][:MAX_LINE_CHARS]
            message += f"; the closest line is {number}: {closest!r}"
    return (
        message + ". old_text must match the file exactly, indentation and line ends included; "
        "read the lines with read_file (offset, limit) and copy them without the line numbers"
    )
