"""Benchmark of what the MCP surface costs a model: the tool list, and the traffic of a fix.

Run `python bench/surface.py` as root (workspaces need namespaces and overlayfs; the demo's
instances are built, or found cached, by `demo.build_suite`: the first run fetches one sdist).
Writes bench/results/surface.json:

- tools_list_chars: what `tools/list` shows a model on the whole server, counted as each
  tool's name + description + the JSON of its inputSchema.
- agent_tools_chars: the same over the tools an external agent uses (claim_trajectory and the
  workspace tools of the table).
- agent_profile_chars: the same for the server's agent profile (`--tools agent`).
- bytes_per_fix, calls_per_fix: a scripted agent fixes 3 of the demo's bugs (inflection:
  ordinal-thirteen, underscore-acronym, parameterize-trailing-separator) through a real MCP
  client over stdio, the local backend: claim, read the lines of the bug, edit_file the fix,
  run the tests, submit. It knows the fix (the task's gold patch, applied hunk by hunk as
  exact edits) but works only through the tools. Bytes are the JSON of each `tools/call`
  request's params and of its result (text content and structuredContent both, as a client
  receives them), summed per fix, mean over the fixes, for a 2026-07-28 client;
  model_bytes_per_fix counts the text content alone (what a client shows its model) with the
  requests, structured_bytes_per_fix the structuredContent alone (compact JSON).
- envelope_bytes_per_fix: the part of bytes_per_fix that the protocol puts around every result
  whatever the server answers (2026-07-28 stamps each with `_meta` serverInfo, spec #3002, and
  a `resultType`; plus `isError` and the keys that wrap the content);
  server_bytes_per_fix = bytes_per_fix - envelope_bytes_per_fix, what this server's tools
  choose to send and receive. bytes_per_fix_handshake: the same 3 fixes again, in a campaign
  of their own, through a handshake-era client (`initialize`), which gets no stamp.
- Each campaign is then scored: `resolved` (and `resolved_handshake`) say how many fixes the
  tests graded resolved.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.surface` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import json
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from bench.common import LoadRecord, describe_load, write_results
from demo import build_suite
from mcp_evalserver.agents.tool_table import WORKSPACE_TOOLS
from testsupport.servers import stdio_client

BUGS = ("ordinal-thirteen", "underscore-acronym", "parameterize-trailing-separator")
TEST_COMMAND = ".venv/bin/python -m pytest -q test_inflection.py | tail -1"
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


def tool_chars(tools: list[Any]) -> int:
    """Name + description + JSON of inputSchema, summed over `tools`."""
    return sum(
        len(t.name) + len(t.description or "") + len(json.dumps(t.input_schema)) for t in tools
    )


class Meter:
    """Calls tools on one client, counting the calls and the bytes both ways."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.calls = 0
        self.bytes = 0
        self.model_bytes = 0
        self.structured_bytes = 0
        self.envelope_bytes = 0
        self.by_tool: dict[str, int] = {}

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, arguments)
        self.calls += 1
        request = {"name": tool, "arguments": arguments}
        answer = result.model_dump_json(by_alias=True, exclude_none=True)
        # As a client sends it: compact JSON (the SDK serializes with pydantic).
        asked = len(json.dumps(request, separators=(",", ":"), ensure_ascii=False).encode())
        spent = asked + len(answer.encode())
        self.envelope_bytes += len(answer.encode()) - len(_own_part(answer))
        self.bytes += spent
        self.by_tool[tool] = self.by_tool.get(tool, 0) + spent
        text = "".join(getattr(block, "text", "") for block in result.content)
        self.model_bytes += asked + len(text.encode())
        structured: dict[str, Any] | None = result.structured_content
        self.structured_bytes += len(json.dumps(structured, separators=(",", ":")).encode())
        if result.is_error or structured is None:
            raise RuntimeError(f"{tool} failed: {text}")
        if "stdout_at" in structured:  # the output is the text's; this says where
            start, end = structured["stdout_at"]
            structured = {**structured, "stdout": text[start:end]}
        return structured


def _own_part(answer: str) -> bytes:
    """The JSON of a result's content and structuredContent alone, serialized as the whole
    result was (the rest of it is the protocol's envelope)."""
    dumped = json.loads(answer)
    kept = {k: dumped[k] for k in ("content", "structuredContent") if k in dumped}
    return json.dumps(kept, separators=(",", ":"), ensure_ascii=False).encode()


def edits(patch: str) -> list[tuple[str, int, int, str, str]]:
    """The gold patch as (path, offset, lines, old_text, new_text) per hunk, each edit the
    changed lines with one line of context on each side."""
    found = []
    for section in patch.split("diff --git ")[1:]:
        path = section.split(" b/", 1)[1].split("\n", 1)[0]
        for match in _HUNK.finditer(section):
            body = section[match.end() :].split("\n", 1)[1]
            lines = re.split(r"\n(?=@@ )", body)[0].splitlines()
            changed = [n for n, line in enumerate(lines) if line[:1] in "+-"]
            first, last = max(changed[0] - 1, 0), min(changed[-1] + 1, len(lines) - 1)
            kept = lines[first : last + 1]
            old = "\n".join(line[1:] for line in kept if line[:1] in " -")
            new = "\n".join(line[1:] for line in kept if line[:1] in " +")
            start, count = int(match.group(1)), int(match.group(2) or 1)
            found.append((path, start, count, old, new))
    return found


async def fix(client: Client, campaign_id: str, tasks: dict[str, dict[str, Any]]) -> Meter:
    """One trajectory fixed through the tools, as a model would: claim, read, edit, test,
    submit."""
    meter = Meter(client)
    claim = await meter.call("claim_trajectory", campaign_id=campaign_id, wait_s=60)
    claim_id = claim["claim_id"]
    for path, offset, count, old, new in edits(tasks[claim["task_id"]]["patch"]):
        await meter.call("read_file", claim_id=claim_id, path=path, offset=offset, limit=count)
        await meter.call("edit_file", claim_id=claim_id, path=path, old_text=old, new_text=new)
    tested = await meter.call(
        "sandbox_exec", claim_id=claim_id, command=TEST_COMMAND, max_output_chars=2000
    )
    if "failed" in tested["stdout"]:
        raise RuntimeError(f"{claim['task_id']}: the fix did not pass: {tested['stdout']}")
    await meter.call("submit", claim_id=claim_id)
    return meter


#: A build of its own: demo/build's tasks.jsonl is `make demo`'s, with every bug.
BUILD_DIR = build_suite.DEFAULT_CACHE / "bench-surface"


def build_tasks() -> list[dict[str, Any]]:
    bugs = [a for bug in BUGS for a in ("--bug", bug)]
    if build_suite.main(["--build", str(BUILD_DIR), "--project", "inflection", *bugs]) != 0:
        raise RuntimeError("the demo suite could not be built (see above)")
    lines = (BUILD_DIR / "tasks.jsonl").read_text().splitlines()
    wanted = {f"inflection__{bug}" for bug in BUGS}
    return [task for line in lines if (task := json.loads(line))["id"] in wanted]


async def fixed_by(
    client: Client, tasks: list[dict[str, Any]]
) -> tuple[list[Meter], dict[str, Any]]:
    """A campaign of `tasks` started and every trajectory fixed through `client`; its meters
    and final status."""
    spec = {
        "name": "surface",
        "tasks": tasks,
        "agent": {"type": "external"},
        "scorer": {"type": "tests", "timeout_s": 300},
        "limits": {"concurrency": len(tasks), "scoring": 1},
    }
    started = await client.call_tool("start_campaign", {"spec": spec})
    campaign_id = (started.structured_content or {})["campaign_id"]
    by_id = {task["id"]: task for task in tasks}
    meters = [await fix(client, campaign_id, by_id) for _ in tasks]
    status: dict[str, Any] = {}
    with anyio.fail_after(900):
        while status.get("status") != "finished":
            done = await client.call_tool(
                "campaign_status", {"campaign_id": campaign_id, "wait_s": 120}
            )
            status = done.structured_content or {}
    return meters, status


async def measure(state_dir: Path) -> dict[str, Any]:
    tasks = build_tasks()
    async with stdio_client(state_dir, server_args=["--tools", "agent"]) as agent_client:
        profile = (await agent_client.list_tools()).tools
    async with stdio_client(state_dir, mode="2026-07-28") as client:
        tools = (await client.list_tools()).tools
        meters, status = await fixed_by(client, tasks)
    async with stdio_client(state_dir, mode="legacy") as handshake_client:
        handshake, handshake_status = await fixed_by(handshake_client, tasks)
    agent_names = {"claim_trajectory", *(t.name for t in WORKSPACE_TOOLS)}

    def mean(figure: Callable[[Meter], float], of: list[Meter] = meters) -> float:
        return round(sum(figure(m) for m in of) / len(of), 1)

    return {
        "tools_list_chars": tool_chars(tools),
        "tools": len(tools),
        "agent_tools_chars": tool_chars([t for t in tools if t.name in agent_names]),
        "agent_profile_chars": tool_chars(profile),
        "fixes": len(meters),
        "bytes_per_fix": mean(lambda m: m.bytes),
        "calls_per_fix": mean(lambda m: m.calls),
        "bytes_by_fix": [m.bytes for m in meters],
        "model_bytes_per_fix": mean(lambda m: m.model_bytes),
        "structured_bytes_per_fix": mean(lambda m: m.structured_bytes),
        "envelope_bytes_per_fix": mean(lambda m: m.envelope_bytes),
        "server_bytes_per_fix": mean(lambda m: m.bytes - m.envelope_bytes),
        "bytes_per_fix_handshake": mean(lambda m: m.bytes, handshake),
        "envelope_bytes_per_fix_handshake": mean(lambda m: m.envelope_bytes, handshake),
        "bytes_per_fix_by_tool": {
            tool: round(sum(m.by_tool.get(tool, 0) for m in meters) / len(meters), 1)
            for tool in meters[0].by_tool
        },
        "resolved": status.get("resolved"),
        "resolved_handshake": handshake_status.get("resolved"),
    }


def main() -> int:
    load = LoadRecord()
    with tempfile.TemporaryDirectory(prefix="bench-surface-") as state:
        figures = load.finish(anyio.run(measure, Path(state)))
    path = write_results("surface", figures)
    print(
        f"tools/list {figures['tools_list_chars']:,} chars over {figures['tools']} tools "
        f"(an external agent's: {figures['agent_tools_chars']:,}); a fix: "
        f"{figures['bytes_per_fix']:,.0f} bytes ({figures['server_bytes_per_fix']:,.0f} the "
        f"server's own, {figures['model_bytes_per_fix']:,.0f} read by a model; "
        f"{figures['bytes_per_fix_handshake']:,.0f} for a handshake-era client) in "
        f"{figures['calls_per_fix']:g} calls "
        f"({figures['resolved']}/{figures['fixes']} resolved); {describe_load(figures)}"
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
