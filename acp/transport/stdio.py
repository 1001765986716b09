"""The agent's side of stdio: the protocol on the process's own stdin/stdout."""

from __future__ import annotations

import os
import stat
import sys
import threading
from typing import TextIO

from .fd import FdTransport

__all__ = ["StdioTransport"]

# stdin/stdout exist once per process, so at most one StdioTransport may own them at a time.
_active_lock = threading.Lock()
_active: _StdioClaim | None = None


class StdioTransport(FdTransport):
    """Protocol bytes on fd 0 / fd 1, with the real stdout guarded against stray output.

    On construction the transport takes private duplicates of fd 0 and fd 1 (close-on-exec, so
    child processes never inherit them) and then:

    * points fd 1 at fd 2 and sets ``sys.stdout = sys.stderr``, so a stray ``print()``, a C
      library's ``printf`` or a child process that inherits stdout writes to stderr, never into
      the protocol stream;
    * points fd 0 at ``/dev/null``, so a stray ``input()`` or an inheriting child process cannot
      swallow protocol bytes (``sys.stdin`` then reads EOF; anything already buffered in
      ``sys.stdin`` before construction is not seen by the transport).

    :meth:`close` restores fd 0, ``sys.stdout`` and fd 1. Exception: after :meth:`close_write`
    (half-close), fd 1 stays on stderr, because pointing it back at the protocol stream would
    reopen the stream the peer has just seen end. So, to make the peer read EOF while this
    process keeps running, call ``close_write()`` before ``close()``; a plain ``close()`` hands
    stdout back to the process and the peer sees EOF when the process exits.

    End of stdin makes :meth:`read` return ``b""``. Only one instance may be open per process
    (``RuntimeError`` otherwise). POSIX only.
    """

    def __init__(self) -> None:
        self._claim = _StdioClaim()
        read_fd, write_fd = self._claim.read_fd, self._claim.write_fd
        self._half_closed = False
        # Pipes and sockets go non-blocking: a read or write is then one syscall, with a
        # poll only when it would block (a blocking fd needs a poll before every call to
        # stay wakeable by close(), which cost ~12 us per round trip here). Safe: fd 0/1
        # now point elsewhere, so only our private fds use these descriptions; ttys and
        # files are left as they are. close() restores the flags.
        self._made_nonblocking = [fd for fd in (read_fd, write_fd) if _may_go_nonblocking(fd)]
        for fd in self._made_nonblocking:
            os.set_blocking(fd, False)
        super().__init__(read_fd, write_fd, description="stdio")

    def close_write(self) -> None:
        """Half-close: the peer reads EOF; fd 1 stays on stderr from now on (see class doc)."""
        self._half_closed = True
        super().close_write()

    def _fd_released(self, fd: int) -> None:
        # Give the descriptions back blocking, but only now that no thread is inside a call on
        # them: a reader between its poll and its os.read would otherwise block for good.
        _restore_blocking(self._made_nonblocking, fd)
        super()._fd_released(fd)

    def _on_close_locked(self) -> None:
        # The private fds are still open here: FdTransport closes them only after this hook.
        self._claim.release(self._read_fd, None if self._half_closed else self._write_fd)


class _StdioClaim:
    """This process's fd 0 / fd 1 taken for the protocol, for either runtime's StdioTransport
    (see :class:`StdioTransport` for what happens to them): ``read_fd`` / ``write_fd`` are the
    private duplicates the transport uses; :meth:`release` gives fd 0 / fd 1 back."""

    def __init__(self) -> None:
        global _active
        with _active_lock:
            if _active is not None:
                raise RuntimeError("a StdioTransport is already open in this process")
            read_fd = os.dup(0)
            try:
                write_fd = os.dup(1)
            except OSError:
                os.close(read_fd)
                raise
            devnull = os.open(os.devnull, os.O_RDWR)
            try:
                os.dup2(devnull, 0)
                try:
                    os.dup2(2, 1)
                except OSError:  # no fd 2 (closed): stray output is discarded instead
                    os.dup2(devnull, 1)
            finally:
                os.close(devnull)
            self.read_fd = read_fd
            self.write_fd = write_fd
            self._saved_stdout: TextIO | None = sys.stdout
            sys.stdout = sys.stderr
            if self._saved_stdout is not None:
                # Text printed before we started and still buffered now lands on stderr.
                try:
                    self._saved_stdout.flush()
                except (OSError, ValueError):
                    pass
            _active = self

    def release(self, read_fd: int | None, write_fd: int | None) -> None:
        """Point fd 0 back at ``read_fd`` and fd 1 at ``write_fd`` (both still open; None:
        leave that one as it is), restore ``sys.stdout``, let another transport claim them."""
        global _active
        if read_fd is not None:
            os.dup2(read_fd, 0)
        if write_fd is not None:
            os.dup2(write_fd, 1)
        if sys.stdout is sys.stderr:
            sys.stdout = self._saved_stdout
        with _active_lock:
            if _active is self:
                _active = None


def _restore_blocking(made_nonblocking: list[int], fd: int) -> None:
    """Give ``fd``'s description back blocking if this transport made it non-blocking (both
    runtimes' stdio transports, once no call is inside on ``fd``)."""
    if fd in made_nonblocking:
        made_nonblocking.remove(fd)
        try:
            os.set_blocking(fd, True)
        except OSError:
            pass


def _may_go_nonblocking(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
        return (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)) and os.get_blocking(fd)
    except OSError:
        return False
