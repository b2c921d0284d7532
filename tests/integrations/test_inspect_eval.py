"""`inspect eval` on the command line runs a task in `evalserver` sandboxes, mock model, no key.

The task (inspect_eval/sandbox_task.py) names Inspect's `mockllm/model` itself: the command
line cannot hand mockllm an answer with its usage filled in (see `mock_answer`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log

from tests.root import require_root
from tests.sandbox.docker_support import require_docker

pytestmark = pytest.mark.slow

TASK = Path(__file__).parents[2] / "examples" / "inspect" / "sandbox_task.py"


def inspect_eval(*args: str, log_dir: Path) -> Path:
    """Runs `inspect eval` on the example task; returns its JSON log."""
    inspect = Path(sys.executable).with_name("inspect")
    run = subprocess.run(
        [str(inspect), "eval", f"{TASK}@sandbox_task", "--epochs", "2", *args,
         "--log-dir", str(log_dir), "--log-format", "json", "--display", "plain"],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "INSPECT_LOG_LEVEL": "warning"},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (log_file,) = log_dir.glob("*.json")
    return log_file


def assert_every_sample_scored_correct(log_file: Path) -> None:
    log = read_eval_log(str(log_file))
    assert log.status == "success", log.error
    assert log.samples is not None
    scored = {(s.id, s.epoch): s.scores for s in log.samples}
    assert set(scored) == {(i, e) for i in (1, 2, 3) for e in (1, 2)}
    for key, scores in scored.items():
        assert scores is not None, key
        (score,) = scores.values()
        assert score.value == "C", (key, score.explanation)


@pytest.mark.docker
def test_the_example_task_runs_as_the_readme_says_on_the_docker_backend(tmp_path: Path) -> None:
    require_docker()  # builds the base image the example's evalserver.yaml names
    assert_every_sample_scored_correct(inspect_eval(log_dir=tmp_path))


def test_inspect_eval_runs_every_sample_and_epoch_in_its_own_workspace_and_scores_each(
    tmp_path: Path,
) -> None:
    require_root()
    instance = tmp_path / "instance"
    instance.mkdir()
    config = tmp_path / "evalserver.yaml"
    # A relative path: resolved against the config file's directory.
    config.write_text("path: instance\nsetup:\n  - echo base > base.txt\n")
    log_file = inspect_eval("-T", f"sandbox={config}", log_dir=tmp_path / "logs")
    assert_every_sample_scored_correct(log_file)
    # The samples wrote into their workspaces, never into the instance directory.
    assert sorted(p.name for p in instance.iterdir()) == ["base.txt"]
