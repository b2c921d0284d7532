#!/usr/bin/env python3
"""A small external agent: claims one trajectory and drives it through the sandbox tools.

    python clients/example_agent.py --http http://127.0.0.1:8765/mcp --token "$TOKEN" \\
        --replace calc.py 'a - b' 'a + b'

It claims a trajectory of a campaign whose agent is `{"type": "external"}`, looks around the
workspace (`git status`, `ls`), applies each `--replace FILE OLD NEW` edit with edit_file (every
occurrence), runs `--check` if given, shows the diff, and submits. A real agent would put a model
where the edits come from; the tool calls stay the same.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def connect(url: str, token: str | None) -> AsyncIterator[Client]:
    """Over streamable HTTP: the campaign runs in a server that other clients share."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx2.Timeout(30, read=300)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


async def tool(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    """Calls a tool; exits with the server's message if it fails. Parts of the text that the
    structured content locates (`stdout_at: [start, end]`, `prompt_at`) are added to it by
    name: the server sends each once, in the text."""
    result = await client.call_tool(name, arguments)
    text = "".join(getattr(block, "text", "") for block in result.content)
    if result.is_error or result.structured_content is None:
        sys.exit(f"example_agent: {name} failed: {text}")
    structured: dict[str, Any] = dict(result.structured_content)
    for key, span in list(structured.items()):
        if key.endswith("_at"):
            start, end = span
            structured[key.removesuffix("_at")] = text[start:end]
    return structured


async def drive(args: argparse.Namespace) -> None:
    async with connect(args.http, args.token or os.environ.get("MCP_EVALSERVER_TOKEN")) as client:
        claim = await tool(
            client, "claim_trajectory", campaign_id=args.campaign, wait_s=args.wait_s
        )
        claim_id = claim["claim_id"]
        print(f"claimed {claim['trajectory_id']} of {claim['campaign_id']}: {claim['prompt']}")
        if claim["has_workspace"]:
            look = await tool(
                client, "sandbox_exec", claim_id=claim_id, command="git status -s; ls"
            )
            print(look["stdout"], end="")
        for path, old, new in args.replace:
            edit = {"claim_id": claim_id, "path": path, "old_text": old, "new_text": new}
            edited = await client.call_tool("edit_file", {**edit, "replace_all": True})
            # What a model would read: the edited lines, or why nothing matched.
            text = " ".join(getattr(block, "text", "") for block in edited.content)
            print(text, file=sys.stderr if edited.is_error else sys.stdout)
        if args.check:
            checked = await tool(client, "sandbox_exec", claim_id=claim_id, command=args.check)
            print(f"check exited {checked['exit_code']}")
        if claim["has_workspace"]:
            print((await tool(client, "get_diff", claim_id=claim_id))["patch"], end="")
        done = await tool(client, "submit", claim_id=claim_id, answer=args.answer)
        print(f"submitted {done['trajectory_id']}: {done['patch_bytes']} bytes of patch")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--http",
        metavar="URL",
        required=True,
        help="the server's URL, e.g. http://127.0.0.1:8765/mcp",
    )
    parser.add_argument("--token", help="bearer token (default $MCP_EVALSERVER_TOKEN)")
    parser.add_argument("--campaign", help="claim only from this campaign")
    parser.add_argument("--wait-s", type=float, default=60.0, help="wait for a trajectory")
    parser.add_argument(
        "--replace", nargs=3, action="append", default=[], metavar=("FILE", "OLD", "NEW")
    )
    parser.add_argument("--check", help="a command to run before submitting (e.g. the tests)")
    parser.add_argument("--answer", help="an answer to submit (answer-graded tasks)")
    anyio.run(drive, parser.parse_args(argv))


if __name__ == "__main__":
    main()
