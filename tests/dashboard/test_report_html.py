"""`mcp-evalserver report ID --format html`: one file that fetches nothing, clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.ledger import LedgerWriter
from mcp_evalserver.engine.records import EndpointLimitChanged
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.spec.campaign import CampaignSpec

pytestmark = pytest.mark.anyio


async def _finished(state_dir: Path) -> str:
    tasks = [{"id": f"t{n}", "prompt": "?", "answer": "<b>bold</b>"} for n in range(3)]
    spec = CampaignSpec.model_validate(
        {"name": "html", "tasks": tasks, "samples": 2, "agent": {"type": "oracle"}}
    )
    store = CampaignStore(state_dir)
    campaign_id = await store.create(spec, "html-report")
    await CampaignRunner(store, campaign_id).run()
    return campaign_id


async def test_the_html_report_is_one_file_that_names_nothing_to_fetch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign_id = await _finished(tmp_path)
    assert main(["--state-dir", str(tmp_path), "report", campaign_id, "--format", "html"]) == 0
    html = capsys.readouterr().out
    assert html.startswith("<!doctype html>")
    assert "Campaign html-report" in html
    assert html.count('<svg class="plot"') == 3
    # Only the SVG namespace names a URL; no stylesheet, image, script or font is fetched.
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert urls == {"http://www.w3.org/2000/svg"}
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|@import|url\(", html)
    assert "default-src 'none'" in html


async def test_the_html_report_says_what_to_do_when_it_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign_id = await _finished(tmp_path)
    missing = tmp_path / "no-such-dir" / "report.html"
    argv = ["--state-dir", str(tmp_path), "report", campaign_id, "--format", "html"]
    assert main([*argv, "--out", str(missing)]) == 2
    assert f"cannot write {missing}" in capsys.readouterr().err
    assert main(["--state-dir", str(tmp_path), "report", "nope", "--format", "html"]) == 2
    assert "html-report" in capsys.readouterr().err


async def test_recorded_changes_of_an_adaptive_limit_are_plotted_per_endpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign_id = await _finished(tmp_path)
    argv = ["--state-dir", str(tmp_path), "report", campaign_id, "--format", "html"]
    assert main(argv) == 0
    assert "Adaptive concurrency" not in capsys.readouterr().out
    directory = CampaignStore(tmp_path).directory(campaign_id)
    async with await LedgerWriter.open(directory, campaign_id) as ledger:
        for endpoint, limits in (("model-a", [1, 2, 4, 3]), ("model-b", [8, 6])):
            for previous, limit in zip([0, *limits], limits, strict=False):
                await ledger.append(
                    EndpointLimitChanged(
                        endpoint=endpoint, previous=previous, limit=limit, reason="x"
                    )
                )
    assert main(argv) == 0
    html = capsys.readouterr().out
    assert "Adaptive concurrency" in html
    assert html.count('<polyline class="line"') == 3  # throughput, model-a, model-b
    assert ">model-a</text>" in html
    assert ">model-b</text>" in html
    assert "model-a: limit 3 now (between 1 and 4), 4 change(s), 1 decrease(s)" in html
