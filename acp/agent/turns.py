"""Prompt-turn bookkeeping: at most one active turn per session, cancellation, and the rule
that every prompt gets exactly one answer.

A :class:`Turn` lives from the moment its ``session/prompt`` handler starts until the prompt is
answered, by whoever answers first:

* the handler returning (or raising),
* the SDK after the cancel grace period (``stopReason: "cancelled"``),
* the SDK at ``max_prompt_duration`` (error -32800),
* the SDK on ``session/close`` for the session (``stopReason: "cancelled"``, before the close
  handler runs),
* the engine itself (``$/cancel_request`` for the prompt, or the connection closed).

The engine also cancels the call while it can still be answered (the client's input ended,
or a graceful close began): that only cancels the turn, whose handler still answers.

Answering takes the turn's lock and flips ``answered``; updates are sent under the same lock,
so an update can never follow the answer on the wire, and one sent later is dropped. The turn
leaves the registry the moment it is answered, so a ``session/cancel`` that arrives afterwards
finds no turn (or, once the client has sent its next prompt, that prompt's turn, which is the
one such a cancel was sent for, given the wire order).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .. import schema
from ..errors import INVALID_REQUEST, REQUEST_CANCELLED, RequestError
from .cancellation import CancelToken

if TYPE_CHECKING:
    from .protocols import Call, Notifier


class TimerHandle(Protocol):
    """A timer of either runtime (``connection.call_later``)."""

    def cancel(self) -> None: ...

__all__ = ["Turn", "TurnRegistry"]

_log = logging.getLogger("acp.agent")


class Turn(CancelToken):
    """One active prompt turn of one session on one connection; also its cancellation token
    (one object per prompt rather than two: cancelling the turn is cancelling the token)."""

    __slots__ = (
        "session_id", "_call", "task", "_answer_lock", "_answered", "_registry", "_timers",
        "_done", "_waiters",
    )

    def __init__(self, session_id: str, call: Call, registry: TurnRegistry) -> None:
        # CancelToken's fields, set here: one __init__ call less per prompt.
        self._event: threading.Event | None = None
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], None]] | None = {}
        self.session_id = session_id
        # Held until the turn ends, then let go: the call holds the turn (its attachment, its
        # cancel callback), so holding it longer would leave each prompt a cycle for the
        # garbage collector (a collection every ~120 prompts, and a full one as they pile up).
        self._call: Call | None = call
        self._answer_lock = threading.Lock()
        self._answered = False
        self._registry = registry
        self._timers: list[TimerHandle] | None = None  # most turns have none: made by add_timer
        self._done: threading.Event | None = None  # made by the first wait_answered()
        self._waiters: list[Callable[[], None]] | None = None  # when_answered() callbacks
        self.task: Any = None
        """The asyncio runtime: the task of an ``async def`` handler (cancelled with the turn)."""

    def _fired(self) -> None:
        # First of all the turn's callbacks: an async handler's task is cancelled.
        task = self.task
        if task is not None and not task.done():
            task.cancel()

    @property
    def answered(self) -> bool:
        """True once the prompt has been answered (by anyone)."""
        return self._answered

    def send(self, connection: Notifier, notification: schema.SessionNotification) -> bool:
        """Send ``session/update`` ``notification`` on ``connection`` unless the prompt was
        answered; True if sent. (The arguments, not a closure: this runs once per update.)"""
        # acquire/release rather than ``with``: half the cost (~55 ns) of the lock, paid per update.
        lock = self._answer_lock
        lock.acquire()
        try:
            if self._answered:
                return False
            connection.notify("session/update", notification)
            return True
        finally:
            lock.release()

    def finish(self) -> bool:
        """The handler is done: claim the answer. False when someone answered first."""
        lock = self._answer_lock  # acquire/release, not ``with``: ~55 ns less, once per prompt
        lock.acquire()
        try:
            if self._answered:
                return False
            self._answered = True
            if self._done is not None or self._waiters is not None:  # someone waits: rare
                self._set_answered()
        finally:
            lock.release()
        self._ended()
        return True

    def wait_answered(self, timeout: float | None) -> bool:
        """Block until the turn is answered (or ``timeout``); True if it was."""
        with self._answer_lock:
            if self._answered:
                return True
            if self._done is None:
                self._done = threading.Event()
            done = self._done
        return done.wait(timeout)

    def when_answered(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the turn is answered (at once if it is), where it is answered;
        the asyncio runtime's way to wait without blocking."""
        with self._answer_lock:
            if not self._answered:
                if self._waiters is None:
                    self._waiters = []
                self._waiters.append(callback)
                return
        callback()

    def answer(self, result: Any = None, error: RequestError | None = None) -> bool:
        """Answer the prompt now (grace period, deadline, session/close, or a cancelled turn's
        handler); False if already answered."""
        with self._answer_lock:
            if self._answered:
                return False
            call = self._call  # (set: a turn ends only once answered)
            # Out of the registry before the answer is on the wire: the client may send its
            # next prompt for this session the moment it reads the answer.
            self._ended()
            # Under the lock: no update of this turn can slip in behind the answer. The turn
            # counts as answered once the answer is written (session/close waits for that).
            try:
                assert call is not None
                if error is not None:
                    call.answer_error(error.code, error.message, error.data)
                else:
                    call.answer(result)
            finally:
                self._set_answered()
        return True

    def abort(self) -> None:
        """The engine answered (or can no longer answer) the prompt: end the turn, cancelled."""
        with self._answer_lock:
            self._set_answered()
        self.cancel()
        self._ended()

    def _engine_cancelled(self) -> None:
        # The engine cancelled the call: it answered it itself ($/cancel_request) or nobody
        # can any more (closed), or it can still be answered (input ended, graceful close),
        # in which case the handler answers, "cancelled", as after session/cancel.
        call = self._call
        if call is None or call.is_answered:
            self.abort()
        else:
            self.cancel()

    def _set_answered(self) -> None:  # under self._answer_lock
        self._answered = True
        if self._done is not None:
            self._done.set()
        waiters = self._waiters
        if waiters is not None:  # nobody waits, in most turns: no swap, no loop
            self._waiters = None
            for callback in waiters:
                callback()  # (the asyncio runtime's: it only resolves a future)

    def add_timer(self, handle: TimerHandle) -> None:
        """Cancel ``handle`` when the turn ends (its grace or deadline timer)."""
        if self._timers is None:
            self._timers = [handle]
        else:
            self._timers.append(handle)

    def _ended(self) -> None:
        self._call = None  # see __init__
        timers = self._timers
        if timers is not None:
            for timer in timers:
                timer.cancel()
        self._registry._remove(self)


class TurnRegistry:
    """The active turns of one connection, by session id.

    ``grace_period``: seconds between ``session/cancel`` and the SDK answering ``cancelled``
    itself (None: never). ``max_duration``: seconds after which a turn is answered with -32800
    (None: no limit).
    """

    def __init__(
        self,
        call_later: Callable[[float, Callable[[], None]], TimerHandle],
        grace_period: float | None,
        max_duration: float | None,
    ) -> None:
        self._call_later = call_later
        self._grace = grace_period
        self._max = max_duration
        self._lock = threading.Lock()
        self._turns: dict[str, Turn] = {}
        self._closed = False

    def begin(self, session_id: str, call: Call) -> Turn:
        """Start the turn of ``call``; -32600 (data ``{"sessionId"}``) if one is active."""
        lock = self._lock  # acquire/release, not ``with``: ~55 ns less, once per prompt
        lock.acquire()
        try:
            if session_id in self._turns:
                raise RequestError(
                    INVALID_REQUEST,
                    "A prompt turn is already active for this session",
                    {"sessionId": session_id},
                )
            turn = Turn(session_id, call, self)
            self._turns[session_id] = turn
            closed = self._closed
        finally:
            lock.release()
        # The engine cancels the call on $/cancel_request (answering -32800 itself), at the end
        # of input and on close.
        call.on_cancel(turn._engine_cancelled)
        if closed:
            turn.cancel()
        elif self._max is not None:
            turn.add_timer(self._call_later(self._max, lambda: self._expire(turn)))
        return turn

    def get(self, session_id: str) -> Turn | None:
        """The active turn of ``session_id``, if any."""
        return self._turns.get(session_id)

    def cancel(self, session_id: str) -> bool:
        """``session/cancel``: cancel the active turn and start its grace period."""
        turn = self._turns.get(session_id)
        if turn is None:
            _log.debug("session/cancel for %s: no active turn (late or unknown); ignored", session_id)
            return False
        self._cancel(turn)
        return True

    def cancel_all(self, closing: bool = False) -> None:
        """Cancel every active turn (the client went away); ``closing`` also cancels turns that
        start from now on."""
        with self._lock:
            if closing:
                self._closed = True
            turns = list(self._turns.values())
        for turn in turns:
            turn.cancel()

    def close_session(self, session_id: str, wait: float | None) -> None:
        """``session/close``: cancel the session's turn (as ``session/cancel`` does), give its
        handler up to ``wait`` seconds to answer, then answer ``cancelled`` if it has not. On
        return the turn's answer is on the wire."""
        turn = self.begin_close(session_id)
        if turn is not None:
            turn.wait_answered(wait)
            self.end_close(turn, wait)

    def begin_close(self, session_id: str) -> Turn | None:
        """The first half of :meth:`close_session`: cancel the session's turn, if any; the
        caller then waits (up to its bound) for the turn to be answered, then calls
        :meth:`end_close`."""
        turn = self._turns.get(session_id)
        if turn is not None:
            self._cancel(turn)
        return turn

    def end_close(self, turn: Turn, wait: float | None) -> None:
        """The second half of :meth:`close_session`: answer ``cancelled`` if nobody has."""
        if turn.answer(schema.PromptResponse(stop_reason=schema.StopReasons.CANCELLED)):
            _log.info("session %s closed: its turn did not end within %s s; answered 'cancelled'", turn.session_id, wait)

    def abort_all(self) -> None:
        """The connection is closed: end every turn (later updates are dropped)."""
        self.cancel_all(closing=True)
        with self._lock:
            turns = list(self._turns.values())
        for turn in turns:
            turn.abort()

    def _cancel(self, turn: Turn) -> None:
        if turn.cancel() and self._grace is not None and not turn.answered:
            turn.add_timer(self._call_later(self._grace, lambda: self._grace_expired(turn)))

    def _grace_expired(self, turn: Turn) -> None:
        if turn.answer(schema.PromptResponse(stop_reason=schema.StopReasons.CANCELLED)):
            _log.info("session %s: cancel grace period over; answered 'cancelled'", turn.session_id)

    def _expire(self, turn: Turn) -> None:
        turn.cancel()
        error = RequestError(
            REQUEST_CANCELLED,
            "Prompt turn exceeded max_prompt_duration",
            {"sessionId": turn.session_id},
        )
        if turn.answer(error=error):
            _log.info("session %s: max_prompt_duration reached; answered -32800", turn.session_id)

    def _remove(self, turn: Turn) -> None:
        lock = self._lock
        lock.acquire()
        try:
            if self._turns.get(turn.session_id) is turn:
                del self._turns[turn.session_id]
        finally:
            lock.release()
