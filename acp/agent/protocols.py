"""What the agent facade needs of a runtime, as Protocols: the connection (notifications,
timers, the default timeout) and an inbound call. Below every other module of ``acp.agent``:
it imports none of them, so they can all name these without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Call", "Notifier", "Runtime"]


class Call(Protocol):
    """An inbound request while its handler runs, as either runtime gives it to the facade
    (:class:`acp.connection.InboundCall`, :class:`acp.aio.connection.AsyncInboundCall`)."""

    id: Any
    method: str
    attachment: Any

    @property
    def is_answered(self) -> bool: ...

    def on_cancel(self, callback: Callable[[], None]) -> Any: ...

    def answer(self, result: Any) -> bool: ...

    def answer_error(self, code: int, message: str | None = None, data: Any = None) -> bool: ...


class Runtime(Protocol):
    """What the shared agent code needs of either runtime's connection: notifications that
    never block, the default call timeout, timers (grace periods, prompt deadlines)."""

    request_timeout: float | None

    def notify(self, method: str, params: Any = None) -> None: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Any: ...


class Notifier(Protocol):
    """What the calls need of a runtime connection to send notifications (never blocks)."""

    request_timeout: float | None

    def notify(self, method: str, params: Any = None) -> None: ...
