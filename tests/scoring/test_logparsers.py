"""Log parsers: our own pytest and unittest parsers on realistic logs, and parser lookup.

The SWE-bench mirrors are checked line for line against SWE-bench itself in
test_swebench_differential.py; here are the behaviours that are ours.
"""

from __future__ import annotations

import pytest

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.swebench.logparsers import (
    TestStatus,
    get_parser,
    parse_django,
    parse_pytest,
    parse_pytest_v2,
    parse_pytest_verbose,
    parse_unittest,
)

P, F, S, E, X = (
    TestStatus.PASSED,
    TestStatus.FAILED,
    TestStatus.SKIPPED,
    TestStatus.ERROR,
    TestStatus.XFAIL,
)

PYTEST_VERBOSE_LOG = """\
============================= test session starts ==============================
platform linux -- Python 3.11.9, pytest-8.3.3, pluggy-1.5.0 -- /usr/bin/python3
cachedir: .pytest_cache
rootdir: /testbed
collecting ... collected 9 items

tests/test_calc.py::test_add PASSED                                      [ 11%]
tests/test_calc.py::test_div FAILED                                      [ 22%]
tests/test_calc.py::test_parse[1 + 2-3] PASSED                           [ 33%]
tests/test_calc.py::test_parse[a - b-nan] FAILED                         [ 44%]
tests/test_calc.py::TestNet::test_fetch SKIPPED (needs network)          [ 55%]
tests/test_calc.py::test_known_bug XFAIL (issue 12)                      [ 66%]
tests/test_calc.py::test_lucky XPASS (flaky upstream)                    [ 77%]
tests/test_calc.py::test_db ERROR                                        [ 88%]
tests/test_calc.py::test_cleanup PASSED                                  [100%]
tests/test_calc.py::test_cleanup ERROR                                   [100%]

==================================== ERRORS ====================================
_______________________ ERROR at setup of test_db ______________________________
E   RuntimeError: no database
=================================== FAILURES ===================================
___________________________________ test_div ___________________________________
E       ZeroDivisionError: division by zero
=========================== short test summary info ============================
PASSED tests/test_calc.py::test_add
PASSED tests/test_calc.py::test_parse[1 + 2-3]
PASSED tests/test_calc.py::test_cleanup
SKIPPED [1] tests/test_calc.py:40: needs network
XFAIL tests/test_calc.py::test_known_bug - issue 12
XPASS tests/test_calc.py::test_lucky flaky upstream
ERROR tests/test_calc.py::test_db - RuntimeError: no database
ERROR tests/test_calc.py::test_cleanup - OSError: busy
FAILED tests/test_calc.py::test_div - ZeroDivisionError: division by zero
FAILED tests/test_calc.py::test_parse[a - b-nan] - ValueError: could not convert
===== 2 failed, 3 passed, 1 skipped, 1 xfailed, 1 xpassed, 2 errors in 0.31s =====
"""


def test_pytest_verbose_reads_progress_and_summary_lines_with_spaces_and_brackets() -> None:
    assert parse_pytest_verbose(PYTEST_VERBOSE_LOG) == {
        "tests/test_calc.py::test_add": P,
        "tests/test_calc.py::test_div": F,
        "tests/test_calc.py::test_parse[1 + 2-3]": P,
        "tests/test_calc.py::test_parse[a - b-nan]": F,
        "tests/test_calc.py::TestNet::test_fetch": S,
        "tests/test_calc.py::test_known_bug": X,
        "tests/test_calc.py::test_lucky": P,
        "tests/test_calc.py::test_db": E,
        "tests/test_calc.py::test_cleanup": E,
    }


def test_pytest_verbose_reads_a_log_without_the_summary() -> None:
    progress_only = PYTEST_VERBOSE_LOG.split("=== ERRORS ===")[0]
    statuses = parse_pytest_verbose(progress_only)
    assert statuses["tests/test_calc.py::test_parse[a - b-nan]"] is F
    assert statuses["tests/test_calc.py::TestNet::test_fetch"] is S
    assert len(statuses) == 9


def test_pytest_verbose_reads_xdist_lines_and_strips_colours() -> None:
    log = (
        "[gw0] [ 50%] PASSED tests/a.py::test_one[x y]\n"
        "[gw1] [100%] FAILED tests/a.py::test_two\n"
        "\x1b[32mPASSED\x1b[0m tests/a.py::test_three\n"
        "\x1b[31mFAILED\x1b[0m tests/a.py::test_four - assert 0\n"
    )
    assert parse_pytest_verbose(log) == {
        "tests/a.py::test_one[x y]": P,
        "tests/a.py::test_two": F,
        "tests/a.py::test_three": P,
        "tests/a.py::test_four": F,
    }


def test_swebench_pytest_parser_keeps_only_the_first_word_of_an_id_with_spaces() -> None:
    # That is SWE-bench's behaviour, which its test lists depend on; pytest_v2 keeps the spaces.
    line = "PASSED tests/test_calc.py::test_parse[1 + 2-3]\n"
    assert parse_pytest(line) == {"tests/test_calc.py::test_parse[1": P}
    assert parse_pytest_v2(line) == {"tests/test_calc.py::test_parse[1 + 2-3]": P}


def test_mirrors_skip_lines_whose_status_word_is_not_exact() -> None:
    # SWE-bench would record "ERROR:" as a status that grades as neither pass nor fail.
    assert parse_pytest("ERROR: file or directory not found: tests/x.py\n") == {}
    assert parse_pytest_v2("collected 3 items ... XPASSED\n") == {}


UNITTEST_LOG = """\
test_add (calc.tests.test_ops.OpsTest.test_add) ... ok
test_div (calc.tests.test_ops.OpsTest.test_div) ... FAIL
test_net (calc.tests.test_ops.OpsTest.test_net) ... skipped 'needs network'
test_known (calc.tests.test_ops.OpsTest.test_known) ... expected failure
test_lucky (calc.tests.test_ops.OpsTest.test_lucky) ... unexpected success
test_noisy (calc.tests.test_ops.OpsTest.test_noisy) ... printing from the test
and more output
ok
test_doc (calc.tests.test_ops.OpsTest.test_doc)
Adds with a docstring. ... ok
test_old (calc.tests.test_legacy.LegacyTest) ... ERROR
test_sub (calc.tests.test_ops.OpsTest.test_sub) ... ok

======================================================================
FAIL: test_div (calc.tests.test_ops.OpsTest.test_div)
----------------------------------------------------------------------
Traceback (most recent call last):
AssertionError: 1 != 2

======================================================================
FAIL: test_sub (calc.tests.test_ops.OpsTest.test_sub) (i=3)
----------------------------------------------------------------------
AssertionError: subtest failed

----------------------------------------------------------------------
Ran 9 tests in 0.004s

FAILED (failures=2, errors=1, skipped=1, expected failures=1, unexpected successes=1)
"""


def test_unittest_reads_verbose_results_in_both_id_forms() -> None:
    statuses = parse_unittest(UNITTEST_LOG)
    expected = {
        "test_add": P,
        "test_div": F,
        "test_net": S,
        "test_known": X,
        "test_lucky": F,
        "test_noisy": P,
        "test_doc": P,
        "test_sub": F,
    }
    for name, status in expected.items():
        assert statuses[f"{name} (calc.tests.test_ops.OpsTest.{name})"] is status, name
        assert statuses[f"{name} (calc.tests.test_ops.OpsTest)"] is status, name
    assert statuses["test_old (calc.tests.test_legacy.LegacyTest)"] is E
    assert len(statuses) == 2 * len(expected) + 1


def test_unittest_ignores_lines_that_are_not_results() -> None:
    assert parse_unittest("Ran 3 tests in 0.1s\n\nOK\nok\n... ok\n") == {}


def test_unittest_attributes_a_description_only_to_the_line_right_after_the_id() -> None:
    log = "test_a (m.T)\nunrelated output\nsetting up ... ok\n"
    assert parse_unittest(log) == {}


def test_django_parser_keys_headers_by_method_name_like_swebench() -> None:
    log = (
        "test_a (app.tests.ATest) ... ok\n"
        "test_b (app.tests.ATest) ... FAIL\n"
        "FAIL: test_b (app.tests.ATest)\n"
        "test_c (app.tests.ATest) ... skipped 'no db'\n"
    )
    assert parse_django(log) == {
        "test_a (app.tests.ATest)": P,
        "test_b (app.tests.ATest)": F,
        "test_b": F,
        "test_c (app.tests.ATest)": S,
    }


def test_django_parser_skips_a_bare_fail_header_where_swebench_raises() -> None:
    assert parse_django("FAIL:\nERROR:\ntest_a (app.T) ... ok\n") == {"test_a (app.T)": P}


@pytest.mark.parametrize(
    ("name", "parser"),
    [
        ("pytest", parse_pytest),
        ("parse_log_pytest", parse_pytest),
        ("parse_log_astropy", parse_pytest_v2),
        ("parse_log_flask", parse_pytest),
        ("unittest", parse_unittest),
    ],
)
def test_parsers_are_found_by_our_name_or_swebenchs(name: str, parser: object) -> None:
    assert get_parser(name) is parser


def test_an_unknown_parser_name_lists_the_known_ones() -> None:
    with pytest.raises(InvalidInput, match="pytest_verbose"):
        get_parser("parse_log_cobol")
