"""Doctest ids, and the examples a doctest id stands for, read without running any code.

pytest names a doctest of a module `pkg/mod.py::pkg.mod.func` (`--doctest-modules`: the
module's path, then the dotted name doctest's finder gives the object) and a doctest text file
`docs/usage.rst::usage.rst` (`--doctest-glob`). Such a test lives in the file the fix changes,
so strict mode cannot put that file back as the base commit has it (`strict`): it gives the
test its examples instead, read here from a version of the file nobody under evaluation wrote.

Examples are found by reading the source (`ast`), never by importing it: a docstring written
as a literal string of a module, class, function, method or property, at the module's or a
class's top level or inside its `if`/`try` blocks. A docstring built at run time (`__doc__`
assigned, a decorator that writes it, a `__test__` dict) is not found.
"""

from __future__ import annotations

import ast
import re
from typing import Literal

DoctestKind = Literal["module", "textfile"]


def doctest_kind(test_id: str) -> DoctestKind | None:
    """Whether a pytest id names a doctest of a module (`path.py::dotted.name`), a doctest text
    file (`path.rst::name.rst`), or neither (None: a test function or method, or not a pytest
    id)."""
    path, separator, node = test_id.partition("::")
    if not separator or not path:
        return None
    if not path.endswith(".py"):
        return "textfile"
    # A test function's name has no dot (a parameter may: `test_p[1.5]`); a method's id has
    # a second `::`.
    if "." in node.split("[", 1)[0] and "::" not in node:
        return "module"
    return None


def doctest_examples_text(source: str, test_id: str) -> str | None:
    """The text whose examples the doctest `test_id` runs, read from `source` (the text of
    the file the id names): the whole text for a text file, the docstring for a module's
    object. None when the source has no such docstring or cannot be parsed."""
    kind = doctest_kind(test_id)
    if kind == "textfile":
        return source
    if kind is None:
        return None
    path, _, name = test_id.partition("::")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    docstrings = _docstrings(tree)
    for prefix in _module_names(path):
        if name == prefix:
            return docstrings.get("")
        if name.startswith(f"{prefix}."):
            found = docstrings.get(name.removeprefix(f"{prefix}."))
            if found is not None:
                return found
    return None


def _module_names(path: str) -> list[str]:
    """The names a module at `path` may be imported under, longest first: `src/pkg/mod.py`
    is `src.pkg.mod`, `pkg.mod` or `mod` depending on the project's layout."""
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return [".".join(parts[start:]) for start in range(len(parts))]


def _docstrings(tree: ast.Module) -> dict[str, str]:
    """Docstrings by qualified name ("" for the module's own)."""
    found: dict[str, str] = {}
    module_doc = ast.get_docstring(tree, clean=False)
    if module_doc is not None:
        found[""] = module_doc
    _collect(tree.body, "", found)
    return found


def _collect(body: list[ast.stmt], prefix: str, found: dict[str, str]) -> None:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{node.name}"
            doc = ast.get_docstring(node, clean=False)
            # A later definition wins, but one without a docstring (a property's setter)
            # keeps the doc the object had.
            if doc is not None:
                found[name] = doc
            if isinstance(node, ast.ClassDef):
                _collect(node.body, f"{name}.", found)
        elif isinstance(node, ast.If):
            _collect(node.body, prefix, found)
            _collect(node.orelse, prefix, found)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                _collect(block, prefix, found)
            for handler in node.handlers:
                _collect(handler.body, prefix, found)


def reference_source(
    base: str | None, path: str, *, gold: str | None, test_patch: str | None
) -> tuple[str | None, str]:
    """The text of the file at `path` as the task's authors meant its doctests, and where it
    came from: after the task's `test_patch` when that touches the file (the eval applies it
    over the submission's), else after the gold patch when that touches it (a fix may change
    or add a doctest), else as the base commit has it (`base`, None: no such file).

    Computed here, never in a workspace: the gold patch must not be where the code under test
    could read it. A patch whose hunks do not match the base exactly leaves the base's text
    (the origin says so).
    """
    for patch, origin in ((test_patch, "the test_patch"), (gold, "the gold patch")):
        if not patch:
            continue
        try:
            hunks = _file_hunks(patch, path)
            if hunks is None:
                continue
            return _apply_hunks(base, hunks), origin
        except ValueError as error:
            return base, f"the base commit ({origin} does not apply to it: {error})"
    return base, "the base commit"


_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,(\d+))? @@")
#: A hunk: where it starts in the old file, how many old lines it covers, its (tag, line)s.
_Hunk = tuple[int, int, list[tuple[str, str]]]


def _lines(text: str) -> list[str]:
    """Lines as diff counts them: split at newlines only, each keeping its newline."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def _file_hunks(patch: str, path: str) -> list[_Hunk] | None:
    """The hunks a git-style patch has for `path` (None: no `diff --git` of it).

    Raises:
        ValueError: a hunk is cut short.
    """
    lines = _lines(patch)
    found: list[_Hunk] | None = None
    current: list[_Hunk] | None = None  # the hunks of the file being read, if it is `path`
    number = 0
    while number < len(lines):
        line = lines[number]
        number += 1
        if line.startswith("diff --git "):
            current = [] if line.rstrip("\n") == f"diff --git a/{path} b/{path}" else None
            found = current if current is not None else found
            continue
        header = _HUNK_HEADER.match(line) if current is not None else None
        if current is None or header is None:
            continue
        old_start, old_left = int(header[1]), int(header[2] or 1)
        old_count, new_left = old_left, int(header[3] or 1)
        body: list[tuple[str, str]] = []
        while number < len(lines) and (old_left or new_left or lines[number][:1] == "\\"):
            line = lines[number]
            number += 1
            if line[:1] == "\\":  # "\ No newline at end of file": the line before has none
                body[-1] = (body[-1][0], body[-1][1].removesuffix("\n"))
                continue
            tag, text = (" ", line) if line == "\n" else (line[:1], line[1:])
            if tag not in (" ", "-", "+"):
                break
            body.append((tag, text))
            old_left -= tag != "+"
            new_left -= tag != "-"
        if old_left or new_left:
            raise ValueError(f"a hunk of {path} at line {old_start} is cut short")
        current.append((old_start, old_count, body))
    return found


def _apply_hunks(base: str | None, hunks: list[_Hunk]) -> str:
    """`base` with `hunks` applied where they say, every old line as they say.

    Raises:
        ValueError: a line differs from the hunk's (the patch was made on another text).
    """
    lines = _lines(base or "")
    out: list[str] = []
    position = 0
    for old_start, old_count, body in hunks:
        start = old_start - 1 if old_count else old_start
        if not position <= start <= len(lines):
            raise ValueError(f"a hunk at line {old_start} is out of order or past the end")
        out += lines[position:start]
        position = start
        for tag, text in body:
            if tag != "+":
                if position >= len(lines) or lines[position] != text:
                    raise ValueError(f"line {position + 1} is not the hunk's")
                position += 1
            if tag != "-":
                out.append(text)
    out += lines[position:]
    return "".join(out)
