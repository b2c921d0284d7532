"""The templates (Jinja2, autoescaped) and the static report: one HTML file, nothing fetched.

Every page inlines its stylesheet and its few lines of script, so the static report is the
campaign page itself rendered with `static=True`: every row on one page, sorting and
filtering done in the browser, no polling, no links to pages that a file does not have.
"""

from __future__ import annotations

import datetime
import secrets
import time
from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.server.dashboard import views
from mcp_evalserver.server.dashboard.ledgers import LedgerCache


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _usd(value: float | None) -> str:
    return "–" if value is None else f"${value:.4f}"


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 120:
        return f"{value:.2f}s"
    minutes, seconds = divmod(int(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"


def _interval(interval: dict[str, Any] | None) -> str:
    if not interval:
        return "no interval"
    return (
        f"{100 * interval['confidence']:.0f}% CI {_percent(interval['low'])}–"
        f"{_percent(interval['high'])} ({interval['method']})"
    )


def _signed_interval(interval: dict[str, Any] | None) -> str:
    if not interval:
        return "no interval"
    low, high = 100 * interval["low"], 100 * interval["high"]
    level = 100 * interval["confidence"]
    return f"{level:.0f}% CI {low:+.1f} to {high:+.1f} points ({interval['method']})"


def _timestamp(epoch: float | None) -> str:
    if epoch is None:
        return "–"
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("mcp_evalserver.server.dashboard", "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        percent=_percent,
        usd=_usd,
        seconds=_seconds,
        interval=_interval,
        signed_interval=_signed_interval,
        timestamp=_timestamp,
    )
    return env


def compile_templates() -> None:
    """Compiles every template now (~60 ms), so a server's first visitor does not wait for it."""
    env = environment()
    for name in env.list_templates(filter_func=lambda name: name.endswith(".html")):
        env.get_template(name)


def render(template: str, **context: Any) -> str:
    """A page or fragment from the templates."""
    return environment().get_template(template).render(**context)


def static_report(store: CampaignStore, campaign_id: str) -> str:
    """The campaign page as one self-contained HTML file (for CI artifacts).

    Raises:
        NotFound: no such campaign.
        LedgerCorrupt: its ledger is corrupt.
    """
    ledger = LedgerCache(store).get(campaign_id)
    context = views.campaign_page(ledger, views.TableQuery(), everything=True)
    return render(
        "campaign.html",
        nonce=secrets.token_urlsafe(12),
        poll_ms=0,
        live=False,
        static=True,
        generated=time.time(),
        link=lambda **_: "#",
        **context,
    )
