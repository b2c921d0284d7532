"""Evaluation sets (issue 42): several agents on one task set, one campaign per agent, one
instance per task for all of them, and a leaderboard whose figures are the campaigns' own.

Three agents on three real tasks (local backend, the `tests` scorer in fresh workspaces), two
samples each: `oracle` resolves every task, `noop` none, `fixer` (below) the first two.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from statsmodels.stats.multitest import multipletests  # type: ignore[import-untyped]

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.comparison import build_comparison
from mcp_evalserver.engine.eval_sets import EvalSetStore, run_set
from mcp_evalserver.engine.leaderboard import build_leaderboard, holm
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.sandboxes import SandboxPool
from mcp_evalserver.spec.eval_set import parse_eval_set
from mcp_evalserver.spec.submission import Submission
from tests.sandbox.docker_support import require_docker
from tests.scoring.sandboxed import PYTHON_PYTEST, diff_of, git_repo
from testsupport.counting import CountingBackends

pytestmark = [pytest.mark.root, pytest.mark.slow]

CODE = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"
UNITTESTS = (
    "import unittest\n\nimport calc\n\n\nclass TestCalc(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(calc.add(2, 2), 4)\n"
)
FIXES = {"t1", "t2"}


class Fixer(Agent):
    """Fixes the tasks in FIXES with its own edit; submits nothing for the others."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        if context.task.id not in FIXES:
            return Submission()
        workspace = await context.sandbox.workspace()
        await workspace.write_file("calc.py", FIXED)
        return Submission(patch=await workspace.diff())


def fixer(options: dict[str, Any]) -> Agent:
    return Fixer()


def _set_spec(tmp_path: Path, agents: dict[str, Any], **fields: Any) -> dict[str, Any]:
    tasks = []
    for name in ("t1", "t2", "t3"):
        repo = tmp_path / "repos" / name
        if not repo.exists():
            git_repo(repo, {"calc.py": CODE, "test_calc.py": TESTS})
        tasks.append(
            {
                "id": name,
                "path": str(repo),
                "patch": diff_of(repo, {"calc.py": FIXED}),
                "FAIL_TO_PASS": ["test_calc.py::test_add"],
                "eval_script": f"{PYTHON_PYTEST} -rA -p no:cacheprovider test_calc.py",
            }
        )
    return {
        "name": "trio",
        "tasks": tasks,
        "samples": 2,
        "agents": agents,
        "scorer": {"type": "tests"},
        "limits": {"concurrency": 4},
        **fields,
    }


def _docker_tasks(tmp_path: Path) -> list[dict[str, Any]]:
    """The same three tasks as images: the base image with the repository made by `setup`
    (a line of its own per task, so each is its own instance)."""
    create = (
        "git init -q . && git config user.email t@t && git config user.name t",
        f"printf {shlex.quote(CODE)} > calc.py && printf {shlex.quote(UNITTESTS)} > test_calc.py",
        "git add -A && git commit -qm base",
    )
    gold = tmp_path / "gold"
    gold.mkdir()
    for command in create:
        subprocess.run(["sh", "-c", command], cwd=gold, check=True)
    patch = diff_of(gold, {"calc.py": FIXED})
    return [
        {
            "id": name,
            "image": require_docker(),
            "setup": [*create, f"echo {name} > .instance && git add -A && git commit -qm n"],
            "patch": patch,
            "FAIL_TO_PASS": ["test_add (test_calc.TestCalc)"],
        }
        for name in ("t1", "t2", "t3")
    ]


AGENTS = {
    "oracle": {"type": "oracle"},
    "noop": {"type": "noop"},
    "fixer": {"type": "python", "factory": "tests.engine.test_eval_sets:fixer"},
}


@pytest.mark.anyio
async def test_a_set_provisions_each_instance_once_and_its_leaderboard_is_its_campaigns(
    tmp_path: Path,
) -> None:
    counting = await _provisions_once_and_ranks(tmp_path, _set_spec(tmp_path, AGENTS))
    assert counting.backends == {"local"}


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_set_on_docker_provisions_each_container_once_for_its_three_agents(
    tmp_path: Path,
) -> None:
    counting = await _provisions_once_and_ranks(
        tmp_path, {**_set_spec(tmp_path, AGENTS), "tasks": _docker_tasks(tmp_path)}
    )
    assert counting.backends == {"docker"}


async def _provisions_once_and_ranks(tmp_path: Path, spec: dict[str, Any]) -> CountingBackends:
    """Runs the set on counting backends: one provisioning per task, the leaderboard the
    campaigns' own reports, the pairs `compare`'s, Holm as statsmodels has it."""
    sets = EvalSetStore(CampaignStore(tmp_path / "state"))
    evalset = await sets.create(spec, None, "trio")
    counting = CountingBackends()
    with anyio.fail_after(600):
        async with SandboxPool(backends=counting, sharers=3) as pool:
            states = await run_set(sets, evalset, pool=pool)
            released = [c.instance_key for c in pool.closed if c.why == "released"]
    assert {agent: s.status for agent, s in states.items()} == dict.fromkeys(AGENTS, "finished")
    assert sorted(counting.provisioned) == sorted(set(counting.provisioned))
    assert len(counting.provisioned) == 3, "one provisioning per task for the three agents"
    assert sorted(released) == sorted(counting.provisioned), "each released once, at the end"

    board = build_leaderboard(evalset, states)
    assert list(board["agents"]) == ["oracle", "fixer", "noop"]
    for agent, row in board["agents"].items():
        report = build_report(states[agent])
        assert row["pass_rate"] == report["pass_rate"]
        assert row["mean_pass_rate"] == report["summary"]["mean_pass_rate"]
        assert row["mean_pass_rate_ci"] == report["summary"]["mean_pass_rate_ci"]
        assert row["cost_usd"] == report["cost"]["cost_usd"]
    assert {a: r["resolved"] for a, r in board["agents"].items()} == {
        "oracle": 6,
        "fixer": 4,
        "noop": 0,
    }
    assert [(p["a"], p["b"]) for p in board["pairs"]] == [
        ("oracle", "fixer"),
        ("oracle", "noop"),
        ("fixer", "noop"),
    ]
    for pair in board["pairs"]:
        by_hand = build_comparison(states[pair["a"]], states[pair["b"]])
        assert pair["difference"] == by_hand["mean_difference"]
        assert pair["p_value"] == by_hand["tests"]["p_value"]
    p_values = [p["p_value"] for p in board["pairs"]]
    expected = multipletests(p_values, method="holm")[1]
    assert [p["p_value_holm"] for p in board["pairs"]] == pytest.approx(list(expected))
    return counting


def test_holm_matches_statsmodels_and_leaves_untested_pairs_out() -> None:
    p_values = [0.01, 0.04, 0.03, 0.005, 0.2]
    assert holm(p_values) == pytest.approx(list(multipletests(p_values, method="holm")[1]))
    assert holm([0.02, None, 0.04]) == pytest.approx([0.04, None, 0.04])


def test_a_set_runs_from_the_command_line_and_a_fourth_agent_runs_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    spec = tmp_path / "set.json"
    two = {name: AGENTS[name] for name in ("oracle", "noop")}
    spec.write_text(json.dumps(_set_spec(tmp_path, two)))
    assert main(["--state-dir", str(state), "run", str(spec), "--id", "s"]) == 0
    out = capsys.readouterr().out
    assert "# Evaluation set s" in out
    assert "| oracle | 100.0%" in out
    ledgers = {cid: (state / "campaigns" / cid / "ledger.jsonl").read_text() for cid in
               ("s.oracle", "s.noop")}  # fmt: skip

    spec.write_text(json.dumps(_set_spec(tmp_path, {**two, "fixer": AGENTS["fixer"]})))
    assert main(["--state-dir", str(state), "run", str(spec), "--id", "s"]) == 0
    out = capsys.readouterr().out
    assert "| fixer | 66.7%" in out
    for cid, before in ledgers.items():
        assert (state / "campaigns" / cid / "ledger.jsonl").read_text() == before, cid
    assert main(["--state-dir", str(state), "report", "s", "--format", "json"]) == 0
    board = json.loads(capsys.readouterr().out)
    assert list(board["agents"]) == ["oracle", "fixer", "noop"]
    assert main(["--state-dir", str(state), "resume", "s"]) == 0


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"agents": {}}, "no agents"),
        ({"agents": {"a b": {"type": "noop"}}}, "agent name 'a b'"),
        ({"agents": {"x": {"type": "opeanai"}}}, "agent 'x'"),
        ({"agent": {"type": "noop"}}, "not `agent`"),
    ],
    ids=["empty", "bad name", "bad config", "agent and agents"],
)
def test_a_bad_set_is_refused_before_anything_is_recorded(
    change: dict[str, Any], error: str, tmp_path: Path
) -> None:
    sets = EvalSetStore(CampaignStore(tmp_path / "state"))
    data = {**_set_spec(tmp_path, AGENTS), **change}
    with pytest.raises(InvalidInput, match=error):
        anyio.run(sets.create, data, None, "bad")
    assert not (tmp_path / "state").exists()


def test_two_agents_of_one_name_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "set.json"
    text = json.dumps(_set_spec(tmp_path, {"a": {"type": "noop"}}))
    spec.write_text(text.replace('"a": {"type": "noop"}', '"a": {"type": "noop"}, "a": {}'))
    assert main(["--state-dir", str(tmp_path / "state"), "run", str(spec)]) != 0
    assert "'a' is given twice" in capsys.readouterr().err
    assert not (tmp_path / "state" / "campaigns").exists()


def test_extending_a_set_with_another_scorer_or_tasks_is_refused(tmp_path: Path) -> None:
    sets = EvalSetStore(CampaignStore(tmp_path / "state"))
    anyio.run(sets.create, _set_spec(tmp_path, {"noop": AGENTS["noop"]}), None, "s")
    before = sorted(p.name for p in (tmp_path / "state" / "campaigns").iterdir())
    other_scorer = _set_spec(tmp_path, {"o": AGENTS["oracle"]}, scorer={"type": "exact"})
    with pytest.raises(InvalidInput, match="other scorer than the set's"):
        anyio.run(sets.create, other_scorer, None, "s")
    fewer = _set_spec(tmp_path, {"o": AGENTS["oracle"]})
    fewer["tasks"] = fewer["tasks"][:2]
    with pytest.raises(InvalidInput, match="other tasks than the set's"):
        anyio.run(sets.create, fewer, None, "s")
    changed = _set_spec(tmp_path, {"noop": AGENTS["oracle"]})
    with pytest.raises(InvalidInput, match="exists with another config"):
        anyio.run(sets.create, changed, None, "s")
    assert sorted(p.name for p in (tmp_path / "state" / "campaigns").iterdir()) == before


def test_a_matrix_crosses_models_with_agent_configs() -> None:
    data = {
        "name": "grid",
        "tasks": [{"id": "t1", "answer": "1"}],
        "agents": {"floor": {"type": "noop"}},
        "matrix": {"models": ["m-1", "org/m2"], "agents": {"loop": {"type": "openai"}}},
    }
    _, per_agent = parse_eval_set(data)
    assert {name: spec["agent"] for name, spec in per_agent.items()} == {
        "floor": {"type": "noop"},
        "loop-m-1": {"type": "openai", "model": "m-1"},
        "loop-org-m2": {"type": "openai", "model": "org/m2"},
    }
    assert {spec["name"] for spec in per_agent.values()} == {
        "grid-floor",
        "grid-loop-m-1",
        "grid-loop-org-m2",
    }
