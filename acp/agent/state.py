"""What one agent connection knows: its engine, what was negotiated, its turns and terminals.

Everything here belongs to exactly one connection. A context or client proxy reaches the
client only through its own connection's state, so a capability or terminal id from one
connection can never be used on another.
"""

from __future__ import annotations

import threading

from ..capabilities import NegotiatedCapabilities
from ..errors import CapabilityError
from ..schema import PROTOCOL_VERSION
from .protocols import Call, Runtime
from .turns import TurnRegistry

__all__ = ["ConnectionState", "TerminalRegistry", "Call", "Runtime"]


class TerminalRegistry:
    """The terminal ids this connection created and has not released yet."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[str] = set()

    def add(self, terminal_id: str) -> None:
        """Remember a terminal ``terminal/create`` returned."""
        with self._lock:
            self._live.add(terminal_id)

    def require(self, terminal_id: str, method: str) -> None:
        """Raise :class:`CapabilityError` unless ``terminal_id`` is live on this connection."""
        with self._lock:
            if terminal_id in self._live:
                return
        raise CapabilityError(
            f"{method}: terminal {terminal_id!r} was not created on this connection "
            "(or was already released)"
        )

    def release(self, terminal_id: str) -> None:
        """Forget ``terminal_id`` (raises like :meth:`require` if it is not live): a terminal
        is released at most once."""
        with self._lock:
            if terminal_id in self._live:
                self._live.discard(terminal_id)
                return
        raise CapabilityError(
            f"terminal/release: terminal {terminal_id!r} was not created on this connection "
            "(or was already released)"
        )

    def __contains__(self, terminal_id: object) -> bool:
        with self._lock:
            return terminal_id in self._live


class ConnectionState:
    """The per-connection state shared by the handlers, contexts and client proxies."""

    def __init__(
        self,
        connection: Runtime,
        turns: TurnRegistry,
        unstable: bool,
    ) -> None:
        self.connection = connection
        self.turns = turns
        self.unstable = unstable
        self.terminals = TerminalRegistry()
        # Until initialize, the client advertised nothing: every optional call is refused.
        self.capabilities = NegotiatedCapabilities(protocol_version=PROTOCOL_VERSION)
        self.initialized = False
        self.lock = threading.Lock()
        # The encoded last auth/status_update sent (the spec: send only when it changed).
        self.last_auth_status: bytes | None = None
