"""The agent's side of stdio on the event loop: the protocol on the process's own
stdin/stdout (the asyncio twin of :class:`acp.transport.StdioTransport`)."""

from __future__ import annotations

import os

from ...transport.stdio import _may_go_nonblocking, _restore_blocking, _StdioClaim
from ._fd import FdTransport

__all__ = ["StdioTransport"]


class StdioTransport(FdTransport):
    """Protocol bytes on fd 0 / fd 1, on the running loop, with the real stdout guarded
    against stray output exactly as by the sync :class:`acp.transport.StdioTransport`
    (private duplicates of fd 0/1; fd 1 pointed at stderr and ``sys.stdout = sys.stderr``;
    fd 0 at ``/dev/null``; :meth:`close` gives them back, except fd 1 after
    :meth:`close_write`). Only one StdioTransport, sync or async, may be open per process.

    How the fds are driven (no thread, no task): pipes and sockets are made non-blocking and
    watched by the loop (``loop.add_reader`` / ``add_writer``); the O_NONBLOCK flag is put back
    as it was when the transport lets go of each fd (at :meth:`close`, or for stdout when a
    :meth:`close_write` has been written out), so fd 0/1, and whoever shares those pipes,
    find them blocking again. A terminal is left blocking (other processes share it): the
    loop says when it is ready, then one read, or one write of at most ``PIPE_BUF`` bytes.
    A regular file, or anything else the loop cannot watch (``/dev/null``), is read and
    written directly (such files are always ready; each read yields to the loop once first).

    :meth:`close` wakes a waiting read at once and refuses writes, then waits at most
    ``flush_timeout`` seconds (``None``: no limit) for the output still buffered to be
    written, so that a last message written just before ``close()`` still reaches the peer.
    Create it on the running loop; POSIX only.
    """

    def __init__(self, *, flush_timeout: float | None = 5.0) -> None:
        self._claim = _StdioClaim()
        read_fd, write_fd = self._claim.read_fd, self._claim.write_fd
        self._half_closed = False
        self._made_nonblocking = [fd for fd in (read_fd, write_fd) if _may_go_nonblocking(fd)]
        try:
            for fd in self._made_nonblocking:
                os.set_blocking(fd, False)
            super().__init__(
                read_fd, write_fd, description="stdio", flush_timeout=flush_timeout
            )
        except BaseException:
            self._claim.release(read_fd, write_fd)
            for fd in (read_fd, write_fd):
                self._release_fd(fd)
            raise

    def close_write(self) -> None:
        """Half-close: the peer reads EOF once the buffered data is written; fd 1 stays on
        stderr from now on (see the sync transport)."""
        self._half_closed = True
        super().close_write()

    def _on_close(self) -> None:
        # The private fds are still open here: they are released only after this hook.
        self._claim.release(self._read_fd, None if self._half_closed else self._write_fd)

    def _release_fd(self, fd: int) -> None:
        _restore_blocking(self._made_nonblocking, fd)
        os.close(fd)
