"""How `search` and `list_files` answers read for a model: one `path:line:text` (or path) per
line, then a line that says how many were left out and how to narrow.

Both the MCP tools (`server.models`, `model_text`) and the `openai` agent's function tools use
these, so a model reads the same text on every surface. Names and lines come from the agent's
own workspace and may be forged: a control character in a file's name or text is shown escaped
(`\\n`, `\\x1b`), so no name or line can print a line of its own or drive a terminal.
"""

from __future__ import annotations

import re

from mcp_evalserver.sandbox.base import GlobResult, SearchResult

# C0 and C1 controls but tab, and the Unicode line and paragraph separators.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
#: What a search skips, said when it found nothing.
SKIPPED = ".git, binary files and files over 2 MiB are not searched"


def printable(text: str) -> str:
    """`text` with every control character but tab escaped as Python writes it."""
    return _CONTROL.sub(lambda found: repr(found.group())[1:-1], text)


def search_text(result: SearchResult) -> str:
    """`path:line:text` per hit, then what was left out (or that nothing matched)."""
    lines = [f"{printable(hit.path)}:{hit.line}:{printable(hit.text)}" for hit in result.hits]
    if not result.hits:
        lines.append(f"no matches ({SKIPPED})")
    elif result.truncated:
        lines.append(
            f"[{result.total - len(result.hits):,} more matching lines not shown "
            f"({len(result.hits):,} of {result.total:,}); narrow with path or glob, or a more "
            "specific pattern]"
        )
    return "\n".join(lines)


def glob_text(result: GlobResult) -> str:
    """One path per line, then what was left out (or that nothing matched)."""
    lines = [printable(path) for path in result.paths]
    if not result.paths:
        lines.append("no files match (directories are not listed; .git is skipped)")
    elif result.truncated:
        lines.append(
            f"[{result.total - len(result.paths):,} more paths not shown "
            f"({len(result.paths):,} of {result.total:,}); narrow with path or glob]"
        )
    return "\n".join(lines)
