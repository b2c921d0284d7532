"""Who may read the dashboard: the token (as a bearer header or a session cookie from the
login form) is required on every page and data endpoint, the Host must be this server's, and
nothing but logging in and out is accepted."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest

from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.server.transport.http import SESSION_COOKIE, session_value
from mcp_evalserver.spec.campaign import CampaignSpec
from tests.dashboard.helpers import TOKEN, dashboard_server

pytestmark = pytest.mark.anyio

PAGES = [
    "/",
    "/fragments/campaigns",
    "/campaigns/c1",
    "/campaigns/c1/live",
    "/campaigns/c1/trajectories/t1@0",
    "/compare?a=c1&b=c1",
    "/api/campaigns",
    "/api/campaigns/c1",
]


async def _campaign(state_dir: Path) -> None:
    spec = CampaignSpec.model_validate(
        {
            "name": "access",
            "tasks": [{"id": "t1", "prompt": "1?", "answer": "secret-answer-1"}],
            "agent": {"type": "oracle"},
        }
    )
    store = CampaignStore(state_dir)
    await store.create(spec, "c1")
    await CampaignRunner(store, "c1").run()


async def test_without_the_token_every_page_and_data_endpoint_is_refused(tmp_path: Path) -> None:
    await _campaign(tmp_path)
    with anyio.fail_after(30):
        async with dashboard_server(tmp_path) as base, httpx2.AsyncClient(base_url=base) as client:
            for path in PAGES:
                for headers in (
                    {},
                    {"authorization": "Bearer wrong-token-0123456789"},
                    {"cookie": f"{SESSION_COOKIE}=forged"},
                    # The token itself is not a session: only the login form makes one.
                    {"cookie": f"{SESSION_COOKIE}={TOKEN}"},
                ):
                    response = await client.get(path, headers=headers)
                    assert response.status_code == 401, (path, headers)
                    assert "secret-answer-1" not in response.text
                    assert "t1@0" not in response.text
                # A browser asking for a page is sent to the login form, with nothing else.
                page = await client.get(path, headers={"accept": "text/html"})
                assert page.status_code == 303
                assert page.headers["location"] == "/login"
                assert page.content == b""


async def test_with_the_token_every_page_answers_and_the_session_does_not_open_mcp(
    tmp_path: Path,
) -> None:
    await _campaign(tmp_path)
    with anyio.fail_after(30):
        async with dashboard_server(tmp_path) as base, httpx2.AsyncClient(base_url=base) as client:
            bearer = {"authorization": f"Bearer {TOKEN}"}
            for path in PAGES:
                assert (await client.get(path, headers=bearer)).status_code == 200, path

            wrong = await client.post("/login", data={"token": "not-the-token-0123456789"})
            assert wrong.status_code == 401
            assert SESSION_COOKIE not in wrong.cookies
            login = await client.post("/login", data={"token": TOKEN})
            assert login.status_code == 303
            assert login.headers["location"] == "/"
            cookie = login.headers["set-cookie"]
            assert "HttpOnly" in cookie
            assert "SameSite=strict" in cookie
            assert TOKEN not in cookie
            assert session_value(TOKEN) in cookie
            session = {"cookie": f"{SESSION_COOKIE}={session_value(TOKEN)}"}
            for path in PAGES:
                assert (await client.get(path, headers=session)).status_code == 200, path
            page = await client.get("/campaigns/c1/trajectories/t1@0", headers=session)
            assert "secret-answer-1" in page.text
            assert "script-src 'nonce-" in page.headers["content-security-policy"]
            # MCP clients send the bearer header: a browser's cookie never reaches /mcp.
            mcp = await client.post("/mcp", headers=session, json={})
            assert mcp.status_code == 401


async def test_a_foreign_host_or_origin_is_refused_even_with_the_token(tmp_path: Path) -> None:
    await _campaign(tmp_path)
    bearer = {"authorization": f"Bearer {TOKEN}"}
    with anyio.fail_after(30):
        async with dashboard_server(tmp_path) as base, httpx2.AsyncClient(base_url=base) as client:
            for path in [*PAGES, "/login"]:
                rebound = await client.get(path, headers={**bearer, "host": "evil.example"})
                assert rebound.status_code == 421, path
                assert "secret-answer-1" not in rebound.text
                foreign = await client.get(
                    path, headers={**bearer, "origin": "http://evil.example"}
                )
                assert foreign.status_code == 403, path
            login = await client.post(
                "/login", data={"token": TOKEN}, headers={"origin": "http://evil.example:80"}
            )
            assert login.status_code == 403
            assert "set-cookie" not in login.headers
            assert (await client.get("/", headers={**bearer, "host": "localhost:1"})).is_success


async def test_the_dashboard_is_read_only_and_names_no_path_outside_the_state(
    tmp_path: Path,
) -> None:
    await _campaign(tmp_path)
    (tmp_path / "ledger.jsonl").write_text("{}\n")
    bearer = {"authorization": f"Bearer {TOKEN}"}
    with anyio.fail_after(30):
        async with dashboard_server(tmp_path) as base, httpx2.AsyncClient(base_url=base) as client:
            for method in ("POST", "PUT", "PATCH", "DELETE"):
                for path in PAGES:
                    response = await client.request(method, path, headers=bearer)
                    assert response.status_code == 405, (method, path)
            # (A bare `..` is resolved by the client before it is sent: sent encoded here.)
            for campaign in ("..%2F..", "%2E%2E", "%2E", "missing"):
                response = await client.get(f"/campaigns/{campaign}", headers=bearer)
                assert response.status_code == 404, campaign
                api = await client.get(f"/api/campaigns/{campaign}", headers=bearer)
                assert api.status_code == 404, campaign
