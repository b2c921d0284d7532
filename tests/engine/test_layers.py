"""The folder tree is the architecture: layers only point down and nothing imports in a circle.

Every import counts, those made inside functions included (they are how cycles hide). The layers,
top to bottom, are `LAYERS`; a module's layer is its first package under `mcp_evalserver`.
The package root's `__init__` is the public API (it may name anything, lazily) and `errors`
sits under everything.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "mcp_evalserver"

#: Top to bottom; packages on one row are independent of each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("server", "integrations"),
    ("engine",),
    ("agents", "scoring"),
    ("runtime",),
    ("sandbox",),
    ("spec",),
    ("errors",),
)
RANK = {name: rank for rank, row in enumerate(LAYERS) for name in row}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(node: ast.AST, importer: str, modules: set[str]) -> Iterable[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            package = importer.split(".")[: -node.level]
            base = ".".join([*package, base] if base else package)
        for alias in node.names:
            # `from package import module` names a module; `from module import name`, its module.
            candidate = f"{base}.{alias.name}"
            yield candidate if candidate in modules else base


def import_graph() -> dict[str, set[str]]:
    """Every module of the package and the modules of ours it imports, anywhere in its body."""
    paths = {
        module_name(path): path
        for path in sorted(PACKAGE.rglob("*.py"))
        if "__pycache__" not in path.parts
    }
    modules = set(paths)
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            found.update(m for m in _imported(node, name, modules) if m in modules and m != name)
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def subpackages() -> set[str]:
    return {
        module_name(path.parent) for path in PACKAGE.rglob("__init__.py") if path.parent != PACKAGE
    }


def sibling_package_graph(graph: dict[str, set[str]], packages_: set[str]) -> dict[str, set[str]]:
    """Edges between packages that share a parent: `a.b.x -> a.c.y` is `a.b -> a.c`.

    A cycle here is a cycle between packages even where no two files import each other.
    """
    packages: dict[str, set[str]] = {}
    for source, targets in graph.items():
        for target in targets:
            a, b = source.split("."), target.split(".")
            common = 0
            while common < min(len(a), len(b)) and a[common] == b[common]:
                common += 1
            if common >= min(len(a), len(b)):
                continue  # one contains the other: a package and its own modules
            left, right = ".".join(a[: common + 1]), ".".join(b[: common + 1])
            if left in packages_ and right in packages_:
                packages.setdefault(left, set()).add(right)
    return packages


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_no_two_files_import_each_other_even_through_others() -> None:
    assert cycles(import_graph()) == []


def test_no_two_packages_import_each_other_even_through_others() -> None:
    assert cycles(sibling_package_graph(import_graph(), subpackages())) == []


def test_every_package_and_module_at_the_root_has_a_layer() -> None:
    layers = {layer_of(m) for m in import_graph()} - {None, "py"}
    assert layers - set(RANK) == set(), "give the new package a row in LAYERS"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if (s := layer_of(source)) in RANK
        and (t := layer_of(target)) in RANK
        and s != t
        and RANK[t] <= RANK[s]
    )


def test_imports_only_point_down_a_layer_or_within_one() -> None:
    assert upward_imports(import_graph()) == []


def test_the_checks_see_an_upward_import_a_sideways_one_and_cycles_of_files_and_packages() -> None:
    assert upward_imports({"mcp_evalserver.spec.a": {"mcp_evalserver.engine.b"}}) == [
        "mcp_evalserver.spec.a -> mcp_evalserver.engine.b"
    ]
    assert upward_imports({"mcp_evalserver.agents.a": {"mcp_evalserver.scoring.b"}}) != []
    assert upward_imports({"mcp_evalserver.engine.a": {"mcp_evalserver.spec.b"}}) == []
    assert cycles({"x": {"y"}, "y": {"z"}, "z": {"x"}}) == [["x", "y", "z"]]
    # No two files in a circle, but packages b and c import each other.
    files = {"p.b.x": {"p.c.y"}, "p.c.y": set(), "p.c.z": {"p.b.w"}, "p.b.w": set()}
    assert cycles(files) == []
    assert cycles(sibling_package_graph(files, {"p.b", "p.c"})) == [["p.b", "p.c"]]


def test_nothing_below_the_server_imports_the_mcp_sdk_and_only_the_mcp_app_package_does() -> None:
    users = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            if any(n == "mcp" or n.startswith("mcp.") for n in names):
                users.append(str(path.relative_to(PACKAGE)))
                break
    assert users
    assert all(user.startswith("server/mcp_app/") for user in users), users
