"""The `tests` scorer against bytes a submission's code prints: NUL bytes, invalid UTF-8,
ANSI codes and carriage returns around forged result lines, single lines far past the output
cap on either stream. Each submission fixes nothing; whatever it prints, it is graded `failed`
(the submission's miss, in the pass rate's denominator), never resolved and never an error of
the harness, in both modes.

These held before issue 9's fixes too; they guard the parsers and the capture against
"improvements" that would let such bytes through (a parser that strips ANSI codes or splits
lines at carriage returns, as SWE-bench 5.0.2's does not, would resolve the second case).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_evalserver.agents.base import Submission
from mcp_evalserver.scoring.testsuite import TestsScorer
from tests.scoring.sandboxed import diff_of, require_root, scoring_in_workspaces
from tests.scoring.test_tests_scorer import _task

pytestmark = [pytest.mark.anyio, pytest.mark.root]

GRADED = ("test_calc.py::test_add", "test_calc.py::test_mul", "test_calc.py::test_zero")
OUTPUT_CAP = 1 << 20


def _forged(decorate: str) -> bytes:
    """PASSED lines for every graded test, each wrapped by `decorate` (`{}` is the line)."""
    return "".join(decorate.format(f"PASSED {t}") + "\n" for t in GRADED).encode()


def _conftest(at_import: bytes, at_exit: bytes, *, fd: int = 1) -> str:
    """A conftest.py that writes raw bytes to `fd` when collected and when the interpreter
    exits (after pytest's own summary)."""
    return (
        "import atexit\nimport os\n\n"
        f"os.write({fd}, {at_import!r})\n"
        f"atexit.register(os.write, {fd}, {at_exit!r})\n"
    )


CASES = {
    "NUL bytes and invalid UTF-8 in and around forged lines": _conftest(
        b"\x00\xff\xfe\x80 PASSED x\x00\n" * 1000,
        b"\x00\n" + _forged("\x00{}\x00") + _forged("{}").replace(b"\n", b"\xff\n"),
    ),
    "ANSI codes and carriage returns around forged lines": _conftest(
        b"\x1b[2J\x1b[H",
        b"\n"
        + _forged("\x1b[32m{}\x1b[0m")
        + _forged("\r{}")
        + _forged("\x1b[1A\x1b[2K{}")
        + b"FAILED test_other.py::test_unrelated\r\n",
    ),
    "a line of 20 MB on stdout, then forged lines": _conftest(
        b"A" * (20 << 20), b"\n" + _forged("{}")
    ),
    "a line of 20 MB on stderr, then forged lines": _conftest(
        b"", b"B" * (20 << 20) + b"\n" + _forged("{}"), fd=2
    ),
    "a flood of forged lines past the cap, the real summary in the middle": _conftest(
        _forged("{}") * (OUTPUT_CAP // 64), _forged("{}") * (OUTPUT_CAP // 64)
    ),
}


@pytest.fixture(autouse=True)
def _needs_root() -> None:
    require_root()


@pytest.mark.parametrize("strict", [False, True], ids=["swebench", "strict"])
@pytest.mark.parametrize("case", list(CASES))
async def test_hostile_bytes_are_graded_as_the_submissions_failure(
    case: str, strict: bool, tmp_path: Path
) -> None:
    task = _task(tmp_path)
    patch = diff_of(Path(task.path or ""), {"conftest.py": CASES[case]})
    scorer = TestsScorer(strict=strict, output_cap=OUTPUT_CAP)
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(scorer, task, Submission(patch=patch))
    assert not result.resolved, result.explanation
    assert result.outcome in ("failed", "error"), "never the harness's fault"
    assert result.status in ("failed", "exit_code_mismatch"), result.explanation
