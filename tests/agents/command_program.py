"""An agent program for the `command` agent's tests: a real, separate process.

    python command_program.py fix <notes-dir>   fixes calc.py through its MCP endpoint, submits
    python command_program.py probe <notes-dir> first tries the other trajectory's endpoint
    python command_program.py edit-and-exit     writes the fix, exits 0 without submitting
    python command_program.py answer [notes]    submits an answer (a task with no workspace);
                                                with a notes dir, then lingers
    python command_program.py usage <notes-dir>  sends each report_usage of $USAGE_REPORTS (a
                                                JSON list of arguments), then answers 4
    python command_program.py fail              writes to stderr and exits 3 without submitting
    python command_program.py hang <notes-dir>  starts a child in its group, then hangs
    python command_program.py branch <notes-dir> the root writes a note and forks into two;
                                                branch .2 fixes calc.py; every one submits
    python command_program.py branch-crash <notes-dir> <campaign-dir>   as `branch`, but the
                                                first attempt of branch .2 waits until the
                                                ledger has scored the others and kept the
                                                fork's checkpoint, says "ready" on
                                                <notes-dir>/events (a FIFO) and hangs there

It learns everything from its environment (MCP_EVALSERVER_*) and writes what it saw as JSON to
`<notes-dir>/<trajectory>.json` for the test to check.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

FIXED = "def add(a, b):\n    return a + b\n"
CHECK = "python3 -B -c 'import calc; assert calc.add(2, 2) == 4'"
# How long `probe` waits for the other trajectory's program to publish its endpoint.
PEER_WAIT_S = 30.0


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content}")
    structured: dict[str, Any] | None = result.structured_content
    assert structured is not None
    # A command's output is sent once, in the text; the structured content says where.
    if "stdout_at" in structured:
        text = "".join(getattr(block, "text", "") for block in result.content)
        start, end = structured["stdout_at"]
        structured["stdout"] = text[start:end]
    return structured


async def status_with(url: str, token: str) -> int:
    """The HTTP status an MCP initialize request gets at `url` with `token`."""
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
    }
    async with httpx2.AsyncClient(timeout=30.0) as http:
        response = await http.post(url, json=request, headers=headers)
        return response.status_code


def peer_url(notes: Path, me: str) -> str:
    """Publishes this program's URL (never its token) and waits for the other program's."""
    (notes / f"{me}.url.tmp").write_text(os.environ["MCP_EVALSERVER_URL"])
    (notes / f"{me}.url.tmp").rename(notes / f"{me}.url")
    deadline = time.monotonic() + PEER_WAIT_S
    while time.monotonic() < deadline:
        others = [p for p in notes.glob("*.url") if p.name != f"{me}.url"]
        if others:
            return others[0].read_text()
        time.sleep(0.02)
    raise TimeoutError("the other trajectory's program never published its endpoint")


async def work(mode: str, notes: Path | None) -> int:
    url, token = os.environ["MCP_EVALSERVER_URL"], os.environ["MCP_EVALSERVER_TOKEN"]
    me = os.environ["MCP_EVALSERVER_TRAJECTORY"]
    seen: dict[str, Any] = {
        "task_id": os.environ["MCP_EVALSERVER_TASK_ID"],
        "prompt": os.environ["MCP_EVALSERVER_PROMPT"],
        "prompt_file": Path(os.environ["MCP_EVALSERVER_PROMPT_FILE"]).read_text(),
        "extra": os.environ.get("AGENT_EXTRA"),
        "attempt": os.environ["MCP_EVALSERVER_ATTEMPT"],
        "idempotency_key": os.environ["MCP_EVALSERVER_IDEMPOTENCY_KEY"],
    }
    if mode == "probe":
        assert notes is not None
        other = peer_url(notes, me)
        seen["other_url_differs"] = other != url
        seen["other_with_my_token"] = await status_with(other, token)
        seen["mine_with_a_wrong_token"] = await status_with(url, "not-the-token-0123456789")
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60.0) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        if mode == "branch-crash" and me.endswith(".2") and seen["attempt"] == "1":
            assert notes is not None
            await anyio.to_thread.run_sync(hang_once_the_others_are_scored, notes, me)
        if mode in ("branch", "branch-crash"):
            if "." not in me.rsplit("@", 1)[1]:  # the root
                await call(client, "write_file", path="note.txt", content="before the fork\n")
                seen["branches"] = (await call(client, "fork_trajectory", n=2))["trajectory_ids"]
                await call(client, "write_file", path="late.txt", content="after the fork\n")
            else:
                listing = await call(client, "sandbox_exec", command="ls")
                seen["files"] = listing["stdout"].split()
                if me.endswith(".2"):
                    await call(client, "write_file", path="calc.py", content=FIXED)
            await call(client, "submit")
            assert notes is not None
            (notes / f"{me}.json").write_text(json.dumps(seen))
            return 0
        if mode == "usage":
            assert notes is not None
            replies = []
            for arguments in json.loads(os.environ["USAGE_REPORTS"]):
                result = await client.call_tool("report_usage", arguments)
                text = " ".join(getattr(block, "text", "") for block in result.content)
                replies.append(
                    {"error": result.is_error, "reply": result.structured_content, "text": text}
                )
            (notes / f"{me}.json").write_text(json.dumps(replies))
            await call(client, "submit", answer="4")
            return 0
        if mode == "answer":
            refused = await client.call_tool("sandbox_exec", {"command": "ls"})
            print(" ".join(getattr(block, "text", "") for block in refused.content))
            await call(client, "submit", answer=str(2 + 2))
            if notes is not None:  # then lingers, holding its connection
                (notes / "submitted").write_text("")
                await anyio.sleep(600)
            return 0
        tools = (await client.list_tools()).tools
        seen["tools"] = {
            tool.name: sorted(tool.input_schema.get("properties", {})) for tool in tools
        }
        read = await client.call_tool("read_file", {"path": "calc.py"})
        numbered = "".join(getattr(block, "text", "") for block in read.content)
        # The lines as `cat -n` numbers them, read back as a model reads them.
        seen["before"] = "".join(line.split("\t", 1)[1] + "\n" for line in numbered.splitlines())
        await call(client, "write_file", path="calc.py", content=FIXED)
        if mode == "edit-and-exit":
            return 0
        seen["check"] = (await call(client, "sandbox_exec", command=CHECK))["exit_code"]
        seen["diff_files"] = (await call(client, "get_diff"))["files"]
        seen["submitted"] = await call(client, "submit", answer=f"fixed by {me}")
        after = await client.call_tool("read_file", {"path": "calc.py"})
        seen["after_submit_refused"] = after.is_error
    if notes is not None:
        (notes / f"{me}.json").write_text(json.dumps(seen))
    return 0


def hang_once_the_others_are_scored(notes: Path, me: str) -> None:
    """For a test that kills the run: only once every other trajectory is scored and the
    fork's checkpoint kept in the ledger, says so on the events FIFO, then waits to be
    killed."""
    ledger = Path(sys.argv[3]) / "ledger.jsonl"
    others = {me.rsplit(".", 1)[0], me[:-1] + "1"}
    deadline = time.monotonic() + PEER_WAIT_S * 4
    while time.monotonic() < deadline:
        scored, kept = set(), False
        for line in ledger.read_text().splitlines():
            with contextlib.suppress(ValueError):  # a line being written
                record = json.loads(line)
                if record["kind"] == "scored":
                    scored.add(record.get("trajectory"))
                kept = kept or record["kind"] == "checkpoint_kept"
        if others <= scored and kept:
            (notes / "hanging.pid").write_text(str(os.getpid()))
            with open(notes / "events", "w") as fifo:
                fifo.write("ready\n")
            time.sleep(600)
        time.sleep(0.05)
    raise TimeoutError(f"{sorted(others)} were never scored")


def main() -> int:
    mode = sys.argv[1]
    notes = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    if mode == "fail":
        print("the agent gave up: no idea how to fix calc.py", file=sys.stderr)
        return 3
    if mode == "hang":
        assert notes is not None
        child = subprocess.Popen(["sleep", "600"])
        pids = {"program": os.getpid(), "child": child.pid}
        (notes / "pids.json.tmp").write_text(json.dumps(pids))
        (notes / "pids.json.tmp").rename(notes / "pids.json")
        print("hanging", flush=True)
        time.sleep(600)
        return 0
    return anyio.run(work, mode, notes)


if __name__ == "__main__":
    sys.exit(main())
