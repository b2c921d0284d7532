"""`Workspace.search` and `Workspace.glob` on every backend: ripgrep's conventions, caps that
count what they leave out, and errors that say what is wrong.

Each test runs against each param of the `backend` fixture (see conftest.py); the attacks a
cheating agent would aim at these tools are in test_file_tool_attacks.py.
"""

from __future__ import annotations

import re

import anyio
import pytest

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import Instance, SearchHit

pytestmark = pytest.mark.anyio

# Beside the base repository (a.txt, blob.bin, pkg/mod.py): text at depth, a file git ignores
# nothing about but ripgrep skips (.git), a binary with the word in it, a long line.
MORE_FILES = (
    "mkdir -p pkg/sub manual && printf 'def hello():\\n    return 1\\n' > pkg/sub/deep.py && "
    "printf 'say hello\\nHELLO\\n' > manual/notes.md && echo hello >> .git/description && "
    "printf 'hello\\000binary' > manual/blob.dat && "
    "python3 -c \"open('long.txt','w').write('x' * 5000 + 'hello' + 'y' * 5000 + '\\n')\""
)


async def test_search_finds_matching_lines_by_path_and_number_and_skips_git_and_binaries(
    instance: Instance,
) -> None:
    with anyio.fail_after(30):
        async with await instance.workspace("search-basic") as ws:
            assert (await ws.exec(MORE_FILES)).exit_code == 0
            found = await ws.search("hello")
            in_manual = await ws.search(r"^(say )?hello$", path="manual")
            one_file = await ws.search("HELLO|return", path="manual/notes.md")
            only_py = await ws.search("hello|x = 1", glob="*.py")
            at_depth = await ws.search("hello", glob="pkg/**/*.py")
            absolute = await ws.search("def", path=f"{instance.spec.workdir}/pkg")
    paths = [(hit.path, hit.line) for hit in found.hits]
    assert paths == [("a.txt", 1), ("long.txt", 1), ("manual/notes.md", 1), ("pkg/sub/deep.py", 1)]
    assert (found.total, found.truncated) == (4, False)
    long_hit = found.hits[1].text
    assert "hello" in long_hit
    assert len(long_hit) <= 242
    assert long_hit.startswith("…")
    assert in_manual.hits == [SearchHit(path="manual/notes.md", line=1, text="say hello")]
    assert [(h.line, h.text) for h in one_file.hits] == [(2, "HELLO")]
    assert [h.path for h in only_py.hits] == ["pkg/mod.py", "pkg/sub/deep.py"]
    assert [h.path for h in at_depth.hits] == ["pkg/sub/deep.py"]
    assert [(h.path, h.text) for h in absolute.hits] == [("pkg/sub/deep.py", "def hello():")]


async def test_search_keeps_the_first_hits_and_counts_every_one(instance: Instance) -> None:
    with anyio.fail_after(30):
        async with await instance.workspace("search-cap") as ws:
            await ws.write_file("many.txt", "".join(f"match {n}\n" for n in range(500)))
            capped = await ws.search("^match", max_hits=7)
            with pytest.raises(errors.InvalidInput, match="max_hits"):
                await ws.search("match", max_hits=0)
    assert [h.line for h in capped.hits] == list(range(1, 8))
    assert (capped.total, capped.truncated) == (500, True)


async def test_an_invalid_pattern_names_the_error_and_its_position(instance: Instance) -> None:
    with anyio.fail_after(30):
        async with await instance.workspace("search-invalid") as ws:
            with pytest.raises(errors.InvalidInput) as bad:
                await ws.search("def (foo")
            with pytest.raises(errors.NotFound, match="nowhere"):
                await ws.search("x", path="nowhere")
            unfiltered = await ws.search("hello", glob="")  # what a model sends for "none"
    assert "missing ), unterminated subpattern at position 4" in str(bad.value)
    assert [h.path for h in unfiltered.hits] == ["a.txt"]


async def test_glob_lists_names_sorted_at_any_depth_without_git_and_counts_past_its_cap(
    instance: Instance,
) -> None:
    with anyio.fail_after(30):
        async with await instance.workspace("glob-basic") as ws:
            assert (await ws.exec(MORE_FILES)).exit_code == 0
            everything = await ws.glob()
            python = await ws.glob("*.py")
            by_extension = await ws.glob("*.{txt,bin}", path=".")
            under = await ws.glob("**/*.py", path="pkg")
            braced = await ws.glob("manual/*.{md,dat}")
            capped = await ws.glob(max_entries=2)
            outside = await ws.glob("os.py", path="/usr/lib")
            with pytest.raises(errors.InvalidInput, match="not a directory"):
                await ws.glob(path="a.txt")
            with pytest.raises(errors.NotFound):
                await ws.glob(path="nowhere")
    assert everything.paths == [
        "a.txt", "blob.bin", "long.txt", "manual/blob.dat", "manual/notes.md", "pkg/mod.py",
        "pkg/sub/deep.py",
    ]  # fmt: skip
    assert python.paths == ["pkg/mod.py", "pkg/sub/deep.py"]
    assert by_extension.paths == ["a.txt", "blob.bin", "long.txt"]
    assert under.paths == ["pkg/mod.py", "pkg/sub/deep.py"]
    assert braced.paths == ["manual/blob.dat", "manual/notes.md"]
    assert (capped.paths, capped.total, capped.truncated) == (["a.txt", "blob.bin"], 7, True)
    assert outside.paths
    assert all(p.startswith("/usr/lib/") for p in outside.paths)
    assert all(p.endswith("/os.py") for p in outside.paths)


async def test_search_and_glob_see_the_workspace_not_the_instance_or_another_workspace(
    instance: Instance,
) -> None:
    with anyio.fail_after(30):
        async with (
            await instance.workspace("glob-mine") as mine,
            await instance.workspace("glob-theirs") as theirs,
        ):
            await mine.write_file("only-mine.txt", "private words\n")
            await mine.exec("rm a.txt")
            mine_sees = await mine.glob("*.txt")
            theirs_sees = await theirs.glob("*.txt")
            theirs_finds = await theirs.search("private words")
    assert mine_sees.paths == ["only-mine.txt"]
    assert theirs_sees.paths == ["a.txt"]
    assert theirs_finds.total == 0


# Lines and patterns of every shape the search's shortcuts treat apart: required literals,
# alternations, case-insensitive and verbose flags, anchors, lookbehinds, escapes, non-ASCII.
LINES = [
    "class ValueError(Exception):", "CLASS Shout", "  return a - b", "x.y = 1", "xzy = 2",
    "def f(): pass", "café au lait", "tab\there", "end", "", "foo(bar)baz", "foobarbaz",
    "prefix_bar", "bar", "\\A literal backslash A",
]  # fmt: skip
PATTERNS = [
    r"^class \w+Error\(", "(?i)class", "a|bar", r"x\.y", "x.y", r"(?<!prefix_)bar$", r"\Aend",
    r"end\Z", "(?x) return \\s a", "caf[ée]", "^$", r"\t", "foo(bar)baz", "(?i:CLASS) Sh",
    r"\\A", "b+a?r", "[a-c]ar",
]  # fmt: skip


async def test_search_finds_exactly_the_lines_python_re_matches_one_by_one(
    instance: Instance,
) -> None:
    with anyio.fail_after(30):
        async with await instance.workspace("search-shapes") as ws:
            await ws.write_file("shapes.txt", "\n".join(LINES) + "\n")
            found = {p: await ws.search(p, path="shapes.txt") for p in PATTERNS}
    for pattern in PATTERNS:
        expected = [n for n, line in enumerate(LINES, 1) if re.search(pattern, line)]
        assert [hit.line for hit in found[pattern].hits] == expected, pattern
        assert expected, f"{pattern} should match a line: the check would prove nothing"
