"""Blocking waits that a Ctrl-C interrupts in the main thread, whichever thread the kernel gave it.

A signal sent to the process (SIGINT from the terminal) goes to one of its threads that does not
block it, any of them: the reader in its ``poll``, say. Python raises the KeyboardInterrupt in
the main thread, and only when that thread next runs Python code, so a main thread asleep on a
lock or an Event sleeps on until its wait ends (for a prompt without a timeout: until the agent
answers). The waits here sleep in slices of :data:`CHECK_EVERY` seconds in the main thread, so
the interrupt is raised within that time; in every other thread they are the plain waits (a
slice costs the kernel a timer: about 1.5 µs per wait that blocks).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["CHECK_EVERY", "MAIN_THREAD", "acquire", "wait_event"]

#: How often a wait in the main thread wakes to let a pending Ctrl-C be raised.
CHECK_EVERY = 0.1
#: The main thread's ident: the one thread where Python raises KeyboardInterrupt.
MAIN_THREAD = threading.main_thread().ident


def acquire(lock: threading.Lock, timeout: float | None) -> bool:
    """``lock.acquire()`` within ``timeout`` seconds (None: no limit); False when it passed."""
    if threading.get_ident() != MAIN_THREAD:
        return lock.acquire() if timeout is None else lock.acquire(True, max(0.0, timeout))
    return _sliced(lambda seconds: lock.acquire(True, seconds), timeout)


def wait_event(event: threading.Event, timeout: float | None) -> bool:
    """``event.wait(timeout)``: True once the event is set, False when the timeout passed."""
    if threading.get_ident() != MAIN_THREAD:
        return event.wait(timeout)
    return _sliced(event.wait, timeout)


def _sliced(wait: Callable[[float], bool], timeout: float | None) -> bool:
    if timeout is None:
        while not wait(CHECK_EVERY):
            pass  # (a pending signal's handler runs here, between two waits)
        return True
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if wait(max(0.0, min(left, CHECK_EVERY))):
            return True
        if left <= CHECK_EVERY:
            return False
