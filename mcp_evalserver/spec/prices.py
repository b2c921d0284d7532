"""Prices of model calls: US dollars per million tokens, by model, as a spec or a file gives them.

A price file is JSON: `{"models": {"<model>": {"input": 2.5, "cached_input": 1.25,
"output": 10.0}}}` (other top-level keys, such as `source`, are notes). The package ships one
for common models (`runtime/prices.json`); a file named by `$MCP_EVALSERVER_PRICES` and a
spec's `prices` (inline, or the path of such a file) override it model by model.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_evalserver.errors import InvalidInput


class ModelPrice(BaseModel):
    """What one model charges, in US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0, allow_inf_nan=False, description="Per million prompt tokens.")
    cached_input: float | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="Per million prompt tokens read from the provider's cache (default: input).",
    )
    output: float = Field(ge=0, allow_inf_nan=False, description="Per million completion tokens.")


class PriceFile(BaseModel):
    """The contents of a price file (keys besides `models` are notes, kept unread)."""

    model_config = ConfigDict(extra="allow")

    models: dict[str, ModelPrice]


def read_price_file(path: Path) -> dict[str, ModelPrice]:
    """The prices a file holds, by model.

    Raises:
        InvalidInput: the file is missing, not JSON, or not a price file.
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise InvalidInput(
            f"price file {path} does not exist; give the path of a JSON file"
        ) from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"price file {path} is not readable JSON: {exc}") from exc
    try:
        return PriceFile.model_validate(data).models
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"]) or "file"
        raise InvalidInput(
            f"price file {path}: {where}: {error['msg']}; write "
            '{"models": {"MODEL": {"input": 2.5, "cached_input": 1.25, "output": 10.0}}} '
            "(US dollars per million tokens)"
        ) from exc
