"""How a program reads a tool's answer: its structured content, and the parts of its text that
the structured content locates."""

from __future__ import annotations

from typing import Any


def with_text_parts(text: str, structured: dict[str, Any]) -> dict[str, Any]:
    """`structured` with the parts of the answer's text it locates (`stdout_at: [start, end]`
    is `stdout`), as a program reads them: the server sends each part once, in the text."""
    parts = {
        name.removesuffix("_at"): text[span[0] : span[1]]
        for name, span in structured.items()
        if name.endswith("_at") and isinstance(span, list) and len(span) == 2
    }
    return {**structured, **parts}
