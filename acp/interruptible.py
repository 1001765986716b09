"""Blocking waits that a Ctrl-C interrupts in the main thread, whichever thread the kernel gave it.

A signal sent to the process (SIGINT from the terminal) goes to one of its threads that does not
block it, any of them: the reader in its ``poll``, say. Python raises the KeyboardInterrupt in
the main thread, and only when that thread next runs Python code, so a main thread asleep on a
lock or an Event sleeps on until its wait ends (for a prompt without a timeout: until the agent
answers). The waits here sleep in slices of :data:`CHECK_EVERY` seconds in the main thread, so
the interrupt is raised within that time; in every other thread they are the plain waits (a
slice costs the kernel a timer: about 1.5 µs per wait that blocks).

Work in the main thread that a KeyboardInterrupt must not cut in two is done between
:func:`hold` and :func:`release` (see the end of this module).
"""

from __future__ import annotations

# The C module (no stubs): signal's wrappers convert to and from enums, ~2 µs a call.
import _signal  # type: ignore[import-not-found]
import threading
import time
from collections.abc import Callable
from types import FrameType

__all__ = ["CHECK_EVERY", "MAIN_THREAD", "acquire", "can_hold", "hold", "release", "wait_event", "withheld"]

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


# ---------------------------------------------------------------------------------------------
# Holding a Ctrl-C back
#
# Work in the main thread that an exception must not cut in two (reading and routing the bytes
# of one read for its own call: a KeyboardInterrupt between the read and the routing would lose
# them) runs between hold() and release(). Meanwhile a Ctrl-C only sets a flag (withheld()
# tells, so a wait can stop early), and release() raises the KeyboardInterrupt. This is done
# only while Python's own handler is in place: an application that installed its own keeps it
# (can_hold() is False, and such work is left to other threads), as does one with a handler of
# its own for SIGTERM. Handlers for other signals (SIGALRM, SIGUSR1...) are not looked at: one
# that raises in the main thread can still cut such work. Swapping the handler costs two
# sigaction calls, ~0.6 µs each.

_SIGINT = _signal.SIGINT
_SIGTERM = _signal.SIGTERM
_DEFAULT = _signal.default_int_handler
_withheld = False


def _hold_back(signum: int, frame: FrameType | None) -> None:
    global _withheld
    _withheld = True


def can_hold() -> bool:
    """True in the main thread while Python's default Ctrl-C handler is in place and no
    Python handler is set for SIGTERM (one that raises, as for a CI runner's stop, would cut
    the work held in two just the same)."""
    return threading.get_ident() == MAIN_THREAD and _nothing_else_raises()


def _nothing_else_raises() -> bool:
    return _signal.getsignal(_SIGINT) is _DEFAULT and not callable(_signal.getsignal(_SIGTERM))


def hold() -> bool:
    """(Main thread.) Hold Ctrl-C back until :meth:`release`; False, holding nothing, unless
    :func:`can_hold`. A Ctrl-C that came just before is raised here."""
    if not _nothing_else_raises():
        return False
    _signal.signal(_SIGINT, _hold_back)  # (runs a pending handler first: the default one)
    return True


def withheld() -> bool:
    """True when a Ctrl-C came since :func:`hold`."""
    return _withheld


def release() -> None:
    """Put Python's default handler back, and raise the KeyboardInterrupt held back, if any."""
    global _withheld
    if _signal.getsignal(_SIGINT) is _hold_back:  # (not if someone put their own in meanwhile)
        _signal.signal(_SIGINT, _DEFAULT)  # (a Ctrl-C not yet handled is held back first)
    if _withheld:
        _withheld = False
        raise KeyboardInterrupt
