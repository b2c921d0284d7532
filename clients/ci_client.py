#!/usr/bin/env python3
"""Run an evaluation campaign from CI through mcp-evalserver, and gate on its pass rate.

    python clients/ci_client.py campaign.json --min-pass-rate 0.8
    python clients/ci_client.py campaign.json --http http://127.0.0.1:8765/mcp --token "$TOKEN"

Without `--http` it starts `mcp-evalserver --stdio` itself. It starts the campaign, streams
progress to stderr, prints the report (Markdown) to stdout, and exits:

    0  the campaign finished and its pass rate is at least --min-pass-rate
    1  it finished below the threshold (or with nothing graded)
    2  bad usage, or the server refused the spec (the reason is printed)
    3  the campaign did not finish (cancelled, stopped, or --timeout-s passed)
    4  the server could not be reached or failed (wrong URL or token, crashed)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

EXIT_PASSED, EXIT_BELOW, EXIT_USAGE, EXIT_UNFINISHED, EXIT_SERVER = 0, 1, 2, 3, 4
TOKEN_ENV = "MCP_EVALSERVER_TOKEN"


class ToolFailed(Exception):
    """A tool answered with an error; the message is the server's."""


@asynccontextmanager
async def connect(args: argparse.Namespace) -> AsyncIterator[Client]:
    """A client over HTTP (`--http URL`) or over a `mcp-evalserver --stdio` subprocess."""
    if args.http:
        token = args.token or os.environ.get(TOKEN_ENV)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        timeout = httpx2.Timeout(30.0, read=300.0)
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
            transport = streamable_http_client(args.http, http_client=http)
            async with Client(transport, mode=args.protocol) as client:
                yield client
        return
    command = [sys.executable, "-m", "mcp_evalserver.cli"]
    if args.state_dir:
        command += ["--state-dir", str(args.state_dir)]
    params = StdioServerParameters(command=command[0], args=[*command[1:], "--stdio"])
    async with Client(params, mode=args.protocol) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Calls a tool; returns its structured result.

    Raises:
        ToolFailed: the tool reported an error.
    """
    result = await client.call_tool(tool, arguments, progress_callback=_print_progress)
    if result.is_error or result.structured_content is None:
        text = " ".join(getattr(block, "text", "") for block in result.content)
        raise ToolFailed(text or f"{tool} failed")
    structured: dict[str, Any] = result.structured_content
    return structured


async def _print_progress(progress: float, total: float | None, message: str | None) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message or f'{progress:g}/{total}'}", file=sys.stderr)


def load_spec(path: Path) -> dict[str, Any]:
    """Reads a spec; a relative task file is made absolute (the server's cwd may differ)."""
    spec: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    tasks = spec.get("tasks")
    if isinstance(tasks, str) and not Path(tasks).is_absolute():
        spec["tasks"] = str((path.parent / tasks).resolve())
    return spec


async def run(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.spec)
    except (OSError, ValueError) as exc:
        print(f"ci_client: cannot read {args.spec}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    async with connect(args) as client:
        try:
            status = await call(client, "start_campaign", spec=spec)
        except ToolFailed as exc:
            print(f"ci_client: the server refused the campaign: {exc}", file=sys.stderr)
            return EXIT_USAGE
        campaign_id = status["campaign_id"]
        print(f"ci_client: campaign {campaign_id} started", file=sys.stderr)
        deadline = time.monotonic() + args.timeout_s
        while status["active"] and time.monotonic() < deadline:
            wait_s = min(30.0, max(0.0, deadline - time.monotonic()))
            status = await call(client, "campaign_status", campaign_id=campaign_id, wait_s=wait_s)
        if status["status"] != "finished":
            if status["active"]:
                await call(client, "cancel_campaign", campaign_id=campaign_id)
            print(
                f"ci_client: campaign {campaign_id} did not finish ({status['status']}; "
                f"{status['done']}/{status['trajectories']} done): {status['next_step']}",
                file=sys.stderr,
            )
            return EXIT_UNFINISHED
        print(
            f"ci_client: campaign {campaign_id} finished, "
            f"{status['done']}/{status['trajectories']} done",
            file=sys.stderr,
        )
        report = await client.read_resource(f"campaign://{campaign_id}/report")
        print("".join(getattr(content, "text", "") for content in report.contents))
        scoring = await call(client, "score", campaign_id=campaign_id)
    print(f"ci_client: {_summary_line(scoring.get('summary'))}", file=sys.stderr)
    rate = status["pass_rate"]
    verdict = "-" if rate is None else f"{rate:.3f}"
    passed = rate is not None and rate >= args.min_pass_rate
    print(
        f"ci_client: pass rate {verdict} (threshold {args.min_pass_rate:g}): "
        + ("passed" if passed else "FAILED"),
        file=sys.stderr,
    )
    return EXIT_PASSED if passed else EXIT_BELOW


def _summary_line(summary: dict[str, Any] | None) -> str:
    """`mean pass rate 0.833 (95% CI 0.667-1.000), pass@1 0.833, 18 attempts, 0 infra errors`."""
    if not summary or summary.get("mean_pass_rate") is None:
        return "nothing graded"
    parts = [f"mean pass rate {summary['mean_pass_rate']:.3f}"]
    interval = summary.get("mean_pass_rate_ci")
    if interval:
        level = round(100 * interval["confidence"])
        parts[0] += f" ({level}% CI {interval['low']:.3f}-{interval['high']:.3f})"
    for k, value in sorted((summary.get("pass_at_k") or {}).items(), key=lambda kv: int(kv[0])):
        parts.append(f"pass@{k} {value:.3f}")
    parts.append(f"{summary['attempts']} attempts, {summary['infra_errors']} infra errors")
    return ", ".join(parts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("spec", type=Path, help="campaign spec file (JSON)")
    parser.add_argument(
        "--min-pass-rate", type=float, default=1.0, help="fail below this (0-1; default 1)"
    )
    parser.add_argument("--http", metavar="URL", help="server URL (default: start one on stdio)")
    parser.add_argument("--token", help=f"bearer token for --http (default ${TOKEN_ENV})")
    parser.add_argument("--state-dir", type=Path, help="stdio server's state directory")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="give up after this")
    parser.add_argument(
        "--protocol",
        default="auto",
        choices=["auto", "legacy", "2026-07-28"],
        help="MCP protocol negotiation (default auto)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0.0 <= args.min_pass_rate <= 1.0:
        print("ci_client: --min-pass-rate must be between 0 and 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        return anyio.run(run, args)
    except Exception as exc:  # connection refused, 401, server crash: not a low pass rate
        print(f"ci_client: cannot talk to the server: {_describe(exc)}", file=sys.stderr)
        return EXIT_SERVER


def _describe(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in error.exceptions)
    return f"{type(error).__name__}: {error}"


if __name__ == "__main__":
    sys.exit(main())
