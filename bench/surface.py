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
  receives them), summed per fix, mean over the fixes; model_bytes_per_fix counts the text
  content alone (what a client shows its model) with the requests, structured_bytes_per_fix
  the structuredContent alone (compact JSON); the rest of bytes_per_fix is the protocol's own
  (each result's `_meta` serverInfo stamp, `resultType`, `isError`, the content's wrapping,
  the text's JSON escapes). The campaign is then
  scored and `resolved` says how many fixes the tests graded resolved.
"""

from __future__ import annotations

if not __package__:  # run as a file: becomes `python -m bench.surface` (see _as_module.py)
    import _as_module  # type: ignore[import-not-found]  # noqa: F401

import json
import re
import sys
import tempfile
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
        self.by_tool: dict[str, int] = {}

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, arguments)
        self.calls += 1
        request = {"name": tool, "arguments": arguments}
        answer = result.model_dump_json(by_alias=True, exclude_none=True)
        asked = len(json.dumps(request).encode())
        spent = asked + len(answer.encode())
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


async def measure(state_dir: Path) -> dict[str, Any]:
    tasks = build_tasks()
    spec = {
        "name": "surface",
        "tasks": tasks,
        "agent": {"type": "external"},
        "scorer": {"type": "tests", "timeout_s": 300},
        "limits": {"concurrency": len(tasks), "scoring": 1},
    }
    async with stdio_client(state_dir, server_args=["--tools", "agent"]) as agent_client:
        profile = (await agent_client.list_tools()).tools
    async with stdio_client(state_dir) as client:
        tools = (await client.list_tools()).tools
        agent_names = {"claim_trajectory", *(t.name for t in WORKSPACE_TOOLS)}
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
    return {
        "tools_list_chars": tool_chars(tools),
        "tools": len(tools),
        "agent_tools_chars": tool_chars([t for t in tools if t.name in agent_names]),
        "agent_profile_chars": tool_chars(profile),
        "fixes": len(meters),
        "bytes_per_fix": sum(m.bytes for m in meters) / len(meters),
        "calls_per_fix": sum(m.calls for m in meters) / len(meters),
        "bytes_by_fix": [m.bytes for m in meters],
        "model_bytes_per_fix": sum(m.model_bytes for m in meters) / len(meters),
        "structured_bytes_per_fix": sum(m.structured_bytes for m in meters) / len(meters),
        "bytes_per_fix_by_tool": {
            tool: sum(m.by_tool.get(tool, 0) for m in meters) / len(meters)
            for tool in meters[0].by_tool
        },
        "resolved": status.get("resolved"),
    }


def main() -> int:
    load = LoadRecord()
    with tempfile.TemporaryDirectory(prefix="bench-surface-") as state:
        figures = load.finish(anyio.run(measure, Path(state)))
    path = write_results("surface", figures)
    print(
        f"tools/list {figures['tools_list_chars']:,} chars over {figures['tools']} tools "
        f"(an external agent's: {figures['agent_tools_chars']:,}); a fix: "
        f"{figures['bytes_per_fix']:,.0f} bytes ({figures['model_bytes_per_fix']:,.0f} read by "
        f"a model) in {figures['calls_per_fix']:g} calls "
        f"({figures['resolved']}/{figures['fixes']} resolved); {describe_load(figures)}"
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
