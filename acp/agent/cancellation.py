"""Cooperative cancellation for the agent side: a token that many waiters can watch.

Python cannot interrupt a thread, so cancelling a prompt turn means setting a flag and waking
every blocking call that watches it. :class:`CancelToken` is that flag: an event plus callbacks
that can be removed again (a finished wait must not leave its waker behind, or a long turn
with many calls would grow the list without bound).
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
from collections.abc import Callable

__all__ = ["CancelToken"]

_log = logging.getLogger("acp.agent")


class CancelToken:
    """A one-shot cancellation flag with removable callbacks (thread-safe)."""

    __slots__ = ("_event", "_lock", "_callbacks")

    # One counter for every token (keys need only be unique per token): no count() made per
    # token, one per prompt turn and request. next() on it is atomic under the GIL.
    _ids = itertools.count()

    def __init__(self, first: Callable[[], None] | None = None) -> None:
        # The Event is made on first use: creating one costs ~4 us, and most turns are never
        # waited on nor cancelled. _callbacks is None once cancelled. ``first``: a callback
        # registered from the start (cheaper than on_cancel; it cannot be unregistered).
        self._event: threading.Event | None = None
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], None]] | None = {} if first is None else {-1: first}

    @property
    def event(self) -> threading.Event:
        """The event that is set once cancelled."""
        event = self._event
        if event is None:
            with self._lock:
                event = self._event
                if event is None:
                    event = self._event = threading.Event()
                    if self._callbacks is None:
                        event.set()
        return event

    @property
    def is_cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._callbacks is None

    def cancel(self) -> bool:
        """Set the flag and run the callbacks (on this thread); True the first time only."""
        with self._lock:
            callbacks = self._callbacks
            if callbacks is None:
                return False
            self._callbacks = None
            if self._event is not None:
                self._event.set()
        self._fired()
        # Each callback is taken out before it runs: an on_cancel() racing with the flip above
        # takes its own out too if it saw the flip, and only the one that took it runs it.
        for key in list(callbacks):  # in registration order; one C-level copy
            callback = callbacks.pop(key, None)
            if callback is not None:
                try:
                    callback()
                except Exception:
                    _log.exception("a cancel callback failed")
        return True

    def _fired(self) -> None:
        """Runs once, right after the flag is set and before the callbacks (a subclass's
        first reaction: a prompt turn cancels its async handler's task)."""

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], object]:
        """Run ``callback`` once on cancellation (at once if already cancelled).

        Returns a function that unregisters it (a no-op once it has run).
        """
        # Lock-free (every call an agent makes to the client in a turn registers and removes
        # one): dict insertion and pop are atomic, and cancel() pops each callback before it
        # runs it. Registered after the flip to cancelled: whoever pops it runs it, once.
        callbacks = self._callbacks
        if callbacks is not None:
            key = next(self._ids)
            callbacks[key] = callback
            if self._callbacks is not None:
                return functools.partial(callbacks.pop, key, None)  # a C call: no Python frame
            if callbacks.pop(key, None) is None:
                return _noop  # cancel() took it and runs it
        callback()
        return _noop


def _noop() -> None:
    return None
