"""Shared by the dashboard tests: a real HTTP server on loopback, a real headless Chromium."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn
from playwright.async_api import Browser, Page, async_playwright

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.server.http_app import build_http_app
from mcp_evalserver.server.http_options import HttpOptions
from mcp_evalserver.server.transport.http import listening_socket
from mcp_evalserver.spec.submission import Submission

TOKEN = "dashboard-token-0123456789"
CHROMIUM = "/usr/bin/chromium"
#: Screenshots land here (gitignored) so a person can look at what the tests saw.
ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts" / "dashboard"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@asynccontextmanager
async def dashboard_server(state_dir: Path) -> AsyncIterator[str]:
    """The product's HTTP app (MCP, dashboard, auth) served by uvicorn; yields its base URL."""
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    app = build_http_app(state_dir, HttpOptions(host="127.0.0.1", token=TOKEN))
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as group:
        # The socket listens already: requests queue until uvicorn accepts them.
        group.start_soon(server.serve, [sock])
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
    sock.close()


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """Debian's chromium, headless, driven by Playwright (no browser is ever downloaded)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it (scripts/ensure-system.sh)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


async def log_in(page: Page, base: str) -> None:
    """Uses the login form as a person would: the token typed in, never put in a URL."""
    await page.goto(f"{base}/")
    assert page.url == f"{base}/login"
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base}/")


async def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path


class GatedAgent(Agent):
    """Answers each trajectory only when the test opens its gate: progress the test controls."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.gates: dict[str, anyio.Event] = {}
        self.waiting: dict[str, anyio.Event] = {}

    def gate(self, trajectory_id: str) -> anyio.Event:
        return self.gates.setdefault(trajectory_id, anyio.Event())

    async def generate(self, context: TrajectoryContext) -> Submission:
        await self.gate(context.trajectory_id).wait()
        answer = self.answers[context.task.id]
        transcript: list[dict[str, Any]] = [
            {"role": "user", "content": context.task.prompt},
            {"role": "assistant", "content": answer},
        ]
        return Submission(answer=answer, transcript=transcript)
