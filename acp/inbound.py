"""What a handler of the threaded runtime holds: its inbound call, and what cancels a call.

:class:`InboundCall` is one inbound request while its handler runs on a thread: its id and
method, and its cancellation (an Event and callbacks, set from whichever thread cancels it).
Answering goes through the connection that owns it (:class:`CallOwner`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol, cast

from .rpc import InboundRequest, RequestId

__all__ = ["CallOwner", "CancelSource", "InboundCall", "cancel_all"]

_log = logging.getLogger("acp.connection")


class CallOwner(Protocol):
    """The connection an :class:`InboundCall` belongs to (``acp.Connection``)."""

    _state_lock: threading.Lock

    def _answer(self, call: InboundRequest, result: Any) -> bool: ...

    def _answer_error(self, call: InboundRequest, code: int, message: str | None, data: Any) -> bool: ...


class CancelSource(Protocol):
    """Something that can cancel a blocking call: ``on_cancel(fn)`` runs ``fn`` when it fires
    (at once if it already has) and returns a function that unregisters ``fn`` (whatever that
    function returns is ignored)."""

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], object]: ...


class InboundCall(InboundRequest):
    """One inbound request while its handler runs: its id, method and cancellation state.

    ``cancelled`` is set when the peer sends ``$/cancel_request`` for it, when the input ends
    (the peer is gone) and as soon as :meth:`Connection.close` starts; ``on_cancel`` callbacks
    then run on the thread that cancelled it, so keep them short and non-blocking. After the
    end of input or during a graceful close the request can still be answered
    (:attr:`is_answered` tells).
    """

    __slots__ = ("connection", "_cancelled", "_callbacks")

    def __init__(self, connection: CallOwner, call_id: RequestId, method: str) -> None:
        # rpc.InboundRequest.__init__'s fields, set here: one call less per inbound request.
        self.id = call_id
        self.method = method
        self.attachment = None
        self._answered = False
        self.connection = connection
        self._cancelled: threading.Event | None = None
        self._callbacks: list[Callable[[], None]] | None = None

    @property
    def cancelled(self) -> threading.Event:
        """An event set once the request is cancelled."""
        event = self._cancelled
        if event is None:
            with self.connection._state_lock:
                if self._cancelled is None:
                    self._cancelled = threading.Event()
                event = self._cancelled
        return event

    @property
    def is_cancelled(self) -> bool:
        """True once the request was cancelled."""
        event = self._cancelled
        return event is not None and event.is_set()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the request is cancelled (at once if it already is)."""
        lock = self.connection._state_lock
        lock.acquire()  # acquire/release rather than ``with``: every prompt turn registers one
        event = self._cancelled
        if event is None or not event.is_set():
            callbacks = self._callbacks
            if callbacks is None:
                self._callbacks = [callback]
            else:
                callbacks.append(callback)
            lock.release()
            return
        lock.release()
        callback()

    def answer(self, result: Any) -> bool:
        """Answer the request now, from any thread, instead of (or before) its handler.

        Returns False, sending nothing, when the request was already answered (or cancelled,
        or the connection closed). Exactly one answer ever goes out: whatever the handler
        returns afterwards is dropped (logged at DEBUG).
        """
        return self.connection._answer(self, result)

    def answer_error(self, code: int, message: str | None = None, data: Any = None) -> bool:
        """Answer the request with an error now; False (nothing sent) if it was already answered."""
        return self.connection._answer_error(self, code, message, data)

    def _cancel(self) -> None:
        with self.connection._state_lock:
            if self._cancelled is None:
                self._cancelled = threading.Event()
            if self._cancelled.is_set():
                return
            self._cancelled.set()
            callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            try:
                callback()
            except Exception:
                _log.exception("on_cancel callback failed for %s", self.method)


def cancel_all(calls: Iterable[InboundRequest]) -> None:
    """Set ``cancelled`` on calls the scheduler handed back (all of them are InboundCalls)."""
    for call in calls:
        cast(InboundCall, call)._cancel()
