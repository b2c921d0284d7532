"""The `tests` scorer against bytes a submission's code prints: NUL bytes, invalid UTF-8,
ANSI codes and carriage returns around forged result lines, single lines far past the output
cap on either stream. Each submission fixes nothing; whatever it prints, it is graded `failed`
(the submission's miss, in the pass rate's denominator), never resolved and never an error of
the harness, in both modes.

These held before issue 9's fixes too; they guard the parsers and the capture against
"improvements" that would let such bytes through.

ANSI codes are removed before parsing (`terminal_codes`, so a coloured run is graded), and a
lone carriage return ends a line (SWE-bench 5.0.2 grades the `test_output.txt` it wrote and
read back in text mode: universal newlines): a line wrapped in either then says what the same
plain lines say, nothing more. In SWE-bench mode such forged lines grade exactly as the plain
forgery does, which fools SWE-bench 5.0.2 too
(`test_strict_mode_does_not_believe_passes_printed_at_exit_beside_a_forged_failure`); strict
mode believes neither.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_evalserver.scoring.testsuite import TestsScorer
from mcp_evalserver.spec.submission import Submission
from tests.scoring.sandboxed import diff_of, scoring_in_workspaces
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
    "escape strings left open around the real summary": _conftest(
        b"\x1b]0;\x1b[8m", b"\x07\x1b\\\n" + _forged("\x1b]0;{}")
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


#: Forged PASSED lines for every graded test and a forged FAILED line for a test nobody grades
#: (so the exit status of 1 agrees with the log), in escape codes a terminal would not show.
ANSI_FORGERY = (
    b"\n"
    + _forged("\x1b[32m{}\x1b[0m")
    + _forged("\x1b[1A\x1b[2K{}")
    + b"\x1b[31mFAILED\x1b[0m test_other.py::test_unrelated\n"
)


#: The same forgery with carriage returns around the lines (a terminal would overwrite them).
CR_FORGERY = b"\n" + _forged("\r{}") + b"FAILED test_other.py::test_unrelated\r\n"


def _plain(forgery: bytes) -> bytes:
    for code in (b"\x1b[32m", b"\x1b[31m", b"\x1b[0m", b"\x1b[1A\x1b[2K"):
        forgery = forgery.replace(code, b"")
    return forgery.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


@pytest.mark.parametrize(
    "forgery", [ANSI_FORGERY, CR_FORGERY], ids=["ansi codes", "carriage returns"]
)
async def test_forged_lines_in_ansi_codes_or_carriage_returns_grade_as_the_plain_lines(
    forgery: bytes, tmp_path: Path
) -> None:
    task = _task(tmp_path)
    repo = Path(task.path or "")
    verdicts = {}
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        for name, lines in (("decorated", forgery), ("plain", _plain(forgery))):
            for strict in (False, True):
                patch = diff_of(repo, {"conftest.py": _conftest(b"", lines)})
                scorer = TestsScorer(strict=strict, output_cap=OUTPUT_CAP)
                result = await scoring.score(scorer, task, Submission(patch=patch))
                verdicts[name, strict] = (result.resolved, result.status, result.outcome)
    assert verdicts["decorated", False] == verdicts["plain", False]
    assert verdicts["decorated", True] == verdicts["plain", True] == (False, "failed", "failed")
