"""The export in Inspect's own viewer: `inspect view` serves it, a real Chromium shows a
sample's score and transcript."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from playwright.async_api import expect

from mcp_evalserver.cli.main import main
from mcp_evalserver.server.transport.http import listening_socket
from tests.dashboard.helpers import chromium, screenshot
from tests.exports.campaign import answered_campaign

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

INSPECT = Path(sys.executable).with_name("inspect")


@asynccontextmanager
async def inspect_view(log_dir: Path) -> AsyncIterator[str]:
    """`inspect view` on a free loopback port; yields its URL once it says it listens."""
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()  # inspect binds the port itself
    command = [str(INSPECT), "view", "--log-dir", str(log_dir), "--host", "127.0.0.1"]
    async with await anyio.open_process(
        [*command, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as process:
        assert process.stdout is not None
        said = b""
        async for chunk in process.stdout:
            said += chunk
            if b"Running on" in said:
                break
        assert b"Running on" in said, said.decode(errors="replace")
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()


async def test_inspect_view_shows_an_exported_samples_score_and_transcript(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, state = await answered_campaign(tmp_path, monkeypatch)
    logs = tmp_path / "logs"
    logs.mkdir()
    argv = ["--state-dir", str(store.state_dir), "export", state.id, "--format", "inspect"]
    argv += ["--out", str(logs / "campaign.eval")]
    assert await anyio.to_thread.run_sync(main, argv) == 0
    with anyio.fail_after(90):
        async with inspect_view(logs) as base, chromium() as browser:
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            await page.goto(f"{base}/")
            # The log opens on its list of samples: the task, the model, the accuracy.
            await expect(page.get_by_text("openai/scripted-model").first).to_be_visible()
            rows = page.get_by_text("What is 3 squared?")
            await expect(rows).to_have_count(2)
            await rows.first.click()
            await expect(page.get_by_text("Sample t3 (Epoch 1)")).to_be_visible()
            # The transcript: the prompt, the model's words, the call and what it returned.
            await expect(page.get_by_text("Let me look that up.")).to_be_visible()
            await expect(page.get_by_text("error: no tool named 'lookup'")).to_be_visible()
            await screenshot(page, "inspect-view-messages")
            # The score: the scorer's verdict and why.
            await page.get_by_role("tab", name="Scoring").click()
            await expect(page.get_by_text("expected '9', got '8'")).to_be_visible()
            await screenshot(page, "inspect-view-scoring")
