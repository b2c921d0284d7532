"""Real transports: a stdio subprocess and a streamable-HTTP server behind a bearer token."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.shared.exceptions import MCPError

from tests.server.helpers import MODES, answer_spec
from testsupport.rawmcp import initialize_request
from testsupport.servers import (
    REPO,
    TOKEN,
    call,
    http_client,
    http_server,
    server_command,
    stdio_client,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.mark.parametrize("mode", MODES)
async def test_a_campaign_runs_to_the_end_over_a_real_stdio_subprocess(
    tmp_path: Path, mode: str
) -> None:
    with anyio.fail_after(60):
        async with stdio_client(tmp_path, mode) as client:
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else mode)
            started = await call(client, "start_campaign", spec=answer_spec(3))
            status = await call(
                client, "campaign_status", campaign_id=started["campaign_id"], wait_s=30
            )
    assert status["status"] == "finished"
    assert status["pass_rate"] == 1.0


async def test_http_needs_the_bearer_token_and_keeps_dns_rebinding_protection(
    tmp_path: Path,
    workers: int,
) -> None:
    probe = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    async with (
        http_server(tmp_path, "--allow-host", "evals.internal", workers=workers) as url,
        httpx2.AsyncClient() as raw,
    ):
        health = await raw.get(url.replace("/mcp", "/healthz"))
        assert health.status_code == 200
        missing = await raw.post(url, json=probe)
        assert missing.status_code == 401
        assert "missing bearer token" in missing.text
        wrong = await raw.post(url, json=probe, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert "invalid bearer token" in wrong.text
        authorized = {"Authorization": f"Bearer {TOKEN}"}
        rebound = await raw.post(url, json=probe, headers={**authorized, "Host": "evil.example"})
        assert rebound.status_code == 421
        foreign = await raw.post(
            url, json=probe, headers={**authorized, "Origin": "http://evil.example"}
        )
        assert foreign.status_code == 403
        port = url.split(":")[2].split("/")[0]
        allowed = await raw.post(
            url, json=probe, headers={**authorized, "Host": f"evals.internal:{port}"}
        )
        assert allowed.status_code not in (401, 403, 421)
        for mode in MODES:
            with anyio.fail_after(60):
                async with http_client(url, mode=mode) as client:
                    started = await call(client, "start_campaign", spec=answer_spec(2))
                    status = await call(
                        client, "campaign_status", campaign_id=started["campaign_id"], wait_s=30
                    )
            assert status["status"] == "finished"
            assert status["resolved"] == 2


async def test_a_call_is_answered_with_one_json_response_unless_it_asked_for_a_stream(
    tmp_path: Path, workers: int
) -> None:
    """Progress asked for, or log events (the session's `logging/setLevel`), keep SSE; every
    other request gets JSON, half the SDK's cost per call (transport/answers.py)."""
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Accept": "application/json, text/event-stream",
    }

    def request(number: int, method: str, **params: object) -> dict[str, object]:
        return {"jsonrpc": "2.0", "id": number, "method": method, "params": params}

    listing = {"name": "list_campaigns", "arguments": {}}
    async with http_server(tmp_path, workers=workers) as url, httpx2.AsyncClient() as raw:
        opened = await raw.post(url, headers=headers, json=request(0, "initialize", **{
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}))  # fmt: skip
        assert opened.headers["content-type"] == "application/json"
        headers |= {"mcp-session-id": opened.headers["mcp-session-id"],
                    "mcp-protocol-version": "2025-11-25"}  # fmt: skip
        ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await raw.post(url, headers=headers, json=ready)).status_code == 202

        plain = await raw.post(url, headers=headers, json=request(1, "tools/call", **listing))
        assert plain.headers["content-type"] == "application/json"
        assert plain.json()["result"]["structuredContent"]["total"] == 0
        progress = request(2, "tools/call", **listing, _meta={"progressToken": "p"})
        streamed = await raw.post(url, headers=headers, json=progress)
        assert streamed.headers["content-type"].startswith("text/event-stream")
        data = [line for line in streamed.text.splitlines() if line.startswith("data: {")]
        assert json.loads(data[-1].removeprefix("data: "))["result"]["isError"] is False

        level = await raw.post(url, headers=headers, json=request(3, "logging/setLevel",
                                                                    level="info"))  # fmt: skip
        assert level.status_code == 200
        following = await raw.post(url, headers=headers, json=request(4, "tools/call", **listing))
        assert following.headers["content-type"].startswith("text/event-stream")
        # Only JSON accepted: answered when it needs no stream, as the SDK's JSON mode does.
        only_json = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}
        opened = await raw.post(url, headers=only_json, json=request(5, "initialize", **{
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}))  # fmt: skip
        assert opened.status_code == 200


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


async def test_an_mcp_client_without_the_right_token_cannot_connect(
    tmp_path: Path, workers: int
) -> None:
    async with http_server(tmp_path, workers=workers) as url:
        for token in (None, "wrong-token-0123456789"):
            for mode in MODES:
                with anyio.fail_after(30), pytest.raises(BaseException) as refused:  # noqa: PT011
                    async with http_client(url, token=token, mode=mode) as client:
                        await client.list_tools()
                assert any(isinstance(leaf, MCPError) for leaf in _leaves(refused.value))


async def test_a_stdio_server_whose_client_leaves_cancels_its_campaigns_cleanly(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with stdio_client(tmp_path) as client:
            spec = answer_spec(2, agent="external")
            await call(client, "start_campaign", spec=spec, campaign_id="left")
        # The server's lifespan ended with the session: the run recorded its cancellation.
        ledger = tmp_path / "campaigns" / "left" / "ledger.jsonl"
        kinds = [json.loads(line)["kind"] for line in ledger.read_text().splitlines()]
        assert kinds[-1] == "campaign_cancelled"
        assert json.loads(ledger.read_text().splitlines()[-1])["by"] == "shutdown"
        # A new server resumes it by itself (no `resume` call): its trajectories wait again.
        async with stdio_client(tmp_path) as client:
            claim = await call(client, "claim_trajectory", campaign_id="left", wait_s=30)
            assert claim["trajectory_id"] in ("t1@0", "t2@0")
            resumed = await call(client, "campaign_status", campaign_id="left")
            assert resumed["active"] is True
            # Resuming it again is answered with its status: resume is idempotent.
            again = await call(client, "resume", campaign_id="left")
            assert (again["active"], again["claimed"]) == (True, 1)


async def _lines(stream: ByteReceiveStream) -> AsyncIterator[str]:
    buffered = BufferedByteReceiveStream(stream)
    while True:
        yield (await buffered.receive_until(b"\n", 1 << 24)).decode()


async def _everything(stream: ByteReceiveStream) -> str:
    chunks = []
    with contextlib.suppress(anyio.EndOfStream):
        while True:
            chunks.append(await stream.receive())
    return b"".join(chunks).decode(errors="replace")


async def _send(server: Process, message: dict[str, Any]) -> None:
    assert server.stdin is not None
    await server.stdin.send(json.dumps(message).encode() + b"\n")


@pytest.mark.parametrize("end", ["stdin's end", "SIGINT"])
async def test_a_stdio_server_ends_at_once_on_sigint_and_at_stdins_end_closing_its_campaigns(
    tmp_path: Path, end: str
) -> None:
    # Claude Code ends a server with SIGINT (then SIGTERM if it is still there); other
    # clients close its stdin. Either way: exit 0, no traceback, the lifespan closed.
    command = server_command(tmp_path, "--stdio")
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    with anyio.fail_after(60):
        async with await anyio.open_process(command, env=environment) as server:
            assert server.stdout is not None
            assert server.stderr is not None
            lines = _lines(server.stdout)
            await _send(server, initialize_request("test"))
            assert "result" in json.loads(await anext(lines))
            await _send(server, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            arguments = {"spec": answer_spec(1, agent="external"), "campaign_id": "ended"}
            params = {"name": "start_campaign", "arguments": arguments}
            await _send(
                server, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
            )
            started = json.loads(await anext(lines))
            assert started["result"]["isError"] is False, started
            if end == "SIGINT":
                server.send_signal(signal.SIGINT)
            else:
                assert server.stdin is not None
                await server.stdin.aclose()
            # It took ~1 s of the interpreter's teardown here (4 s under load) before.
            with anyio.fail_after(20):
                code = await server.wait()
            errors = await _everything(server.stderr)
    assert code == 0, errors
    assert "Traceback" not in errors
    ledger = tmp_path / "campaigns" / "ended" / "ledger.jsonl"
    last = json.loads(ledger.read_text().splitlines()[-1])
    assert (last["kind"], last.get("by")) == ("campaign_cancelled", "shutdown"), last
