"""Strict mode grades from the report of the one pytest run a test section starts: a task
whose runner is Django's `runtests.py`, SymPy's `bin/test`, tox or unittest is refused when
the campaign is made (or rescored in strict mode), not graded `tests_errored` trajectory by
trajectory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mcp_evalserver.engine.rescoring import request_rescore
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.swebench.runners import section_runners
from mcp_evalserver.spec.campaign import CampaignSpec, Task
from mcp_evalserver.spec.scorers import TestsScorerConfig

pytestmark = pytest.mark.anyio

SECTION = ": '>>>>> Start Test Output'\n{}\n: '>>>>> End Test Output'"
PATCH = "diff --git a/tests/test_x.py b/tests/test_x.py\n"


def _swebench_task(repo: str, version: str, ids: list[str]) -> Task:
    return Task(
        id=f"{repo.split('/')[1]}-1", repo=repo, version=version, test_patch=PATCH,
        FAIL_TO_PASS=ids,
    )  # fmt: skip


DJANGO = _swebench_task("django/django", "3.0", ["test_x (admin_views.tests.T)"])
SYMPY = _swebench_task("sympy/sympy", "1.12", ["test_x"])
SPHINX = _swebench_task("sphinx-doc/sphinx", "4.4", ["tests/test_x.py::test_x"])
PYTEST_TASK = _swebench_task("pytest-dev/pytest", "5.4", ["tests/test_x.py::test_x"])
INFERRED = Task(id="inferred", FAIL_TO_PASS=["tests/test_x.py::test_x"])


def _spec(*tasks: Task, strict: bool = True) -> CampaignSpec:
    return CampaignSpec(name="s", tasks=list(tasks), scorer=TestsScorerConfig(strict=strict))


@pytest.mark.parametrize(
    ("script", "runners"),
    [
        ("./tests/runtests.py --verbosity 2 --settings=test_sqlite x", ["./tests/runtests.py"]),
        ("PYTHONWARNINGS='ignore::UserWarning' bin/test -C --verbose x", ["bin/test"]),
        ("tox --current-env -epy39 -v -- tests/test_x.py", ["tox"]),
        ("python -m unittest -v a.B", ["python -m unittest"]),
        ("pytest -rA tests/test_x.py", ["pytest"]),
        ('PY="$(command -v python)"; "$PY" -m pytest -rA x', ["pytest"]),
        ("cd a && LANG=C timeout 60 /opt/py/bin/python3 -m pytest x | tee o", ["pytest", "tee"]),
        ("pytest a.py\npytest b.py", ["pytest", "pytest"]),
    ],
)  # fmt: skip
def test_the_runner_a_test_section_starts_is_read_from_its_commands(
    script: str, runners: list[str]
) -> None:
    assert section_runners(SECTION.format(script)) == runners


async def test_a_strict_campaign_of_tasks_pytest_does_not_run_is_refused_before_it_starts(
    tmp_path: Path,
) -> None:
    store = CampaignStore(tmp_path)
    with pytest.raises(InvalidInput) as refused:
        await store.create(_spec(DJANGO, SYMPY, SPHINX, PYTEST_TASK), "c")
    message = str(refused.value)
    assert "3 task(s) do not start pytest exactly once" in message
    assert "django-1 (its test section runs `./tests/runtests.py`)" in message
    assert "sympy-1 (its test section runs `bin/test`)" in message
    assert "sphinx-1 (its test section runs `tox`)" in message
    assert "pytest-1" not in message
    assert "without `strict`" in message
    assert store.list_ids() == [], "nothing was recorded"


async def test_a_strict_campaign_of_pytest_tasks_and_a_plain_one_of_any_start(
    tmp_path: Path,
) -> None:
    store = CampaignStore(tmp_path)
    teed = PYTEST_TASK.model_copy(update={"id": "teed", "eval_script": "pytest -rA x | tee log"})
    await store.create(_spec(PYTEST_TASK, INFERRED, teed), "strict")
    twice = teed.model_copy(update={"id": "twice", "eval_script": "pytest a.py; pytest b.py"})
    with pytest.raises(
        InvalidInput, match=re.escape("twice (its test section runs `pytest`, `pytest`)")
    ):
        await store.create(_spec(twice), "twice")
    await store.create(_spec(DJANGO, SYMPY, SPHINX, strict=False), "plain")
    eval_script = SECTION.format("./tests/runtests.py --verbosity 2 x")
    shipped = DJANGO.model_copy(update={"eval_script": eval_script})
    with pytest.raises(InvalidInput, match=re.escape("runs `./tests/runtests.py`")):
        await store.create(_spec(shipped), "shipped")


async def test_rescoring_in_strict_mode_refuses_tasks_pytest_does_not_run(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    await store.create(_spec(DJANGO, strict=False), "c")
    strict = TestsScorerConfig(strict=True).model_dump(mode="json")
    with pytest.raises(InvalidInput, match="django-1"):
        await request_rescore(store, "c", scorer=strict)
