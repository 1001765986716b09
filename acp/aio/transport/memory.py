"""Two :class:`~acp.aio.transport.AsyncTransport` ends joined in memory, on one event loop.

No OS pipe and no thread: ``write`` on one end appends the bytes to the other end's read buffer
and wakes its reader (or, for a :class:`~acp.aio.transport.ReceivingTransport` user, schedules
one loop callback that pushes what arrived). For tests, and for an async agent and client in
one process.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Callable

from ...errors import ConnectionClosedError
from .base import READ_CHUNK

__all__ = ["MemoryTransport", "memory_pair"]

#: ``drain`` waits while the peer has more than this many bytes left unread.
HIGH_WATER = 1024 * 1024


class MemoryTransport:
    """One end of :func:`memory_pair`. Every method is called on the loop of its pair."""

    __slots__ = ("_peer", "_chunks", "_buffered", "_eof", "_closed", "_write_closed", "_reader", "_drainers",
                 "_description", "_receiver", "_paused", "_scheduled", "_eof_pushed", "_context")

    def __init__(self, description: str) -> None:
        self._peer: MemoryTransport | None = None
        # Bytes written by the peer and not read yet, in order.
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        # The peer will write no more (it half-closed or closed).
        self._eof = False
        # This end was closed / half-closed.
        self._closed = False
        self._write_closed = False
        # The Future a waiting read() sleeps on, resolved by the peer's write or EOF.
        self._reader: asyncio.Future[None] | None = None
        # Futures of the peer's drain() calls, waiting for this end to read.
        self._drainers: list[asyncio.Future[None]] = []
        self._description = description
        # Push mode (set_receiver): who gets the bytes, paused by backpressure, a delivery
        # callback already scheduled, the end of stream already pushed.
        self._receiver: Callable[[bytes], None] | None = None
        self._paused = False
        self._scheduled = False
        self._eof_pushed = False
        # Deliveries run in this end's own context, not in a copy of the writer's (the peer's
        # handler, whose context variables are none of this end's business).
        self._context = contextvars.Context()

    @property
    def description(self) -> str:
        """``"memory (a)"`` or ``"memory (b)"``."""
        return self._description

    @property
    def buffered(self) -> int:
        """Bytes the peer wrote that this end has not read yet (for tests and diagnostics)."""
        return self._buffered

    async def read(self) -> bytes:
        """The next bytes (at most :data:`READ_CHUNK`), or ``b""`` at end of stream."""
        while not self._chunks:
            if self._eof or self._closed:
                return b""
            waiter = self._reader = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._reader = None
        return self._take()

    def _take(self) -> bytes:
        chunks = self._chunks
        if len(chunks) == 1 and len(chunks[0]) <= READ_CHUNK:
            data = chunks.popleft()
        else:
            parts = []
            size = 0
            while chunks and size + len(chunks[0]) <= READ_CHUNK:
                part = chunks.popleft()
                parts.append(part)
                size += len(part)
            if not parts:  # one chunk bigger than READ_CHUNK: split it
                big = chunks[0]
                parts.append(big[:READ_CHUNK])
                chunks[0] = big[READ_CHUNK:]
            data = b"".join(parts)
        self._buffered -= len(data)
        if self._drainers and self._buffered <= HIGH_WATER:
            self._wake_drainers()
        return data

    def write(self, data: bytes | bytearray) -> None:
        """Hand ``data`` to the peer's read buffer; ConnectionClosedError once either end closed."""
        peer = self._peer
        if self._closed or self._write_closed or peer is None or peer._closed:
            raise ConnectionClosedError("connection closed")
        if not data:
            return
        peer._chunks.append(bytes(data))
        peer._buffered += len(data)
        peer._wake()

    async def drain(self) -> None:
        """Wait while the peer has more than :data:`HIGH_WATER` bytes unread."""
        peer = self._peer
        while peer is not None and peer._buffered > HIGH_WATER and not (peer._closed or self._closed):
            waiter = asyncio.get_running_loop().create_future()
            peer._drainers.append(waiter)
            await waiter

    def close_write(self) -> None:
        """The peer reads EOF once it has read what was written. Idempotent."""
        if self._write_closed:
            return
        self._write_closed = True
        if self._peer is not None:
            self._peer._feed_eof()

    async def close(self) -> None:
        """Close this end: a pending read returns ``b""``, the peer reads EOF. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.close_write()
        self._chunks.clear()
        self._buffered = 0
        self._paused = False
        self._wake()
        self._wake_drainers()
        if self._peer is not None:
            self._peer._wake_drainers()

    # ------------------------------------------------------------------ push mode

    def set_receiver(self, receiver: Callable[[bytes], None]) -> None:
        """Push every chunk to ``receiver`` from a loop callback instead of serving
        :meth:`read`; ``receiver(b"")`` once at end of stream (ReceivingTransport)."""
        self._receiver = receiver
        self._schedule()

    def pause_reading(self) -> None:
        """Stop pushing until :meth:`resume_reading`; written bytes wait in the buffer."""
        self._paused = True

    def resume_reading(self) -> None:
        """Push again, starting with what arrived meanwhile."""
        if self._paused:
            self._paused = False
            self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled and not self._paused and not self._eof_pushed:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._deliver, context=self._context)

    def _deliver(self) -> None:
        # A loop callback, never inside a write: no re-entrancy between the two ends.
        self._scheduled = False
        receiver = self._receiver
        if receiver is None or self._paused or self._eof_pushed:
            return
        if self._chunks and not self._closed:
            data = self._take()
            if self._chunks or self._eof:
                self._schedule()  # the rest (or the end) in the next callback
            receiver(data)
        elif self._eof or self._closed:
            self._eof_pushed = True
            receiver(b"")

    # ------------------------------------------------------------------ internals

    def _wake(self) -> None:
        if self._receiver is not None:
            self._schedule()
            return
        waiter = self._reader
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _feed_eof(self) -> None:
        self._eof = True
        self._wake()

    def _wake_drainers(self) -> None:
        drainers, self._drainers = self._drainers, []
        for waiter in drainers:
            if not waiter.done():
                waiter.set_result(None)


def memory_pair() -> tuple[MemoryTransport, MemoryTransport]:
    """Two connected in-memory transports: what one writes, the other reads.

    Loop-native (no OS pipe, no thread); use both ends from the same event loop. Closing (or
    half-closing) one end makes the other read EOF after what was already written; writing to
    an end whose peer is closed raises :class:`~acp.errors.ConnectionClosedError`.
    """
    a = MemoryTransport("memory (a)")
    b = MemoryTransport("memory (b)")
    a._peer = b
    b._peer = a
    return a, b
