"""The byte-pipe contract of the asyncio runtime: :class:`AsyncTransport`.

The same pipe as :class:`acp.transport.Transport`, for the event loop: one task reads at a
time with ``await read()``, writes never block (``write`` buffers; ``await drain()`` waits for
the buffer to shrink), and nothing here starts a thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ...transport.base import READ_CHUNK

__all__ = ["READ_CHUNK", "AsyncTransport", "ReceivingTransport"]


class AsyncTransport(Protocol):
    """A bidirectional byte stream driven from one event loop (stdio, a child process, an
    in-memory pair, a WebSocket, Streamable HTTP...). Every method is called on the loop."""

    async def read(self) -> bytes:
        """Wait until bytes are available; return up to :data:`READ_CHUNK` of them.

        ``b""`` means end of stream: EOF, the peer is gone, or :meth:`close` was called (a read
        already waiting returns ``b""`` promptly). Never raises for those; ``OSError`` only for
        truly unexpected failures.
        """
        ...

    def write(self, data: bytes | bytearray) -> None:
        """Queue all of ``data`` for writing, in order; never blocks.

        ``data`` is the transport's once passed: the engine never changes it afterwards (a
        batch of a MiB or more comes as the bytearray it was encoded into, not copied to bytes).

        Raises :class:`acp.errors.ConnectionClosedError` when the peer is gone or this side was
        closed (:meth:`close` or :meth:`close_write`).
        """
        ...

    async def drain(self) -> None:
        """Wait until the write buffer is below its high-water mark (flow control). Returns at
        once when it is; raises :class:`acp.errors.ConnectionClosedError` if the pipe closed
        with data still unwritten."""
        ...

    def close_write(self) -> None:
        """Half-close: no more writes from this side; the peer reads EOF once the buffer is
        written. Idempotent."""
        ...

    async def close(self) -> None:
        """Release everything. Idempotent; a pending :meth:`read` returns ``b""``, and no task
        the transport started is still running when this returns."""
        ...

    @property
    def description(self) -> str:
        """A short human-readable name for logs, e.g. ``"stdio"`` or ``"process 1234 (npx x)"``."""
        ...


class ReceivingTransport(AsyncTransport, Protocol):
    """An :class:`AsyncTransport` that can also push what it reads (optional; the
    connection uses it when present, instead of a task awaiting :meth:`read`).

    Pushing saves a task wake-up per read: the bytes go from the loop's data callback
    straight to the connection's framer.
    """

    def set_receiver(self, receiver: Callable[[bytes], None]) -> None:
        """From now on call ``receiver(data)`` on the loop with every chunk read, in order,
        instead of serving :meth:`read` (bytes already buffered are pushed first), and
        ``receiver(b"")`` once at end of stream (EOF, the peer is gone, or :meth:`close`).
        The receiver never runs inside :meth:`write` of either end (no re-entrancy)."""
        ...

    def pause_reading(self) -> None:
        """Stop pushing (and reading) until :meth:`resume_reading` (backpressure)."""
        ...

    def resume_reading(self) -> None:
        """Push again, starting with what was read meanwhile."""
        ...
