"""Writes the demo suite as a SWE-bench 5 task repository (sweb.yaml, tasks/<id>/...).

The repository holds the same instances as `<build>/tasks.jsonl`: a spec's `tasks` or
`import-predictions --instances` may name either, and they grade the same
(tests/demo/test_swebench_repo.py runs both). The demo's instances are folders, not images,
so each task.yaml gives `path` where a published one gives `image`.

Usage: python -m demo.write_swebench_repo OUT [--tasks FILE]   (after `python -m demo.build_suite`)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from demo.build_suite import DEFAULT_BUILD_DIR
from mcp_evalserver.errors import EvalServerError
from mcp_evalserver.spec.campaign import Task, load_tasks
from mcp_evalserver.spec.swebench_repos import write_task_repo

#: The dataset name sweb.yaml publishes the demo under.
DATASET = "mcp-evalserver/demo"
#: Task keys that are a SWE-bench column of another name.
_RENAMED = {"id": "instance_id", "prompt": "problem_statement"}
#: Keys the demo keeps in `metadata` that SWE-bench 5 gives task.yaml itself.
_LIFTED = ("log_parser", "eval_type")


def swebench_row(task: Task) -> dict[str, Any]:
    """A task as the row SWE-bench publishes (its own metadata under `metadata`)."""
    row = {_RENAMED.get(key, key): value for key, value in task.model_dump().items()}
    row = {key: value for key, value in row.items() if value is not None and value != []}
    row.setdefault("patch", "")
    row.setdefault("test_patch", "")
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        row[key] = getattr(task, key)
    metadata = dict(task.metadata)
    for key in _LIFTED:
        if key in metadata:
            row[key] = metadata.pop(key)
    row.setdefault("eval_type", "pass_and_fail")
    if metadata:
        row["metadata"] = metadata
    else:
        row.pop("metadata", None)
    if not task.network:
        row.pop("network", None)
    return row


def write_demo_repo(tasks_file: Path, out: Path) -> Path:
    """Writes the tasks of `tasks_file` as a task repository under `out`; returns `out`.

    Raises:
        InvalidInput: the tasks file is unreadable, or `out` is not empty.
    """
    return write_task_repo(
        (swebench_row(task) for task in load_tasks(tasks_file)), out, datasets=[DATASET]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out", type=Path, metavar="OUT", help="a new (or empty) folder")
    parser.add_argument("--tasks", type=Path, default=DEFAULT_BUILD_DIR / "tasks.jsonl")
    args = parser.parse_args(argv)
    if not args.tasks.is_file():
        print(
            f"error: no {args.tasks}; build the suite first: python -m demo.build_suite",
            file=sys.stderr,
        )
        return 1
    try:
        out = write_demo_repo(args.tasks, args.out)
    except EvalServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
