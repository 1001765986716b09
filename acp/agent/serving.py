"""What the built agents of both runtimes share: the agent's bookkeeping of its connections,
and a connection handle's view of what its client negotiated (:class:`~acp.agent.SyncAgent` /
:class:`~acp.agent.AgentConnection` over threads, :class:`~acp.agent.AsyncAgent` /
:class:`~acp.agent.AsyncAgentConnection` over asyncio)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from ..capabilities import NegotiatedCapabilities
from .client_calls import CallsToClient
from .context import SessionUpdater
from .spec import AgentSpec
from .state import ConnectionState, Runtime
from .turns import TurnRegistry

if TYPE_CHECKING:
    from ..transport._serving import Authenticator
    from ..transport.http_server import AcpAsgiApp

__all__ = ["AgentBase", "AgentConnectionBase"]

H = TypeVar("H")


class AgentConnectionBase:
    """The parts of a connection handle that do not depend on the runtime."""

    name: str
    _state: ConnectionState
    _closed: Any  # the runtime's Event (threading or asyncio), set once fully closed

    def _init_state(self, spec: AgentSpec, connection: Runtime) -> None:
        # Grace periods and prompt deadlines are the runtime's timers.
        turns = TurnRegistry(connection.call_later, spec.cancel_grace_period, spec.max_prompt_duration)
        self._state = ConnectionState(connection, turns, spec.unstable)

    def _proxy(self) -> CallsToClient:
        raise NotImplementedError

    @property
    def capabilities(self) -> NegotiatedCapabilities:
        """What was negotiated with this client (nothing before ``initialize``)."""
        return self._state.capabilities

    @property
    def initialized(self) -> bool:
        """True once the client sent ``initialize``."""
        return self._state.initialized

    def session(self, session_id: str) -> SessionUpdater:
        """Send updates for ``session_id`` to this client outside a prompt turn."""
        return SessionUpdater(session_id, self._proxy())

    def cancel_turns(self) -> None:
        """Cancel every active prompt turn (and any that starts from now on), as if the client
        had sent ``session/cancel`` for each: handlers wake (an ``async def`` one's task is
        cancelled) and answer ``cancelled``. For a server shutting down gracefully."""
        self._state.turns.cancel_all(closing=True)

    @property
    def is_closed(self) -> bool:
        """True once the connection is fully closed."""
        return bool(self._closed.is_set())

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}{' closed' if self.is_closed else ''}>"


class AgentBase(Generic[H]):
    """The parts of a built agent that do not depend on the runtime: its spec and the set of
    connections it serves (``H``: the runtime's connection handle)."""

    _ids = itertools.count(1)

    def __init__(self, spec: AgentSpec) -> None:
        self._spec = spec
        self._lock = threading.Lock()
        self._connections: set[H] = set()
        self._closed = False

    @property
    def name(self) -> str:
        """The name connections and logs use (from ``agent_info``)."""
        return self._spec.name

    @property
    def spec(self) -> AgentSpec:
        """The configuration fixed by ``build()`` (capabilities, handlers, options)."""
        return self._spec

    @property
    def connections(self) -> list[H]:
        """The connections currently open."""
        with self._lock:
            return list(self._connections)

    def _next_name(self) -> str:
        return f"{self._spec.name}-{next(self._ids)}"

    def _forget(self, handle: H) -> None:
        with self._lock:
            self._connections.discard(handle)

    def asgi_app(
        self,
        *,
        path: str | None = "/acp",
        origins: Iterable[str] | None = None,
        authenticate: Authenticator | None = None,
        max_connections: int = 1024,
        max_message_bytes: int = 64 * 1024 * 1024,
        idle_timeout: float | None = 300.0,
        **options: Any,
    ) -> AcpAsgiApp:
        """An ASGI application serving this agent over Streamable HTTP and WebSocket on
        ``path``: run it under any ASGI server (uvicorn, hypercorn for HTTP/2) or mount it in
        an ASGI framework. Each ACP connection is one connection of this agent (see
        ``connect``). A SyncAgent's handlers run on the handler executor, never on the event
        loop; an AsyncAgent's connections live on the server's loop (no thread per connection).

        ``idle_timeout``: a connection with no open event stream and no request for that many
        seconds is closed. The other options are those of ``SyncAgent.serve_websocket``, plus
        ``keepalive``, ``initialize_timeout`` and ``websocket`` (see
        :class:`acp.transport.http_server.AcpAsgiApp`). Needs no extra package.
        """
        from ..transport.http_server import AcpAsgiApp

        return AcpAsgiApp(
            cast(Any, self),  # a ConnectionServer (SyncAgent) or an AsyncConnectionServer (AsyncAgent)
            path=path,
            origins=origins,
            authenticate=authenticate,
            max_connections=max_connections,
            max_message_bytes=max_message_bytes,
            idle_timeout=idle_timeout,
            **options,
        )
