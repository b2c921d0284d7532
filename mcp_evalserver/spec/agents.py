"""Agent configurations: one discriminated union, the `agent` field of a campaign spec.

Adding an agent kind = its config class here, added to `AgentConfig`, and its builder in
`agents/factory.py`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoopAgentConfig(_Strict):
    """Submits nothing: the floor every other agent must beat."""

    type: Literal["noop"] = "noop"


class OracleAgentConfig(_Strict):
    """Submits the task's gold answer or patch: proves the tasks and the scorer agree."""

    type: Literal["oracle"] = "oracle"


class ValidationAgentConfig(_Strict):
    """Validates a task set (`mcp-evalserver validate`): samples 0..runs-1 submit the gold
    patch (as `oracle`), samples runs..2*runs-1 submit nothing (as `noop`); the campaign's
    `samples` is 2 * runs. Its report tells broken, trivial and flaky tasks and tests."""

    type: Literal["validation"] = "validation"
    runs: int = Field(5, ge=1, le=100, description="Gold runs, and as many empty runs, per task.")


class PythonAgentConfig(_Strict):
    """An agent written in Python, loaded from `module:factory`; `factory(options)` returns it."""

    type: Literal["python"] = "python"
    factory: str = Field(description="Import path `package.module:callable`.")
    options: dict[str, Any] = Field(default_factory=dict)


class ExternalAgentConfig(_Strict):
    """An agent outside the server (an IDE, a script, a model) that drives each trajectory
    through the MCP tools: `claim_trajectory`, the sandbox tools, then `submit`."""

    type: Literal["external"] = "external"
    lease_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="Seconds a claim lasts without a tool call on it; then another client may "
        "claim the trajectory, its workspace as it was.",
    )


#: Where a model caller sends its requests when neither its `base_url` nor $OPENAI_BASE_URL
#: says otherwise (`runtime/endpoints.py`).
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIAgentConfig(_Strict):
    """A tool-calling loop (exec, read_file, write_file, submit) against an OpenAI-compatible
    chat completions endpoint."""

    type: Literal["openai"] = "openai"
    model: str = Field(description="Model name as the endpoint knows it.")
    base_url: str | None = Field(
        None,
        description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1. Default: "
        "$OPENAI_BASE_URL, else OpenAI.",
    )
    api_key_env: str | None = Field(
        "OPENAI_API_KEY",
        description="Environment variable holding the API key (never the key itself); null for "
        "a `base_url` that needs no key. May be unset on a server that is not shared (stdio, "
        "CLI) when `base_url` needs no key.",
    )
    max_steps: int = Field(30, ge=1, description="Model calls per trajectory; then it submits.")
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    seed: int | None = None
    max_output_tokens: int | None = Field(None, ge=1, description="Per model call.")
    system_prompt: str | None = None
    answer_from: Literal["reply", "submit"] = Field(
        "reply",
        description="Tasks without a workspace: `reply` takes the model's first reply as the "
        "answer (one request, no tools offered: models without tool calling work); `submit` "
        "offers a `submit` tool and takes only its answer. Repository tasks always submit.",
    )
    request_timeout_s: float = Field(600.0, gt=0, description="Per HTTP request to the model.")
    command_timeout_s: float = Field(120.0, gt=0, description="Per `exec` tool call.")
    checkpoints: bool = Field(
        False, description="Offer the model `checkpoint` and `restore` tools on its workspace."
    )
    tool_output_bytes: int = Field(
        16_384, ge=256, description="Cap on what one tool call shows the model (head and tail)."
    )
    retry_attempts: int = Field(
        6, ge=1, description="Requests per model call on 429/5xx before an infrastructure error."
    )
    retry_base_delay_s: float = Field(1.0, ge=0.0, description="Backoff: base·2^(n-1), ±50%.")
    retry_max_delay_s: float = Field(60.0, ge=0.0, description="Cap on one wait (Retry-After too).")


class PredictionsAgentConfig(_Strict):
    """Submits the patches of a SWE-bench predictions file: evaluation only, no generation."""

    type: Literal["predictions"] = "predictions"
    path: str = Field(
        description="A .json/.jsonl file of {instance_id, model_name_or_path, model_patch}, or "
        "`gold` for each task's own patch."
    )
    model_name: str | None = Field(
        None, description="Use only this `model_name_or_path` when the file holds several."
    )


class CommandAgentConfig(_Strict):
    """A program of the user's, run once per trajectory: it gets the task through environment
    variables and acts through an MCP endpoint that reaches its own trajectory only."""

    type: Literal["command"] = "command"
    command: list[str] | str = Field(
        description="The program and its arguments; a string is run by /bin/sh -c. It gets "
        "MCP_EVALSERVER_URL, MCP_EVALSERVER_TOKEN (bearer), MCP_EVALSERVER_TRAJECTORY, "
        "MCP_EVALSERVER_ATTEMPT, MCP_EVALSERVER_IDEMPOTENCY_KEY (the same in every attempt), "
        "MCP_EVALSERVER_TASK_ID, MCP_EVALSERVER_PROMPT and MCP_EVALSERVER_PROMPT_FILE."
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment variables for the program. Of the server's own it "
        "gets only PATH, HOME, LANG, OPENAI_BASE_URL and those `pass_env` names.",
    )
    pass_env: list[str] = Field(
        default_factory=list,
        description="Names of the server's environment variables the program also gets (e.g. "
        "an API key's); over HTTP only those of the server's --allow-env.",
    )
    cwd: str | None = Field(None, description="Where it starts; default the server's own.")

    @field_validator("command")
    @classmethod
    def _not_empty(cls, command: list[str] | str) -> list[str] | str:
        if not command or (isinstance(command, str) and not command.strip()):
            raise ValueError(
                "`command` is empty: give the program to run, e.g. ['python3', 'agent.py']"
            )
        return command


class MiniSweAgentConfig(_Strict):
    """mini-swe-agent's own agent loop (the `minisweagent` extra) on the trajectory's workspace:
    its messages are the transcript, what it submits is the patch, its limits end the run."""

    type: Literal["mini-swe-agent"] = "mini-swe-agent"
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="A mini-swe-agent config, as in its YAML files: `agent` (templates, "
        "`step_limit`, `cost_limit`, ...), `environment` (`env`, `timeout`, `cwd`) and "
        "`model`; merged over `base_config`.",
    )
    model: dict[str, Any] = Field(
        default_factory=dict,
        description="mini-swe-agent's `model` section (`model_name`, `model_class`, "
        "`model_kwargs`, `cost_tracking`, ...), merged over `config.model`.",
    )
    base_config: str | None = Field(
        "mini",
        description="A builtin mini-swe-agent config under `config` (`mini`, `default`, "
        "`swebench`, ...); null for none.",
    )


#: The CLI agents' pinned npm packages: (package, default version). A version is recorded in the
#: ledger with the package's integrity hash from npm.
CLI_PACKAGES: dict[str, tuple[str, str]] = {
    "claude-code": ("@anthropic-ai/claude-code", "2.1.332"),
    "codex": ("@openai/codex", "0.171.0"),
    "gemini-cli": ("@google/gemini-cli", "0.61.0"),
    "opencode": ("opencode-ai", "1.18.33"),
}
#: Where a CLI agent without `base_url` sends its model calls (unless the operator's
#: $ANTHROPIC_BASE_URL / $OPENAI_BASE_URL names another).
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"


class _CliAgentConfig(_Strict):
    """A command-line coding agent run inside the trajectory's workspace with its own tools;
    its model calls go through the server's model bridge (docs/guides/cli-agents.md)."""

    version: str = Field("", description="The npm package's version; empty: the pinned default.")
    model: str = Field(description="Model name as the endpoint knows it.")
    max_turns: int | None = Field(
        None,
        ge=1,
        description="Model turns (Claude Code's --max-turns; for the others, model calls "
        "through the bridge); running out is the agent's failure.",
    )
    args: list[str] = Field(
        default_factory=list, description="Extra command-line flags, after the ones we pass."
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment variables for the CLI (the bridge's address and "
        "token, and the telemetry switches, cannot be overridden).",
    )
    timeout_s: float = Field(
        1800.0, gt=0, description="Wall-clock limit of the CLI's run; it is told the deadline."
    )
    base_url: str | None = Field(
        None,
        description="Model endpoint the bridge relays to; default the operator's "
        "$..._BASE_URL, else the provider's.",
    )

    @field_validator("version")
    @classmethod
    def _plain_version(cls, version: str) -> str:
        if version and not all(c.isalnum() or c in ".-+" for c in version):
            raise ValueError(f"`version` {version!r}: give an npm version such as 2.1.332")
        return version

    @property
    def package(self) -> str:
        """The npm package this CLI installs from."""
        return CLI_PACKAGES[self.type][0]  # type: ignore[attr-defined]

    @property
    def pinned_version(self) -> str:
        """`version`, or the pinned default."""
        return self.version or CLI_PACKAGES[self.type][1]  # type: ignore[attr-defined]


class ClaudeCodeAgentConfig(_CliAgentConfig):
    """Claude Code (`claude -p`, permissions bypassed: the sandbox is the boundary)."""

    type: Literal["claude-code"] = "claude-code"
    api_key_env: str | None = Field(
        "ANTHROPIC_API_KEY",
        description="Variable holding the key the bridge sends (never given to the CLI); null "
        "for an endpoint that needs none.",
    )


class CodexAgentConfig(_CliAgentConfig):
    """OpenAI's Codex CLI (`codex exec`, approvals and its own sandbox off: ours is the
    boundary), speaking the Responses API."""

    type: Literal["codex"] = "codex"
    api_key_env: str | None = Field(
        "OPENAI_API_KEY",
        description="Variable holding the key the bridge sends (never given to the CLI); null "
        "for an endpoint that needs none.",
    )


class GeminiCliAgentConfig(_CliAgentConfig):
    """Google's Gemini CLI (`gemini -p`, `--yolo`: the sandbox is the boundary), speaking the
    Gemini API."""

    type: Literal["gemini-cli"] = "gemini-cli"
    api_key_env: str | None = Field(
        "GEMINI_API_KEY",
        description="Variable holding the key the bridge sends (never given to the CLI); null "
        "for an endpoint that needs none.",
    )


class OpenCodeAgentConfig(_CliAgentConfig):
    """OpenCode (`opencode run --auto`: permissions granted, the sandbox is the boundary), its
    `anthropic` provider speaking Anthropic's Messages API."""

    type: Literal["opencode"] = "opencode"
    api_key_env: str | None = Field(
        "ANTHROPIC_API_KEY",
        description="Variable holding the key the bridge sends (never given to the CLI); null "
        "for an endpoint that needs none.",
    )


CliAgentConfig = (
    ClaudeCodeAgentConfig | CodexAgentConfig | GeminiCliAgentConfig | OpenCodeAgentConfig
)


AgentConfig = Annotated[
    NoopAgentConfig
    | OracleAgentConfig
    | PythonAgentConfig
    | ExternalAgentConfig
    | OpenAIAgentConfig
    | PredictionsAgentConfig
    | CommandAgentConfig
    | MiniSweAgentConfig
    | ValidationAgentConfig
    | ClaudeCodeAgentConfig
    | CodexAgentConfig
    | GeminiCliAgentConfig
    | OpenCodeAgentConfig,
    Field(discriminator="type"),
]
