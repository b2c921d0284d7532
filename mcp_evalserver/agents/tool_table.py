"""The workspace tools, declared once: what an agent may do in its trajectory's workspace.

Three surfaces are made from `WORKSPACE_TOOLS`:

- `claimed`: the evaluation server's MCP tools, each naming the `claim_id` of an external agent
  (`server.mcp_app`);
- `scoped`: the MCP tools of one trajectory's own endpoint, for a `command` agent's program
  (`server.mcp_app.create_trajectory_server`);
- the OpenAI function tools of the `openai` agent (`agents.workspace_tools.tool_schemas`).

The table lives in the agents layer because that is the lowest layer both of its readers may
import (the server sits above it; agents may not import the server), and it imports neither
`mcp` nor the server's models. What each tool returns is its handler's return type, on the
server's side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from mcp_evalserver.agents.file_text import DEFAULT_LINES, MAX_FILE_BYTES
from mcp_evalserver.sandbox.supervisor import finder
from mcp_evalserver.spec.prose import one_paragraph
from mcp_evalserver.spec.submission import MAX_COST_USD, MAX_TOKENS

#: The two MCP surfaces: tools that name a claim id, and tools bound to one trajectory.
Audience = Literal["claimed", "scoped"]
#: What a call does, for MCP's hints: reads only; adds something (a checkpoint, branches, a
#: submission) and loses nothing; overwrites files (what they held is lost, again changes
#: nothing more); edits a file (what it replaced is lost, and twice is not once); runs a
#: command (may delete anything, and twice is not once).
Effect = Literal["reads", "adds", "overwrites", "edits", "runs"]
#: What a trajectory must offer for a tool to be shown to a model.
Capability = Literal["workspace", "checkpoints"]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: The default of a parameter that callers must give.
REQUIRED: Final = _Required()


@dataclass(frozen=True)
class Parameter:
    """One argument of a workspace tool, as MCP clients see it.

    A default of None makes the parameter nullable (`type | None`).
    """

    name: str
    type: type
    description: str | None = None
    default: object = REQUIRED
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    #: Offered on this MCP surface only; None: on both.
    only: Audience | None = None
    #: Kept, clipped, in a `command` agent's transcript of the calls its program made.
    in_transcript: bool = True

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class ModelArgument:
    """A parameter as a model is offered it; its type is the parameter's."""

    name: str
    description: str | None = None
    required: bool = True


@dataclass(frozen=True)
class ModelTool:
    """How a workspace tool is offered to a model, as an OpenAI function tool."""

    name: str
    description: str
    arguments: tuple[ModelArgument, ...] = ()
    needs: frozenset[Capability] = frozenset({"workspace"})


@dataclass(frozen=True)
class WorkspaceTool:
    """One workspace tool: its name, what it says on each surface, its parameters."""

    name: str
    #: The description when the tool names a claim id.
    claimed: str
    #: The description on a trajectory's own endpoint.
    scoped: str
    effect: Effect
    parameters: tuple[Parameter, ...] = ()
    #: Offered to a model as the first of these whose `needs` the trajectory meets; none: never.
    models: tuple[ModelTool, ...] = ()

    def __post_init__(self) -> None:
        names = {p.name for p in self.parameters}
        for model in self.models:
            unknown = {a.name for a in model.arguments} - names
            if unknown:
                raise ValueError(f"{self.name}: model arguments {unknown} are not parameters")

    def description(self, audience: Audience) -> str:
        """What the tool says it does on this MCP surface."""
        return self.claimed if audience == "claimed" else self.scoped

    def parameters_for(self, audience: Audience) -> tuple[Parameter, ...]:
        """The parameters this MCP surface offers, in order."""
        return tuple(p for p in self.parameters if p.only in (None, audience))

    def parameter(self, name: str) -> Parameter:
        """The parameter called `name`.

        Raises:
            KeyError: there is none.
        """
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    def for_model(self, capabilities: frozenset[Capability]) -> ModelTool | None:
        """What a model with these capabilities is offered; None: not this tool."""
        return next((m for m in self.models if m.needs <= capabilities), None)


_PATH = Parameter("path", str, "Absolute, or relative to the workdir.")
#: `sandbox_exec`'s cap per stream on the MCP surfaces unless a call gives one, and its most
#: (what the sandbox keeps per stream). The `openai` agent has a cap of its own configuration.
DEFAULT_OUTPUT_CHARS, MAX_OUTPUT_CHARS = 30_000, 1 << 20
#: The most hits a search answers, and paths a listing answers.
SEARCH_HITS: Final = 200
LISTED_FILES: Final = 1000
_SEARCH = (
    f"for a Python regex, line by line: path:line:text per match, the first {SEARCH_HITS} "
    f"(clipped to {finder.MAX_LINE_CHARS} chars), then how many more. Skips .git, binary "
    f"files, files over {finder.MAX_FILE_BYTES >> 20} MiB, symlinks; stops after "
    f"{finder.TIMEOUT_S} s."
)
_LIST = (
    f"whose path below it matches glob: sorted, relative to the workdir, the first "
    f"{LISTED_FILES:,}, then how many more. Skips .git; symlinks are listed, not followed."
)
_GLOB_SYNTAX = "**: any depth, {a,b}; without /: a name at any depth"


def _tokens(name: str, description: str) -> Parameter:
    return Parameter(name, int, description, default=0, ge=0, le=MAX_TOKENS)


WORKSPACE_TOOLS: Final[tuple[WorkspaceTool, ...]] = (
    WorkspaceTool(
        "sandbox_exec",
        claimed=one_paragraph("""
            Run a shell command in the claimed trajectory's workspace, from the task's workdir,
            without network. Answers the exit code line, then stdout and stderr as printed (a
            stream over max_output_chars keeps head and tail). Background processes (cmd &) run
            on until the trajectory ends; their later output is not returned. A timeout kills
            the command's process group.
        """),
        scoped=one_paragraph("""
            Run a shell command in this trajectory's private workspace, starting in the task's
            workdir, without network. Answers the exit code line, then stdout, then stderr, as
            printed; each stream over max_output_chars keeps its head and tail and says so. A
            non-zero exit code is a normal result. Background processes (cmd &, nohup) keep
            running until the trajectory ends; their later output is not returned (redirect it
            to a file). A timeout kills the command's process group.
        """),
        effect="runs",
        parameters=(
            Parameter("command", str, "Shell command, run by /bin/sh -c."),
            Parameter(
                "timeout_s",
                float,
                "Seconds before it is killed.",
                default=120.0,
                gt=0,
                le=3600,
                in_transcript=False,
            ),
            Parameter("stdin", str, "Text fed to the command.", default=None, in_transcript=False),
            Parameter(
                "max_output_chars",
                int,
                "Characters kept per stream (head and tail).",
                default=DEFAULT_OUTPUT_CHARS,
                ge=1,
                le=MAX_OUTPUT_CHARS,
                in_transcript=False,
            ),
        ),
        # A model's commands get the agent's configured timeout and output cap.
        models=(
            ModelTool(
                "exec",
                "Run a shell command (/bin/sh -c) in the repository's directory. Returns the "
                "exit code, stdout and stderr (long output keeps its head and tail). No network. "
                "Background processes (cmd &) keep running for later commands; their output "
                "after the command exits is not returned (redirect it to a file).",
                (ModelArgument("command"),),
            ),
        ),
    ),
    WorkspaceTool(
        "read_file",
        claimed=one_paragraph("""
            Read a text file of the claimed trajectory's workspace, lines numbered as cat -n:
            `limit` lines (default 2,000) from `offset` (default 1), at most max_bytes (default
            256 KiB); an answer cut short gives the next offset. Long lines are clipped; binary
            files are refused.
        """),
        scoped=one_paragraph("""
            Read lines of a text file in this trajectory's workspace, numbered as `cat -n`
            does: `limit` lines (default 2,000) from line `offset` (default 1), at most
            max_bytes of them (default 256 KiB); an answer that stops early gives the next
            offset. Lines over 2,000 characters are clipped; binary files are refused.
        """),
        effect="reads",
        parameters=(
            _PATH,
            Parameter("offset", int, "First line, from 1.", default=1, ge=1),
            Parameter("limit", int, "Lines at most.", default=DEFAULT_LINES, ge=1, le=100_000),
            Parameter("max_bytes", int, default=None, gt=0, le=MAX_FILE_BYTES, in_transcript=False),
        ),
        models=(
            ModelTool(
                "read_file",
                "Read a text file (absolute, or relative to the repository), its lines numbered; "
                "give offset and limit to read a range of a long file.",
                (
                    ModelArgument("path"),
                    ModelArgument("offset", "First line (default 1).", required=False),
                    ModelArgument("limit", "Lines at most (default 2,000).", required=False),
                ),
            ),
        ),
    ),
    WorkspaceTool(
        "edit_file",
        claimed=one_paragraph("""
            Replace old_text with new_text in a file of the claimed trajectory's workspace: it
            must occur once (or every time, with replace_all), else the error gives the count
            and lines, or the closest line. Answers the edited lines, numbered. An empty
            old_text creates a new file.
        """),
        scoped=one_paragraph("""
            Replace old_text with new_text in a file of this trajectory's workspace: it must
            occur exactly once (every occurrence with replace_all), else the error gives the
            count and lines, or the closest line. Answers the edited lines, numbered. An empty
            old_text creates a file that does not exist.
        """),
        effect="edits",
        parameters=(
            _PATH,
            Parameter("old_text", str, "The exact text to replace, without line numbers."),
            Parameter("new_text", str, "What replaces it."),
            Parameter("replace_all", bool, default=False),
        ),
        models=(
            ModelTool(
                "edit_file",
                "Replace old_text with new_text in a file; old_text must occur exactly once "
                "(copy it from read_file without the line numbers), or give replace_all=true.",
                (
                    ModelArgument("path"),
                    ModelArgument("old_text"),
                    ModelArgument("new_text"),
                    ModelArgument("replace_all", required=False),
                ),
            ),
        ),
    ),
    WorkspaceTool(
        "write_file",
        claimed=one_paragraph("""
            Write a whole file (created with its directories, or replaced: the answer gives the
            old size) in the claimed trajectory's workspace. To change part of one, edit_file.
        """),
        scoped=one_paragraph("""
            Write (create or replace) a whole file in this trajectory's workspace; parent
            directories are created. Answers the size it replaced. Only the workspace is
            writable; to change part of a file, use edit_file.
        """),
        effect="overwrites",
        parameters=(_PATH, Parameter("content", str, "The whole new content (UTF-8).")),
        models=(
            ModelTool(
                "write_file",
                "Create or overwrite a file with the given content (whole file).",
                (ModelArgument("path"), ModelArgument("content")),
            ),
        ),
    ),
    WorkspaceTool(
        "search",
        claimed="Search the text files under `path` in the claimed trajectory's workspace "
        + _SEARCH,
        scoped="Search the text files under `path` (a directory or file) in this trajectory's "
        "workspace " + _SEARCH,
        effect="reads",
        parameters=(
            Parameter("pattern", str, "Python `re` syntax."),
            Parameter("path", str, "Absolute, or relative to the workdir.", default="."),
            Parameter(
                "glob", str, f"Only paths matching it, e.g. *.py ({_GLOB_SYNTAX}).", default=None
            ),
        ),
        models=(
            ModelTool(
                "search",
                "Search the repository's text files for a Python regular expression, line by "
                f"line. Returns path:line:text, the first {SEARCH_HITS} matching lines. .git, "
                f"binary files and files over {finder.MAX_FILE_BYTES >> 20} MiB are skipped.",
                (
                    ModelArgument("pattern"),
                    ModelArgument("path", "A directory or file; default: all.", required=False),
                    ModelArgument("glob", "Only paths matching it, e.g. *.py", required=False),
                ),
            ),
        ),
    ),
    WorkspaceTool(
        "list_files",
        claimed="List the files under `path` in the claimed trajectory's workspace " + _LIST,
        scoped="List the files (not directories) under `path` in this trajectory's workspace "
        + _LIST,
        effect="reads",
        parameters=(
            Parameter("path", str, "Directory, absolute or relative to the workdir.", "."),
            Parameter("glob", str, _GLOB_SYNTAX + ".", "**/*"),
        ),
        models=(
            ModelTool(
                "list_files",
                f"List the repository's files matching a glob ({_GLOB_SYNTAX}), sorted, up to "
                f"{LISTED_FILES:,}.",
                (
                    ModelArgument("path", "A directory; default: the repository.", False),
                    ModelArgument("glob", 'Default "**/*": every file.', False),
                ),
            ),
        ),
    ),
    WorkspaceTool(
        "get_diff",
        claimed=one_paragraph("""
            The changes made in the claimed trajectory's workspace so far, as a git patch
            against the task's base commit (what submit will hand in).
        """),
        scoped=one_paragraph("""
            The changes made in this trajectory's workspace so far, as a git patch against the
            task's base commit (what submit will hand in).
        """),
        effect="reads",
    ),
    WorkspaceTool(
        "checkpoint",
        claimed=one_paragraph("""
            Freeze the claimed trajectory's workspace files as they are now (milliseconds);
            restore returns to them.
        """),
        scoped="Freeze this trajectory's workspace files as they are now; restore returns to them.",
        effect="adds",
        models=(
            ModelTool(
                "checkpoint",
                "Save the repository's files as they are now (instant). Returns an id that "
                "restore takes: try something risky, and go back if it fails.",
                needs=frozenset({"workspace", "checkpoints"}),
            ),
        ),
    ),
    WorkspaceTool(
        "restore",
        claimed=one_paragraph("""
            Return the claimed trajectory's workspace files to a checkpoint; later writes are
            discarded (later checkpoints stay).
        """),
        scoped="Return the workspace files to a checkpoint; later writes are discarded.",
        effect="overwrites",
        parameters=(Parameter("checkpoint_id", str, "What checkpoint returned."),),
        models=(
            ModelTool(
                "restore",
                "Put the files back as they were at a checkpoint; later edits go.",
                (ModelArgument("checkpoint_id"),),
                needs=frozenset({"workspace", "checkpoints"}),
            ),
        ),
    ),
    WorkspaceTool(
        "fork_trajectory",
        claimed=one_paragraph("""
            Branch the claimed trajectory into n new ones of the same task, each with a
            copy-on-write copy of the workspace and its own claim_id, held by you (those past
            the campaign's free slots wait: claim them later). Each is submitted and scored on
            its own; a root and its branches count once. Your claim stays yours.
        """),
        scoped=one_paragraph("""
            Branch this trajectory into n new ones of the same task: each runs this program
            again in a copy of the workspace as it is now, and is scored on its own.
        """),
        effect="adds",
        parameters=(
            Parameter("n", int, "How many branches.", ge=1, le=64),
            # A scoped program's branches are started by the runner; a client claims its own.
            Parameter(
                "wait_s",
                float,
                "Seconds to wait at most.",
                default=60.0,
                ge=0,
                le=300,
                only="claimed",
            ),
        ),
    ),
    WorkspaceTool(
        "submit",
        claimed=one_paragraph("""
            Finish the claimed trajectory: hands in the workspace's diff (and the answer, if
            given) to be scored. The claim ends.
        """),
        scoped=one_paragraph("""
            Finish this trajectory: hands in the workspace's diff (and the answer, if given) to
            be scored. Further tool calls are refused; exit the program.
        """),
        effect="adds",
        parameters=(
            Parameter("answer", str, "A final answer, for tasks graded on answers.", default=None),
        ),
        models=(
            ModelTool(
                "submit",
                "Hand in your work: every change you made in the repository is submitted as a "
                "patch. This ends your work on the task.",
                (ModelArgument("answer", "Optional short summary or answer.", required=False),),
            ),
            # Without a workspace the answer is all there is to hand in.
            ModelTool(
                "submit",
                "Hand in your final answer. This ends your work on the task.",
                (ModelArgument("answer", "The final answer."),),
                needs=frozenset(),
            ),
        ),
    ),
    WorkspaceTool(
        "report_usage",
        claimed=one_paragraph("""
            Report model calls you made for the claimed trajectory (tokens; the provider's cost
            if given): they count toward the campaign's cost and budget. Call it after each
            call or batch; the reply gives their cost.
        """),
        scoped=one_paragraph("""
            Report model calls you made for this trajectory (tokens, and the cost your provider
            gave, if any): they count toward the campaign's cost and its budget. Call it after
            each call or batch of calls; the reply says what they cost.
        """),
        effect="adds",
        parameters=(
            Parameter("model", str, "Priced by the campaign's table.", None),
            _tokens("input_tokens", "Prompt tokens, cached included."),
            _tokens("cached_input_tokens", "Of those, cached."),
            _tokens("output_tokens", "Completion tokens."),
            Parameter("requests", int, "Calls this report covers.", default=1, ge=0, le=1_000_000),
            Parameter(
                "cost_usd",
                float,
                "The provider's cost in USD; wins over the table.",
                default=None,
                ge=0,
                le=MAX_COST_USD,
            ),
        ),
    ),
)
