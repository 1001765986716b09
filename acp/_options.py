"""Builder options both roles share, written once: mixed into the agent and client builder bases
(acp/agent/builder.py, acp/client/registration.py), whichever runtime they build for."""

from __future__ import annotations

from typing_extensions import Self

from .rpc import ORDERINGS, Ordering

__all__ = ["DEFAULT_WAIT_SPIN", "OrderingOption", "WaitSpinOption"]

#: How long a blocking request of the threaded runtime polls for its answer before it sleeps
#: (``acp.polling``; ``acp.Connection(wait_spin=...)`` defaults to it).
DEFAULT_WAIT_SPIN = 0.0001


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


class WaitSpinOption:
    """The ``wait_spin(seconds)`` option of a builder (read back as ``_wait_spin``)."""

    _wait_spin: float = DEFAULT_WAIT_SPIN

    def wait_spin(self, seconds: float) -> Self:
        """How long a blocking call polls for its answer before its thread sleeps (default
        100 µs; 0: sleep at once). Polling spends that CPU time to save a thread wake-up when
        the answer comes quickly, which is most of a short round trip's latency; one thread per
        process polls at a time, and none on a single CPU. The threaded runtime only (the
        asyncio builders do not offer it: they await their answers and never poll). See
        docs/threading.md."""
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds >= 0:
            raise ValueError(f"wait_spin: expected 0 or more seconds, got {seconds!r}")
        self._wait_spin = float(seconds)
        return self
