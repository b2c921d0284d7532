"""Answer matchers: compare a submitted answer with the expected one, and say why.

An answer that does not match (or does not parse) is a verdict, never an exception; only a bad
matcher configuration (an invalid regular expression) raises.

Normalisation, by matcher:

- `match_exact`: Unicode NFC, strip both ends, collapse every run of whitespace (spaces, tabs,
  newlines) to one space; with `case_sensitive=False` also `str.casefold` (so "Straße" equals
  "STRASSE"). The same normalisation is applied to both sides.
- `match_regex`: the answer is stripped of surrounding whitespace, nothing else. The pattern
  must match the whole answer (`mode="fullmatch"`, the default) or anywhere in it
  (`mode="search"`); `ignore_case` and `dotall` map to the `re` flags.
- `match_json`: the answer is stripped and one surrounding Markdown code fence (```` ``` ```` or
  ```` ```json ````) is removed, then parsed as strict JSON (no NaN or Infinity). Values compare
  structurally: objects by keys, arrays in order, numbers by value (1 equals 1.0, but a boolean
  is never a number), strings exactly. With `subset=True` the answer's objects may carry keys
  the expected objects do not name, at every depth.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mcp_evalserver.errors import InvalidInput

_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*[ \t]*\n(?P<body>.*?)\n?```\Z", re.DOTALL)
_SHOWN = 80


@dataclass(frozen=True)
class MatchVerdict:
    """Whether the answer matched, and a one-line reason a person can act on."""

    matched: bool
    explanation: str


def normalise_text(text: str, *, case_sensitive: bool = True) -> str:
    """The normalisation `match_exact` applies to both sides (see the module docstring)."""
    collapsed = " ".join(unicodedata.normalize("NFC", text).split())
    return collapsed if case_sensitive else collapsed.casefold()


def match_exact(answer: str, expected: str, *, case_sensitive: bool = True) -> MatchVerdict:
    """Equal after `normalise_text`."""
    got = normalise_text(answer, case_sensitive=case_sensitive)
    want = normalise_text(expected, case_sensitive=case_sensitive)
    if got == want:
        return MatchVerdict(True, "answer equals the expected text after normalisation")
    return MatchVerdict(False, f"expected {_show(want)}, got {_show(got)}")


def match_regex(
    answer: str,
    pattern: str,
    *,
    mode: Literal["fullmatch", "search"] = "fullmatch",
    ignore_case: bool = False,
    dotall: bool = False,
) -> MatchVerdict:
    """The stripped answer matches `pattern` in full (default) or somewhere (`search`).

    Raises:
        InvalidInput: `pattern` is not a valid regular expression.
    """
    flags = (re.IGNORECASE if ignore_case else 0) | (re.DOTALL if dotall else 0)
    try:
        compiled = re.compile(pattern, flags)
    except re.error as error:
        raise InvalidInput(f"invalid regex {pattern!r}: {error}") from error
    text = answer.strip()
    found = compiled.fullmatch(text) if mode == "fullmatch" else compiled.search(text)
    if found is None:
        how = "match the whole answer" if mode == "fullmatch" else "occur in the answer"
        return MatchVerdict(False, f"pattern {pattern!r} does not {how} {_show(text)}")
    return MatchVerdict(True, f"pattern {pattern!r} matched {_show(found.group(0))}")


def match_json(answer: str, expected: Any, *, subset: bool = False) -> MatchVerdict:
    """The answer, parsed as JSON, equals `expected` (an already parsed JSON value).

    Use `parse_json` first if the expected value is itself JSON text.

    Raises:
        InvalidInput: `expected` holds something JSON cannot express (a set, an object).
    """
    try:
        got = parse_json(answer)
    except InvalidInput as error:
        return MatchVerdict(False, str(error))
    difference = _difference("$", expected, got, subset=subset)
    if difference is None:
        how = "contains" if subset else "equals"
        return MatchVerdict(True, f"answer {how} the expected JSON value")
    return MatchVerdict(False, difference)


def parse_json(text: str) -> Any:
    """Parses strict JSON after stripping whitespace and one surrounding Markdown fence.

    Raises:
        InvalidInput: the text is not JSON (the message gives the position).
    """
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group("body").strip()
    try:
        return json.loads(stripped, parse_constant=_reject_constant)
    except ValueError as error:
        raise InvalidInput(f"answer is not valid JSON: {error}") from error


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _difference(path: str, want: Any, got: Any, *, subset: bool) -> str | None:
    """The first place where `got` differs from `want`, described; None when they agree."""
    want_kind, got_kind = _kind(want), _kind(got)
    if want_kind != got_kind:
        return f"{path}: expected {want_kind} {_dump(want)}, got {got_kind} {_dump(got)}"
    if isinstance(want, Mapping):
        missing = [key for key in want if key not in got]
        if missing:
            return f"{path}: missing key {missing[0]!r}"
        extra = [key for key in got if key not in want]
        if extra and not subset:
            return f"{path}: unexpected key {extra[0]!r}"
        for key in want:
            found = _difference(f"{path}.{key}", want[key], got[key], subset=subset)
            if found:
                return found
        return None
    if isinstance(want, list | tuple):
        if len(want) != len(got):
            return f"{path}: expected {len(want)} items, got {len(got)}"
        for index, (w, g) in enumerate(zip(want, got, strict=True)):
            found = _difference(f"{path}[{index}]", w, g, subset=subset)
            if found:
                return found
        return None
    # int and float compare by value in Python (exactly, also for big integers).
    if want != got:
        return f"{path}: expected {_dump(want)}, got {_dump(got)}"
    return None


def _kind(value: Any) -> str:
    # bool before number: True == 1 in Python, but not in an answer.
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    raise InvalidInput(f"expected value holds {type(value).__name__}, which JSON cannot express")


def _dump(value: Any) -> str:
    return _show(json.dumps(value, ensure_ascii=False), quote=False)


def _show(text: str, *, quote: bool = True) -> str:
    shown = text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
    return repr(shown) if quote else shown


def json_difference(expected: Any, got: Any, *, subset: bool = False) -> str | None:
    """Where `got` (a parsed JSON value) first differs from `expected`; None when they agree.

    Raises:
        InvalidInput: `expected` holds something JSON cannot express.
    """
    return _difference("$", expected, got, subset=subset)
