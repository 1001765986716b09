"""Per-session bookkeeping for the spec's cancellation rule on the client side.

When the client cancels a prompt turn it MUST answer every pending
``session/request_permission`` of that session with the ``cancelled`` outcome. The user's
handler may be blocked on a UI, so the SDK answers on its behalf, then marks the call
cancelled: the handler sees ``ctx.cancelled`` and whatever it returns later is dropped by the
engine (an inbound call is answered at most once).

From the cancel until the session's next prompt starts, a permission request that still
arrives for that session (the agent sent it before it saw ``session/cancel``) is answered
``cancelled`` at once, without bothering the user. (Until the next prompt rather than until the
cancelled ``prompt()`` returns: the agent has no turn in between to ask for, and a prompt then
costs no bookkeeping at all unless a cancel happened.)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from .. import schema

__all__ = ["TurnTracker", "CANCELLED_PERMISSION"]

_log = logging.getLogger("acp.client")

CANCELLED_PERMISSION = schema.RequestPermissionResponse(outcome=schema.CancelledPermissionOutcome())


def answer_early(call: Any, result: object) -> None:
    """Answer ``call`` now, on behalf of its still-running handler, then cancel it.

    Answer first, cancel second: once the call is marked cancelled the handler may return at
    any moment, and its answer must not be the one that goes out. The engine sends exactly one
    answer per call (the first), so the handler's late answer is dropped.
    """
    call.answer(result)
    call._cancel()


class TurnTracker:
    """Sessions whose turn was cancelled, and pending permission calls.

    Runtime-neutral: ``answer`` answers a call on behalf of its handler and cancels it (the
    threaded engine's way by default; the asyncio client passes its own). The lock is only
    ever held for a few dict operations, never across a call.
    """

    def __init__(self, answer: Callable[[Any, object], None] = answer_early) -> None:
        self._answer = answer
        self._lock = threading.Lock()
        self.cancelled: set[str] = set()
        """Sessions cancelled since their last prompt started (read without the lock: a
        prompt calls :meth:`prompt_starting` only when this is not empty)."""
        self._permissions: dict[str, set[Any]] = {}

    # -- prompts ---------------------------------------------------------------------------

    def prompt_starting(self, session_id: str) -> None:
        """A ``session/prompt`` for ``session_id`` is about to be sent: a cancel before it no
        longer applies (its permission requests reach the handler)."""
        with self._lock:
            self.cancelled.discard(session_id)

    def cancel(self, session_id: str) -> list[Any]:
        """Mark the session's turn cancelled; return its pending permission calls to answer."""
        with self._lock:
            self.cancelled.add(session_id)
            return list(self._permissions.pop(session_id, ()))

    # -- permission requests ---------------------------------------------------------------

    def permission_started(self, session_id: str, call: Any) -> bool:
        """Register a permission call; False when its turn is already cancelled."""
        with self._lock:
            if session_id in self.cancelled:
                return False
            self._permissions.setdefault(session_id, set()).add(call)
            return True

    def permission_finished(self, session_id: str, call: Any) -> None:
        """The permission handler returned (or the call was cancelled)."""
        with self._lock:
            calls = self._permissions.get(session_id)
            if calls is not None:
                calls.discard(call)
                if not calls:
                    del self._permissions[session_id]

    def cancel_permissions(self, session_id: str) -> int:
        """Answer every pending permission call of ``session_id`` with ``cancelled``."""
        calls = self.cancel(session_id)
        for call in calls:
            _log.debug("session %s cancelled: answering permission request %r as cancelled", session_id, call.id)
            self._answer(call, CANCELLED_PERMISSION)
        return len(calls)
