"""ACP over Streamable HTTP and WebSocket as an ASGI application: the agent side.

:class:`AcpAsgiApp` (or ``SyncAgent.asgi_app()``) serves both profiles of the RFD "Streamable
HTTP & WebSocket transport" on one endpoint (``/acp``), under any ASGI server (uvicorn for
HTTP/1.1, hypercorn for HTTP/2) or mounted inside an ASGI framework. It needs no third-party
package; :class:`HttpServer` (or ``SyncAgent.serve_http()``) runs it under uvicorn in a
background thread (``pip install 'acp-sync[http]'``).

The application only moves bytes. For a sync server (a :class:`~acp.agent.SyncAgent`) every ACP
connection is an ordinary engine connection of the agent (``agent.connect(transport)``) whose
handlers run on the handler executor, never on the event loop: :class:`_LoopTransport` is the
bridge, the engine's reader thread blocks on a queue the event loop fills, and what the engine
writes is handed to the loop, which routes it. For an asyncio server (an
:class:`~acp.transport._serving.AsyncConnectionServer`, told by its ``connect_async``, such as
``acp.AsyncAgent``) the connection lives on the server's own loop: :class:`_AsgiTransport` takes
what the application receives straight into its read buffer and routes what the connection
writes at once, with the same routing code; no thread and no queue per connection.

Routing (RFD):

- ``POST`` with a JSON-RPC message. ``initialize`` without ``Acp-Connection-Id`` opens a
  connection and is answered ``200`` with the answer as body and the ``Acp-Connection-Id``
  header. Anything else needs that header (400 without, 404 when unknown), and a message naming
  a session needs ``Acp-Session-Id`` too (400); it is answered ``202`` at once. A body that is
  not JSON or not a message: 400 with a JSON-RPC error; a batch: 501; a body that is not
  ``application/json``: 415; too large: 413.
- ``GET`` with ``Accept: text/event-stream``: the connection's event stream (406 without that
  Accept). With ``Acp-Session-Id`` it is scoped to that session: the session's notifications,
  its requests to the client and the answers to requests posted for it go there while it is
  open; everything else, and everything while no stream is open, goes to (or waits for) the
  connection-scoped stream. One stream per scope at a time (409 for a second one).
- ``DELETE``: ends the connection (turns are cancelled, answers flushed, streams closed): 202.
- ``GET`` with ``Upgrade: websocket`` (an ASGI ``websocket`` scope): one ACP connection per
  WebSocket, exactly as :mod:`acp.transport.websocket` serves it.

Every request is first checked for the path (404), the ``Origin`` (403) and by the
``authenticate`` hook (401/403...). A connection with no open stream and no request for
``idle_timeout`` seconds is closed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any, Union, cast

from ..errors import ConnectionClosedError
from ..rpc import messages as rpc
from ._inbox import AsyncInbox
from ._remote import (
    CONNECTION_ID_HEADER,
    DEFAULT_MAX_MESSAGE_BYTES,
    SESSION_ID_HEADER,
    session_id_of,
)
from ._serving import (
    AsyncConnectionServer,
    AsyncServedConnection,
    Authenticator,
    BackgroundServer,
    ConnectionServer,
    Headers,
    OriginPolicy,
    ServedConnection,
    check_auth,
    close_connection,
    close_connections,
)
from .base import READ_CHUNK

if TYPE_CHECKING:
    from ..aio.transport.base import AsyncTransport

__all__ = ["AcpAsgiApp", "HttpServer"]

_log = logging.getLogger("acp.transport.http")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_IDLE_TIMEOUT = 300.0
DEFAULT_KEEPALIVE = 15.0
DEFAULT_INITIALIZE_TIMEOUT = 30.0

_CID = CONNECTION_ID_HEADER.lower()
_SID = SESSION_ID_HEADER.lower()
_INITIALIZE = "initialize"
# Requests that name an existing session to attach to: Acp-Session-Id is not required on them.
_ATTACHING = frozenset({"session/load", "session/resume", "session/fork"})
_EOF = b""


# ------------------------------------------------------------------------- the bridge


class _LoopTransport:
    """A :class:`~acp.transport.Transport` whose other end is an asyncio event loop.

    Engine side (threads): :meth:`read` blocks on a queue the loop fills with :meth:`feed`;
    :meth:`write` hands bytes to the loop (one wake-up per burst) where ``on_output`` routes
    them. ``on_end`` runs on the loop once the engine closes its side (after every write
    before it was delivered).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        description: str,
        on_output: Callable[[bytes], None],
        on_end: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._description = description
        self._on_output = on_output
        self._on_end = on_end
        self._inbound: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._eof = False
        self._lock = threading.Lock()
        self._out: list[bytes] = []
        self._scheduled = False
        self._write_closed = False
        self._closed = False
        self._ended = False

    @property
    def description(self) -> str:
        """A short name for logs."""
        return self._description

    # -- loop side ---------------------------------------------------------------------------

    def feed(self, line: bytes) -> None:
        """Give the engine one received line (``\\n``-terminated). Any thread."""
        self._inbound.put(line)

    def feed_eof(self) -> None:
        """The peer is gone: the engine reads end of input."""
        self._inbound.put(_EOF)

    # -- engine side -------------------------------------------------------------------------

    def read(self) -> bytes:
        """Block until the loop fed a line; ``b""`` at end of input."""
        if self._eof:
            return _EOF
        item = self._inbound.get()
        if not item:
            self._eof = True
            return _EOF
        parts = [item]
        size = len(item)
        while size < READ_CHUNK:
            try:
                more = self._inbound.get_nowait()
            except queue.Empty:
                break
            if not more:
                self._inbound.put(_EOF)
                break
            parts.append(more)
            size += len(more)
        return b"".join(parts) if len(parts) > 1 else item

    def write(self, data: bytes | bytearray) -> None:
        """Hand ``data`` to the loop; never blocks on the network."""
        with self._lock:
            if self._write_closed:
                raise ConnectionClosedError(f"{self._description}: transport is closed")
            self._out.append(bytes(data))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError as exc:  # the event loop is closed: the server is gone
            raise ConnectionClosedError(f"{self._description}: the server stopped") from exc

    def close_write(self) -> None:
        """No more writes; the streams end once what was written is delivered."""
        with self._lock:
            if self._write_closed:
                return
            self._write_closed = True
        self._schedule_end()

    def close(self) -> None:
        """End both directions; a blocked :meth:`read` returns ``b""``. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._write_closed = True
        self._inbound.put(_EOF)
        self._schedule_end()

    # -- internals ---------------------------------------------------------------------------

    def _schedule_end(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._end)
        except RuntimeError:  # the loop is closed: nobody is left to tell
            pass

    def _drain(self) -> None:
        with self._lock:
            chunks = self._out
            self._out = []
            self._scheduled = False
        if chunks:
            self._on_output(b"".join(chunks))

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._drain()
        self._on_end()


class _AsgiTransport:
    """An :class:`~acp.aio.transport.AsyncTransport` whose other end is this application, on
    the same event loop (for an asyncio server). :meth:`feed` puts what the application
    received straight into the read buffer; :meth:`write` hands what the connection writes to
    ``on_output`` (the routing) at once; ``on_end`` runs once the connection closes its side.
    """

    def __init__(self, description: str, on_output: Callable[[bytes], None], on_end: Callable[[], None]) -> None:
        self._description = description
        self._on_output = on_output
        self._on_end = on_end
        self._inbox = AsyncInbox()
        self._write_closed = False
        self._ended = False

    @property
    def description(self) -> str:
        """A short name for logs."""
        return self._description

    def feed(self, line: bytes) -> None:
        """Give the connection one received line (``\\n``-terminated)."""
        self._inbox.put(line)

    def feed_eof(self) -> None:
        """The peer is gone: the connection reads end of input."""
        self._inbox.put(_EOF)

    async def read(self) -> bytes:
        """What was fed (joined, up to 64 KiB); ``b""`` at end of input."""
        return await self._inbox.read()

    def write(self, data: bytes | bytearray) -> None:
        """Route ``data`` now (to the streams waiting for it); never blocks."""
        if self._write_closed:
            raise ConnectionClosedError(f"{self._description}: transport is closed")
        self._on_output(bytes(data))

    async def drain(self) -> None:
        """Nothing to wait for: what was written is queued on its stream already."""

    def close_write(self) -> None:
        """No more writes; the streams end (after what was routed)."""
        if self._write_closed:
            return
        self._write_closed = True
        self._end()

    async def close(self) -> None:
        """End both directions; a pending :meth:`read` returns ``b""``. Idempotent."""
        self.feed_eof()
        self.close_write()

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._on_end()


# One ACP connection's pipe and handle, for a sync server or an asyncio one.
_Transport = Union[_LoopTransport, _AsgiTransport]
_Handle = Union[ServedConnection, AsyncServedConnection]


def _one_line(data: bytes) -> bytes:
    # Raw line breaks can only be whitespace between JSON tokens: read them as spaces, so one
    # message is one line for the engine.
    if b"\n" in data or b"\r" in data:
        data = data.replace(b"\r", b" ").replace(b"\n", b" ")
    return data + b"\n"


# ------------------------------------------------------------------------- event streams


class _EventStream:
    """Messages waiting for (or flowing to) one open GET stream or WebSocket, on the loop."""

    __slots__ = ("events", "wakeup", "attached", "ended", "close_code")

    def __init__(self) -> None:
        self.events: deque[bytes] = deque()
        self.wakeup = asyncio.Event()
        self.attached = False
        self.ended = False
        self.close_code = 1000  # for a WebSocket: the close code once ended

    def push(self, event: bytes) -> None:
        self.events.append(event)
        self.wakeup.set()

    def end(self) -> None:
        self.ended = True
        self.wakeup.set()


def _sse(line: bytes) -> bytes:
    return b"data: " + line + b"\n\n"


class _HttpConnection:
    """One ACP connection over Streamable HTTP: its engine handle, streams and routing state.
    Lives on the event loop; only :attr:`transport` is touched by engine threads."""

    def __init__(self, app: AcpAsgiApp, connection_id: str, loop: asyncio.AbstractEventLoop, peer: str) -> None:
        self.app = app
        self.id = connection_id
        self.loop = loop
        self.transport = app._transport(loop, f"http {connection_id} from {peer}", self._route_output, self._ended)
        self.handle: _Handle | None = None
        self.main = _EventStream()
        self.session_streams: dict[str, _EventStream] = {}
        self.listening = 0  # session-scoped streams open
        self.routes: dict[Any, str] = {}  # request id -> session, for session-stream answers
        self.init_id: Any = None
        self.init_answer: asyncio.Future[bytes] | None = None
        self.last_activity = loop.time()
        self.ended = False
        self.idle_timer: asyncio.TimerHandle | None = None

    def touch(self) -> None:
        self.last_activity = self.loop.time()

    def streaming(self) -> bool:
        return self.main.attached or self.listening > 0

    # -- output routing (on the loop) --------------------------------------------------------

    def _route_output(self, data: bytes) -> None:
        for line in data.split(b"\n"):
            if line and not line.isspace():
                self._route(line)

    def _route(self, line: bytes) -> None:
        answer = self.init_answer
        if answer is None and not self.listening:
            self.main.push(_sse(line))  # the common case: no decoding at all
            return
        decoded = rpc.decode_line(line)
        msg = decoded[0] if isinstance(decoded, list) else decoded
        session: str | None = None
        if isinstance(msg, (rpc.Response, rpc.ErrorResponse)):
            if answer is not None and msg.id == self.init_id:
                self.init_answer = None
                if not answer.done():
                    answer.set_result(line)
                return
            session = self.routes.pop(msg.id, None)
        elif isinstance(msg, (rpc.Request, rpc.Notification)) and self.listening:
            session = session_id_of(msg.params)
        stream = self.session_streams.get(session) if session is not None else None
        (stream if stream is not None and stream.attached else self.main).push(_sse(line))

    def _ended(self) -> None:
        """The engine closed this connection (DELETE, idle, shutdown, or the agent's doing)."""
        self.ended = True
        self.main.end()
        for stream in self.session_streams.values():
            stream.end()
        answer = self.init_answer
        if answer is not None and not answer.done():
            answer.set_exception(ConnectionClosedError("the connection closed before initialize was answered"))
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        self.app._forget_http(self)


# ------------------------------------------------------------------------- the application


class AcpAsgiApp:
    """An ASGI 3 application serving an agent over Streamable HTTP and WebSocket on one path.

    ``server`` is what serves each connection: a :class:`~acp.agent.SyncAgent` (a
    :class:`~acp.transport._serving.ConnectionServer`: one engine per connection, its handlers
    on threads), or an asyncio server with ``connect_async`` (an
    :class:`~acp.transport._serving.AsyncConnectionServer` such as ``acp.AsyncAgent``: its
    connections live on the ASGI server's own loop, no thread per connection). ``path``: the
    endpoint (``None``: any path). ``origins``: browser origins allowed (None: pages from this
    machine only; requests without ``Origin`` always pass). ``authenticate(headers)`` sees every
    request's headers and returns None to accept or an HTTP status to refuse (see
    :data:`acp.transport.websocket.Authenticator`). ``max_connections``: ACP connections at once
    (HTTP and WebSocket together; more get 503). ``max_message_bytes``: the largest message in
    (413 / WebSocket close 1009). ``idle_timeout``: seconds a connection may sit with no open
    stream and no request (None: forever). ``keepalive``: seconds between SSE keep-alive
    comments. ``websocket``: also accept WebSocket upgrades.

    :meth:`close` (or :meth:`aclose` on the loop, or the ASGI lifespan shutdown) ends every
    connection gracefully.
    """

    def __init__(
        self,
        server: ConnectionServer | AsyncConnectionServer,
        *,
        path: str | None = "/acp",
        origins: Iterable[str] | None = None,
        authenticate: Authenticator | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        keepalive: float = DEFAULT_KEEPALIVE,
        initialize_timeout: float = DEFAULT_INITIALIZE_TIMEOUT,
        websocket: bool = True,
    ) -> None:
        if max_connections <= 0:
            raise ValueError("max_connections must be positive")
        if max_message_bytes <= 0:
            raise ValueError("max_message_bytes must be positive")
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError("idle_timeout must be positive or None")
        if not keepalive > 0:
            raise ValueError("keepalive must be positive")
        self._server = server
        # An asyncio server (AsyncAgent has an async `connect` too: `connect_async` decides).
        self._async = callable(getattr(server, "connect_async", None))
        self._loop: asyncio.AbstractEventLoop | None = None  # the ASGI server's, once it runs
        self._closers: set[asyncio.Task[None]] = set()  # async closes in flight (DELETE, idle)
        self.path = path
        """The endpoint path (None: any)."""
        self._origins = OriginPolicy(origins)
        self._authenticate = authenticate
        self._max_connections = max_connections
        self.max_message_bytes = max_message_bytes
        """The largest message accepted."""
        self._idle_timeout = idle_timeout
        self._keepalive = keepalive
        self._initialize_timeout = initialize_timeout
        self._accept_websocket = websocket
        self._http: dict[str, _HttpConnection] = {}
        self._ws: set[_Handle] = set()
        self._ws_opening = 0  # WebSockets accepted whose connection is being made
        self._lock = threading.Lock()  # guards _ws and _closing (close() runs off the loop)
        self._closing = False
        self.started = threading.Event()
        """Set when an ASGI server sent the lifespan startup event."""

    # -- public ------------------------------------------------------------------------------

    @property
    def connections(self) -> list[Any]:
        """The agent connections open over this application (both profiles): the server's
        :class:`~acp.transport._serving.ServedConnection` handles, or for an asyncio server its
        :class:`~acp.transport._serving.AsyncServedConnection` ones."""
        with self._lock:
            handles = [c.handle for c in list(self._http.values()) if c.handle is not None]
            return handles + list(self._ws)

    def close(self, timeout: float | None = 5.0, *, cancel: bool = True) -> None:
        """Refuse new connections (503) and close every open one gracefully; idempotent.

        With ``cancel=True`` turns in flight are cancelled first, so their prompts are
        answered ``cancelled``; each connection gets up to ``timeout`` seconds to deliver its
        answers. Call it from any thread but the event loop's (the lifespan shutdown does); on
        the loop, ``await`` :meth:`aclose`.
        """
        if not self._start_closing():
            return
        handles = self.connections
        _log.info("closing the ACP endpoint (%d connections)", len(handles))
        loop = self._loop
        if not self._async:
            close_connections(handles, timeout, cancel)
        elif handles and loop is not None and not loop.is_closed():
            if _running_loop() is loop:
                raise RuntimeError("AcpAsgiApp.close() was called on its event loop: await aclose() there")
            # The connections live on the loop: close them there, all at once.
            closing = asyncio.run_coroutine_threadsafe(_close_all_async(handles, timeout, cancel), loop)
            try:
                closing.result(None if timeout is None else timeout + 5.0)
            except concurrent.futures.TimeoutError:  # the loop no longer runs
                closing.cancel()
                _log.warning("the event loop did not close the connections in time")

    async def aclose(self, timeout: float | None = 5.0, *, cancel: bool = True) -> None:
        """:meth:`close` from the event loop the application runs on. The connections of an
        asyncio server are closed right there; a sync server's on a worker thread."""
        if not self._start_closing():
            return
        handles = self.connections
        _log.info("closing the ACP endpoint (%d connections)", len(handles))
        if self._async:
            await _close_all_async(handles, timeout, cancel)
        else:
            await asyncio.get_running_loop().run_in_executor(None, close_connections, handles, timeout, cancel)

    def _start_closing(self) -> bool:
        with self._lock:
            if self._closing:
                return False
            self._closing = True
            return True

    # -- ASGI --------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._loop is None:  # a server without lifespan events
            self._loop = asyncio.get_running_loop()
        kind = scope["type"]
        if kind == "http":
            await self._http_request(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._loop = asyncio.get_running_loop()
                self.started.set()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _path_ok(self, scope: Scope) -> bool:
        if self.path is None:
            return True
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if path == self.path:
            return True
        return bool(root) and path.startswith(root) and path[len(root):] == self.path

    def _unavailable(self) -> str | None:
        """Why a new connection gets 503 now (closing, or full), or None."""
        with self._lock:
            if self._closing:
                return "Service Unavailable: the server is closing"
            if len(self._http) + len(self._ws) + self._ws_opening >= self._max_connections:
                _log.warning("refused a connection: %d connections open", self._max_connections)
                return "Service Unavailable: too many connections"
        return None

    def _gate(self, scope: Scope, headers: Headers) -> tuple[int, str] | None:
        """Path, Origin, authentication: None to go on, or the refusal."""
        if not self._path_ok(scope):
            return 404, f"Not Found: the ACP endpoint is {self.path}"
        if not self._origins.allows(headers.get("origin")):
            _log.warning("refused a request from origin %r", headers.get("origin"))
            return 403, "Forbidden: origin not allowed"
        if self._authenticate is not None:
            return check_auth(self._authenticate, headers)
        return None

    # -- Streamable HTTP ---------------------------------------------------------------------

    async def _http_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope.get("headers", ()))
        refusal = self._gate(scope, headers)
        if refusal is not None:
            await _respond(send, refusal[0], refusal[1])
            return
        method = scope.get("method", "GET")
        if method == "POST":
            await self._post(scope, receive, send, headers)
        elif method == "GET":
            await self._get(receive, send, headers)
        elif method == "DELETE":
            await self._delete(send, headers)
        else:
            await _respond(send, 405, "Method Not Allowed", [(b"allow", b"GET, POST, DELETE")])

    async def _post(self, scope: Scope, receive: Receive, send: Send, headers: Headers) -> None:
        content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            await _respond(send, 415, "Unsupported Media Type: POST a JSON-RPC message as application/json")
            return
        body = await _read_body(receive, self.max_message_bytes)
        if body is None:
            await _respond(send, 413, f"Payload Too Large: the limit is {self.max_message_bytes} bytes")
            return
        if body.lstrip()[:1] == b"[":
            await _respond(send, 501, "Not Implemented: batch requests are not supported")
            return
        decoded = rpc.decode_line(body)
        msg = decoded[0] if isinstance(decoded, list) else decoded
        if isinstance(msg, rpc.Invalid):
            await _respond_json(send, 400, rpc.Encoder().error(msg.id, msg.code, msg.reason))
            return
        connection_id = headers.get(_CID)
        if connection_id is None:
            if isinstance(msg, rpc.Request) and msg.method == _INITIALIZE:
                await self._initialize(scope, send, msg, _one_line(body))
            else:
                await _respond(send, 400, f"Bad Request: {CONNECTION_ID_HEADER} is missing (initialize first)")
            return
        conn = self._http.get(connection_id)
        if conn is None or conn.ended:
            await _respond(send, 404, f"Not Found: unknown {CONNECTION_ID_HEADER}")
            return
        if isinstance(msg, (rpc.Request, rpc.Notification)):
            session = session_id_of(msg.params)
            if session is not None:
                given = headers.get(_SID)
                if given is None and msg.method not in _ATTACHING:
                    await _respond(send, 400, f"Bad Request: {SESSION_ID_HEADER} is missing for {msg.method}")
                    return
                if given is not None and given != session:
                    await _respond(send, 400, f"Bad Request: {SESSION_ID_HEADER} does not match params.sessionId")
                    return
                if isinstance(msg, rpc.Request):
                    stream = conn.session_streams.get(session)
                    if stream is not None and stream.attached:
                        conn.routes[msg.id] = session
        conn.touch()
        conn.transport.feed(_one_line(body))
        await _respond(send, 202, None)

    async def _initialize(self, scope: Scope, send: Send, msg: rpc.Request, line: bytes) -> None:
        unavailable = self._unavailable()
        if unavailable is not None:
            await _respond(send, 503, unavailable)
            return
        loop = asyncio.get_running_loop()
        conn = _HttpConnection(self, str(uuid.uuid4()), loop, _peer(scope))
        conn.init_id = msg.id
        answer: asyncio.Future[bytes] = loop.create_future()
        conn.init_answer = answer
        with self._lock:  # counted from now on: connecting may yield to other requests
            self._http[conn.id] = conn
        try:
            conn.handle = await self._connect(conn.transport)
        except RuntimeError:  # the agent was closed
            self._forget_http(conn)
            await _respond(send, 503, "Service Unavailable: the agent is closed")
            return
        conn.transport.feed(line)
        try:
            body = await asyncio.wait_for(asyncio.shield(answer), self._initialize_timeout)
        except asyncio.TimeoutError:
            self._close_later(conn)
            await _respond(send, 504, "Gateway Timeout: the agent did not answer initialize")
            return
        except ConnectionClosedError:
            await _respond(send, 503, "Service Unavailable: the agent closed the connection")
            return
        if b'"error"' in body and isinstance(rpc.decode_line(body), rpc.ErrorResponse):
            self._close_later(conn)  # initialize failed: no connection to keep
            await _respond_json(send, 200, body)
            return
        _log.debug("%s: initialized", conn.transport.description)
        self._arm_idle(conn)
        await _respond_json(send, 200, body, [(_CID.encode(), conn.id.encode())])

    async def _get(self, receive: Receive, send: Send, headers: Headers) -> None:
        if "text/event-stream" not in headers.get("accept", ""):
            await _respond(send, 406, "Not Acceptable: GET opens an event stream (Accept: text/event-stream)")
            return
        connection_id = headers.get(_CID)
        if connection_id is None:
            await _respond(send, 400, f"Bad Request: {CONNECTION_ID_HEADER} is missing")
            return
        conn = self._http.get(connection_id)
        if conn is None or conn.ended:
            await _respond(send, 404, f"Not Found: unknown {CONNECTION_ID_HEADER}")
            return
        session = headers.get(_SID)
        # A session-scoped stream may be opened before the session exists on this connection:
        # clients open it before they post session/load for it (the TypeScript SDK does).
        stream = conn.main if session is None else conn.session_streams.setdefault(session, _EventStream())
        if stream.attached:
            await _respond(send, 409, "Conflict: this stream is already open")
            return
        await self._stream(conn, stream, session, receive, send)

    async def _stream(
        self, conn: _HttpConnection, stream: _EventStream, session: str | None, receive: Receive, send: Send
    ) -> None:
        stream.attached = True
        if session is not None:
            conn.listening += 1
        conn.touch()
        gone = asyncio.Event()

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    gone.set()
                    stream.wakeup.set()
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream"),
                        (b"cache-control", b"no-cache, no-transform"),
                        (b"x-accel-buffering", b"no"),  # nginx: pass events on at once
                        (_CID.encode(), conn.id.encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b": open\n\n", "more_body": True})
            while not gone.is_set():
                if stream.events:
                    body = b"".join(stream.events)
                    stream.events.clear()
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                    continue
                if stream.ended:
                    break
                stream.wakeup.clear()
                try:
                    await asyncio.wait_for(stream.wakeup.wait(), self._keepalive)
                except asyncio.TimeoutError:
                    await send({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})
            if not gone.is_set():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away under a send
            pass
        finally:
            watcher.cancel()
            stream.attached = False
            if session is not None:
                conn.listening -= 1
                if stream.events and not conn.ended:  # not sent: the connection stream takes them
                    conn.main.events.extend(stream.events)
                    stream.events.clear()
                    conn.main.wakeup.set()
            conn.touch()

    async def _delete(self, send: Send, headers: Headers) -> None:
        connection_id = headers.get(_CID)
        if connection_id is None:
            await _respond(send, 400, f"Bad Request: {CONNECTION_ID_HEADER} is missing")
            return
        conn = self._http.get(connection_id)
        if conn is None or conn.ended:
            await _respond(send, 404, f"Not Found: unknown {CONNECTION_ID_HEADER}")
            return
        self._close_later(conn)
        await _respond(send, 202, None)

    def _close_later(self, conn: _HttpConnection) -> None:
        """Close ``conn`` in the background: on a thread for a sync server (closing waits for
        the engine), in a task for an asyncio one; its streams end after."""
        handle = conn.handle
        if handle is None:
            return
        if self._async:
            closer = asyncio.ensure_future(_close_async(cast(AsyncServedConnection, handle), 5.0, True))
            self._closers.add(closer)  # held until done (the loop keeps only weak references)
            closer.add_done_callback(self._closers.discard)
            return
        threading.Thread(
            target=close_connection, args=(handle, 5.0, True), name=f"acp-http-close-{conn.id[:8]}", daemon=True
        ).start()

    # -- sync or asyncio server --------------------------------------------------------------

    def _transport(
        self, loop: asyncio.AbstractEventLoop, description: str, on_output: Callable[[bytes], None],
        on_end: Callable[[], None],
    ) -> _Transport:
        """The pipe of one ACP connection: to the engine's threads, or loop-native."""
        if self._async:
            return _AsgiTransport(description, on_output, on_end)
        return _LoopTransport(loop, description, on_output, on_end)

    async def _connect(self, transport: _Transport) -> _Handle:
        """Serve a new connection over ``transport``; RuntimeError when the server is closed."""
        if self._async:
            return await cast(AsyncConnectionServer, self._server).connect_async(cast("AsyncTransport", transport))
        return cast(ConnectionServer, self._server).connect(cast(_LoopTransport, transport))

    async def _close_handle(self, handle: _Handle, timeout: float | None, cancel: bool) -> None:
        if self._async:
            await _close_async(cast(AsyncServedConnection, handle), timeout, cancel)
        else:
            sync_handle = cast(ServedConnection, handle)
            await asyncio.get_running_loop().run_in_executor(None, close_connection, sync_handle, timeout, cancel)

    def _arm_idle(self, conn: _HttpConnection) -> None:
        timeout = self._idle_timeout
        if timeout is None or conn.ended:
            return

        def check() -> None:
            if conn.ended:
                return
            idle_for = conn.loop.time() - conn.last_activity
            if conn.streaming() or idle_for < timeout:
                conn.idle_timer = conn.loop.call_later(max(timeout - idle_for, 1.0), check)
                return
            _log.info("%s: idle for %ss; closing", conn.transport.description, timeout)
            self._close_later(conn)

        conn.idle_timer = conn.loop.call_later(timeout, check)

    def _forget_http(self, conn: _HttpConnection) -> None:
        with self._lock:
            if self._http.get(conn.id) is conn:
                del self._http[conn.id]

    # -- WebSocket ---------------------------------------------------------------------------

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        headers = Headers(scope.get("headers", ()))
        refusal = (404, "Not Found: WebSocket is not served here") if not self._accept_websocket else self._gate(scope, headers)
        if refusal is None:
            unavailable = self._unavailable()
            refusal = None if unavailable is None else (503, unavailable)
        if refusal is not None:
            await _refuse_websocket(scope, send, refusal[0], refusal[1])
            return
        loop = asyncio.get_running_loop()
        connection_id = str(uuid.uuid4())
        out = _EventStream()

        def on_output(data: bytes) -> None:
            for line in data.split(b"\n"):
                if line and not line.isspace():
                    out.push(line)

        transport = self._transport(loop, f"websocket {connection_id} from {_peer(scope)}", on_output, out.end)
        with self._lock:  # counted from now on: connecting may yield to other requests
            self._ws_opening += 1
        try:
            handle = await self._connect(transport)
        except RuntimeError:
            with self._lock:
                self._ws_opening -= 1
            await _refuse_websocket(scope, send, 503, "Service Unavailable: the agent is closed")
            return
        with self._lock:
            self._ws_opening -= 1
            self._ws.add(handle)
        await send({"type": "websocket.accept", "headers": [(_CID.encode(), connection_id.encode())]})
        last = [time.monotonic()]
        sender = asyncio.ensure_future(self._ws_send(out, send, last))
        watchdog: list[asyncio.TimerHandle] = []  # the idle timer, re-armed as it goes
        self._ws_watchdog(loop, out, last, transport.description, watchdog)
        try:
            while True:
                message = await receive()
                kind = message["type"]
                if kind == "websocket.disconnect":
                    break
                if kind != "websocket.receive":
                    continue
                text = message.get("text")
                if text is None:
                    _log.warning("%s: ignored a binary frame (ACP messages are text frames)", transport.description)
                    continue
                data = text.encode("utf-8")
                if len(data) > self.max_message_bytes:
                    _log.warning("%s: a message of %d bytes is over the limit", transport.description, len(data))
                    out.close_code = 1009
                    out.end()
                    continue  # the sender closes; the client's disconnect ends this loop
                last[0] = time.monotonic()
                transport.feed(_one_line(data))
        finally:
            # No longer open over this application from here on: before the end of input
            # reaches the agent (whose close callbacks may look at `connections`).
            with self._lock:
                self._ws.discard(handle)
            for timer in watchdog:
                timer.cancel()
            transport.feed_eof()  # the engine ends the connection, which ends `out`
            try:
                await asyncio.wait_for(asyncio.shield(sender), 5.0)
            except (asyncio.TimeoutError, OSError):
                sender.cancel()
            await self._close_handle(handle, 5.0, False)

    def _ws_watchdog(
        self,
        loop: asyncio.AbstractEventLoop,
        out: _EventStream,
        last: list[float],
        name: str,
        timers: list[asyncio.TimerHandle],
    ) -> None:
        """Close the WebSocket (1001) after ``idle_timeout`` without a message either way.
        One timer at a time, kept in ``timers[0]`` so the caller can cancel it."""
        timeout = self._idle_timeout
        if timeout is None:
            return

        def check() -> None:
            if out.ended:
                return
            remaining = last[0] + timeout - time.monotonic()
            if remaining > 0:
                timers[0] = loop.call_later(remaining, check)
                return
            _log.info("%s: idle for %ss; closing", name, timeout)
            out.close_code = 1001
            out.end()

        timers.append(loop.call_later(timeout, check))

    async def _ws_send(self, out: _EventStream, send: Send, last: list[float]) -> None:
        try:
            while True:
                while out.events:
                    line = out.events.popleft()
                    await send({"type": "websocket.send", "text": line.decode("utf-8")})
                    last[0] = time.monotonic()
                if out.ended:
                    await send({"type": "websocket.close", "code": out.close_code})
                    return
                out.wakeup.clear()
                await out.wakeup.wait()
        except (OSError, RuntimeError):  # the client went away: sends fail or are refused
            return


async def _close_async(handle: AsyncServedConnection, timeout: float | None, cancel: bool) -> None:
    """:func:`~acp.transport._serving.close_connection` for a connection on the loop."""
    try:
        if cancel:
            handle.cancel_turns()
        await handle.close(graceful=True, timeout=timeout)
    except Exception:
        _log.exception("%s: close failed", getattr(handle, "name", "connection"))


async def _close_all_async(handles: list[AsyncServedConnection], timeout: float | None, cancel: bool) -> None:
    """Close every connection at once, so the total time is one ``timeout``."""
    await asyncio.gather(*(_close_async(handle, timeout, cancel) for handle in handles))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(parts)


async def _respond(send: Send, status: int, text: str | None, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = b"" if text is None else (text + "\n").encode("utf-8")
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})


async def _respond_json(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = body.rstrip(b"\n")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})


async def _refuse_websocket(scope: Scope, send: Send, status: int, text: str) -> None:
    if "websocket.http.response" in scope.get("extensions", {}):
        body = (text + "\n").encode("utf-8")
        await send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "websocket.http.response.body", "body": body})
    else:  # the server answers 403 to a close before accept
        await send({"type": "websocket.close", "code": 1008})


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"


# ------------------------------------------------------------------------- a ready server


class HttpServer(BackgroundServer):
    """An :class:`AcpAsgiApp` served by uvicorn in a background thread
    (``SyncAgent.serve_http`` makes it; ``pip install 'acp-sync[http]'``).

    Listening from construction on: ``port`` / ``url`` say where; :meth:`serve_forever` blocks
    until :meth:`close`; ``with`` closes it. Both profiles are served on the path: Streamable
    HTTP (HTTP/1.1: uvicorn has no HTTP/2; run :attr:`app` under hypercorn for that) and
    WebSocket (``ws://`` on the same port). Logging is left as you configured it.
    """

    def __init__(
        self,
        app: AcpAsgiApp,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        start_timeout: float = 10.0,
        **uvicorn_options: Any,
    ) -> None:
        from .._extras import need

        with need("http", "serve_http (an HTTP server)"):
            import uvicorn

        self.app = app
        """The ASGI application served."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit it: an answer's headers and body go out as separate writes,
        # and Nagle would hold the body for the client's delayed ACK (40 ms per answer).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((host, port))
            # Listening now: uvicorn reports the lifespan startup before it starts accepting,
            # and a client that connects in between must wait in the backlog, not be refused.
            sock.listen(2048)
        except OSError:
            sock.close()
            raise
        address = sock.getsockname()
        self.host: str = address[0]
        """The address bound."""
        self.port: int = address[1]
        """The port bound (the one the OS picked when ``port=0``)."""
        self._tls = ssl_certfile is not None
        options: dict[str, Any] = {
            "lifespan": "on",
            "log_config": None,  # never reconfigure the application's logging
            "access_log": False,
            "server_header": False,
            "ws_max_size": app.max_message_bytes,
            "timeout_graceful_shutdown": 5,
        }
        options.update(uvicorn_options)
        config = uvicorn.Config(app, ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile, **options)
        self._server = uvicorn.Server(config)
        self._sock = sock
        self._closed = threading.Event()
        self._close_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"acp-http-{self.port}", daemon=True)
        self._thread.start()
        if not app.started.wait(start_timeout) or not self._thread.is_alive():
            self._server.should_exit = True
            self._thread.join(start_timeout)
            sock.close()
            raise RuntimeError(f"the HTTP server on port {self.port} did not start")
        _log.info("serving on %s", self.url)

    @property
    def url(self) -> str:
        """``http://host:port/path`` (``https`` with TLS) for ``SyncClient.builder().connect``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self._tls else 'http'}://{host}:{self.port}{self.app.path or '/'}"

    @property
    def ws_url(self) -> str:
        """The same endpoint as a WebSocket URL (``ws://`` / ``wss://``)."""
        return "ws" + self.url[4:]

    @property
    def connections(self) -> list[ServedConnection]:
        """The agent connections open over this server."""
        return self.app.connections

    def close(self, timeout: float | None = 5.0, *, cancel: bool = True) -> None:
        """End every connection gracefully (see :meth:`AcpAsgiApp.close`), then stop
        listening and join the server thread; idempotent."""
        with self._close_lock:
            if self._closed.is_set():
                return
            self.app.close(timeout, cancel=cancel)  # streams end, so uvicorn has nothing to wait for
            self._server.should_exit = True
            self._thread.join(None if timeout is None else timeout + 5.0)
            self._sock.close()
            self._closed.set()

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        except BaseException:  # pragma: no cover - uvicorn logs its own failures
            _log.exception("the HTTP server on port %d failed", self.port)

    def __repr__(self) -> str:
        return f"<HttpServer {self.url}{' closed' if self.closed else ''}>"
