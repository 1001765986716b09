"""Waiting for an answer in the threaded runtime: a short poll, then sleep.

A blocking request first polls its waiter (a pre-acquired lock) for up to ``wait_spin`` seconds,
yielding the CPU between looks, and only then sleeps on it. An answer that comes within that
time then costs no thread wake-up on the way back (the reader's release finds nobody asleep),
which is most of a quick round trip's latency where a wake-up costs tens of µs; the price is
that CPU time while waiting. One thread per process polls at a time; with one CPU nobody does.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

__all__ = ["SEVERAL_CPUS", "spin_for"]

# The thread polling for its answer, if any (one per process: pollers would only take the CPU
# from the threads that produce the answers). Set and cleared without a lock: a race lets two
# threads poll for a moment, which is harmless.
_spinner: list[int] = []
# sched_yield lets the other threads of this CPU run (and releases the GIL); POSIX only.
_yield_cpu: Callable[[], None] = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may run on (Linux)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# With one CPU a poller could only delay the thread (or the peer process) that delivers the
# answer: requests then sleep at once, whatever wait_spin says.
SEVERAL_CPUS = _cpus() > 1


def spin_for(lock: threading.Lock, seconds: float) -> float | None:
    """Take ``lock`` (a pre-acquired waiter) by polling it for up to ``seconds``, yielding the
    CPU (and the GIL) between looks. None once taken; else the seconds spent polling (0.0 when
    another thread is polling already: this one does not)."""
    if lock.acquire(False):
        return None
    if _spinner:
        return 0.0
    _spinner.append(1)
    try:
        clock = time.perf_counter
        start = clock()
        end = start + seconds
        yield_cpu = _yield_cpu
        while True:
            yield_cpu()
            if lock.acquire(False):
                return None
            now = clock()
            if now >= end:
                return now - start
    finally:
        _spinner.clear()


