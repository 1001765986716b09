"""``AgentSpec``: what a builder collected, fixed by ``build()``, for either runtime.

The configuration flows one way: a builder (:mod:`acp.agent.builder`) validates the
registrations and derives the capabilities into an :class:`AgentSpec`; a runtime
(:class:`~acp.agent.SyncAgent` over threads, :class:`~acp.agent.AsyncAgent` over asyncio)
serves connections from it. Nothing here knows about threads, tasks or transports.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

import msgspec

from .. import schema

if TYPE_CHECKING:
    from ..connection import Ordering

__all__ = ["AgentSpec", "DEFAULT_CANCEL_GRACE_PERIOD", "DEFAULT_REQUEST_TIMEOUT", "DEFAULT_CLOSE_TIMEOUT"]

DEFAULT_CANCEL_GRACE_PERIOD = 60.0
DEFAULT_REQUEST_TIMEOUT = 60.0
DEFAULT_CLOSE_TIMEOUT = 5.0


# A msgspec Struct, not a dataclass: defining a dataclass costs ~0.35 ms of import time.
class AgentSpec(msgspec.Struct, frozen=True):
    """Everything ``build()`` fixed; shared read-only by every connection of the agent."""

    handlers: dict[str, Callable[..., Any]]  # wire method -> user function
    ext_requests: dict[str, Callable[..., Any]]  # fn(params, ctx)
    ext_notifications: dict[str, Callable[[Any], Any]]
    capabilities: schema.AgentCapabilities
    auth_methods: tuple[schema.AuthMethod, ...]
    agent_info: schema.Implementation | None
    executor: Executor | None
    request_timeout: float | None
    cancel_grace_period: float | None
    max_prompt_duration: float | None
    close_timeout: float
    unstable: bool
    wait_spin: float  # the threaded runtime's Connection(wait_spin=...)
    name: str = "acp-agent"
    ordering: Ordering = "connection"
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    @property
    def close_session_wait(self) -> float | None:
        """How long ``session/close`` (``session/archive``) waits for the session's cancelled
        turn to answer before the SDK answers it ``cancelled``."""
        if self.cancel_grace_period is None:
            return self.close_timeout
        return min(self.cancel_grace_period, self.close_timeout)
