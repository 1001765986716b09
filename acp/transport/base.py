"""The byte-pipe contract every transport fulfils.

A transport moves opaque bytes; it knows nothing about JSON or lines. The connection engine
(``acp.connection``) owns the threads: one reader thread calls :meth:`Transport.read` in a loop,
and writers call :meth:`Transport.write` under the engine's write lock.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["READ_CHUNK", "Transport"]

#: The most bytes one :meth:`Transport.read` returns.
READ_CHUNK = 65536


class Transport(Protocol):
    """A bidirectional byte stream (stdio, a child process, an in-memory pair, ...).

    Threading: one thread reads at a time and one thread writes at a time (the engine
    serialises both); :meth:`close` and :meth:`close_write` may be called from any thread.
    A transport may also have ``read_within(timeout) -> bytes | None`` (None: the timeout
    passed) and ``interrupt_read()`` (the read under way returns None at once), as
    :class:`~acp.transport.FdTransport` has: a thread waiting for an answer then reads it
    itself (docs/threading.md).
    """

    def read(self) -> bytes:
        """Block until bytes are available; return up to 64 KiB of them.

        ``b""`` means end of stream: EOF, the peer is gone, or :meth:`close` was called.
        Never raises for those; ``OSError`` only for truly unexpected failures.
        """
        ...

    def write(self, data: bytes | bytearray) -> None:
        """Write all of ``data`` (looping over partial writes).

        ``data`` is the transport's once passed: the engine never changes it afterwards (a
        batch of a MiB or more comes as the bytearray it was encoded into, not copied to bytes).

        Raises :class:`acp.errors.ConnectionClosedError` when the peer is gone or this side was
        closed (:meth:`close` or :meth:`close_write`).
        """
        ...

    def close_write(self) -> None:
        """Half-close: no more writes from this side; the peer reads EOF. Idempotent."""
        ...

    def close(self) -> None:
        """Release everything. Idempotent.

        A :meth:`read` blocked in another thread returns ``b""`` promptly, a blocked
        :meth:`write` raises ``ConnectionClosedError``, and no thread started by the transport
        is still running when this returns.
        """
        ...

    @property
    def description(self) -> str:
        """A short human-readable name for logs, e.g. ``"stdio"`` or ``"process 1234 (npx x)"``."""
        ...
