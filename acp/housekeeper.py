"""The threaded runtime's clock: one thread per connection, started on first use.

The scheduler has no clock; the threaded runtime's is this thread. It runs ``call_later``
timers, writes batched notifications within their bound, tells the connection when the
scheduler's next deadline has come, and looks again and again at a watched condition (the
parked reader) while the connection asks it to. It only keeps time: what a deadline or a
flush means is the connection's (and so the scheduler's) business.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Housekeeper", "TimerHandle"]

_log = logging.getLogger("acp.connection")


class TimerHandle:
    """A callback scheduled with ``call_later``."""

    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        """Do not run the callback (no effect once it has run)."""
        self.cancelled = True


class Housekeeper:
    """The thread that keeps time for one connection.

    ``flush()`` writes the batched bytes; ``next_deadline()`` is the scheduler's earliest one
    (None: none) and ``expire(now)`` is called when it has come; ``watch(now)`` is called each
    time the thread wakes and returns when to call it again (None: not until poked).
    """

    def __init__(
        self,
        name: str,
        *,
        flush: Callable[[], None],
        next_deadline: Callable[[], float | None],
        expire: Callable[[float], None],
        watch: Callable[[float], float | None],
    ) -> None:
        self.name = name
        self._flush = flush
        self._next_deadline = next_deadline
        self._expire = expire
        self._watch = watch
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._flush_at: float | None = None
        self._timers: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._stopped = False
        # A wake-up not yet taken (under the condition's lock): one that comes while the
        # thread is not waiting (starting, or busy with a look) is kept, not lost.
        self._woken = False
        self.watching = False
        """True while the thread looks at the watched condition again and again: a condition
        that starts needs no poke then. Set False before each look, so that one that starts
        meanwhile is either seen by that look or poked."""

    def flush_within(self, delay: float) -> None:
        """Call ``flush`` within ``delay`` seconds (once, whatever else asks meanwhile)."""
        with self._cond:
            if self._flush_at is None:
                self._flush_at = time.monotonic() + delay
                self._wake()

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` after ``delay`` seconds on this thread (never once stopped)."""
        handle = TimerHandle(callback)
        with self._cond:
            if self._stopped:
                handle.cancel()
                return handle
            heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), handle))
            self._wake()
        return handle

    def poke(self) -> None:
        """Look at everything again now (a new deadline; a condition to watch)."""
        with self._cond:
            self._wake()

    def stop(self) -> threading.Thread | None:
        """Stop the thread (idempotent); returns it, for the caller to join."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        return self._thread

    def _wake(self) -> None:
        # (under the condition's lock)
        self._woken = True
        if self._thread is None:
            if self._stopped:
                return
            self._thread = threading.Thread(target=self._run, name=f"{self.name}-housekeeper", daemon=True)
            self._thread.start()
        self._cond.notify()

    def _run(self) -> None:
        cond = self._cond
        call_due = self._next_deadline()
        watch_at = self._watch(time.monotonic())
        self.watching = watch_at is not None
        while True:
            expired: list[TimerHandle] = []
            notified = False
            with cond:
                while not self._stopped:
                    now = time.monotonic()
                    wake = self._flush_at
                    for when in (call_due, watch_at, self._timers[0][0] if self._timers else None):
                        if when is not None and (wake is None or when < wake):
                            wake = when
                    if wake is not None and wake <= now:
                        break
                    if not self._woken:
                        cond.wait(None if wake is None else wake - now)
                    if self._woken:
                        self._woken = False
                        notified = True
                        break  # something new (a deadline, a park to watch): look again
                if self._stopped:
                    return
                now = time.monotonic()
                flush = self._flush_at is not None and self._flush_at <= now
                if flush:
                    self._flush_at = None
                while self._timers and self._timers[0][0] <= now:
                    expired.append(heapq.heappop(self._timers)[2])
            # The connection's state is looked at only when it may have changed: asked again
            # after a poke, or once its time came (a watch runs every ms while it lasts).
            if notified or (watch_at is not None and watch_at <= now):
                self.watching = False  # first: see the docstring
                watch_at = self._watch(now)
                self.watching = watch_at is not None
            if notified:
                call_due = self._next_deadline()
            if call_due is not None and call_due <= now:
                self._expire(now)  # which flushes too
                call_due = self._next_deadline()
            elif flush:
                self._flush()
            for handle in expired:
                if not handle.cancelled:
                    try:
                        handle.callback()
                    except Exception:
                        _log.exception("%s: a timer callback failed", self.name)
