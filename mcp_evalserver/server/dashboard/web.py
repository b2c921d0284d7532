"""The dashboard's routes: server-rendered pages over the campaigns' ledgers, read-only.

`http.BearerAuth` and `http.HostGuard` stand in front of every route here (login aside); the
only writes are the login and logout of a session cookie. Endpoints are plain functions, so
Starlette runs them in its thread pool: a large ledger's first read or a report's bootstrap
never stalls the event loop that serves MCP.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import EvalServerError, InvalidInput, NotFound
from mcp_evalserver.server.dashboard import summaries, views
from mcp_evalserver.server.dashboard.ledgers import LedgerCache
from mcp_evalserver.server.dashboard.render import compile_templates, render
from mcp_evalserver.server.transport.http import LOGIN_PATH, SESSION_COOKIE, session_value

#: Refresh interval of the live parts of a page (short polling of server-rendered fragments).
POLL_MS = 1000


def _security_headers(nonce: str) -> dict[str, str]:
    # Agents write transcripts and logs: the pages run only the script the server put there.
    return {
        "content-security-policy": f"default-src 'none'; script-src 'nonce-{nonce}'; "
        "style-src 'unsafe-inline'; img-src data:; connect-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'",
        "x-content-type-options": "nosniff",
        # `same-origin`, not `no-referrer`: with no referrer a form post says `Origin: null`.
        "referrer-policy": "same-origin",
        "cache-control": "no-store",
    }


def _page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    nonce = secrets.token_urlsafe(12)
    html = render(template, nonce=nonce, poll_ms=POLL_MS, live=True, **context)
    return HTMLResponse(html, status_code=status, headers=_security_headers(nonce))


def _fragment(template: str, **context: Any) -> HTMLResponse:
    html = render(template, live=True, **context)
    return HTMLResponse(html, headers=_security_headers(secrets.token_urlsafe(12)))


def _error_page(view: Callable[[Request], Response]) -> Callable[[Request], Response]:
    """The view, with our errors shown as the error page (404 for what is not found)."""

    @functools.wraps(view)
    def shown(request: Request) -> Response:
        try:
            return view(request)
        except EvalServerError as exc:
            status = (
                404 if isinstance(exc, NotFound) else 400 if isinstance(exc, InvalidInput) else 500
            )
            return _page("error.html", status=status, message=str(exc))

    return shown


def start_summarising(cache: LedgerCache) -> threading.Thread:
    """`views.summarise_unsummarised` in a background thread at the lowest CPU priority, so
    the first pages of campaigns nobody viewed yet come from summaries (a 10,000-trajectory
    campaign costs about a second of CPU to read); a page asked meanwhile waits for that
    campaign's lock at most, and pages of other campaigns not at all."""

    def run() -> None:
        with contextlib.suppress(OSError):  # a thread is a task on Linux: its own nice value
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        views.summarise_unsummarised(cache)

    thread = threading.Thread(target=run, name="dashboard-summaries", daemon=True)
    thread.start()
    return thread


def dashboard_routes(state_dir: Path, token: str) -> list[BaseRoute]:
    """The dashboard's routes over the campaigns in `state_dir`."""
    cache = LedgerCache(CampaignStore(state_dir))
    session = session_value(token)
    # Work that depends on no campaign is done as the server starts, not by its first page.
    compile_templates()
    summaries.code_fingerprint()
    start_summarising(cache)

    def login_form(request: Request) -> Response:
        return _page("login.html", failed=False)

    async def login(request: Request) -> Response:
        form = await request.form()
        given = str(form.get("token", ""))
        if not hmac.compare_digest(given.encode(), token.encode()):
            return _page("login.html", status=401, failed=True)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            SESSION_COOKIE, session, httponly=True, samesite="strict", path="/", max_age=86400
        )
        return response

    def logout(request: Request) -> Response:
        response = RedirectResponse(LOGIN_PATH, status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    def campaigns(request: Request) -> Response:
        return _page("campaigns.html", rows=views.campaign_rows(cache), sets=views.set_rows(cache))

    def campaign_rows(request: Request) -> Response:
        return _fragment("campaign_rows.html", rows=views.campaign_rows(cache))

    def campaign_context(request: Request) -> dict[str, Any]:
        campaign_id = request.path_params["campaign_id"]
        ledger = cache.get(campaign_id)
        query = views.TableQuery.from_params(dict(request.query_params))
        page = f"/campaigns/{quote(campaign_id)}"
        live = f"{page}/live" + (f"?{request.url.query}" if request.url.query else "")
        return {
            **views.campaign_page(ledger, query),
            "static": False,
            "link": _linker(page, dict(request.query_params)),
            "poll_url": live,
        }

    @_error_page
    def campaign(request: Request) -> Response:
        return _page("campaign.html", **campaign_context(request))

    @_error_page
    def campaign_live(request: Request) -> Response:
        """The campaign page's content (what the page polls while the campaign runs)."""
        return _fragment("campaign_body.html", **campaign_context(request))

    @_error_page
    def trajectory(request: Request) -> Response:
        ledger = cache.get(request.path_params["campaign_id"])
        context = views.trajectory_page(ledger, request.path_params["trajectory_id"])
        return _page("trajectory.html", **context)

    @_error_page
    def compare(request: Request) -> Response:
        a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
        ids = cache.ids()
        if not a or not b:
            return _page("compare.html", ids=ids, chosen=(a, b), result=None)
        result = views.comparison_page(cache, a, b)
        return _page("compare.html", ids=ids, chosen=(a, b), result=result)

    @_error_page
    def evaluation_set(request: Request) -> Response:
        return _page("set.html", **views.set_page(cache, request.path_params["set_id"]))

    def api_campaigns(request: Request) -> Response:
        return JSONResponse({"campaigns": views.campaign_rows(cache)})

    def api_campaign(request: Request) -> Response:
        try:
            ledger = cache.get(request.path_params["campaign_id"])
            report = views.report_of(ledger)
        except EvalServerError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        return JSONResponse(report)

    return [
        Route(LOGIN_PATH, login_form, methods=["GET"]),
        Route(LOGIN_PATH, login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", campaigns, methods=["GET"]),
        Route("/fragments/campaigns", campaign_rows, methods=["GET"]),
        Route("/campaigns/{campaign_id}", campaign, methods=["GET"]),
        Route("/campaigns/{campaign_id}/live", campaign_live, methods=["GET"]),
        Route(
            "/campaigns/{campaign_id}/trajectories/{trajectory_id:path}",
            trajectory,
            methods=["GET"],
        ),
        Route("/compare", compare, methods=["GET"]),
        Route("/sets/{set_id}", evaluation_set, methods=["GET"]),
        Route("/api/campaigns", api_campaigns, methods=["GET"]),
        Route("/api/campaigns/{campaign_id}", api_campaign, methods=["GET"]),
    ]


def _linker(path: str, current: dict[str, str]) -> Any:
    """`link(**changes)`: the page at `path` with some query parameters changed."""

    def link(**changes: Any) -> str:
        params = {**current, **{k: str(v) for k, v in changes.items() if v is not None}}
        params = {k: v for k, v in params.items() if v != ""}
        return f"{path}?{urlencode(params)}" if params else path

    return link
