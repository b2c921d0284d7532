"""HTTP answers written in one system call: uvicorn's httptools protocol over a transport that
holds a write until the next one or the end of the event loop's step.

uvicorn writes an answer's status line and headers when the app starts it and its body when
the app sends it: two `send`s on the socket for every JSON answer, and a client woken for
the headers alone, which on a machine of 2 CPUs may preempt the server before it writes the
body. The app sends both in one step of the loop, so holding the first write until the second
makes them one. A write nobody follows (the headers of an event stream, a 100 Continue) goes
out at the loop's next step; a close or an end of file sends what is held first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: A body past this size is sent after the held headers, not copied into one buffer with them.
JOINED_MAX_BYTES = 64 << 10


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose answers leave in one write (`OneWriteTransport`)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(OneWriteTransport(transport, self.loop))


class OneWriteTransport(asyncio.Transport):
    """`transport` whose first write waits for the next one, or for the end of the loop's
    step; everything else is `transport`'s."""

    __slots__ = ("_flush", "_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._flush: asyncio.Handle | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is None:
            self._held = bytes(data)
            self._flush = self._loop.call_soon(self._send_held)
            return
        self._held = None
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if len(data) <= JOINED_MAX_BYTES:
            self._transport.write(held + data)
        else:
            self._transport.write(held)
            self._transport.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def _send_held(self) -> None:
        held, self._held, self._flush = self._held, None, None
        if held is not None:
            self._transport.write(held)

    def _send_now(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
        self._send_held()

    def close(self) -> None:
        self._send_now()
        self._transport.close()

    def write_eof(self) -> None:
        self._send_now()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None  # an abort drops what is buffered
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
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
        self._send_now()  # an upgraded connection's protocol writes to `transport` itself
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()
