"""How a client cuts the supervisor's output into replies, whatever pieces it arrives in: a
batch's replies in one read, a large file's bytes over many (client.py's `_ReplyParser`, which
both an anyio stream's reader and the event loop's pipes and sockets feed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp_evalserver.sandbox.client import _ReplyParser
from mcp_evalserver.sandbox.supervisor.protocol import result_of

# Raw bytes that look like the protocol: lines, JSON, a reply's own shape.
FILE = b'{"id": 9, "ok": true}\nline two\n\n' + bytes(range(256))
OUTPUT = b"out\n" * 3


def framed(reply: dict[str, Any], *raw: bytes) -> bytes:
    return json.dumps(reply).encode() + b"\n" + b"".join(raw)


REPLIES = [
    ({"id": 1, "ok": True, "result": {}}, b""),
    ({"id": 2, "ok": True, "result": {}, "raw": {"data": len(FILE)}}, FILE),
    ({"id": 3, "ok": False, "error": {"type": "NotFound", "message": "gone"}}, b""),
    (
        {"id": 4, "ok": True, "result": {"code": 0}, "raw": {"stdout": len(OUTPUT), "stderr": 1}},
        OUTPUT + b"!",
    ),
]
STREAM = b"".join(framed(reply, raw) for reply, raw in REPLIES)


def parser() -> tuple[_ReplyParser, list[tuple[dict[str, Any], bytes]]]:
    got: list[tuple[dict[str, Any], bytes]] = []
    return _ReplyParser(lambda reply, raw: got.append((reply, raw))), got


def test_replies_cut_in_two_at_every_byte_arrive_whole_and_in_order() -> None:
    for cut in range(len(STREAM) + 1):
        feed, got = parser()
        feed.feed(STREAM[:cut])
        feed.feed(STREAM[cut:])
        assert got == REPLIES, f"cut at byte {cut}"


def test_replies_that_arrive_a_byte_at_a_time_arrive_whole_and_in_order() -> None:
    feed, got = parser()
    for at in range(len(STREAM)):
        feed.feed(STREAM[at : at + 1])
    assert got == REPLIES
    assert result_of(*got[3]) == {"code": 0, "stdout": OUTPUT, "stderr": b"!"}


def test_a_reply_is_delivered_as_soon_as_its_last_raw_byte_comes() -> None:
    feed, got = parser()
    feed.feed(framed(REPLIES[1][0], FILE[:-1]))
    assert got == []
    feed.feed(FILE[-1:] + b'{"id": 5')
    assert got == [REPLIES[1]]


def test_a_line_longer_than_the_most_a_line_may_have_is_refused_before_it_ends() -> None:
    got: list[Any] = []
    feed = _ReplyParser(lambda reply, raw: got.append(reply), most=16)
    feed.feed(b'{"id": 1, ')
    with pytest.raises(ValueError, match="a line over 16 bytes"):
        feed.feed(b'"ok": true')
    assert got == []


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"not json\n", "Expecting value"),
        (b'{"id": 1, "ok": true, "raw": {"data": -1}}\n', "bad raw lengths"),
        (b'{"id": 1, "ok": true, "raw": {"data": "4"}}\n', "bad raw lengths"),
        (b'{"id": 1, "ok": true, "raw": {"data": 101}}\n', "100 bytes at most"),
        (b"\xff\xfe\n", "can't decode"),
    ],
)
def test_a_line_that_is_not_json_or_announces_bad_raw_lengths_is_refused(
    line: bytes, why: str
) -> None:
    feed = _ReplyParser(lambda reply, raw: None, most=100)
    feed.feed(b'{"id": 0, "ok": true, "raw": {"data": 1}}\nx')  # a good one first
    with pytest.raises(ValueError, match=why):
        feed.feed(line)
