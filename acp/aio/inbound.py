"""What a handler of the asyncio runtime holds: its inbound call, and its timers.

:class:`AsyncInboundCall` is one inbound request while its handler runs on the loop: its id
and method, its cancellation (a flag, an :class:`asyncio.Event`, callbacks, the handler's
task). Answering goes through the connection that owns it (:class:`AsyncCallOwner`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from ..rpc import InboundRequest, RequestId

__all__ = ["AsyncCallOwner", "AsyncInboundCall", "Timer"]

_log = logging.getLogger("acp.aio.connection")


class AsyncCallOwner(Protocol):
    """The connection an :class:`AsyncInboundCall` belongs to (``acp.aio.AsyncConnection``)."""

    def _answer(self, call: InboundRequest, result: Any) -> bool: ...

    def _answer_error(self, call: InboundRequest, code: int, message: str | None, data: Any) -> bool: ...


class AsyncInboundCall(InboundRequest):
    """One inbound request while its handler runs: its id, method and cancellation state.

    ``cancelled`` is set when the peer sends ``$/cancel_request`` for it (its handler's task is
    then cancelled too), when the input ends (the peer is gone: the task goes on and may still
    answer) and as soon as :meth:`acp.aio.AsyncConnection.close` starts. ``on_cancel`` callbacks run on
    the loop, at that moment. :attr:`task` is the handler's task (None for a plain-function
    handler, which runs to completion on the loop, and before the handler starts).
    """

    __slots__ = ("connection", "task", "_is_cancelled", "_event", "_callbacks")

    def __init__(self, connection: AsyncCallOwner, call_id: RequestId, method: str) -> None:
        # rpc.InboundRequest.__init__'s fields, set here (as acp.inbound.InboundCall does): one
        # call less per inbound request.
        self.id = call_id
        self.method = method
        self.attachment = None
        self._answered = False
        self.connection = connection
        self.task: asyncio.Task[Any] | None = None
        self._is_cancelled = False
        self._event: asyncio.Event | None = None
        self._callbacks: list[Callable[[], None]] | None = None

    @property
    def cancelled(self) -> asyncio.Event:
        """An :class:`asyncio.Event` set once the request is cancelled."""
        event = self._event
        if event is None:
            event = self._event = asyncio.Event()
            if self._is_cancelled:
                event.set()
        return event

    @property
    def is_cancelled(self) -> bool:
        """True once the request was cancelled (a plain bool: safe to read from any thread)."""
        return self._is_cancelled

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop when the request is cancelled (at once if it already is)."""
        if self._is_cancelled:
            callback()
            return
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(callback)

    def answer(self, result: Any) -> bool:
        """Answer the request now, instead of (or before) its handler. False, sending nothing,
        when it was already answered (or cancelled, or the connection closed); whatever the
        handler returns afterwards is dropped."""
        return self.connection._answer(self, result)

    def answer_error(self, code: int, message: str | None = None, data: Any = None) -> bool:
        """Answer the request with an error now; False (nothing sent) if it was already answered."""
        return self.connection._answer_error(self, code, message, data)

    def cancel(self) -> None:
        """Cancel the request as ``$/cancel_request`` does, without answering it: set
        :attr:`cancelled`, run the callbacks, cancel :attr:`task`. The handler's
        CancelledError then sends nothing: the caller answers (e.g. a prompt turn's
        ``stopReason: "cancelled"``) with :meth:`answer`."""
        self._set_cancelled()
        task = self.task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()

    def _set_cancelled(self) -> None:
        if self._is_cancelled:
            return
        self._is_cancelled = True
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            try:
                callback()
            except Exception:
                _log.exception("on_cancel callback failed for %s", self.method)


class Timer:
    """A callback scheduled with :meth:`acp.aio.AsyncConnection.call_later`."""

    __slots__ = ("_handle", "_timers")

    def __init__(self, handle: asyncio.TimerHandle | None, timers: set[Timer]) -> None:
        self._handle = handle
        self._timers = timers

    def cancel(self) -> None:
        """Do not run the callback (no effect once it has run)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._timers.discard(self)
