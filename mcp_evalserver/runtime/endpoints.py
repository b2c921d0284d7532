"""Where model calls go: the operator's own endpoints, and URL prefixes compared safely.

Kept apart from `endpoint_calls` (which imports the `openai` library, half a second at
start-up) so that the server's privileges and the spec checks can ask where a call would go
without loading a model client.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from mcp_evalserver.spec.agents import DEFAULT_BASE_URL


def operators_endpoints() -> list[str]:
    """Where the operator's own OpenAI settings go: OpenAI's endpoint, and $OPENAI_BASE_URL."""
    return [DEFAULT_BASE_URL, *filter(None, [os.environ.get("OPENAI_BASE_URL")])]


def url_below(url: str, prefix: str) -> bool:
    """Whether `url` is `prefix` or below it: the same scheme, host and port (no user part),
    and the prefix's path segments first. Text prefixes are not enough: an allowed
    `https://api.example.com` would also admit `https://api.example.com.attacker.net`, and a
    host is compared as written (`127.1` is not `127.0.0.1`)."""
    given, allowed = urlsplit(url), urlsplit(prefix)
    return (
        plain_url(url)
        and given.scheme.lower() == allowed.scheme.lower()
        and given.netloc.lower() == allowed.netloc.lower()
        and f"{given.path.rstrip('/')}/".startswith(f"{allowed.path.rstrip('/')}/")
    )


def plain_url(url: str) -> bool:
    """No spaces, controls, backslashes or non-ASCII: nothing that URL parsers read apart."""
    return re.fullmatch(r"[!-~]+", url) is not None and "\\" not in url
