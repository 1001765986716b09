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
on the wrong file). A thread inside :meth:`FdTransport.read` holds the read side's lock, one
inside :meth:`FdTransport.write` the write side's (one reader and one writer at a time: never
contended, one acquire and release per call). ``close()`` closes an fd only when it can take
its side's lock; otherwise the thread inside closes it on its way out (promptly, since
``close()`` woke it). The wake-up pipe goes once both fds are gone.
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
        self._lock = threading.Lock()  # closing: the flags below and releasing fds
        self._reading = threading.Lock()  # held by the thread inside read()
        self._writing = threading.Lock()  # held by the thread inside write()
        self._closed = False
        self._write_closed = write_fd is None
        self._eof = read_fd is None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        # The reader's poll object, built once (one reader at a time), not per read; it also
        # polls a pipe of its own for interrupt_read (never the wake-up pipe: that one is
        # never drained, which every other wait relies on).
        self._read_poller = select.poll()
        self._intr_r = self._intr_w = -1
        if read_fd is not None:
            self._intr_r, self._intr_w = os.pipe()
            os.set_blocking(self._intr_w, False)
            self._read_poller.register(read_fd, select.POLLIN)
            self._read_poller.register(self._wake_r, select.POLLIN)
            self._read_poller.register(self._intr_r, select.POLLIN)
        self._poll_first = not self._read_nonblocking

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
        data = self.read_within(None)
        while data is None:  # (interrupt_read: not for this kind of read)
            data = self.read_within(None)
        return data

    def read_within(self, timeout: float | None) -> bytes | None:
        """:meth:`read`, waiting at most ``timeout`` seconds (None: no limit); None when
        that passed first or :meth:`interrupt_read` was called meanwhile."""
        # acquire/release rather than ``with`` (here and in write): about half the cost, ~50 ns
        # each time, once per read and once per write.
        reading = self._reading
        reading.acquire()
        try:
            fd = self._read_fd  # (None once close() released it: nobody was inside)
            if self._closed or self._eof or fd is None:
                return b""
            # After a short read the pipe was most likely drained: poll first instead of paying
            # for an os.read that fails with EAGAIN (each syscall also releases and retakes the
            # GIL). A blocking fd is always polled first, to stay wakeable by close().
            poll_first = self._poll_first
            while True:
                if poll_first:
                    # Wait for data or the wake-up pipe (a loop, not any() over a generator
                    # expression: a generator made and resumed per read).
                    wake = self._wake_r
                    ready = self._read_poller.poll() if timeout is None else self._read_poller.poll(timeout * 1000)
                    readable = False
                    for ready_fd, _ in ready:
                        if ready_fd == fd:
                            readable = True
                        elif ready_fd == wake:
                            return b""
                        else:
                            os.read(ready_fd, 64)  # interrupt_read's bytes
                    if not readable:
                        return None  # the timeout passed, or interrupt_read
                try:
                    data = os.read(fd, READ_CHUNK)
                    break
                except BlockingIOError:  # our own non-blocking pipe is empty: wait for data
                    poll_first = True
                except ConnectionResetError:
                    data = b""
                    break
            self._poll_first = len(data) < READ_CHUNK or not self._read_nonblocking
            if not data and not self._closed:
                # Sticky: a tty may deliver data again after ^D, but the protocol stream has ended.
                self._eof = True
                _log.debug("%s: end of input", self._description)
            return data
        finally:
            reading.release()
            if self._closed:  # close() may have left the fds to the last one out
                self._release()

    def interrupt_read(self) -> None:
        """Make a :meth:`read_within` under way (or the next one) return None at once."""
        with self._lock:
            if self._intr_w >= 0:
                try:
                    os.write(self._intr_w, b"i")
                except BlockingIOError:  # full of interrupts no reader took yet: one is enough
                    pass

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write all of ``data``; ``ConnectionClosedError`` if the peer is gone or we closed."""
        writing = self._writing
        writing.acquire()
        try:
            fd = self._write_fd
            if self._write_closed or fd is None:
                raise ConnectionClosedError(f"{self._description}: transport is closed")
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
            writing.release()
            if self._write_closed:  # close() or close_write() may have left the fd to us
                self._release()

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

    def _release(self) -> None:
        with self._lock:
            self._release_locked()

    def _release_locked(self) -> None:
        # Release every fd that is finished with and that no thread is inside (see module doc):
        # a side's lock that cannot be taken means a thread is inside, and it calls this again
        # on its way out. Each fd is forgotten before it is closed: an exception raised in
        # between (a Ctrl-C in the main thread) then leaks it, where the other order let the
        # next release close it again, by then perhaps another file's (a reused number).
        if self._closed and self._read_fd is not None and self._reading.acquire(False):
            try:
                fd, self._read_fd = self._read_fd, None
                self._fd_released(fd)
            finally:
                self._reading.release()
        if self._write_closed and self._write_fd is not None and self._writing.acquire(False):
            try:
                fd, self._write_fd = self._write_fd, None
                self._fd_released(fd)
            finally:
                self._writing.release()
        # Polled beside either fd: closed once both are released (a call that starts later
        # finds its fd gone and never polls).
        if self._closed and self._read_fd is None and self._write_fd is None and self._wake_r >= 0:
            fds = (self._wake_r, self._wake_w, self._intr_r, self._intr_w)
            self._wake_r = self._wake_w = self._intr_r = self._intr_w = -1
            for fd in fds:
                if fd >= 0:
                    os.close(fd)

    def _fd_released(self, fd: int) -> None:
        """(Under the lock.) No thread is or will be inside a call on ``fd``: close it if owned.
        Subclasses may hand it back first (stdio restores its blocking flag)."""
        if self._close_fds:
            os.close(fd)

    def _wait(self, fd: int, events: int) -> bool:
        """Block until ``fd`` is ready (True) or the transport is closed (False)."""
        poller = select.poll()
        poller.register(fd, events)
        poller.register(self._wake_r, select.POLLIN)
        ready = poller.poll()
        return not any(ready_fd == self._wake_r for ready_fd, _ in ready)

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
