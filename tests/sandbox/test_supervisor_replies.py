"""How the supervisor's loop writes its replies: what one turn answered leaves in one write per
connection, so a client is woken once for a batch of requests, not once per reply."""

from __future__ import annotations

import array
import json
import os
import select
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from mcp_evalserver.sandbox.client import SUPERVISOR_SOURCE

REQUESTS = 50


def cancels(count: int) -> bytes:
    """`count` requests answered at once, without an instance (`cancel` of nothing running)."""
    return b"".join(
        json.dumps({"id": n, "op": "cancel", "args": {"target": 10**6 + n}}).encode() + b"\n"
        for n in range(1, count + 1)
    )


def first_read(fd: int) -> bytes:
    """What one read of `fd` gets, as soon as anything is there (30 s at most)."""
    readable, _, _ = select.select([fd], [], [], 30)
    assert readable, "the supervisor answered nothing in 30 s"
    return os.read(fd, 1 << 20)


@pytest.fixture
def supervisor() -> Iterator[tuple[subprocess.Popen[bytes], socket.socket]]:
    """A bare supervisor (no instance) on pipes, with its connection channel."""
    ours, theirs = socket.socketpair()
    process = subprocess.Popen(
        [sys.executable, "-I", "-S", str(SUPERVISOR_SOURCE), "--connections", str(theirs.fileno())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        pass_fds=[theirs.fileno()],
    )
    theirs.close()
    try:
        yield process, ours
    finally:
        ours.close()
        assert process.stdin is not None
        process.stdin.close()  # its lifeline: it ends
        process.wait(timeout=30)
        assert process.stdout is not None
        process.stdout.close()


def test_requests_that_arrive_in_one_write_are_answered_in_one_write_on_the_first_connection(
    supervisor: tuple[subprocess.Popen[bytes], socket.socket],
) -> None:
    process, _ = supervisor
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(cancels(REQUESTS))
    process.stdin.flush()
    replies = first_read(process.stdout.fileno()).splitlines()
    assert [json.loads(line)["id"] for line in replies] == list(range(1, REQUESTS + 1))


def test_requests_that_arrive_in_one_write_are_answered_in_one_write_on_a_passed_connection(
    supervisor: tuple[subprocess.Popen[bytes], socket.socket],
) -> None:
    _, channel = supervisor
    mine, passed = socket.socketpair()
    with mine:
        rights = array.array("i", [passed.fileno()])
        channel.sendmsg([b"c"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
        passed.close()
        mine.sendall(cancels(REQUESTS))
        replies = first_read(mine.fileno()).splitlines()
    assert [json.loads(line)["id"] for line in replies] == list(range(1, REQUESTS + 1))
