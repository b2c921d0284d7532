"""SWE-bench 5.0.2's log parsers for its other languages (issue 41): every parser its registry
names and every repository its tables map runs here, and grades every log exactly as swebench's
own parser does: logs in the shapes of the frameworks' real output, seeded random logs made of
those lines, and the fail-only grading of the repositories SWE-bench grades that way.

The ported parsers are swebench's code (scoring/swebench/multilingual/third_party), so this
guards the port and its wrapper: status words, the instance a parser reads, and that a parser
which raises on a log (swebench's evaluation then errors) gives no results here, never an
exception.
"""

from __future__ import annotations

import importlib
import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mcp_evalserver.scoring.swebench import multilingual
from mcp_evalserver.scoring.swebench.grading import EvalStatus, grade_log
from mcp_evalserver.scoring.swebench.logparsers import ALL_REPO_PARSERS, get_parser
from mcp_evalserver.scoring.swebench.test_plans import task_eval_type
from mcp_evalserver.spec.campaign import Task
from tests.scoring.swebench_reference import PARSER_REGISTRY, SwebenchTestSpec, swe_grading
from tests.scoring.test_swebench_differential import eval_log

#: Output in the shapes the frameworks print (abridged), one per family.
SAMPLES = {
    "jest": """ PASS  src/math.test.js
  math
    ✓ adds numbers (3 ms)
    ✕ divides by zero (12 ms)
    ○ skipped pending feature
  ● math › divides by zero
Test Suites: 1 failed, 1 total
Tests:       1 failed, 1 skipped, 1 passed, 3 total
""",
    "vitest": """ ✓ test/basic.spec.ts (3 tests) 12ms
   ✓ basic > adds 1ms
   × basic > subtracts 3ms
   ↓ basic > skipped
 ✓ packages/runtime-core/__tests__/apiWatch.spec.ts > api: watch > effect 2ms
 × packages/runtime-core/__tests__/apiWatch.spec.ts > api: watch > flush 5ms
 Test Files  1 failed | 1 passed (2)
""",
    "mocha": """  Array
    #indexOf()
      ✓ should return -1 when the value is not present
      ✔ passes with a heavy check mark
      1) should fail on purpose
      - is pending
  2 passing (9ms)
  1 failing
""",
    "tap": """TAP version 13
# Subtest: math
ok 1 - adds numbers
not ok 2 - divides by zero
ok 3 - skipped one # SKIP not yet
1..3
""",
    "karma": """Chrome Headless 120.0.0 (Linux x86_64): Executed 3 of 3 (1 FAILED)
  ✓ render > renders a div
  ✗ render > renders a span
Chrome Headless 120.0.0 (Linux x86_64) render renders a span FAILED
""",
    "gotest": """=== RUN   TestAdd
--- PASS: TestAdd (0.00s)
=== RUN   TestDiv
--- FAIL: TestDiv (0.01s)
--- SKIP: TestNet (0.00s)
    --- PASS: TestTable/case_1 (0.00s)
FAIL
""",
    "cargo": """running 3 tests
test parser::tests::parses_empty ... ok
test parser::tests::parses_nested ... FAILED
test parser::tests::slow ... ignored
test result: FAILED. 1 passed; 1 failed; 1 ignored
""",
    "maven": """[INFO] -------------------------------------------------------
[INFO]  T E S T S
[INFO] Running com.example.CalcTest
[INFO] Tests run: 2, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: 0.05 s <<< FAILURE! \
- in com.example.CalcTest
[ERROR] com.example.CalcTest.testDiv  Time elapsed: 0.01 s  <<< FAILURE!
[INFO] com.example.CalcTest.testAdd  Time elapsed: 0.01 s
[ERROR] testDiv(com.example.CalcTest)  Time elapsed: 0.011 sec  <<< FAILURE!
testAdd(com.example.CalcTest)  Time elapsed: 0.001 sec
""",
    "gradle": """CalcTest > testAdd() PASSED
CalcTest > testDiv() FAILED
CalcTest > testNet() SKIPPED
""",
    "ant": """    [junit] Testcase: testAdd took 0.01 sec
    [junit] Testcase: testDiv took 0.02 sec
    [junit] 	FAILED
    [junit] Tests run: 2, Failures: 1
""",
    "phpunit": """PHPUnit 10.5.0 by Sebastian Bergmann and contributors.
Runtime:       PHP 8.2.0
..F                                                                 3 / 3 (100%)
Time: 00:00.012, Memory: 6.00 MB
There was 1 failure:
1) Tests\\CalcTest::testDiv
Failed asserting that 0 is identical to 1.
 ✔ Add
 ✘ Div
""",
    "rspec_json": json.dumps(
        {
            "examples": [
                {"full_description": "Calc adds", "status": "passed"},
                {"full_description": "Calc divides", "status": "failed"},
                {"full_description": "Calc later", "status": "pending"},
            ]
        }
    ),
    "minitest": """Run options: --seed 1234
# Running:
CalcTest#test_add = 0.00 s = .
CalcTest#test_div = 0.01 s = F
CalcTest#test_skip = 0.00 s = S
Finished in 0.01s
3 runs, 3 assertions, 1 failures, 0 errors, 1 skips
""",
    "gtest": """[==========] Running 3 tests from 1 test suite.
[ RUN      ] CalcTest.Add
[       OK ] CalcTest.Add (0 ms)
[ RUN      ] CalcTest.Div
[  FAILED  ] CalcTest.Div (1 ms)
[ RUN      ] CalcTest.Net
[  SKIPPED ] CalcTest.Net (0 ms)
""",
    "doctest": """[doctest] doctest version is "2.4.11"
TEST CASE:  parse empty
TEST CASE:  parse nested
test.cpp:12: ERROR: CHECK( a == b ) is NOT correct!
[doctest] test cases: 2 | 1 passed | 1 failed | 0 skipped
""",
    "redis": """[ok]: SET and GET an item (1 ms)
[err]: DEL against a missing key in tests/unit/keyspace.tcl
[skip]: Needs debug
[ok]: EXPIRE - set timeouts multiple times (2 ms)
""",
    "jq": """Test #1: '.' at line number 5
Test #2: '.a' at line number 9
*** Expected 1, but got 2 for test at line number 9: .a
2 of 2 tests passed (0 malformed, 0 skipped)
""",
    "micropython": """pass  basics/int_big.py
FAIL  basics/int_small.py
skip  basics/net.py
3 tests performed
""",
    "junit_xml": (
        '<testsuite name="s" tests="2"><testcase classname="c" name="ok_case"/>'
        '<testcase classname="c" name="bad_case"><failure message="x"/></testcase></testsuite>'
    ),
    "cucumber": """Feature: Calc
  Scenario: adding   # features/calc.feature:3
    Given a calculator
2 scenarios (1 failed, 1 passed)
Failing Scenarios:
cucumber features/calc.feature:9 # Scenario: dividing
""",
}
#: Which parser reads which sample: each must find results there, as swebench's does.
READS = {
    "jest": "jest", "vitest": "vitest", "tap": "tap", "gotest": "gotest", "cargo": "cargo",
    "gradle_custom": "gradle", "phpunit": "phpunit", "googletest": "gtest", "redis": "redis",
    "micropython_test": "micropython",
}  # fmt: skip
#: The instance each parser is called with: a few choose a format by its id or version.
INSTANCES = {
    "immutable_js": ("immutable-js__immutable-js-2005", "4.0"),
    "jekyll": ("jekyll__jekyll-9141", "4.3"),
    "next": ("alibaba-fusion__next-1.27", "1.27"),
    "lighthouse": ("GoogleChrome__lighthouse-9", "9.5"),
}
RANDOM_LOGS = 300


def theirs(name: str) -> Any:
    """swebench's own function for one of our parser names."""
    ported = multilingual.PARSERS[name]
    module = importlib.import_module(
        f"swebench.harness.log_parsers.{ported.__module__.rsplit('.', 1)[1]}"
    )
    return getattr(module, ported.__name__)


def instance(name: str) -> multilingual.Instance:
    return multilingual.Instance(*INSTANCES.get(name, ("org__repo-123", "1.0")))


def swebench_statuses(name: str, log: str) -> dict[str, str]:
    spec = instance(name)
    try:
        result: dict[str, str] = theirs(name)(
            log, SimpleNamespace(instance_id=spec.instance_id, version=spec.version)
        )
    except Exception:
        return {}
    return result


def random_log(rng: random.Random, lines: list[str]) -> str:
    picked = [rng.choice(lines) for _ in range(rng.randint(0, 30))]
    mutated = [
        line.replace(rng.choice(" .:"), rng.choice(["", "  ", "\t"]), 1)
        if rng.random() < 0.2
        else line
        for line in picked
    ]
    return "\n".join(mutated) + rng.choice(["", "\n"])


def test_every_parser_swebench_registers_is_one_of_ours() -> None:
    missing = []
    for name in PARSER_REGISTRY:
        try:
            get_parser(name)
        except Exception as exc:
            missing.append(f"{name}: {exc}")
    assert not missing
    assert len(PARSER_REGISTRY) == 57


def test_every_repository_swebench_maps_gets_the_same_parser() -> None:
    for language in ("python", "javascript", "c", "go", "java", "php", "ruby", "rust"):
        module = importlib.import_module(f"swebench.harness.log_parsers.{language}")
        suffix = {"python": "PY", "javascript": "JS"}.get(language, language.upper())
        table = getattr(module, f"MAP_REPO_TO_PARSER_{suffix}")
        for repo, parser in table.items():
            assert repo in ALL_REPO_PARSERS, repo
            name = ALL_REPO_PARSERS[repo]
            if language == "python":
                continue  # mirrors under their own names (test_swebench_differential)
            assert theirs(name) is parser, repo


@pytest.mark.parametrize("name", sorted(multilingual.PARSERS))
def test_a_ported_parser_reads_every_log_as_swebenchs_does(name: str) -> None:
    ours = get_parser(name, instance(name))
    lines = [line for sample in SAMPLES.values() for line in sample.splitlines()]
    rng = random.Random(f"multilingual-{name}")
    logs = [*SAMPLES.values(), *(random_log(rng, lines) for _ in range(RANDOM_LOGS))]
    for log in logs:
        expected = swebench_statuses(name, log)
        got = {test: status.value for test, status in ours(log).items()}
        assert got == expected, log


@pytest.mark.parametrize(("name", "sample"), sorted(READS.items()))
def test_a_frameworks_own_output_gives_results(name: str, sample: str) -> None:
    statuses = get_parser(name)(SAMPLES[sample])
    assert statuses
    assert {t: s.value for t, s in statuses.items()} == swebench_statuses(name, SAMPLES[sample])
    assert {"PASSED", "FAILED"} <= {s.value for s in statuses.values()}


def test_a_parser_that_raises_on_a_log_gives_no_results() -> None:
    # immutable-js's parser dispatches on the instance id and raises on one it does not know.
    parser = get_parser("immutable_js", multilingual.Instance("immutable-js__immutable-js-1", "4"))
    with pytest.raises(ValueError, match="immutable"):
        theirs("immutable_js")(
            SAMPLES["jest"], SimpleNamespace(instance_id="immutable-js__immutable-js-1")
        )
    assert parser(SAMPLES["jest"]) == {}


ESLINT_MIN_REPORTER = (
    "/testbed/tests/lib/rules/no-var.js\n"
    "  1) no-var invalid let x = 1:\n"
    "     AssertionError: Should have 1 error but had 0\n"
)


@pytest.mark.parametrize("failing", [False, True], ids=["passing", "a failure"])
def test_a_fail_only_repository_grades_as_swebench_grades_it(failing: bool, tmp_path: Path) -> None:
    task = Task.model_validate({"id": "eslint__eslint-1", "repo": "eslint/eslint", "version": "9"})
    assert task_eval_type(task) == "fail_only"
    # ESLint's `--reporter min` prints failures only; a passing test is in no line at all.
    output = "\n  2 passing (9ms)\n" + (ESLINT_MIN_REPORTER if failing else "")
    log = eval_log(output, exit_code=1 if failing else 0)
    name = ALL_REPO_PARSERS["eslint/eslint"]
    f2p = ["no-var invalid let x = 1:", "no-var valid var x = 1"]
    ours = grade_log(
        log, parser=get_parser(name), fail_to_pass=f2p, pass_to_pass=[], eval_type="fail_only"
    )
    path = tmp_path / "test_output.txt"
    path.write_text(log)
    spec = SwebenchTestSpec(
        instance_id="eslint__eslint-1", image="none", eval_script_list=[], repo="eslint/eslint",
        version="9", FAIL_TO_PASS=f2p, PASS_TO_PASS=[], log_parser=f"parse_log_{name}",
        eval_type="fail_only",
    )  # fmt: skip
    prediction = {"instance_id": spec.instance_id, "model_name_or_path": "m", "model_patch": "d"}
    report = swe_grading.get_eval_report(spec, prediction, str(path), True)[spec.instance_id]
    assert ours.resolved is (not failing)
    assert report["resolved"] is ours.resolved
    assert ours.status is EvalStatus.GRADED
    assert ours.tests is not None
    assert report["tests_status"] == ours.tests.to_swebench()
