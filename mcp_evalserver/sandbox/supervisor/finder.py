"""Finding files and lines in a directory tree, by ripgrep's conventions: `.git` skipped, binary
files (a NUL in their first 8 KB) and files over `MAX_FILE_BYTES` skipped, symlinks never
followed in the walk (no loops, no way out), a glob without `/` matching a name at any depth.

Stdlib only, Python >= 3.7, and no import of this folder: the supervisor runs it in a forked,
sandboxed child (search.py), and an image that cannot host the supervisor runs this very file
as a script (`python3 -c SOURCE ARGS_JSON`, docker_fallback.py). It does no confinement of its
own: its caller has already entered the trajectory's view as the trajectory.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # never at run time: this file also runs alone
    from collections.abc import Callable, Iterator, Mapping

    from .protocol import GlobResult, Hit, SearchResult

SKIPPED_NAMES = frozenset({".git"})
MAX_FILE_BYTES = 2 << 20  # larger files are skipped: generated data, not source
BINARY_PROBE = 8192  # ripgrep's test: a NUL byte in the first 8 KB makes a file binary
MAX_LINE_CHARS = 240  # a hit's text beyond this is clipped around the match
MAX_PATTERN_CHARS = 4096
MAX_RESULTS = 100_000  # the most `max_hits` / `max_entries` may ask for
TIMEOUT_S = 30  # what a search or listing may take before it is killed (search.py, fallback)


class FindError(Exception):
    """A search or listing refused; `kind` names an error type of the protocol."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# --- globs -----------------------------------------------------------------------------------
def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regular expression over a `/`-separated relative path: `**` spans
    directories, `*` and `?` stay within one name, `[...]` and `{a,b}` as in shells. Without
    `/` it matches a name at any depth (`*.py`), as in ripgrep and .gitignore.

    Raises:
        FindError: the glob is empty or malformed.
    """
    glob = pattern.strip()
    while glob.startswith("./"):
        glob = glob[2:]
    glob = glob.lstrip("/")
    if not glob:
        raise FindError("InvalidInput", "the glob is empty: give one such as `**/*.py`")
    if "/" not in glob and not glob.startswith("**"):
        glob = "**/" + glob
    try:
        return re.compile("(?s:" + _translate(glob, in_braces=False) + r")\Z")
    except re.error as e:
        raise FindError("InvalidInput", f"malformed glob {pattern!r}: {e}") from None


def _translate(glob: str, in_braces: bool) -> str:
    out, i, n = [], 0, len(glob)
    while i < n:
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "^", "]") else i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = glob[i + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end + 1
                continue
        elif c == "{" and not in_braces and "}" in glob[i:]:
            end = glob.index("}", i)
            choices = glob[i + 1 : end].split(",")
            out.append("(?:" + "|".join(_translate(x, in_braces=True) for x in choices) + ")")
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


# --- the walk --------------------------------------------------------------------------------
def walk(top: str) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """(path relative to `top`, entry) of everything under `top` that is not a directory, in
    path order (depth first, names sorted). Directory symlinks are entries, never descended
    into; `.git` and what cannot be read are left out."""
    stack = [("", iter(_sorted(top)))]
    while stack:
        prefix, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        if entry.name in SKIPPED_NAMES:
            continue
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if is_dir:
            stack.append((prefix + entry.name + "/", iter(_sorted(entry.path))))
        else:
            yield prefix + entry.name, entry


def _sorted(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:  # unreadable, vanished, a path too long: not ours to report
        return []


def _shown(path: str) -> str:
    """`path` (absolute, normalised) relative to the workdir (our cwd) when under it; names
    that are not UTF-8 are shown with U+FFFD, as the JSON they travel in requires."""
    cwd = os.getcwd()
    if path == cwd:
        path = "."
    elif path.startswith(cwd.rstrip("/") + "/"):
        path = path[len(cwd.rstrip("/")) + 1 :]
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _top(path: str) -> tuple[str, os.stat_result]:
    """`path` (absolute or relative to the workdir), normalised, and its stat (followed: the
    caller named it, and it resolves inside the view)."""
    top = os.path.normpath(os.path.join(os.getcwd(), path or "."))
    try:
        return top, os.stat(top)
    except FileNotFoundError:
        raise FindError("NotFound", f"{path}: no such file or directory") from None
    except OSError as e:
        raise FindError("InvalidInput", f"{path}: {e.strerror}") from None


def _bounded(value: int, name: str) -> int:
    if not 1 <= value <= MAX_RESULTS:
        raise FindError("InvalidInput", f"{name} must be 1..{MAX_RESULTS}, got {value}")
    return value


# --- operations ------------------------------------------------------------------------------
def glob(path: str = ".", pattern: str = "**/*", max_entries: int = 1000) -> GlobResult:
    """Names of what is under directory `path` (not directories) whose path relative to it
    matches `pattern`, sorted; the first `max_entries`, and how many there are.

    Raises:
        FindError: `path` is missing or not a directory, or the glob is malformed.
    """
    _bounded(max_entries, "max_entries")
    matcher = glob_regex(pattern)
    top, st = _top(path)
    if not stat.S_ISDIR(st.st_mode):
        raise FindError("InvalidInput", f"{path} is not a directory: list_files lists directories")
    paths: list[str] = []
    total = 0
    for relative, _ in walk(top):
        if matcher.match(relative):
            total += 1
            if len(paths) < max_entries:
                paths.append(_shown(os.path.join(top, relative)))
    return {"paths": paths, "total": total, "truncated": total > len(paths)}


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A Python regular expression, or an error that names what is wrong and where.

    Raises:
        FindError: not a valid pattern (or longer than MAX_PATTERN_CHARS).
    """
    if not pattern:
        raise FindError("InvalidInput", "the pattern is empty: give a regular expression")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise FindError("InvalidInput", f"the pattern is over {MAX_PATTERN_CHARS} characters")
    try:
        return re.compile(pattern)
    except re.error as e:
        where = "" if e.pos is None else f" at position {e.pos}"
        raise FindError(
            "InvalidInput",
            f"invalid regular expression {pattern!r}: {e.msg}{where} (Python `re` syntax; "
            "escape literal characters such as ( [ . * with a backslash)",
        ) from None
    except (OverflowError, RecursionError, ValueError) as e:
        raise FindError("InvalidInput", f"regular expression {pattern!r}: {e}") from None


def required_literal(pattern: str) -> str | None:
    """The longest run of plain characters every match of `pattern` contains (a run of
    top-level literals), so that files and lines without it are passed over at C speed; None
    when there is none to rely on (alternations, case-insensitive patterns, a parser that
    changed: this reads `re`'s private parser, so anything unexpected means none)."""
    try:
        try:
            from re import _parser as parser  # type: ignore[attr-defined]  # Python >= 3.11
        except ImportError:  # Python < 3.11
            import sre_parse as parser
        parsed = parser.parse(pattern)
        if parsed.state.flags & (re.IGNORECASE | re.VERBOSE):
            return None
        runs, run = [], []
        for op, value in parsed:
            if getattr(op, "name", "") == "LITERAL":
                run.append(chr(value))
            else:
                runs.append("".join(run))
                run = []
        runs.append("".join(run))
        best = max(runs, key=len)
    except Exception:  # a parser of another shape: search without the shortcut
        return None
    # A newline is in no line; U+FFFD may stand for bytes that were not UTF-8.
    return best if best and not {"\n", "\ufffd"} & set(best) else None


def search(
    path: str = ".", pattern: str = "", glob: str | None = None, max_hits: int = 200
) -> SearchResult:
    """Lines matching `pattern` in the text files under `path` (or in file `path`), in walk
    order: the first `max_hits`, and how many there are. `glob` filters paths relative to
    `path`.

    Raises:
        FindError: an invalid pattern or glob, or `path` missing.
    """
    _bounded(max_hits, "max_hits")
    line_rx = compile_pattern(pattern)
    # Files and lines without the pattern's required literal are passed over by a substring
    # test; without one, a whole file is tried at once first (one C call, not one per line),
    # unless the pattern's meaning depends on what surrounds a line.
    literal = required_literal(pattern)
    needle = literal.encode() if literal else None
    whole_rx = None
    if literal is None and not re.search(r"\\[AZ]|\(\?<[=!]", pattern):
        whole_rx = re.compile(pattern, re.MULTILINE)
    matcher = glob_regex(glob) if glob else None
    top, st = _top(path)
    files: Iterator[str]
    if stat.S_ISDIR(st.st_mode):
        files = (
            os.path.join(top, relative)
            for relative, entry in walk(top)
            if (matcher is None or matcher.match(relative)) and _is_file(entry)
        )
    elif stat.S_ISREG(st.st_mode):
        files = iter([top])
    else:  # never opened: a FIFO would block, a device never end
        raise FindError(
            "InvalidInput", f"{path} is not a regular file or a directory: not searched"
        )
    hits: list[Hit] = []
    total = 0
    for name in files:
        data = _read(name)
        if data is None or (needle is not None and needle not in data):
            continue
        text = data.decode("utf-8", "replace")
        if literal is not None:
            matching = _lines_with(text, literal, line_rx)
        elif whole_rx is None or whole_rx.search(text) is not None:
            matching = _lines_matching(text, line_rx)
        else:
            continue
        shown = None
        for number, line, start in matching:
            total += 1
            if len(hits) < max_hits:
                shown = shown or _shown(name)
                hits.append({"path": shown, "line": number, "text": _clip(line, start)})
    return {"hits": hits, "total": total, "truncated": total > len(hits)}


def _lines_matching(text: str, line_rx: re.Pattern[str]) -> Iterator[tuple[int, str, int]]:
    """(number, line, where the match starts) of each line of `text` that matches."""
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()  # no line after the last newline
    for number, line in enumerate(lines, start=1):
        found = line_rx.search(line)
        if found is not None:
            yield number, line, found.start()


def _lines_with(
    text: str, literal: str, line_rx: re.Pattern[str]
) -> Iterator[tuple[int, str, int]]:
    """`_lines_matching`, trying only the lines that hold `literal` (found by `str.find`, and
    numbered by counting newlines, both in C): most lines are never looked at in Python."""
    position, number, counted = 0, 1, 0
    while True:
        at = text.find(literal, position)
        if at < 0:
            return
        begin = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        number += text.count("\n", counted, begin)
        counted = begin
        line = text[begin:end]
        found = line_rx.search(line)
        if found is not None:
            yield number, line, found.start()
        position = end + 1


def _is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _read(path: str) -> bytes | None:
    """A regular, small, non-binary file's bytes; None for anything else. Opened without
    following a symlink and without blocking: a FIFO or a device swapped in after the walk saw
    a file is refused by fstat, never read."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            return None
        data = os.read(fd, BINARY_PROBE)
        if b"\0" in data:
            return None
        chunks = [data]
        size = len(data)
        while data and size <= MAX_FILE_BYTES:
            data = os.read(fd, 1 << 16)
            chunks.append(data)
            size += len(data)
        if size > MAX_FILE_BYTES:  # it grew after fstat
            return None
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks)


def _clip(line: str, start: int) -> str:
    line = line.rstrip("\r\n")
    if len(line) <= MAX_LINE_CHARS:
        return line
    begin = max(0, min(start - 40, len(line) - MAX_LINE_CHARS))
    end = begin + MAX_LINE_CHARS
    return ("…" if begin else "") + line[begin:end] + ("…" if end < len(line) else "")


# --- as a script (docker_fallback.py) ---------------------------------------------------------
def main(argv: list[str]) -> int:
    """`finder.py ARGS_JSON`: {"op": "search"|"glob", "alarm": seconds, ...the op's keyword
    arguments}; prints {"result": ...} or {"error": message, "kind": type}. The alarm's default
    action ends the process even inside a regular expression that never returns."""
    args = json.loads(argv[1])
    signal.alarm(int(args.pop("alarm", 0)))
    ops: dict[str, Callable[..., Mapping[str, Any]]] = {"search": search, "glob": glob}
    op = ops[args.pop("op")]
    try:
        answer: dict[str, Any] = {"result": op(**args)}
    except FindError as e:
        answer = {"error": str(e), "kind": e.kind}
    except MemoryError:
        answer = {"error": "out of memory: simplify the pattern", "kind": "LimitExceeded"}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
