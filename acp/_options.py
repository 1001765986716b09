"""Builder options both roles share, written once: mixed into the agent and client builder bases
(acp/agent/builder.py, acp/client/registration.py), whichever runtime they build for."""

from __future__ import annotations

from typing_extensions import Self

from .connection import ORDERINGS, Ordering

__all__ = ["OrderingOption"]


class OrderingOption:
    """The ``ordering(mode)`` option of a builder (read back as ``_ordering``)."""

    _ordering: Ordering = "connection"

    def ordering(self, mode: Ordering) -> Self:
        """How inbound messages are ordered: ``"connection"`` (the default: one at a time in
        arrival order, connection-wide; a call returns only after every notification read
        before its answer was handled) or ``"session"`` (arrival order within each session,
        sessions handled concurrently: a slow session's updates never delay another session,
        and an answer waits only for its own session's earlier notifications; messages without
        a ``sessionId`` still wait for everything before them). See docs/threading.md."""
        if mode not in ORDERINGS:
            raise ValueError(f"ordering: expected one of {ORDERINGS}, got {mode!r}")
        self._ordering = mode
        return self
