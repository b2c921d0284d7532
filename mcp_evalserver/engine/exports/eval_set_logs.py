"""An evaluation set as `inspect eval-set` lays out its log directory: one `.eval` log per
agent, named `<created>_<task>_<id>.eval` as Inspect names them, each carrying the set's id,
beside `eval-set.json` (the set's id and one entry per log) and `logs.json` (Inspect's
manifest of the directory's log headers), so `inspect view` and `list_eval_logs` read it as a
set.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp_evalserver.engine.eval_sets import EvalSetStore
from mcp_evalserver.engine.exports.inspect_log import (
    iso_time,
    model_name,
    off_the_callers_loop,
    require_inspect,
    write_inspect_log,
)
from mcp_evalserver.engine.exports.transcripts import exported_trajectories
from mcp_evalserver.runtime.atomic_files import write_atomically

EVAL_SET_FILE = "eval-set.json"


def write_eval_set_logs(sets: EvalSetStore, set_id: str, out: Path) -> list[Path]:
    """Writes the set's logs into directory `out` (made if missing); returns the logs written.

    Raises:
        NotFound: no such set.
        InvalidInput: Inspect AI is not installed.
        OSError: `out` cannot be written.
    """
    require_inspect()
    from inspect_ai._util.log_layout import eval_log_name
    from inspect_ai.log import write_log_dir_manifest

    evalset = sets.load(set_id)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    entries = []
    for sequence, (agent, campaign_id) in enumerate(evalset.campaigns.items()):
        state = sets.campaigns.load(campaign_id)
        items = exported_trajectories(state, sets.campaigns.directory(campaign_id))
        model = model_name(state)
        created = iso_time(state.created_ts)
        name = eval_log_name(task=state.spec.name, task_id=state.id, created=created, model=model)
        path = out / f"{name}.eval"
        write_inspect_log(state, items, path, eval_set_id=evalset.id)
        written.append(path)
        entries.append(
            {
                "name": state.spec.name,
                "task_id": state.id,
                "task_file": None,
                "task_args": {"agent": agent},
                "model": model,
                "model_args": {},
                "model_roles": None,
                "sequence": sequence,
            }
        )
    manifest = {"eval_set_id": evalset.id, "tasks": entries}
    write_atomically(out / EVAL_SET_FILE, (json.dumps(manifest, indent=2) + "\n").encode())
    # It reads the logs' headers back with Inspect's sync reader.
    off_the_callers_loop(lambda: write_log_dir_manifest(str(out)))
    return written
