"""Doctest ids, and the examples strict mode gives them, read from source it never runs."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from mcp_evalserver.scoring.swebench.doctests import (
    doctest_examples_text,
    doctest_kind,
    reference_source,
)
from mcp_evalserver.scoring.swebench.grading import EvalStatus
from mcp_evalserver.scoring.swebench.strict import PLUGIN_HELLO, doctest_references, grade_report
from testsupport.repos import GIT


@pytest.mark.parametrize(
    ("test_id", "kind"),
    [
        ("pkg/mod.py::pkg.mod.func", "module"),
        ("pkg/mod.py::pkg.mod", "module"),
        ("boltons/strutils.py::boltons.strutils.slugify", "module"),
        ("README.rst::README.rst", "textfile"),
        ("docs/usage.txt::usage.txt", "textfile"),
        ("tests/test_x.py::test_a", None),
        ("tests/test_x.py::test_p[1.5]", None),
        ("tests/test_x.py::TestK::test_a", None),
        ("test_a (pkg.tests.T)", None),
    ],
)
def test_doctest_ids_are_told_from_test_functions_by_their_shape(
    test_id: str, kind: str | None
) -> None:
    assert doctest_kind(test_id) == kind


MODULE = '''"""The module's own doctest.

>>> 1
1
"""
import functools


class Shape:
    """A shape."""

    @property
    def area(self):
        """Its area."""

    @area.setter
    def area(self, value):
        pass

    class Unit:
        """A unit."""


try:
    def fast():
        """Fast, when it can be."""
except ImportError:
    pass


def built():
    pass


built.__doc__ = "Built at run time."
'''


@pytest.mark.parametrize(
    ("test_id", "text"),
    [
        ("src/pkg/mod.py::pkg.mod", "The module's own doctest.\n\n>>> 1\n1\n"),
        ("src/pkg/mod.py::pkg.mod.Shape", "A shape."),
        ("src/pkg/mod.py::mod.Shape.area", "Its area."),
        ("src/pkg/mod.py::src.pkg.mod.Shape.Unit", "A unit."),
        ("pkg/__init__.py::pkg.fast", "Fast, when it can be."),
        ("pkg/mod.py::pkg.mod.built", None),
        ("pkg/mod.py::pkg.mod.missing", None),
        ("pkg/mod.py::other.Shape", None),
    ],
)
def test_a_docstring_is_found_by_the_dotted_name_pytest_gives_its_doctest(
    test_id: str, text: str | None
) -> None:
    assert doctest_examples_text(MODULE, test_id) == text


def test_a_text_file_is_its_own_doctest_and_unparseable_source_has_none() -> None:
    assert doctest_examples_text(">>> 1\n1\n", "README.rst::README.rst") == ">>> 1\n1\n"
    assert doctest_examples_text("def f(:\n", "pkg/mod.py::pkg.mod.f") is None


def _diff(repo: Path, path: str, new: str) -> str:
    (repo / path).write_text(new)
    try:
        return subprocess.run(
            ["git", "diff"], cwd=repo, check=True, capture_output=True, text=True
        ).stdout
    finally:
        subprocess.run(["git", "checkout", "-q", "--", path], cwd=repo, check=True)


def test_the_test_patch_beats_the_gold_patch_which_beats_the_base(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "m.py").write_text("a\nb\nc\n")
    subprocess.run([*GIT, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*GIT, "commit", "-qm", "base"], cwd=tmp_path, check=True)
    gold = _diff(tmp_path, "m.py", "a\nB\nc\n")
    tests = _diff(tmp_path, "m.py", "a\nb\nc\nd\n")
    base = "a\nb\nc\n"
    assert reference_source(base, "m.py", gold=gold, test_patch=tests) == (
        "a\nb\nc\nd\n",
        "the test_patch",
    )
    assert reference_source(base, "m.py", gold=gold, test_patch=None) == (
        "a\nB\nc\n",
        "the gold patch",
    )
    assert reference_source(base, "other.py", gold=gold, test_patch=tests) == (
        base,
        "the base commit",
    )
    text, origin = reference_source("x\n", "m.py", gold=gold, test_patch=None)
    assert text == "x\n"
    assert origin.startswith("the base commit (the gold patch does not apply to it: ")


def test_a_patch_is_applied_as_git_applies_it_on_seeded_random_edits(tmp_path: Path) -> None:
    rng = random.Random("reference-source")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for _ in range(100):
        lines = [f"line {n}\n" for n in range(rng.randint(0, 25))]
        base = "".join(lines).removesuffix("\n" if rng.random() < 0.2 else "")
        for _ in range(rng.randint(1, 4)):
            where = rng.randint(0, len(lines))
            edit = rng.choice(["insert", "delete", "change"])
            if edit == "insert":
                lines.insert(where, f"new {rng.random()}\n")
            elif lines and where < len(lines):
                if edit == "delete":
                    del lines[where]
                else:
                    lines[where] = "changed\n"
        new = "".join(lines).removesuffix("\n" if rng.random() < 0.2 else "")
        (tmp_path / "f.py").write_text(base)
        subprocess.run(["git", "add", "f.py"], cwd=tmp_path, check=True)
        (tmp_path / "f.py").write_text(new)
        patch = subprocess.run(
            ["git", "diff"], cwd=tmp_path, check=True, capture_output=True, text=True
        ).stdout
        if patch:
            assert reference_source(base, "f.py", gold=patch, test_patch=None) == (
                new,
                "the gold patch",
            ), patch


def test_a_doctest_id_without_examples_the_submission_did_not_write_fails() -> None:
    bases = {"m.py": '"""Module."""\n\n\ndef f():\n    """\n    >>> f()\n    """\n'}
    ids = ["m.py::m.f", "m.py::m.g", "README.rst::README.rst", "test_m.py::test_a"]
    references, account = doctest_references(bases, ids, gold=None, test_patch=None)
    assert references == {"m.py::m.f": "\n    >>> f()\n    "}
    assert account == [
        "m.py::m.f: examples from the base commit",
        "m.py::m.g: no examples in the base commit (it fails)",
        "README.rst::README.rst: no examples in the base commit (it fails)",
    ]


REPORT = (
    b'<testsuites><testsuite name="pytest">'
    b'<testcase classname="m" name="m.f" file="m.py"/>'
    b'<testcase classname="m" name="m.g" file="m.py"/>'
    b'<testcase classname="m" name="m.h" file="m.py"><skipped type="pytest.xfail"/></testcase>'
    b'<testcase classname="m" name="m.k" file="m.py"><skipped type="pytest.skip"/></testcase>'
    b"</testsuite></testsuites>"
)


@pytest.mark.parametrize(
    ("test_id", "resolved", "why"),
    [
        ("m.py::m.f", True, ""),
        ("m.py::m.g", False, "a doctest with no examples the submission did not write"),
        ("m.py::m.h", False, "a doctest XFAIL: only a pass counts for one"),
    ],
)
def test_strict_mode_counts_a_doctest_only_when_its_own_examples_passed(
    test_id: str, resolved: bool, why: str
) -> None:
    grade = grade_report(
        PLUGIN_HELLO + REPORT,
        writers=1,
        fail_to_pass=[test_id],
        pass_to_pass=[],
        exit_status=0,
        doctests=["m.py::m.f", "m.py::m.h", "m.py::m.k"],
    )
    assert (grade.status, grade.resolved) == (EvalStatus.GRADED, resolved)
    assert why in grade.explanation


def test_a_skipped_doctest_is_no_pass_to_pass_test_kept() -> None:
    grade = grade_report(
        PLUGIN_HELLO + REPORT,
        writers=1,
        fail_to_pass=["m.py::m.f"],
        pass_to_pass=["m.py::m.k"],
        exit_status=0,
        doctests=["m.py::m.f", "m.py::m.k"],
    )
    assert not grade.resolved
    assert "a doctest SKIPPED" in grade.explanation
