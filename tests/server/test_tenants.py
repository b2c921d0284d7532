"""Over HTTP a token holder is a tenant: nothing of the server's reaches them.

Tried as a tenant would, over a real HTTP server (uvicorn on loopback, bearer token, the SDK's
client) whose environment holds the operator's OpenAI organisation, project and keys: a
`base_url` naming a loopback listener that records every request reaching it, a link-local
metadata address, an allowed endpoint that redirects elsewhere, and ten variable names probed
as API keys.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_evalserver.engine.store import CampaignStore
from tests.agents.fake_openai import Failure, FakeOpenAI, Reply, Seen, serving
from tests.agents.fake_openai import call as fake_call
from tests.server.helpers import answer_spec, attempt
from testsupport.servers import http_client, http_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ORG, PROJECT = "org-operator-5e1d", "proj-operator-9c2a"
KEY_ENV, KEY = "MCP_EVALSERVER_TEST_PROVIDER_KEY", "sk-provider-77aa"
SECRET_ENV = "MCP_EVALSERVER_TEST_SERVER_SECRET"
#: What a request to an endpoint other than the operator's own may carry: the client's own
#: plumbing, the key the spec may use, the harness's idempotency headers.
PLAIN_HEADERS = {
    "host",
    "accept",
    "accept-encoding",
    "connection",
    "content-length",
    "content-type",
    "user-agent",
    "authorization",
    "x-mcp-evalserver-idempotency-key",
    "x-mcp-evalserver-attempt",
}


@pytest.fixture
def operator_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's environment (the servers are children of this test)."""
    monkeypatch.setenv("OPENAI_ORG_ID", ORG)
    monkeypatch.setenv("OPENAI_PROJECT_ID", PROJECT)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-operator-openai-1f0e")
    monkeypatch.setenv("OPENAI_ADMIN_KEY", "sk-admin-operator-3b7c")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Operator-Gateway: gw-secret-8d1a")
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(SECRET_ENV, "server-secret-4f1c")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def endpoint() -> FakeOpenAI:
    """An OpenAI-compatible endpoint that answers the agent (submit "1") and the judge (yes)."""

    def answer(body: dict[str, Any]) -> Reply:
        if body.get("tools"):
            return fake_call("submit", answer="1")
        return Reply(content=json.dumps({"fulfilled": True, "reason": "scripted"}))

    return FakeOpenAI([], then=answer)


def agent(url: str, **fields: Any) -> dict[str, Any]:
    config = {"type": "openai", "model": "m", "base_url": url, "retry_base_delay_s": 0.0,
              "retry_attempts": 1, "request_timeout_s": 5.0}  # fmt: skip
    return {**config, **fields}


def judge(url: str, **fields: Any) -> dict[str, Any]:
    config = {"type": "llm_judge", "model": "m", "base_url": url, "rubric": ["is 1"],
              "retry_base_delay_s": 0.0, "retry_attempts": 1, "timeout_s": 5.0}  # fmt: skip
    return {**config, **fields}


def answers(count: int, **fields: Any) -> dict[str, Any]:
    return {**answer_spec(count), **fields}


def heard(listener: FakeOpenAI) -> list[dict[str, str]]:
    """What reached a listener: each request's headers that are not plain HTTP plumbing."""
    return [
        {k: v for k, v in seen.headers.items() if k not in PLAIN_HEADERS} for seen in listener.seen
    ]


def leaked(seen: Seen) -> list[str]:
    """The operator's values that a request carried, in any header."""
    values = (ORG, PROJECT, "sk-operator-openai-1f0e", "sk-admin-operator-3b7c", "gw-secret-8d1a")
    return [value for value in values if any(value in header for header in seen.headers.values())]


async def test_a_tenants_loopback_listener_hears_nothing_from_the_server(
    tmp_path: Path, operator_env: None
) -> None:
    state_dir = tmp_path / "state"
    with serving(endpoint()) as listener:
        port = listener.url.split(":")[2].split("/")[0]
        # The same listener under other spellings of loopback.
        urls = [
            listener.url,
            f"http://localhost:{port}/v1",
            f"http://127.1:{port}/v1",
            f"http://2130706433:{port}/v1",
            f"http://0.0.0.0:{port}/v1",
        ]
        keyless = "MCP_EVALSERVER_TEST_UNSET"  # a variable the server does not set
        attempts: list[tuple[str, dict[str, Any]]] = [
            *(("start_campaign", {"spec": answers(2, agent=agent(url))}) for url in urls),
            ("start_campaign", {"spec": answers(2, agent=agent(urls[0], api_key_env=keyless))}),
            ("start_campaign", {"spec": answers(2, scorer=judge(urls[0]))}),
            ("sweep_concurrency", {"spec": answers(2, agent=agent(urls[0])), "levels": [1]}),
        ]
        with anyio.fail_after(240):
            async with http_server(state_dir) as url, http_client(url) as client:
                errors = [await attempt(client, tool, **arguments) for tool, arguments in attempts]
    assert heard(listener) == [], f"the tenant's listener heard {heard(listener)}"
    assert [error is not None for error in errors] == [True] * len(attempts), errors
    for error, url in zip(errors, [*urls, urls[0], urls[0], urls[0]], strict=True):
        assert error is not None
        assert f"base_url {url!r} is not a model endpoint" in error, error
        assert "--allow-endpoints" in error, error
    assert "scorer.base_url" in (errors[6] or "")
    assert CampaignStore(state_dir).list_ids() == []


@pytest.mark.parametrize(
    "base_url",
    [
        "http://169.254.169.254/latest/v1",
        "http://[fe80::a9fe:a9fe]/v1",
        "http://[::ffff:169.254.169.254]/v1",
        "http://metadata.google.internal/computeMetadata/v1",
    ],
)
async def test_a_link_local_metadata_url_is_refused_before_any_request(
    tmp_path: Path, operator_env: None, base_url: str
) -> None:
    state_dir = tmp_path / "state"
    with anyio.fail_after(120):
        async with http_server(state_dir) as url, http_client(url) as client:
            errors = [
                await attempt(client, "start_campaign", spec=answers(1, agent=agent(base_url))),
                await attempt(client, "start_campaign", spec=answers(1, scorer=judge(base_url))),
            ]
    for error in errors:
        assert error is not None, "accepted: the server would have sent it requests"
        assert f"base_url {base_url!r} is not a model endpoint" in error, error
    assert CampaignStore(state_dir).list_ids() == []


async def test_an_allowed_endpoint_gets_neither_the_operators_organisation_nor_other_variables(
    tmp_path: Path, operator_env: None
) -> None:
    state_dir = tmp_path / "state"
    with serving(endpoint()) as allowed:
        flags = ("--allow-endpoints", allowed.url, "--allow-env", KEY_ENV)
        keyless = answers(2, agent=agent(allowed.url, api_key_env=None),
                          scorer=judge(allowed.url, api_key_env=None))  # fmt: skip
        keyed = answers(1, agent=agent(allowed.url, api_key_env=KEY_ENV),
                        scorer=judge(allowed.url, api_key_env=KEY_ENV))  # fmt: skip
        with anyio.fail_after(180):
            async with http_server(state_dir, *flags) as url, http_client(url) as client:
                outcomes = [
                    await attempt(client, "start_campaign", spec=s) for s in (keyless, keyed)
                ]
        statuses = [
            CampaignStore(state_dir).load(cid) for cid in CampaignStore(state_dir).list_ids()
        ]
    assert outcomes == [None, None]
    assert sorted(len(state.trajectories) for state in statuses) == [1, 2]
    # Two agent calls and two judge calls keyless, then one of each with the allowed key.
    assert allowed.requests == 6
    assert [leaked(seen) for seen in allowed.seen] == [[]] * 6
    assert [set(seen.headers) - PLAIN_HEADERS for seen in allowed.seen] == [set()] * 6
    keys = sorted(seen.authorization or "" for seen in allowed.seen)
    assert keys == ["Bearer not-needed"] * 4 + [f"Bearer {KEY}"] * 2


async def test_an_allowed_endpoint_that_redirects_does_not_lead_the_server_elsewhere(
    tmp_path: Path, operator_env: None
) -> None:
    state_dir = tmp_path / "state"
    with serving(endpoint()) as internal:
        moved = Failure(307, headers={"Location": f"{internal.url}/chat/completions"})
        with serving(FakeOpenAI([], then=moved)) as allowed:
            flags = ("--allow-endpoints", allowed.url)
            spec = answers(1, agent=agent(allowed.url, api_key_env=None),
                           scorer=judge(allowed.url, api_key_env=None))  # fmt: skip
            with anyio.fail_after(120):
                async with http_server(state_dir, *flags) as url, http_client(url) as client:
                    outcome = await attempt(client, "start_campaign", spec=spec)
    assert outcome is None
    assert allowed.requests >= 1
    assert internal.requests == 0, f"followed the redirect: {heard(internal)}"


#: Probed as API keys: set on the server (the operator's and the system's), and never set.
PROBED = [
    "OPENAI_API_KEY",
    "OPENAI_ORG_ID",
    "OPENAI_ADMIN_KEY",
    SECRET_ENV,
    "HOME",
    "PATH",
    "PYTHONPATH",
    "MCP_EVALSERVER_TEST_NEVER_SET_1",
    "AWS_SECRET_ACCESS_KEY",
    "MCP_EVALSERVER_TEST_NEVER_SET_2",
]


async def test_probing_ten_variable_names_tells_nothing_of_which_the_server_sets(
    tmp_path: Path, operator_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in PROBED:
        if name.startswith("MCP_EVALSERVER_TEST_NEVER_SET") or name == "AWS_SECRET_ACCESS_KEY":
            monkeypatch.delenv(name, raising=False)
    state_dir = tmp_path / "state"
    with serving(endpoint()) as allowed:
        flags = ("--allow-endpoints", allowed.url, "--allow-env", KEY_ENV)
        with anyio.fail_after(240):
            async with http_server(state_dir, *flags) as url, http_client(url) as client:
                answered = {
                    (name, where): await attempt(client, "start_campaign", spec=spec)
                    for name in PROBED
                    for where, spec in (
                        ("agent", answers(1, agent=agent(allowed.url, api_key_env=name))),
                        ("scorer", answers(1, scorer=judge(allowed.url, api_key_env=name))),
                    )
                }
    assert allowed.requests == 0
    assert CampaignStore(state_dir).list_ids() == []
    # One answer per place, whatever the name: the name itself is all that differs.
    for where in ("agent", "scorer"):
        texts = {
            re.sub(re.escape(name), "NAME", answered[name, where] or "accepted") for name in PROBED
        }
        assert len(texts) == 1, f"{where}: {texts}"
        (text,) = texts
        assert f"{where}.api_key_env 'NAME' is not a variable" in text, text
        assert "--allow-env NAME" in text
