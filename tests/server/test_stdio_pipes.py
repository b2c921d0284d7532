"""The stdio wire on the event loop: lines in, text out, and fd 0/1 claimed while serving."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.server.transport.stdio_pipes import PipeReader, PipeWriter

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def pipe() -> Iterator[tuple[int, int]]:
    """A non-blocking pipe: (read end, write end)."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    try:
        yield read_end, write_end
    finally:
        os.close(read_end)
        os.close(write_end)


async def test_lines_come_whole_however_the_bytes_arrive() -> None:
    euro = "€".encode()  # three bytes: the pipe splits one character across two reads
    pieces = [b'{"a": 1}\n{"b"', b": 2}\n" + euro[:1], euro[1:] + b"\n", b"tail without newline"]
    with anyio.fail_after(5), pipe() as (read_end, write_end):
        reader = PipeReader(read_end)
        lines: list[str] = []

        async def read() -> None:
            for _ in range(3):
                lines.append(await reader.readline())

        async with anyio.create_task_group() as group:
            group.start_soon(read)
            for piece in pieces:
                await anyio.sleep(0.01)  # each piece is a read of its own
                os.write(write_end, piece)
        with anyio.move_on_after(0.2) as waiting:  # the tail waits for its newline or the end
            await reader.readline()
    assert lines == ['{"a": 1}\n', '{"b": 2}\n', "€\n"]
    assert waiting.cancelled_caught


async def test_the_last_line_without_a_newline_then_the_end_reads_empty() -> None:
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    try:
        os.write(write_end, b"one\nlast")
        os.close(write_end)
        reader = PipeReader(read_end)
        with anyio.fail_after(5):
            assert [line async for line in reader] == ["one\n", "last"]
            assert await reader.readline() == ""
    finally:
        os.close(read_end)


@pytest.mark.parametrize(
    "size",
    [
        pytest.param(1 << 20, id="16 times a pipe's buffer: the writer must wait"),
        pytest.param(16 << 20, id="write_file's largest content: 256 reads"),
    ],
)
async def test_a_line_larger_than_the_pipe_arrives_whole(size: int) -> None:
    line = "y" * size + "\n"
    with anyio.fail_after(10), pipe() as (read_end, write_end):
        received: list[str] = []

        async def read() -> None:
            received.append(await PipeReader(read_end).readline())

        async with anyio.create_task_group() as group:
            group.start_soon(read)
            assert await PipeWriter(write_end).write(line) == len(line)
    assert received == [line]


SERVE = textwrap.dedent(
    """
    import os, sys
    import anyio
    from mcp_evalserver.server.transport.stdio_pipes import claim_stdio

    async def main():
        with claim_stdio() as pipes:
            if pipes is None:
                print("not claimed", flush=True)
            else:
                reader, writer = pipes
                print("stray print", flush=True)  # must miss the wire
                os.system("echo stray child")  # so must a child's output
                assert sys.stdin.read() == ""  # fd 0 reads /dev/null meanwhile
                async for line in reader:
                    await writer.write("echo " + line)
        print("after", flush=True)  # fd 1 is the wire again

    anyio.run(main)
    """
)


def serve(stdin: bytes | Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", SERVE]
    if isinstance(stdin, Path):
        with stdin.open("rb") as source:
            return subprocess.run(command, stdin=source, capture_output=True, env=env, timeout=30)
    return subprocess.run(command, input=stdin, capture_output=True, env=env, timeout=30)


def test_while_serving_only_the_protocol_reaches_stdout() -> None:
    done = serve(b"one\ntwo\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"echo one\necho two\nafter\n"
    assert b"stray print\n" in done.stderr
    assert b"stray child\n" in done.stderr


def test_stdin_that_is_not_a_pipe_is_left_to_the_sdk(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(b"one\n")
    done = serve(requests)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"not claimed\nafter\n"
