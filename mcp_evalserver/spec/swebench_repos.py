"""SWE-bench 5 task repositories: the folder layout `swebench.task.repo` (swebench 5.0.2) reads.

    sweb.yaml                 the datasets the repository publishes, and their splits
    tasks/<instance_id>/
        task.yaml             instance_id, repo, base_commit, version, split, image, log_parser, ...
        tests.json            {"FAIL_TO_PASS": [...], "PASS_TO_PASS": [...]}
        problem_statement.md  gold.patch  test.patch  eval.sh  (hints.md when there are hints)

`read_task_repo` gives each task as the row SWE-bench publishes for it: task.yaml's keys, one
column per file, the test lists, without `split` and `datasets` (they route a task to a
dataset and are no column). That is the row a SWE-bench JSONL line holds, so everything past
the reader (tasks, the `tests` scorer, `import-predictions`) cannot tell which it read.

Stricter than swebench's own loader, which takes any key and skips what it cannot use: an
unknown or missing key, a folder without task.yaml or a missing file is an error naming the
file and the field (a typo must not quietly change or shrink a run). A key of one's own goes
under `metadata:`. Besides `image`, a task may give `path` (and `workdir`, `setup`, `paths`,
`network`): where its instance lives on the local backend, which SWE-bench has no key for.

In `spec`, not `scoring/swebench`: a spec's `tasks` may name a task repository and the spec
loader may import nothing above `spec`; `import-predictions` (engine) reads it from here too.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from mcp_evalserver.errors import InvalidInput

CONFIG_FILE = "sweb.yaml"
TASKS_DIR = "tasks"
TASK_FILE = "task.yaml"
TESTS_FILE = "tests.json"
TEST_KEYS = ("FAIL_TO_PASS", "PASS_TO_PASS")
#: Columns kept as files of their own, as swebench keeps them (`AS_FILE`); each must exist.
AS_FILE = {
    "patch": "gold.patch",
    "test_patch": "test.patch",
    "eval_script": "eval.sh",
    "problem_statement": "problem_statement.md",
}
#: Written only when non-empty; a task without one has `hints_text` "" (as in swebench).
OPTIONAL_FILE = {"hints_text": "hints.md"}
REQUIRED_KEYS = ("instance_id", "repo", "base_commit", "version", "split", "log_parser")
#: Where the instance runs: one of these is required.
ENVIRONMENT_KEYS = ("image", "path")
#: The other keys task.yaml may hold: swebench's (`eval_type`, `datasets`, dataset columns)
#: and ours for instances outside an image.
OPTIONAL_KEYS = (
    "eval_type",
    "datasets",
    "created_at",
    "environment_setup_commit",
    "difficulty",
    "workdir",
    "setup",
    "paths",
    "network",
    "metadata",
)
KNOWN_KEYS = (*REQUIRED_KEYS, *ENVIRONMENT_KEYS, *OPTIONAL_KEYS)
#: Keys that route a task to a dataset; swebench drops them from the published rows.
ROUTING_KEYS = ("split", "datasets")
_STRING_KEYS = frozenset(KNOWN_KEYS) - {"datasets", "setup", "paths", "network", "metadata"}

logger = logging.getLogger(__name__)


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]  # yaml has no type stubs here
    """Multi-line strings as literal blocks, as swebench writes task.yaml."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> Any:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _represent_str)


def is_task_repo(path: Path) -> bool:
    """Whether `path` is a folder that says it is a task repository (it holds sweb.yaml)."""
    return (path / CONFIG_FILE).is_file()


def read_task_repo(root: Path) -> list[dict[str, Any]]:
    """The tasks of the splits sweb.yaml publishes, each as SWE-bench publishes its row.

    Tasks in other splits (`deprecated`, say) are left out, and the log says how many.

    Raises:
        InvalidInput: no sweb.yaml, or a file or key is missing, unknown or malformed (the
            message names the file and the field); no task is in a published split.
    """
    splits = _published_splits(root)
    tasks_dir = root / TASKS_DIR
    if not tasks_dir.is_dir():
        raise InvalidInput(
            f"{tasks_dir} is missing: a SWE-bench task repository keeps each instance in "
            f"a folder of its own under {TASKS_DIR}/"
        )
    rows: list[dict[str, Any]] = []
    left_out: Counter[str] = Counter()
    for folder in sorted(entry for entry in tasks_dir.iterdir() if entry.is_dir()):
        row = read_task(folder)
        split = row.pop("split")
        row.pop("datasets", None)
        if split in splits:
            rows.append(row)
        else:
            left_out[split] += 1
    if left_out:
        logger.warning(
            "%s: %d task(s) left out, in split(s) %s does not publish: %s",
            root,
            sum(left_out.values()),
            CONFIG_FILE,
            ", ".join(sorted(left_out)),
        )
    if not rows:
        found = ", ".join(sorted(left_out)) or "none: tasks/ holds no task folder"
        raise InvalidInput(
            f"{root / CONFIG_FILE}: splits: no task is in {', '.join(splits)} (the tasks' "
            f"splits: {found}); add their split to `splits`, or put tasks under {TASKS_DIR}/"
        )
    return rows


def read_task(folder: Path) -> dict[str, Any]:
    """One task folder as its row, `split` and `datasets` included.

    Raises:
        InvalidInput: a file or key is missing, unknown or malformed.
    """
    meta_path = folder / TASK_FILE
    if not meta_path.is_file():
        raise InvalidInput(
            f"{meta_path} is missing: each folder under {TASKS_DIR}/ is one instance and needs "
            f"a {TASK_FILE} (or move the folder out of {TASKS_DIR}/)"
        )
    meta = _load_yaml(meta_path)
    check_task_keys(meta, meta_path)
    if meta["instance_id"] != folder.name:
        raise InvalidInput(
            f"{meta_path}: instance_id: {meta['instance_id']!r}, but the folder is "
            f"{TASKS_DIR}/{folder.name}; the two must match (rename one)"
        )
    row = dict(meta)
    for column, filename in AS_FILE.items():
        path = folder / filename
        if not path.is_file():
            raise InvalidInput(
                f"{path} is missing: every task needs {', '.join(AS_FILE.values())} "
                "(a patch may be empty)"
            )
        row[column] = _read(path)
    for column, filename in OPTIONAL_FILE.items():
        path = folder / filename
        row[column] = _read(path) if path.is_file() else ""
    row.update(_read_tests(folder / TESTS_FILE))
    return row


def check_task_keys(meta: Mapping[str, Any], where: object) -> None:
    """What task.yaml must hold: the required keys, an environment, no unknown key, strings
    where strings belong.

    Raises:
        InvalidInput: naming `where` and the key.
    """
    unknown = [key for key in meta if key not in KNOWN_KEYS]
    if unknown:
        name = str(unknown[0])
        close = difflib.get_close_matches(name, KNOWN_KEYS, n=1, cutoff=0.8)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidInput(
            f"{where}: {name}: unknown key{hint}; task.yaml knows {', '.join(KNOWN_KEYS)}, "
            "and a key of your own goes under `metadata:`"
        )
    missing = [key for key in REQUIRED_KEYS if key not in meta]
    if missing:
        raise InvalidInput(
            f"{where}: {', '.join(missing)}: missing; every task.yaml needs "
            f"{', '.join(REQUIRED_KEYS)} and an `image` (or, on the local backend, a `path`)"
        )
    if not any(key in meta for key in ENVIRONMENT_KEYS):
        raise InvalidInput(
            f"{where}: image: missing; give the instance's image (`image: "
            "swebench/sweb.eval.x86_64.<id>:latest`) or, on the local backend, its folder as "
            "`path`"
        )
    for key in _STRING_KEYS & set(meta):
        value = meta[key]
        if not isinstance(value, str):
            # YAML reads `version: 3.10` as the number 3.1 and `base_commit: 1234567` as an int.
            raise InvalidInput(
                f"{where}: {key}: YAML read {value!r}, a {type(value).__name__}, not text; put "
                f"the value in quotes (`{key}: '...'`): unquoted, `3.10` reads as 3.1"
            )
    datasets = meta.get("datasets", [])
    if not isinstance(datasets, list) or not all(isinstance(d, str) for d in datasets):
        raise InvalidInput(f"{where}: datasets: expected a list of dataset names")
    if not isinstance(meta.get("metadata", {}), dict):
        raise InvalidInput(f"{where}: metadata: expected a mapping (key: value lines)")


def write_task_repo(
    instances: Iterable[Mapping[str, Any]],
    out: Path,
    *,
    datasets: Sequence[str],
    split: str = "test",
) -> Path:
    """Writes SWE-bench rows as a task repository under `out` (absent or empty); returns it.

    A row holds the file columns (`patch`, `test_patch`, `eval_script`, `problem_statement`,
    `hints_text`), the test lists (lists or JSON text) and task.yaml's keys; `split` and
    `datasets` are added where a row has none. What the reader would refuse is refused here.

    Raises:
        InvalidInput: `out` holds files, or a row lacks a column or holds an unknown key.
    """
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InvalidInput(f"{out} is not an empty folder; give a new one")
    prepared = [_prepared(row, split=split, datasets=datasets) for row in instances]
    names = Counter(meta["instance_id"] for meta, _, _ in prepared)
    twice = sorted(name for name, count in names.items() if count > 1)
    if twice:
        raise InvalidInput(f"instance_id {twice[0]!r} appears twice")
    for meta, files, tests in prepared:
        folder = out / TASKS_DIR / meta["instance_id"]
        folder.mkdir(parents=True)
        (folder / TASK_FILE).write_text(_dump_yaml(meta), encoding="utf-8")
        (folder / TESTS_FILE).write_text(
            json.dumps(tests, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        for filename, text in files.items():
            with open(folder / filename, "w", encoding="utf-8", newline="") as handle:
                handle.write(text)
    config = {
        "datasets": list(datasets),
        "splits": sorted({meta["split"] for meta, *_ in prepared}),
    }
    (out / CONFIG_FILE).write_text(_dump_yaml(config), encoding="utf-8")
    return out


def _prepared(
    row: Mapping[str, Any], *, split: str, datasets: Sequence[str]
) -> tuple[dict[str, Any], dict[str, str], dict[str, list[str]]]:
    """task.yaml's keys, the files by name and the test lists of one row."""
    where = f"instance {row.get('instance_id', '(no instance_id)')}"
    files: dict[str, str] = {}
    for column, filename in AS_FILE.items():
        text = row.get(column)
        if not isinstance(text, str):
            raise InvalidInput(f"{where}: {column}: missing (it becomes {filename})")
        files[filename] = text
    for column, filename in OPTIONAL_FILE.items():
        if row.get(column):
            files[filename] = str(row[column])
    tests = {key: _test_list(row.get(key), f"{where}: {key}") for key in TEST_KEYS}
    meta = {
        key: value
        for key, value in row.items()
        if key not in AS_FILE and key not in OPTIONAL_FILE and key not in TEST_KEYS
    }
    meta.setdefault("split", split)
    meta.setdefault("datasets", list(datasets))
    check_task_keys(meta, where)
    if "/" in meta["instance_id"] or meta["instance_id"] in ("", ".", ".."):
        raise InvalidInput(
            f"{where}: instance_id: not a folder name; SWE-bench names a task's folder after it"
        )
    return meta, files, tests


def _published_splits(root: Path) -> list[str]:
    config_path = root / CONFIG_FILE
    if not config_path.is_file():
        raise InvalidInput(
            f"{root} has no {CONFIG_FILE}, so it is not a SWE-bench task repository: add "
            f"{config_path} naming what it publishes (`datasets: [NAME]`, `splits: [test]`), "
            "or give a .jsonl/.json task file"
        )
    config = _load_yaml(config_path)
    datasets = config.get("datasets")
    if not datasets or not isinstance(datasets, list):
        raise InvalidInput(
            f"{config_path}: datasets: missing or empty; name the datasets the repository "
            "publishes (`datasets: [NAME]`)"
        )
    splits = config.get("splits", ["test"])
    if not splits or not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
        raise InvalidInput(
            f"{config_path}: splits: expected a list of split names (`splits: [test]`)"
        )
    return splits


def _read_tests(path: Path) -> dict[str, list[str]]:
    if not path.is_file():
        raise InvalidInput(
            f"{path} is missing: every task needs one, holding "
            '{"FAIL_TO_PASS": [test, ...], "PASS_TO_PASS": [test, ...]}'
        )
    try:
        tests = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        raise InvalidInput(f"{path} is not JSON: {exc}") from exc
    if not isinstance(tests, dict):
        raise InvalidInput(f"{path}: expected an object with FAIL_TO_PASS and PASS_TO_PASS")
    unknown = sorted(set(tests) - set(TEST_KEYS))
    if unknown:
        raise InvalidInput(
            f"{path}: {unknown[0]}: unknown key; {TESTS_FILE} holds FAIL_TO_PASS and "
            "PASS_TO_PASS only"
        )
    for key in TEST_KEYS:
        if key not in tests:
            raise InvalidInput(f"{path}: {key}: missing; give it as a list (may be empty)")
    return {key: _test_list(tests[key], f"{path}: {key}") for key in TEST_KEYS}


def _test_list(value: Any, where: str) -> list[str]:
    if isinstance(value, str):  # SWE-bench's datasets ship the lists as JSON text
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError as exc:
            raise InvalidInput(f"{where}: not a JSON list of test names: {exc}") from exc
    if not isinstance(value, list) or not all(isinstance(test, str) for test in value):
        raise InvalidInput(f"{where}: expected a list of test names (strings)")
    return value


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidInput(f"{path}: expected `key: value` lines, got {type(data).__name__}")
    return data


def _dump_yaml(data: Mapping[str, Any]) -> str:
    # The same options as swebench's `dump_yaml`, so a written repository reads as theirs.
    text: str = yaml.dump(
        dict(data), Dumper=_Dumper, sort_keys=True, allow_unicode=True, default_flow_style=False
    )
    return text


def _read(path: Path) -> str:
    # newline="": a CRLF inside a patch must survive, as in swebench's reader.
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()
