"""``SyncAgent``: a built agent that serves any number of connections, each on its own.

One built agent can serve stdio, a transport given by hand, or an in-process client at the
same time; everything negotiated (client capabilities, turns, terminal ids) belongs to one
:class:`AgentConnection`. When a client goes away (end of input), its connection cancels its
turns, gives running handlers ``close_timeout`` seconds to answer, and closes itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .. import interruptible
from .._options import WaitSpinOption
from ..connection import Connection
from ..transport.base import Transport
from ..transport.stdio import StdioTransport
from .builder import AgentBuilder, is_async_callable
from .client_proxy import ClientProxy
from .context import AgentRequestContext, PromptContext
from .dispatch import install
from .serving import AgentBase, AgentConnectionBase
from .spec import AgentSpec

if TYPE_CHECKING:  # websockets is an optional extra: imported only by serve_websocket
    from ..transport._serving import Authenticator
    from ..transport.http_server import HttpServer
    from ..transport.websocket import WebSocketServer

__all__ = ["SyncAgent", "SyncAgentBuilder", "AgentConnection"]

_log = logging.getLogger("acp.agent")


class SyncAgentBuilder(WaitSpinOption, AgentBuilder[AgentRequestContext, PromptContext]):
    """Collects handlers and options; :meth:`build` makes a :class:`~acp.agent.SyncAgent`.
    Handlers are plain functions, run on the handler executor."""

    def _check_handler(self, what: str, fn: Callable[..., Any]) -> None:
        if is_async_callable(fn):
            raise ValueError(f"{what}: {fn!r} is an async function; serve it with acp.AsyncAgent.builder()")

    def build(self) -> SyncAgent:
        """Check the configuration and make the agent."""
        return SyncAgent(self._spec())


class AgentConnection(AgentConnectionBase):
    """One client connected to a :class:`SyncAgent`: a non-blocking handle.

    ``capabilities`` is what this client negotiated; ``client`` makes raw calls into this
    client outside any turn; ``session(id)`` sends a session's updates outside a turn.
    """

    def __init__(self, agent: SyncAgent, spec: AgentSpec, transport: Transport, name: str) -> None:
        self._agent = agent
        self._spec = spec
        self.name = name
        self.connection = Connection(
            transport,
            executor=spec.executor,
            request_timeout=spec.request_timeout,
            name=name,
            ordering=spec.ordering,
            wait_spin=spec.wait_spin,
        )
        # Grace periods and prompt deadlines run on the connection's housekeeping thread.
        self._init_state(spec, self.connection)
        self._lock = threading.Lock()
        self._closing = False
        self._closer: threading.Thread | None = None
        self._closed: threading.Event = threading.Event()
        install(spec, self._state, self.connection)
        self.connection.on_close(self._on_input_end)

    def _start(self) -> None:
        self.connection.start()

    @property
    def client(self) -> ClientProxy:
        """Raw typed calls into this client, outside any prompt turn (no cancellation)."""
        return ClientProxy(self._state)

    def _proxy(self) -> ClientProxy:
        return ClientProxy(self._state)

    def wait_closed(self, timeout: float | None = None) -> bool:
        """Block until the connection is closed (client gone, or :meth:`close`); in the main
        thread a Ctrl-C ends the wait (KeyboardInterrupt)."""
        return interruptible.wait_event(self._closed, timeout)

    def close(self, graceful: bool = False, timeout: float | None = 5.0) -> None:
        """Close this connection; idempotent.

        ``graceful=False`` cancels every turn and stops at once. ``graceful=True`` stops taking
        requests and waits up to ``timeout`` for running handlers to answer, then closes.
        """
        with self._lock:
            if self._closing:
                first = False
            else:
                self._closing = True
                first = True
        if not first:
            # Another thread is closing: wait for it, unless that is us (a close callback).
            if not self._closing_thread_is_current():
                self._closed.wait(timeout)
            return
        self._closer = threading.current_thread()
        try:
            if not graceful:
                self._state.turns.cancel_all(closing=True)
            # The engine cancels every running request (prompt turns included) as close begins.
            self.connection.close(graceful=graceful, timeout=timeout)
            self._state.turns.abort_all()
        finally:
            self._agent._forget(self)
            self._closed.set()
            _log.debug("%s closed", self.name)

    def _cancel_all(self) -> None:
        # Every turn and running request sees ``cancelled`` now (close() does it too, but a
        # SyncAgent closes its connections one after the other).
        self._state.turns.cancel_all(closing=True)
        self.connection._cancel_inbound()

    def _closing_thread_is_current(self) -> bool:
        return self._closer is threading.current_thread()

    def _on_input_end(self) -> None:
        # The engine calls this once the input ended (or on close()). The client is gone:
        # wake every turn so handlers waiting on it answer, then close within the bound.
        if self._closing:
            return
        _log.debug("%s: input ended", self.name)
        self._state.turns.cancel_all(closing=True)
        self.close(graceful=True, timeout=self._spec.close_timeout)


class SyncAgent(AgentBase[AgentConnection]):
    """A built agent. Serve it with :meth:`serve_stdio`, :meth:`serve`, :meth:`connect` or
    :meth:`serve_in_process`; ``with agent:`` (or :meth:`close`) closes every connection."""

    @staticmethod
    def builder() -> SyncAgentBuilder:
        """A new builder."""
        return SyncAgentBuilder()

    def connect(self, transport: Transport) -> AgentConnection:
        """Start serving ``transport`` in the background; returns its handle at once."""
        handle = AgentConnection(self, self._spec, transport, self._next_name())
        with self._lock:
            if self._closed:
                transport.close()
                raise RuntimeError("this agent is closed")
            self._connections.add(handle)
        handle._start()
        return handle

    def serve(self, transport: Transport) -> None:
        """Serve ``transport`` until the client goes away (end of input) or :meth:`close`."""
        handle = self.connect(transport)
        try:
            handle.wait_closed()
        finally:
            handle.close(graceful=True, timeout=self._spec.close_timeout)

    def serve_stdio(self) -> None:
        """Serve this process's stdin/stdout until stdin ends: everything received is
        answered, then this returns. Logs go to stderr (configure ``logging`` as you like)."""
        self.serve(StdioTransport())

    def serve_in_process(self) -> Transport:
        """Serve one end of an in-memory pipe in the background; return the other end, for a
        client in this process. Closing the agent closes it (the client reads end of input)."""
        from ..transport.memory import memory_pair  # only here: most agents serve stdio

        ours, theirs = memory_pair()
        self.connect(ours)
        return theirs

    def close(self, timeout: float | None = 5.0) -> None:
        """Close every connection (every turn and running request is cancelled at once, on all
        of them); no new ones are accepted."""
        with self._lock:
            self._closed = True
            connections = list(self._connections)
        for handle in connections:
            handle._cancel_all()
        for handle in connections:
            handle.close(graceful=False, timeout=timeout)

    def __enter__(self) -> SyncAgent:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def serve_websocket(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        path: str | None = "/acp",
        origins: Iterable[str] | None = None,
        authenticate: Authenticator | None = None,
        max_connections: int = 1024,
        max_message_bytes: int = 64 * 1024 * 1024,
        idle_timeout: float | None = None,
        **options: Any,
    ) -> WebSocketServer:
        """Serve WebSocket clients at ``ws://host:port/path`` in the background; returns the
        running server (``.url``, ``.port``, ``.serve_forever()``, ``.close()``, ``with``).

        Each WebSocket is one connection of this agent (see :meth:`connect`). ``origins``: the
        browser origins allowed (None: pages from localhost only; requests without ``Origin``
        are always allowed). ``authenticate(headers)`` returns None to accept or an HTTP status
        to refuse. More options (``compression``, ``ping_interval``, ``ssl``...) are those of
        :class:`acp.transport.websocket.WebSocketServer`. Needs ``pip install 'acp-sync[ws]'``.
        """
        from ..transport.websocket import WebSocketServer

        return WebSocketServer(
            self,
            host,
            port,
            path=path,
            origins=origins,
            authenticate=authenticate,
            max_connections=max_connections,
            max_message_bytes=max_message_bytes,
            idle_timeout=idle_timeout,
            **options,
        )

    def serve_http(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        path: str | None = "/acp",
        origins: Iterable[str] | None = None,
        authenticate: Authenticator | None = None,
        max_connections: int = 1024,
        max_message_bytes: int = 64 * 1024 * 1024,
        idle_timeout: float | None = 300.0,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        **options: Any,
    ) -> HttpServer:
        """Serve :meth:`asgi_app` with uvicorn at ``http://host:port/path`` in the background
        (Streamable HTTP and WebSocket on the same port); returns the running server (``.url``,
        ``.ws_url``, ``.port``, ``.serve_forever()``, ``.close()``, ``with``). ``ssl_certfile``
        / ``ssl_keyfile`` serve ``https``. Needs ``pip install 'acp-sync[http]'``.
        """
        from ..transport.http_server import HttpServer

        app = self.asgi_app(
            path=path,
            origins=origins,
            authenticate=authenticate,
            max_connections=max_connections,
            max_message_bytes=max_message_bytes,
            idle_timeout=idle_timeout,
            **options,
        )
        return HttpServer(app, host, port, ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile)
