"""A transport over a pair of POSIX file descriptors; the base of stdio, process and memory.

How blocking calls are made interruptible
-----------------------------------------
A thread blocked in ``os.read``/``os.write`` cannot be woken by another thread, so every wait
goes through ``select.poll`` on the data fd *and* a private wake-up pipe. :meth:`FdTransport.close`
writes one byte into that pipe and never drains it, so every present and future poll of this
transport returns at once.

* Non-blocking fds (pipes this package created, so nobody else shares their file description)
  take the cheap path: ``os.read``/``os.write`` first, and poll only on ``EAGAIN``.
* Blocking fds (stdin/stdout, whose O_NONBLOCK flag we must not change because other processes
  share it) poll first and then read (which cannot block: poll said readable). Writes to a
  blocking pipe or terminal go in ``PIPE_BUF`` pieces after each ``POLLOUT`` so that none of them
  can block; writes to a regular file never wait, so they go straight through.

Fd ownership
------------
An fd is never closed while another thread may still be inside ``os.read``/``os.write``/``poll``
on it (the number could be reused by an unrelated ``open`` and the blocked call would then act
on the wrong file). Each call registers itself under a lock; ``close()`` closes the fds that
nobody is using and leaves the others to the last thread that leaves them, which closes them on
its way out (promptly, since ``close()`` woke it). The wake-up pipe is closed the same way.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import stat
import threading
from types import TracebackType
from typing import TypeVar

from ..errors import ConnectionClosedError
from .base import READ_CHUNK

__all__ = ["FdTransport"]

_log = logging.getLogger("acp.transport")

# A write of at most PIPE_BUF bytes to a pipe that poll() reports writable does not block.
_PIPE_BUF: int = getattr(select, "PIPE_BUF", 512)
_SLICE_FREE = 64 * 1024  # up to this size a write passes bytes as they are (one write, no view)

# Errors that mean "the other side is gone" rather than "something is broken".
_PEER_GONE = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN)

_Self = TypeVar("_Self", bound="FdTransport")

_WRITE_NONBLOCKING = 0  # our own pipe: write, poll only on EAGAIN
_WRITE_REGULAR = 1  # a regular file or block device: never waits on a peer
_WRITE_BLOCKING = 2  # a shared blocking pipe / tty / socket: poll, then PIPE_BUF-sized writes


def _write_mode(fd: int) -> int:
    if not os.get_blocking(fd):
        return _WRITE_NONBLOCKING
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode) or stat.S_ISBLK(mode):
        return _WRITE_REGULAR
    return _WRITE_BLOCKING


class FdTransport:
    """A :class:`~acp.transport.Transport` reading one fd and writing another.

    ``read_fd`` or ``write_fd`` may be ``None`` for a one-way transport (reads then return
    ``b""``, writes raise ``ConnectionClosedError``). With ``close_fds=True`` (the default) the
    transport owns both fds and closes them; with ``False`` it only stops using them. The fds are
    used as they are: make them non-blocking first if nobody else shares them (cheaper).

    One reader and one writer at a time (the engine serialises each); ``close()`` and
    ``close_write()`` may come from any thread. POSIX only (``select.poll``).
    """

    def __init__(
        self,
        read_fd: int | None,
        write_fd: int | None,
        *,
        description: str = "fd",
        close_fds: bool = True,
    ) -> None:
        self._description = description
        self._close_fds = close_fds
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._read_nonblocking = read_fd is not None and not os.get_blocking(read_fd)
        self._write_mode = _write_mode(write_fd) if write_fd is not None else _WRITE_NONBLOCKING
        self._lock = threading.Lock()
        self._closed = False
        self._write_closed = write_fd is None
        self._eof = read_fd is None
        self._readers = 0  # threads inside read()
        self._writers = 0  # threads inside write()
        self._wake_r, self._wake_w = os.pipe()
        self._read_poller: select.poll | None = None
        self._last_read_short = False
        os.set_blocking(self._wake_w, False)

    # -- Transport ---------------------------------------------------------------------------

    @property
    def description(self) -> str:
        """A short name for logs."""
        return self._description

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def read(self) -> bytes:
        """Block until bytes arrive; return up to 64 KiB, or ``b""`` at EOF / after close."""
        # acquire/release rather than ``with`` (here and in write): about half the cost, ~50 ns
        # each time, twice per message.
        lock = self._lock
        lock.acquire()
        try:
            if self._closed or self._eof:
                return b""
            fd = self._read_fd
            assert fd is not None
            self._readers += 1
        finally:
            lock.release()
        try:
            data = self._read_fd_loop(fd)
        finally:
            lock.acquire()
            try:
                self._readers -= 1
                if self._closed:  # only then may an fd need closing by the last one out
                    self._release_locked()
            finally:
                lock.release()
        if not data and not self._closed:
            # Sticky: a tty may deliver data again after ^D, but the protocol stream has ended.
            self._eof = True
            _log.debug("%s: end of input", self._description)
        return data

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write all of ``data``; ``ConnectionClosedError`` if the peer is gone or we closed."""
        lock = self._lock
        lock.acquire()
        try:
            if self._write_closed or self._closed:
                raise ConnectionClosedError(f"{self._description}: transport is closed")
            fd = self._write_fd
            assert fd is not None
            self._writers += 1
        finally:
            lock.release()
        try:
            sent = 0
            if type(data) is bytes and self._write_mode != _WRITE_BLOCKING:
                # Most messages go out in one os.write: no _write_all frame for them.
                try:
                    sent = os.write(fd, data)
                except BlockingIOError:
                    pass
                if sent == len(data):
                    return
            self._write_all(fd, data if type(data) is bytes else memoryview(data).cast("B"), sent)
        except OSError as exc:
            if exc.errno in _PEER_GONE:
                raise ConnectionClosedError(f"{self._description}: peer closed the stream") from exc
            raise
        finally:
            lock.acquire()
            try:
                self._writers -= 1
                if self._write_closed:
                    self._release_locked()
            finally:
                lock.release()

    def close_write(self) -> None:
        """Half-close: the peer reads EOF once any write in progress has finished."""
        with self._lock:
            if self._write_closed:
                return
            self._write_closed = True
            _log.debug("%s: write side closed", self._description)
            self._release_locked()

    def close(self) -> None:
        """Wake blocked calls (reads return ``b""``, writes raise) and release the fds."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._write_closed = True
            # Never drained: every poll of this transport, now or later, returns at once.
            os.write(self._wake_w, b"x")
            self._on_close_locked()
            self._release_locked()
        _log.debug("%s: closed", self._description)

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self._description!r} {state}>"

    # -- internals ---------------------------------------------------------------------------

    def _on_close_locked(self) -> None:
        """Hook for subclasses: runs inside close() under the lock, before fds are released."""

    def _release_locked(self) -> None:
        # Close every fd that is finished with and that no thread is inside (see module doc).
        if self._closed and self._readers == 0 and self._read_fd is not None:
            fd, self._read_fd = self._read_fd, None
            if self._close_fds:
                os.close(fd)
        if self._write_closed and self._writers == 0 and self._write_fd is not None:
            fd, self._write_fd = self._write_fd, None
            if self._close_fds:
                os.close(fd)
        if self._closed and self._readers == 0 and self._writers == 0 and self._wake_r >= 0:
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_r = self._wake_w = -1

    def _wait(self, fd: int, events: int) -> bool:
        """Block until ``fd`` is ready (True) or the transport is closed (False)."""
        poller = select.poll()
        poller.register(fd, events)
        poller.register(self._wake_r, select.POLLIN)
        ready = poller.poll()
        return not any(ready_fd == self._wake_r for ready_fd, _ in ready)

    def _read_fd_loop(self, fd: int) -> bytes:
        # After a short read the pipe was most likely drained: poll first instead of paying for
        # an os.read that fails with EAGAIN (each syscall also releases and retakes the GIL).
        poll_first = not self._read_nonblocking or self._last_read_short
        while True:
            if poll_first:
                # Wait for data or the wake-up pipe, written here (not a method: once per read).
                # The reader's poll object is built once (one reader at a time), not per read.
                poller = self._read_poller
                if poller is None:
                    poller = self._read_poller = select.poll()
                    poller.register(fd, select.POLLIN)
                    poller.register(self._wake_r, select.POLLIN)
                wake = self._wake_r
                # A loop, not any() over a generator expression: a generator made and resumed per read.
                for ready_fd, _ in poller.poll():
                    if ready_fd == wake:
                        return b""
            try:
                data = os.read(fd, READ_CHUNK)
                self._last_read_short = len(data) < READ_CHUNK
                return data
            except BlockingIOError:
                # Our own non-blocking pipe is empty (or a spurious wake-up): wait for data.
                poll_first = True
            except ConnectionResetError:
                return b""

    def _write_all(self, fd: int, view: bytes | memoryview, offset: int = 0) -> None:
        # bytes go straight to os.write (no memoryview per write); a partial write slices.
        # ``offset``: bytes already written.
        total = len(view)
        if total - offset > _SLICE_FREE and type(view) is bytes:
            # A big message goes out in many partial writes: slicing bytes would copy what is
            # left of it each time (quadratic: 50 MiB took 12 s); a memoryview's slices do not.
            view = memoryview(view)
        mode = self._write_mode
        while offset < total:
            if mode == _WRITE_BLOCKING:
                if not self._wait(fd, select.POLLOUT):
                    raise ConnectionClosedError(f"{self._description}: transport is closed")
                offset += os.write(fd, view[offset : offset + _PIPE_BUF])
            elif mode == _WRITE_REGULAR:
                offset += os.write(fd, view[offset:])
            else:
                try:
                    offset += os.write(fd, view[offset:])
                except BlockingIOError:
                    if not self._wait(fd, select.POLLOUT):
                        raise ConnectionClosedError(
                            f"{self._description}: transport is closed"
                        ) from None
