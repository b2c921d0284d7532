"""The model bridge as a CLI under test would attack it: socket, token, paths and budget."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable

import anyio
import httpx2
import pytest

from mcp_evalserver.agents.cli.agent import endpoint_of
from mcp_evalserver.agents.cli.bridge import ModelBridge, serving
from mcp_evalserver.errors import LimitExceeded
from mcp_evalserver.runtime.adaptive import EndpointLimiter
from mcp_evalserver.runtime.pricing import Priced
from mcp_evalserver.spec.agents import ClaudeCodeAgentConfig, CodexAgentConfig
from mcp_evalserver.spec.submission import ModelUsage, UsageSource
from testsupport.fake_providers import FakeAnthropic, Turn
from testsupport.fake_providers import serving as serving_fake

pytestmark = pytest.mark.anyio

REAL_KEY = "sk-ant-real-operator-key"
BODY = {"model": "claude-sonnet-4-5", "stream": True, "tools": [{"name": "Bash"}],
        "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip


class Meter:
    """Records what it is given; refuses once `limit` calls were metered."""

    def __init__(self, limit: int = 100) -> None:
        self.seen: list[ModelUsage] = []
        self.limit = limit

    async def __call__(self, usage: ModelUsage, source: UsageSource) -> Priced:
        self.seen.append(usage)
        if len(self.seen) >= self.limit:
            raise LimitExceeded("the campaign's budget is spent")
        return Priced(0.01, "table")


async def _post(
    sock: str, token: str, path: str = "/v1/messages", **headers: str
) -> httpx2.Response:
    transport = httpx2.AsyncHTTPTransport(uds=sock)
    # A call may wait at the bridge for the calls before it (under a budget): the default 5 s
    # is too short on a loaded machine.
    async with httpx2.AsyncClient(
        transport=transport, base_url="http://127.0.0.1", timeout=30
    ) as client:
        return await client.post(path, json=BODY, headers={"x-api-key": token, **headers})


async def _in_parallel(
    bridge: ModelBridge,
    sock: str,
    calls: int,
    meanwhile: Callable[[], Awaitable[None]] | None = None,
) -> list[int]:
    """The statuses of `calls` calls sent at once, with `meanwhile` run beside them."""
    statuses: list[int] = []

    async def call() -> None:
        statuses.append((await _post(sock, bridge.token)).status_code)

    async with anyio.create_task_group() as group:
        for _ in range(calls):
            group.start_soon(call)
        if meanwhile is not None:
            await meanwhile()
    return statuses


def _bridge(url: str, meter: Meter, *, one_at_a_time: bool = False) -> ModelBridge:
    return ModelBridge(
        provider="anthropic",
        upstream=url,
        api_key=REAL_KEY,
        limiter=EndpointLimiter(url, 8),
        meter=meter,
        one_at_a_time=one_at_a_time,
    )


async def test_a_call_without_the_trajectorys_token_is_refused_and_reaches_no_provider() -> None:
    meter = Meter()
    with serving_fake(FakeAnthropic(lambda body: Turn(text="hi"))) as fake:
        bridge = _bridge(fake.url, meter)
        async with serving(bridge) as sock:
            with anyio.fail_after(30):
                for token in ("", "wrong", REAL_KEY, bridge.token[:-1]):
                    response = await _post(str(sock), token)
                    assert response.status_code == 401
    assert fake.seen == []
    assert meter.seen == []


async def test_only_the_model_path_is_relayed() -> None:
    meter = Meter()
    with serving_fake(FakeAnthropic(lambda body: Turn(text="hi"))) as fake:
        bridge = _bridge(fake.url, meter)
        async with serving(bridge) as sock:
            with anyio.fail_after(30):
                for path in ("/v1/models", "/v1/messages/../files", "/v1/files", "/"):
                    assert (await _post(str(sock), bridge.token, path)).status_code == 404
    assert fake.seen == []


async def test_the_provider_gets_the_operators_key_and_none_of_the_clis_own_headers() -> None:
    meter = Meter()
    with serving_fake(FakeAnthropic(lambda body: Turn(text="hi"))) as fake:
        bridge = _bridge(fake.url, meter)
        async with serving(bridge) as sock:
            with anyio.fail_after(30):
                response = await _post(
                    str(sock), bridge.token, **{"x-forwarded-host": "evil", "cookie": "c=1",
                                                "anthropic-version": "2023-06-01"}
                )  # fmt: skip
    assert response.status_code == 200
    assert "message_stop" in response.text
    (seen,) = fake.seen
    headers = {k.lower(): v for k, v in seen.headers.items()}
    assert headers["x-api-key"] == REAL_KEY
    assert headers["anthropic-version"] == "2023-06-01"
    assert bridge.token not in str(headers)
    assert "x-forwarded-host" not in headers
    assert "cookie" not in headers
    (usage,) = meter.seen
    assert (usage.input_tokens, usage.output_tokens) == (1000, 100)


async def test_once_the_meter_refuses_every_later_call_is_refused_unrelayed() -> None:
    meter = Meter(limit=1)
    with serving_fake(FakeAnthropic(lambda body: Turn(text="hi"))) as fake:
        bridge = _bridge(fake.url, meter)
        async with serving(bridge) as sock:
            with anyio.fail_after(30):
                assert (await _post(str(sock), bridge.token)).status_code == 200
                assert bridge.failed.is_set()
                refused = await _post(str(sock), bridge.token)
    assert refused.status_code == 400
    assert "budget" in refused.text
    assert len(fake.seen) == 1
    assert isinstance(bridge.failure, LimitExceeded)


async def test_parallel_calls_under_a_budget_overshoot_it_by_one_call_at_most() -> None:
    # The attack: while the provider is slow to answer, the CLI fires more calls, hoping they
    # are all relayed before the first is priced. The budget is crossed at the 3rd call.
    meter = Meter(limit=3)
    release = threading.Event()

    def slow(body: object) -> Turn:
        release.wait(30)
        return Turn(text="hi")

    parallel = 6
    with serving_fake(FakeAnthropic(slow)) as fake:
        bridge = _bridge(fake.url, meter, one_at_a_time=True)

        async def once_all_sent() -> None:
            # Neither tells anyone when a call arrives: look until one is at the provider and
            # the rest wait at the bridge.
            while bridge.waiting < parallel - 1 or not fake.seen:  # noqa: ASYNC110
                await anyio.sleep(0.01)
            assert len(fake.seen) == 1  # none of those waiting reached the provider
            release.set()

        async with serving(bridge) as sock:
            with anyio.fail_after(30):
                statuses = await _in_parallel(bridge, str(sock), parallel, once_all_sent)
    assert sorted(statuses) == [200] * 3 + [400] * 3
    assert len(fake.seen) == bridge.relayed == 3
    assert isinstance(bridge.failure, LimitExceeded)
    # What was metered is what the provider served, the call that crossed the budget included.
    assert sum(u.input_tokens for u in meter.seen) == fake.input_tokens
    assert sum(u.output_tokens for u in meter.seen) == fake.output_tokens


async def test_a_call_after_another_trajectory_spent_the_budget_is_refused_unrelayed() -> None:
    # The CLI was running a tool when the campaign's budget was spent elsewhere: its next call
    # must not reach the provider, though no call of its own crossed the budget.
    spent = False

    def admit() -> None:
        if spent:
            raise LimitExceeded("the campaign's budget is spent")

    meter = Meter()
    with serving_fake(FakeAnthropic(lambda body: Turn(text="hi"))) as fake:
        bridge = _bridge(fake.url, meter)
        bridge.admit = admit
        async with serving(bridge) as sock:
            with anyio.fail_after(30):
                assert (await _post(str(sock), bridge.token)).status_code == 200
                spent = True
                refused = await _post(str(sock), bridge.token)
    assert refused.status_code == 400
    assert "budget" in refused.text
    assert len(fake.seen) == len(meter.seen) == 1
    assert isinstance(bridge.failure, LimitExceeded)


async def test_without_a_budget_parallel_calls_are_relayed_in_parallel() -> None:
    meter = Meter()
    parallel = 4
    # Each answer waits for all of them to have reached the provider: one at a time, it breaks.
    together = threading.Barrier(parallel, timeout=30)

    def together_only(body: object) -> Turn:
        together.wait()
        return Turn(text="hi")

    with serving_fake(FakeAnthropic(together_only)) as fake:
        bridge = _bridge(fake.url, meter)
        async with serving(bridge) as sock:
            with anyio.fail_after(30):
                statuses = await _in_parallel(bridge, str(sock), parallel)
    assert statuses == [200] * parallel
    assert len(meter.seen) == parallel


def test_the_bridge_relays_to_the_specs_base_url_else_the_operators_variable_else_the_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    claude = ClaudeCodeAgentConfig(model="m")
    codex = CodexAgentConfig(model="m")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert endpoint_of(claude, "anthropic") == "https://api.anthropic.com"
    assert endpoint_of(codex, "openai") == "https://api.openai.com/v1"
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8/v1")
    assert endpoint_of(claude, "anthropic") == "http://127.0.0.1:9"
    assert endpoint_of(codex, "openai") == "http://127.0.0.1:8/v1"
    named = codex.model_copy(update={"base_url": "http://127.0.0.1:7/v1"})
    assert endpoint_of(named, "openai") == "http://127.0.0.1:7/v1"
