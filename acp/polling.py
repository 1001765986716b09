"""Waiting for an answer in the threaded runtime: maybe a short poll, then sleep.

A blocking request may first poll its waiter (a pre-acquired lock) for up to ``wait_spin``
seconds, yielding the CPU between looks, and only then sleep on it. An answer that comes within
that time then costs no thread wake-up on the way back (the reader's release finds nobody
asleep), which is most of a quick round trip's latency where a wake-up costs tens of µs. Where
wake-ups are cheap the poll only takes a CPU (and the GIL) from the threads and the peer process
that produce the answer: on one 2-vCPU machine it made round trips 25% slower, on another 20%
faster. So whether to poll is not a constant: :class:`WaitPolicy` measures both ways on the
calls themselves and uses the faster, measuring the other again now and then. With one CPU
nobody polls; one thread per process polls at a time.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from . import interruptible

__all__ = ["SEVERAL_CPUS", "WaitPolicy", "spin_for", "wait"]

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


class WaitPolicy:
    """Whether polling for answers pays on this machine, learned from the waits themselves.

    Two ways to wait: poll, then sleep ("poll"), or sleep at once. The policy keeps the mean
    wait of each way over its last window of :attr:`WINDOW` waits and uses the faster one; a
    way not used for :attr:`PROBE_EVERY` windows is measured again for one window (the better
    way changes as the machine's load and the threads' placement on its CPUs change: the same
    pair measured 18-40 µs per wait polling, then 77, against 61 sleeping). Waits longer than
    :attr:`LONG` are left out: no poll shortens them, and their spread would drown the
    difference. Its state is a few numbers updated without a lock: two threads racing on it
    skew one sample, never a wait.
    """

    WINDOW = 32
    PROBE_EVERY = 16
    LONG = 0.002

    def __init__(self) -> None:
        self.polling = True  # the way the next waits use
        self.mean: dict[bool, float | None] = {True: None, False: None}
        self._age = {True: 0, False: 0}  # windows since each way was last measured
        self._sum = 0.0
        self._count = 0

    def record(self, seconds: float) -> None:
        """One wait of ``seconds``, made the way :attr:`polling` says."""
        if seconds > self.LONG:
            return
        self._sum += seconds
        self._count += 1
        if self._count >= self.WINDOW:
            self._end_window()

    def _end_window(self) -> None:
        way = self.polling
        window = self._sum / self._count
        self.mean[way] = window
        self._sum = 0.0
        self._count = 0
        self._age[way] = 0
        self._age[not way] += 1
        other = self.mean[not way]
        if other is None or self._age[not way] >= self.PROBE_EVERY:
            self.polling = not way  # measure the other way (again)
        elif other < window:
            self.polling = not way  # this way got slower than the other was


#: The policy of this process (every connection's requests wait alike: one machine).
POLICY = WaitPolicy()


def wait(lock: threading.Lock, spin: float, timeout: float | None) -> bool:
    """Take ``lock`` (a pre-acquired waiter) within ``timeout`` seconds (None: no limit),
    polling it for up to ``spin`` seconds first when :data:`POLICY` says polling pays. False:
    the timeout passed. A Ctrl-C interrupts the wait in the main thread (KeyboardInterrupt),
    whichever thread the kernel gave it to (:mod:`acp.interruptible`)."""
    if not spin or not SEVERAL_CPUS:
        return interruptible.acquire(lock, timeout)
    policy = POLICY
    clock = time.perf_counter
    start = clock()
    spent = 0.0
    if policy.polling:
        polled = spin_for(lock, spin if timeout is None or spin < timeout else timeout)
        if polled is None:  # the poll took it
            policy.record(clock() - start)
            return True
        spent = polled
    if not interruptible.acquire(lock, None if timeout is None else timeout - spent):
        return False
    policy.record(clock() - start)
    return True
