"""How the text a model reads is laid out (tool descriptions above all)."""

from __future__ import annotations


def one_paragraph(text: str) -> str:
    """`text` as one paragraph: line breaks and indentation (a docstring's, a triple-quoted
    description's) are characters a model pays for and reads nothing in. Every tool
    description an MCP surface shows goes through it (`server.surface.as_models_read_it`)."""
    return " ".join(text.split())
