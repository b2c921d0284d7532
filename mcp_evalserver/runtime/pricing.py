"""What a model call cost: the provider's own figure where it gives one, else its tokens times
the price table; unknown (None) when neither is known, never a guessed 0.

The table is the package's `prices.json` (common models), then the file named by
`$MCP_EVALSERVER_PRICES`, then the campaign spec's `prices`, each overriding the one before
model by model. A model is looked up by its name as given, then without a provider prefix
(`openrouter/openai/gpt-4o` -> `gpt-4o`) and without a date or `-latest` suffix
(`claude-3-5-haiku-20241022` -> `claude-3-5-haiku`).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from mcp_evalserver.spec.prices import ModelPrice, PriceFile, read_price_file
from mcp_evalserver.spec.submission import ModelUsage, UsageSource

#: Names a price file whose prices override the shipped ones (a spec's `prices` override both).
PRICES_ENV = "MCP_EVALSERVER_PRICES"

PricedBy = Literal["provider", "table"]
_SUFFIX = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|-latest)$")


@dataclass(frozen=True)
class Priced:
    """A call's cost in US dollars and where it came from; both None when it is unknown."""

    cost_usd: float | None
    priced_by: PricedBy | None


#: Records the usage of model calls for one trajectory (a ledger record) and returns what
#: they cost. Raises InvalidInput when the campaign has a budget and the cost is unknown.
Meter = Callable[[ModelUsage, UsageSource], Awaitable[Priced]]


class PriceTable:
    """Prices by model name (lower case)."""

    def __init__(self, prices: Mapping[str, ModelPrice]) -> None:
        self.prices = {name.lower(): price for name, price in prices.items()}

    @classmethod
    def for_campaign(
        cls,
        overrides: Mapping[str, ModelPrice] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> PriceTable:
        """The shipped prices, then `$MCP_EVALSERVER_PRICES`'s file (in `environ`, default
        this process's environment when called), then `overrides`.

        Raises:
            InvalidInput: the file the variable names is missing or not a price file.
        """
        prices = dict(shipped_prices())
        if path := (os.environ if environ is None else environ).get(PRICES_ENV):
            prices.update(read_price_file(Path(path)))
        prices.update(overrides or {})
        return cls(prices)

    def lookup(self, model: str | None) -> ModelPrice | None:
        """The price of `model`, or None when the table does not know it."""
        if not model:
            return None
        for name in _candidates(model.lower()):
            if (price := self.prices.get(name)) is not None:
                return price
        return None

    def price(self, usage: ModelUsage) -> Priced:
        """What `usage` cost: the provider's figure, else the table's, else unknown."""
        if usage.cost_usd is not None:
            return Priced(usage.cost_usd, "provider")
        price = self.lookup(usage.model)
        if price is None:
            return Priced(None, None)
        cached = usage.cached_input_tokens
        cached_rate = price.input if price.cached_input is None else price.cached_input
        dollars = (
            (usage.input_tokens - cached) * price.input
            + cached * cached_rate
            + usage.output_tokens * price.output
        ) / 1_000_000
        return Priced(round(dollars, 10), "table")


def _candidates(name: str) -> list[str]:
    found = [name]
    parts = name.split("/")
    for start in range(1, len(parts)):
        found.append("/".join(parts[start:]))
    return found + [short for n in found if (short := undated(n)) != n]


def undated(name: str) -> str:
    """`name` without a date or `-latest` suffix (`gpt-5-2025-08-07` -> `gpt-5`)."""
    return _SUFFIX.sub("", name)


@functools.cache
def shipped_prices() -> dict[str, ModelPrice]:
    """The prices the package ships (`prices.json`)."""
    text = resources.files("mcp_evalserver.runtime").joinpath("prices.json").read_text()
    return PriceFile.model_validate(json.loads(text)).models
