"""Timers for one agent connection on a single lazily started thread.

Grace periods and prompt deadlines are rare, short callbacks; a ``threading.Timer`` per turn
would start a thread per prompt (and a hundred sessions would mean a hundred threads), so one
thread per connection serves them all and is joined on close.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Scheduler", "TimerHandle"]

_log = logging.getLogger("acp.agent")


class TimerHandle:
    """A scheduled callback; :meth:`cancel` keeps it from running."""

    __slots__ = ("fn", "cancelled")

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        """Do not run the callback (no effect once it has run)."""
        self.cancelled = True


class Scheduler:
    """Runs callbacks after a delay on one daemon thread, started on first use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def call_later(self, delay: float, fn: Callable[[], None]) -> TimerHandle:
        """Run ``fn`` after ``delay`` seconds (never if the scheduler is closed first)."""
        handle = TimerHandle(fn)
        with self._cond:
            if self._closed:
                handle.cancelled = True
                return handle
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), handle))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"{self._name}-timers", daemon=True)
                self._thread.start()
            self._cond.notify()
        return handle

    def close(self) -> None:
        """Drop what is scheduled and join the thread (unless called from it)."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    if self._heap:
                        wait = self._heap[0][0] - time.monotonic()
                        if wait <= 0:
                            handle = heapq.heappop(self._heap)[2]
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
            if not handle.cancelled:
                try:
                    handle.fn()
                except Exception:
                    _log.exception("%s: a timer callback failed", self._name)
