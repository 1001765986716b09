"""An :class:`~acp.aio.transport.AsyncTransport` over a pair of POSIX file descriptors: the
base of the asyncio stdio and process transports.

Loop-native: no thread and no task. A read that has to wait awaits a future that
``loop.add_reader`` completes; writes go out at once when the fd takes them, the rest waits in a
buffer that ``loop.add_writer`` empties (``drain()`` is the flow control). A connection can
instead take the bytes pushed (:class:`~acp.aio.transport.ReceivingTransport`): then the fd is
watched once, from ``set_receiver`` until EOF, close or ``pause_reading``, and each readiness
is one ``os.read`` handed straight to the receiver (no future, no epoll change per read). Each fd is driven in
one of three ways, chosen once, the same split as :mod:`acp.transport.fd`:

* non-blocking (our own pipes, stdio pipes and sockets): read or write first, and watch the fd
  only when the call would block;
* blocking but watchable (a terminal, whose O_NONBLOCK flag we must not change because other
  processes share it): wait until the loop reports it ready, then one ``os.read``, or one
  ``os.write`` of at most ``PIPE_BUF`` bytes, neither of which can block;
* not watchable (a regular file, a block device, ``/dev/null``: epoll refuses them because they
  are always ready): read and write directly; each read first yields to the loop once, so a long
  input file does not starve the other tasks.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import select
from collections import deque
from collections.abc import Callable
from itertools import islice
from types import TracebackType
from typing import Any, TypeVar

from ...errors import ConnectionClosedError
from .base import READ_CHUNK

__all__ = ["FdTransport"]

_log = logging.getLogger("acp.aio.transport")

# A write of at most PIPE_BUF bytes to a pipe the loop reports writable does not block.
_PIPE_BUF: int = getattr(select, "PIPE_BUF", 512)
# Errors that mean "the other side is gone" rather than "something is broken".
_PEER_GONE = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN)
# drain() waits while more than HIGH bytes are buffered, until at most LOW are (asyncio's own).
_HIGH_WATER = 65536
_LOW_WATER = 16384
# Buffers handed to one os.writev.
_IOV_MAX = 64

_ALWAYS_READY = 0  # the loop cannot watch it (regular file...): read/write directly
_NONBLOCKING = 1  # call first, watch on EAGAIN
_BLOCKING = 2  # watch first, then a call that cannot block

_Self = TypeVar("_Self", bound="FdTransport")


def _mode(fd: int, watch: Callable[..., Any], unwatch: Callable[[int], Any]) -> int:
    try:
        watch(fd, _noop)
    except OSError:  # EPERM from epoll: a file that is always ready
        return _ALWAYS_READY
    unwatch(fd)
    return _BLOCKING if os.get_blocking(fd) else _NONBLOCKING


def _noop() -> None:
    pass


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class FdTransport:
    """An AsyncTransport reading one fd and writing another (either may be ``None`` for a
    one-way transport), on the running loop. It owns both fds and closes them."""

    def __init__(
        self,
        read_fd: int | None,
        write_fd: int | None,
        *,
        description: str,
        flush_timeout: float | None = 5.0,
    ) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._description = description
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._read_mode = (
            _mode(read_fd, loop.add_reader, loop.remove_reader) if read_fd is not None else 0
        )
        self._write_mode = (
            _mode(write_fd, loop.add_writer, loop.remove_writer) if write_fd is not None else 0
        )
        self._flush_timeout = flush_timeout
        self._closed = False
        self._close_done: asyncio.Future[None] | None = None
        self._flushed: asyncio.Future[None] | None = None  # close() waits for the buffer
        self._eof = read_fd is None
        self._last_read_short = False
        self._reader: asyncio.Future[None] | None = None  # a read waiting for the fd
        self._write_closed = write_fd is None
        self._lost: OSError | None = None  # the error that said the peer is gone
        self._chunks: deque[bytes | bytearray | memoryview] = deque()  # written, not yet taken by the fd
        self._buffered = 0
        self._watching_write = False
        self._paused = False  # more than _HIGH_WATER buffered: drain() waits
        self._drainers: list[asyncio.Future[None]] = []
        self._dropped: str | None = None  # why buffered data was thrown away
        # Push mode (set_receiver): who gets the bytes; the fd is watched (or, always ready,
        # a read is scheduled) while _pushing; _eof_pushed once receiver(b"") was called.
        self._receiver: Callable[[bytes], None] | None = None
        self._push_paused = False
        self._pushing = False
        self._eof_pushed = False
        self._file_scheduled = False  # a _push_file callback is scheduled

    # -- AsyncTransport ----------------------------------------------------------------------

    @property
    def description(self) -> str:
        """A short name for logs."""
        return self._description

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    async def read(self) -> bytes:
        """Wait until bytes arrive; return up to 64 KiB, or ``b""`` at EOF / after close."""
        if self._closed or self._eof:
            return b""
        if self._reader is not None:
            raise RuntimeError(f"{self._description}: another task is already reading")
        if self._receiver is not None:
            raise RuntimeError(f"{self._description}: the bytes are pushed (set_receiver)")
        fd = self._read_fd
        assert fd is not None
        mode = self._read_mode
        # After a short read the pipe was most likely drained: wait first instead of paying for
        # an os.read that fails with EAGAIN.
        wait_first = mode == _BLOCKING or self._last_read_short
        while True:
            if mode == _ALWAYS_READY:
                await asyncio.sleep(0)
            elif wait_first:
                await self._readable(fd)
            if self._closed:
                return b""
            try:
                data = os.read(fd, READ_CHUNK)
                break
            except BlockingIOError:
                wait_first = True
            except ConnectionResetError:
                data = b""
                break
        self._last_read_short = len(data) < READ_CHUNK
        if not data:
            # Sticky: a tty may deliver data again after ^D, but the protocol stream has ended.
            self._eof = True
            _log.debug("%s: end of input", self._description)
        return data

    def write(self, data: bytes | bytearray) -> None:
        """Queue all of ``data`` (ours once passed: a bytearray is kept as it is, not copied);
        never blocks. ``ConnectionClosedError`` if this side was closed or the peer is gone."""
        if self._write_closed or self._closed:
            raise ConnectionClosedError(f"{self._description}: transport is closed")
        if self._lost is not None:
            raise ConnectionClosedError(f"{self._description}: peer closed the stream") from self._lost
        if not data:
            return
        fd = self._write_fd
        assert fd is not None
        if self._write_mode == _ALWAYS_READY:
            self._write_through(fd, data)
            return
        view: bytes | bytearray | memoryview = data
        if not self._chunks and self._write_mode == _NONBLOCKING:
            try:
                written = os.write(fd, data)
            except BlockingIOError:
                written = 0
            except OSError as exc:
                if exc.errno not in _PEER_GONE:
                    raise
                self._lose(exc)
                raise ConnectionClosedError(f"{self._description}: peer closed the stream") from exc
            if written == len(data):
                return
            view = memoryview(data)[written:]
        backed_up = bool(self._chunks)
        self._chunks.append(view)
        self._buffered += len(view)
        if self._buffered > _HIGH_WATER:
            self._paused = True
        if not self._watching_write:
            self._loop.add_writer(fd, self._on_writable)
            self._watching_write = True
        elif backed_up and self._write_mode == _NONBLOCKING:
            # A producer that never yields (a handler streaming many updates in one go) would
            # keep everything after the first pipe-full until it returns to the loop, and the
            # reader would idle meanwhile: offer the backlog to the fd again now.
            self._on_writable()

    async def drain(self) -> None:
        """Wait until at most 16 KiB are buffered once more than 64 KiB were; at once if not.
        ``ConnectionClosedError`` if buffered data had to be thrown away (closed, peer gone)."""
        while True:
            if self._dropped is not None:
                raise ConnectionClosedError(f"{self._description}: {self._dropped}")
            if not self._paused:
                return
            waiter = self._loop.create_future()
            self._drainers.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._drainers:
                    self._drainers.remove(waiter)

    def close_write(self) -> None:
        """Half-close: the peer reads EOF once the buffered data is written. Idempotent."""
        if self._write_closed:
            return
        self._write_closed = True
        _log.debug("%s: write side closed", self._description)
        if not self._chunks:
            self._release_write()

    async def close(self) -> None:
        """Wake a waiting read (it returns ``b""``) and refuse writes at once; wait (at most
        ``flush_timeout``) for the buffered data to be written, drop what is left, release the
        fds. Idempotent: a second call returns once the first is done."""
        if self._close_done is not None:
            await asyncio.shield(self._close_done)
            return
        done = self._close_done = self._loop.create_future()
        try:
            await self._close_steps()
        finally:
            self._release()
            done.set_result(None)

    # -- ReceivingTransport ------------------------------------------------------------------

    def set_receiver(self, receiver: Callable[[bytes], None]) -> None:
        """From now on call ``receiver(data)`` on the loop with each chunk read, and
        ``receiver(b"")`` once at the end (EOF, peer gone, or :meth:`close`), instead of
        serving :meth:`read`."""
        if self._reader is not None:
            raise RuntimeError(f"{self._description}: a task is reading")
        self._receiver = receiver
        self._start_pushing()

    def pause_reading(self) -> None:
        """Stop reading (and pushing) until :meth:`resume_reading`: the peer's writes back up."""
        self._push_paused = True
        self._stop_pushing()

    def resume_reading(self) -> None:
        """Read and push again."""
        if self._push_paused:
            self._push_paused = False
            self._start_pushing()

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self._description!r} {state}>"

    # -- hooks -------------------------------------------------------------------------------

    async def _close_steps(self) -> None:
        """What close() does before it releases everything (which it does in any case)."""
        self._stop_reading()
        await self._flush(self._flush_timeout)

    def _on_close(self) -> None:
        """Runs when close() releases the fds, before it does (those not yet released are
        still open)."""

    def _release_fd(self, fd: int) -> None:
        """Give up one of our fds (the loop no longer watches it)."""
        os.close(fd)

    # -- internals ---------------------------------------------------------------------------

    def _stop_reading(self) -> None:
        """The first step of close(): no more reads or writes; a waiting read returns b""."""
        if self._closed:
            return
        self._closed = True
        if self._receiver is not None:
            # Unwatch while the fd is surely ours; the end is pushed from a loop callback
            # (never inside close(): the receiver may be what is closing us).
            self._stop_pushing()
            self._loop.call_soon(self._push_eof)
        reader = self._reader
        if reader is not None:
            # Unwatch here, while the fd is surely ours: the woken read must not touch it.
            assert self._read_fd is not None
            self._loop.remove_reader(self._read_fd)
            self._reader = None
            _wake(reader)

    async def _flush(self, timeout: float | None) -> None:
        """Wait until the buffer is written or the peer is gone, at most ``timeout``."""
        if self._chunks:
            waiter = self._flushed = self._loop.create_future()
            await asyncio.wait([waiter], timeout=timeout)

    def _release(self) -> None:
        self._stop_reading()
        self._write_closed = True
        if self._chunks:
            self._drop("transport is closed")
        self._on_close()
        self._release_read()
        self._release_write()
        _log.debug("%s: closed", self._description)

    def _release_read(self) -> None:
        if self._read_fd is not None:
            fd, self._read_fd = self._read_fd, None
            self._release_fd(fd)

    def _start_pushing(self) -> None:
        if self._pushing or self._push_paused or self._eof_pushed:
            return
        if self._closed or self._eof:
            self._loop.call_soon(self._push_eof)
            return
        fd = self._read_fd
        assert fd is not None
        self._pushing = True
        if self._read_mode == _ALWAYS_READY:
            self._schedule_file()
        else:
            self._loop.add_reader(fd, self._on_readable)

    def _stop_pushing(self) -> None:
        if self._pushing:
            self._pushing = False
            if self._read_mode != _ALWAYS_READY:
                assert self._read_fd is not None
                self._loop.remove_reader(self._read_fd)

    def _on_readable(self) -> None:
        # The loop says the fd is readable: one os.read cannot block (even on a terminal).
        assert self._read_fd is not None and self._receiver is not None
        try:
            data = os.read(self._read_fd, READ_CHUNK)
        except BlockingIOError:
            return
        except ConnectionResetError:
            data = b""
        if data:
            self._receiver(data)
            return
        self._stop_pushing()
        self._eof = True
        _log.debug("%s: end of input", self._description)
        self._push_eof()

    def _push_file(self) -> None:
        # Always ready (a regular file): one read per loop callback, so a long input file
        # does not starve the other tasks.
        self._file_scheduled = False
        if not self._pushing or self._closed:
            return
        self._on_readable()
        if self._pushing:
            self._schedule_file()

    def _schedule_file(self) -> None:
        if not self._file_scheduled:
            self._file_scheduled = True
            self._loop.call_soon(self._push_file)

    def _push_eof(self) -> None:
        if not self._eof_pushed:
            self._eof_pushed = True
            assert self._receiver is not None
            self._receiver(b"")

    async def _readable(self, fd: int) -> None:
        waiter = self._loop.create_future()
        self._reader = waiter
        self._loop.add_reader(fd, _wake, waiter)
        try:
            await waiter
        finally:
            if self._reader is waiter:  # else close() has unwatched the fd itself
                self._loop.remove_reader(fd)
                self._reader = None

    def _write_through(self, fd: int, data: bytes | bytearray) -> None:
        # A regular file never waits on a peer: write it all now.
        view = memoryview(data)
        offset = 0
        try:
            while offset < len(view):
                offset += os.write(fd, view[offset:])
        except OSError as exc:
            if exc.errno not in _PEER_GONE:
                raise
            self._lose(exc)
            raise ConnectionClosedError(f"{self._description}: peer closed the stream") from exc

    def _on_writable(self) -> None:
        fd = self._write_fd
        assert fd is not None
        try:
            if self._write_mode == _BLOCKING:
                written = os.write(fd, self._chunks[0][:_PIPE_BUF])
            else:
                written = os.writev(fd, list(islice(self._chunks, _IOV_MAX)))
        except BlockingIOError:
            return
        except OSError as exc:  # the peer is gone (or the fd broke): nothing more goes out
            self._lose(exc)
            return
        self._buffered -= written
        chunks = self._chunks
        while written:
            head = chunks[0]
            if written >= len(head):
                written -= len(head)
                chunks.popleft()
            else:
                chunks[0] = memoryview(head)[written:]
                written = 0
        if self._paused and self._buffered <= _LOW_WATER:
            self._paused = False
            self._wake_drainers()
        if not chunks:
            self._unwatch_write()
            if self._flushed is not None:
                _wake(self._flushed)
            if self._write_closed:
                self._release_write()

    def _lose(self, exc: OSError) -> None:
        if self._lost is None:
            self._lost = exc
            _log.debug("%s: write failed: %s", self._description, exc)
        if self._chunks:
            self._drop("peer closed the stream")

    def _drop(self, reason: str) -> None:
        self._unwatch_write()
        self._chunks.clear()
        self._buffered = 0
        self._dropped = reason
        self._paused = False
        self._wake_drainers()
        if self._flushed is not None:
            _wake(self._flushed)

    def _wake_drainers(self) -> None:
        for waiter in self._drainers:
            _wake(waiter)
        self._drainers.clear()

    def _unwatch_write(self) -> None:
        if self._watching_write:
            assert self._write_fd is not None
            self._loop.remove_writer(self._write_fd)
            self._watching_write = False

    def _release_write(self) -> None:
        self._unwatch_write()
        if self._write_fd is not None:
            fd, self._write_fd = self._write_fd, None
            self._release_fd(fd)
