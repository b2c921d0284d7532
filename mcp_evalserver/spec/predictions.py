"""SWE-bench predictions, as a predictions agent reads them and the harness writes them.

`.json` (an array, or an object keyed by instance id as SWE-agent writes it) or `.jsonl`, each
with `instance_id`, `model_name_or_path`, `model_patch`. The source `gold` means each instance's
own `patch` under the model name `gold`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from mcp_evalserver.errors import InvalidInput, NotFound

GOLD = "gold"


class GoldSource(Protocol):
    """What a gold prediction is made from: an instance's id and its own patch."""

    @property
    def instance_id(self) -> str: ...

    @property
    def patch(self) -> str: ...


class Prediction(BaseModel):
    """A model's patch for one instance; `model_patch` None or "" is an empty prediction."""

    model_config = ConfigDict(extra="allow")

    instance_id: str
    model_name_or_path: str
    model_patch: str | None

    @property
    def is_empty(self) -> bool:
        """Empty predictions are counted in the summary but never evaluated."""
        return not self.model_patch


_ModelT = TypeVar("_ModelT", bound=BaseModel)


def read_records(path: Path) -> list[Any]:
    """The JSON values in a `.json` or `.jsonl` file (a `.json` object gives its values)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise NotFound(f"no such file: {path}") from error
    except OSError as error:
        raise InvalidInput(f"cannot read {path}: {error}") from error
    if path.suffix == ".jsonl":
        records = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError as error:
                    raise InvalidInput(f"{path}:{number}: not JSON: {error}") from error
        return records
    if path.suffix != ".json":
        raise InvalidInput(f"{path}: expected a .json or .jsonl file")
    try:
        data = json.loads(text)
    except ValueError as error:
        raise InvalidInput(f"{path}: not JSON: {error}") from error
    if isinstance(data, dict):
        data = list(data.values())
    if not isinstance(data, list):
        raise InvalidInput(f"{path}: expected a JSON array (or an object keyed by instance id)")
    return data


def validate_records(
    model: type[_ModelT], records: Iterable[Any], path: Path, key: Callable[[_ModelT], str]
) -> list[_ModelT]:
    """Each record as `model`, its key (the instance id) unique.

    Raises:
        InvalidInput: a record does not fit `model`, or its key repeats.
    """
    items: list[_ModelT] = []
    seen: set[str] = set()
    for number, record in enumerate(records, start=1):
        try:
            item = model.model_validate(record)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "record"
            raise InvalidInput(f"{path}: record {number}: {where}: {first['msg']}") from error
        instance_id = key(item)
        if instance_id in seen:
            raise InvalidInput(f"{path}: record {number}: duplicate instance_id {instance_id!r}")
        seen.add(instance_id)
        items.append(item)
    return items


def _instance_id(prediction: Prediction) -> str:
    return prediction.instance_id


def load_predictions(source: str | Path, instances: Sequence[GoldSource] = ()) -> list[Prediction]:
    """Reads predictions from a file, or makes them from `instances` when `source` is `gold`.

    Raises:
        NotFound: the file does not exist.
        InvalidInput: not JSON, a record misses a field, or an instance id repeats.
    """
    if str(source) == GOLD:
        return [
            Prediction(instance_id=i.instance_id, model_name_or_path=GOLD, model_patch=i.patch)
            for i in instances
        ]
    path = Path(source)
    return validate_records(Prediction, read_records(path), path, _instance_id)
