"""HTTP answers written in one system call: uvicorn's httptools protocol over a transport that
holds an answer's headers until its body.

uvicorn writes an answer's status line and headers when the app starts it and its body when
the app sends it: two `send`s on the socket for every JSON answer, and a client woken for
the headers alone, which on a machine of 2 CPUs may preempt the server before it writes the
body. Headers that name a content length are held and leave with the body's first write, or
when the answer completes (a HEAD request's has no body), or before a close; any other write
(an event stream's headers and events, a 100 Continue) leaves at once, as before.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: A body past this size is sent after the held headers, not copied into one buffer with them.
JOINED_MAX_BYTES = 64 << 10
#: In the headers uvicorn writes (names lower-cased, each line ending CRLF).
_CONTENT_LENGTH = b"\r\ncontent-length: "


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose answers leave in one write (`OneWriteTransport`)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.answers = OneWriteTransport(transport)
        super().connection_made(self.answers)

    def on_response_complete(self) -> None:
        self.answers.answered()
        super().on_response_complete()


class OneWriteTransport(asyncio.Transport):
    """`transport` that holds an answer's headers until its body or its end (`answered`);
    everything else is `transport`'s."""

    __slots__ = ("_held", "_transport", "_writes_headers")

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self._transport = transport
        self._held: bytes | None = None
        self._writes_headers = True  # the next write is an answer's first

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if len(data) <= JOINED_MAX_BYTES:
                self._transport.write(held + data)
                return
            self._transport.write(held)
        elif self._writes_headers:
            self._writes_headers = False
            if _CONTENT_LENGTH in data:  # a body follows, unless the answer is to a HEAD
                self._held = bytes(data)
                return
        self._transport.write(data)

    def answered(self) -> None:
        """The answer is complete: what is held leaves, and the next write is the next
        answer's headers."""
        self._send_held()
        self._writes_headers = True

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def _send_held(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._transport.write(held)

    def close(self) -> None:
        self._send_held()
        self._transport.close()

    def write_eof(self) -> None:
        self._send_held()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None  # an abort drops what is buffered
        self._transport.abort()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def get_write_buffer_size(self) -> int:
        held = 0 if self._held is None else len(self._held)
        return held + self._transport.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._send_held()  # an upgraded connection's protocol writes to `transport` itself
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()
