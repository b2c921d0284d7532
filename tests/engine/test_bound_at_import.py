"""No default binds the process's streams or environment when its module is imported.

`def f(stderr=sys.stderr)` keeps the stream that was `sys.stderr` at import: a test's capture
(since closed), not the one of the caller. A second in-process HTTP server wrote to the first
test's closed capture that way. The default is None, read when called.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "mcp_evalserver"

#: What a process may replace while it runs (a test's capture, `monkeypatch.setattr`).
REPLACEABLE = {
    "sys.stdin",
    "sys.stdout",
    "sys.stderr",
    "sys.argv",
    "sys.path",
    "os.environ",
}


def _defaults(tree: ast.AST) -> Iterator[ast.expr]:
    """Every expression evaluated once, at import, to be a default: of an argument, or of a
    field of a class body (dataclasses, pydantic models, NamedTuples)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from node.args.defaults
            yield from (d for d in node.args.kw_defaults if d is not None)
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and statement.value is not None:
                    yield statement.value


def _evaluated_now(expr: ast.AST) -> Iterator[ast.AST]:
    """`expr` and what evaluating it evaluates: not a lambda's body (`default_factory=lambda:
    os.environ.get(...)` reads when called)."""
    yield expr
    for child in ast.iter_child_nodes(expr):
        if not isinstance(child, ast.Lambda):
            yield from _evaluated_now(child)


def bound_at_import(source: str, filename: str = "<source>") -> list[str]:
    """`line: name` for each default in `source` that names a replaceable stream or mapping."""
    return [
        f"{filename}:{expr.lineno}: {ast.unparse(node)}"
        for expr in _defaults(ast.parse(source, filename))
        for node in _evaluated_now(expr)
        if isinstance(node, ast.Attribute) and ast.unparse(node) in REPLACEABLE
    ]


def test_no_default_in_the_package_binds_a_stream_or_the_environment_at_import() -> None:
    found = [
        line
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in bound_at_import(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    ]
    assert found == [], "default to None and read it when called"


def test_the_check_sees_a_stream_bound_as_an_argument_or_a_field_default() -> None:
    source = """
def f(text, stderr=sys.stderr): ...
async def g(*, environ=os.environ, out=(sys.stdout,)): ...
class Options:
    stream: TextIO = sys.stdin
    network: str = field(default_factory=lambda: os.environ.get("NETWORK"))
def read_when_called(stderr=None):
    stderr = stderr or sys.stderr
"""
    assert bound_at_import(source) == [
        "<source>:2: sys.stderr",
        "<source>:3: os.environ",
        "<source>:3: sys.stdout",
        "<source>:5: sys.stdin",
    ]
