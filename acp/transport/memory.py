"""An in-process pair of connected transports that still moves real bytes (two OS pipes)."""

from __future__ import annotations

import os

from .fd import FdTransport

__all__ = ["memory_pair"]


def _set_pipe_size(fd: int, size: int) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)  # Linux only
    except (ImportError, AttributeError, OSError):
        pass  # best effort: the default size works, just with more wake-ups


def memory_pair(*, pipe_size: int | None = None) -> tuple[FdTransport, FdTransport]:
    """Two connected transports: what one writes, the other reads.

    Backed by two ``os.pipe()`` pairs (non-blocking, owned by the transports), so the bytes go
    through the kernel exactly as they would between processes. Closing (or half-closing) one
    side makes the other read EOF after it has drained what was written; writing to a side whose
    peer is closed raises ``ConnectionClosedError``. ``pipe_size`` asks the kernel for bigger
    pipe buffers (Linux; best effort).
    """
    a_to_b_r, a_to_b_w = os.pipe()
    b_to_a_r, b_to_a_w = os.pipe()
    for fd in (a_to_b_r, a_to_b_w, b_to_a_r, b_to_a_w):
        os.set_blocking(fd, False)
    if pipe_size is not None:
        _set_pipe_size(a_to_b_w, pipe_size)
        _set_pipe_size(b_to_a_w, pipe_size)
    a = FdTransport(b_to_a_r, a_to_b_w, description="memory (a)")
    b = FdTransport(a_to_b_r, b_to_a_w, description="memory (b)")
    return a, b
