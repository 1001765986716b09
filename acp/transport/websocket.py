"""ACP over WebSocket, client and server, on the ``websockets`` library's sync (threaded) API.

Install the extra: ``pip install 'acp-sync[ws]'``. Importing :mod:`acp` never imports
``websockets``; this module does, when it is imported.

The wire (RFD "Streamable HTTP & WebSocket transport"): one ACP connection per WebSocket, the
server answers the upgrade with an ``Acp-Connection-Id`` header, every JSON-RPC message travels
in one text frame, binary frames are ignored. The client still sends ``initialize`` first.

The connection engine speaks newline-delimited lines, so :class:`WebSocketTransport` adapts:
each line written becomes one text frame, and each text frame received becomes one line (a
newline inside a frame, which valid JSON can only carry as whitespace between tokens, is read
as a space, so a pretty-printed message is still one message).

- Client: :func:`connect_websocket` (or ``SyncClient.builder().connect("ws://...")``).
- Server: :class:`WebSocketServer` (or ``SyncAgent.serve_websocket(...)``): one built agent
  serves every WebSocket as its own :class:`~acp.agent.AgentConnection`, with its own
  negotiated capabilities, sessions and turns.

Limits: a message larger than ``max_message_bytes`` (default 64 MiB) makes the receiving side
close the WebSocket with code 1009 (message too big), as the WebSocket protocol prescribes;
WebSocket has no half-close, so :meth:`WebSocketTransport.close_write` closes the whole socket.
"""

from __future__ import annotations

import http
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from http.cookiejar import CookieJar
from typing import TYPE_CHECKING, Any

from .._extras import need

with need("ws", "WebSocket"):
    from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI
    from websockets.protocol import State
    from websockets.sync.client import ClientConnection
    from websockets.sync.client import connect as _ws_connect
    from websockets.sync.connection import Connection as _WsConnection
    from websockets.sync.server import Server, ServerConnection
    from websockets.sync.server import serve as _ws_serve

from ..errors import ConnectionClosedError
from ._remote import (
    CONNECTION_ID_HEADER,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_OPEN_TIMEOUT,
    RemoteConnectionError,
    cookie_header,
    store_cookies,
)
from ._serving import (
    Authenticator,
    BackgroundServer,
    ConnectionServer,
    OriginPolicy,
    RefuseConnection,
    ServedConnection,
    check_auth,
    close_connections,
)
from .base import READ_CHUNK

if TYPE_CHECKING:
    import ssl as ssl_module

    from websockets.http11 import Request, Response


__all__ = [
    "CONNECTION_ID_HEADER",
    "ConnectionServer",
    "ServedConnection",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "Authenticator",
    "RefuseConnection",
    "RemoteConnectionError",
    "WebSocketServer",
    "WebSocketTransport",
    "connect_websocket",
]

_log = logging.getLogger("acp.transport.websocket")
# The library's own messages (handshakes, frames at DEBUG) go under ours.
_lib_log = logging.getLogger("acp.transport.websocket.lib")

# websockets >= 14 sends UTF-8 bytes as a text frame without a decode/encode round trip.
_SEND_BYTES_AS_TEXT = "text" in inspect.signature(_WsConnection.send).parameters
# websockets >= 17 wants ``legacy=True`` to return the connection directly (we own its close).
_CONNECT_LEGACY: dict[str, bool] = (
    {"legacy": True} if "legacy" in inspect.signature(_ws_connect).parameters else {}
)

DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_PING_INTERVAL = 20.0
DEFAULT_CLOSE_TIMEOUT = 5.0


class WebSocketTransport:
    """A :class:`~acp.transport.Transport` over one open WebSocket (client or server side).

    ``read`` returns the text frames received, each as one ``\\n``-terminated line (several
    queued frames are returned together, up to 64 KiB); binary frames are dropped with a
    warning. ``write`` sends each line as one text frame. ``idle_timeout`` closes the socket
    (code 1001) when no message went either way for that many seconds; pings do not count.
    """

    def __init__(
        self,
        ws: ClientConnection | ServerConnection,
        *,
        description: str = "websocket",
        connection_id: str | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError("idle_timeout must be positive or None")
        self._ws = ws
        self._description = description
        self.connection_id = connection_id
        """The ``Acp-Connection-Id`` of this connection (None if the server sent none)."""
        self._idle_timeout = idle_timeout
        self._last_activity = time.monotonic()
        self._lock = threading.Lock()
        self._closed = False
        self._write_closed = False
        self._eof = False
        if _SEND_BYTES_AS_TEXT:
            self._send: Callable[[bytes], None] = lambda line: ws.send(line, text=True)
        else:  # pragma: no cover - websockets 13
            self._send = lambda line: ws.send(line.decode("utf-8"))

    # -- Transport ---------------------------------------------------------------------------

    @property
    def description(self) -> str:
        """A short name for logs, e.g. ``"websocket ws://127.0.0.1:8765/acp"``."""
        return self._description

    @property
    def websocket(self) -> ClientConnection | ServerConnection:
        """The underlying ``websockets`` connection (headers, remote address, latency...)."""
        return self._ws

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called or the WebSocket closed."""
        return self._closed or self._eof

    def read(self) -> bytes:
        """Block until at least one message arrives; ``b""`` once the WebSocket is closed."""
        ws = self._ws
        parts: list[bytes] = []
        size = 0
        while not parts:
            if self._closed or self._eof:
                return b""
            try:
                message = ws.recv(timeout=self._recv_timeout())
            except TimeoutError:
                if self._idle_expired():
                    _log.info("%s: idle for %ss; closing", self._description, self._idle_timeout)
                    self._close_ws(1001, "idle timeout")
                    self._eof = True
                    return b""
                continue
            except ConnectionClosed as exc:
                self._on_closed(exc)
                return b""
            size += self._take(message, parts)
            # Whatever else is already queued goes out with it: one engine wake-up, many lines.
            while size < READ_CHUNK:
                try:
                    message = ws.recv(timeout=0)
                except (TimeoutError, ConnectionClosed):
                    break  # nothing queued; a close is seen by the next read()
                size += self._take(message, parts)
        self._last_activity = time.monotonic()
        return b"".join(parts)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send each ``\\n``-terminated line of ``data`` as one text frame.

        Raises :class:`~acp.errors.ConnectionClosedError` once the WebSocket is closed.
        """
        if self._write_closed or self._closed:
            raise ConnectionClosedError(f"{self._description}: transport is closed")
        lines = [line for line in bytes(data).split(b"\n") if line and not line.isspace()]
        if _log.isEnabledFor(logging.DEBUG):
            for line in lines:
                _log.debug("%s > %r", self._description, line[:2000])
        try:
            if len(lines) == 1:
                self._send(lines[0])
            elif lines:
                self._send_many(lines)
        except ConnectionClosed as exc:
            raise ConnectionClosedError(f"{self._description}: {closed_reason(exc)}") from exc
        self._last_activity = time.monotonic()

    def close_write(self) -> None:
        """No more writes. WebSocket has no half-close: this closes the WebSocket (code 1000),
        so the peer reads end of input; further reads return ``b""``. Idempotent."""
        with self._lock:
            if self._write_closed:
                return
            self._write_closed = True
        self._close_ws(1000, "")

    def close(self) -> None:
        """Close the WebSocket (closing handshake, bounded by the connection's close timeout).

        A :meth:`read` blocked in another thread returns ``b""``; idempotent.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._write_closed = True
        self._close_ws(1000, "")
        _log.debug("%s: closed", self._description)

    # -- internals ---------------------------------------------------------------------------

    def _send_many(self, lines: list[bytes]) -> None:
        # A batch of coalesced notifications: frame them all under one hold of the library's
        # lock (its documented extension point), instead of one send() per line.
        ws = self._ws
        if not _SEND_BYTES_AS_TEXT:  # pragma: no cover - websockets 13
            for line in lines:
                self._send(line)
            return
        with ws.send_context():
            send_text = ws.protocol.send_text
            for line in lines:
                send_text(line)

    def _take(self, message: str | bytes, parts: list[bytes]) -> int:
        line = frame_line(message, self._description)
        if line is None:
            return 0
        parts.append(line)
        return len(line)

    def _recv_timeout(self) -> float | None:
        if self._idle_timeout is None:
            return None
        return max(0.0, self._last_activity + self._idle_timeout - time.monotonic()) + 0.001

    def _idle_expired(self) -> bool:
        timeout = self._idle_timeout
        return timeout is not None and time.monotonic() - self._last_activity >= timeout

    def _on_closed(self, exc: ConnectionClosed) -> None:
        if not self._eof:
            self._eof = True
            _log.debug("%s: %s", self._description, closed_reason(exc))

    def _close_ws(self, code: int, reason: str) -> None:
        try:
            self._ws.close(code, reason)
        except Exception as exc:  # a socket error while closing: it is closed either way
            _log.debug("%s: error while closing: %r", self._description, exc)

    def __repr__(self) -> str:
        return f"<WebSocketTransport {self._description}{' closed' if self.closed else ''}>"


def closed_reason(exc: ConnectionClosed) -> str:
    rcvd = exc.rcvd
    if rcvd is not None:
        return f"peer closed the WebSocket (code {rcvd.code}{', ' + rcvd.reason if rcvd.reason else ''})"
    sent = exc.sent
    if sent is not None:
        return f"WebSocket closed (code {sent.code}{', ' + sent.reason if sent.reason else ''})"
    return "WebSocket connection lost (no close frame)"


def frame_line(message: str | bytes, description: str) -> bytes | None:
    """One received message as the ``\\n``-terminated line the engine reads, or None for a
    binary frame (dropped with a warning). Shared with :mod:`acp.aio.transport.websocket`."""
    if type(message) is not str:
        _log.warning(
            "%s: ignored a binary frame of %d bytes (ACP messages are text frames)",
            description,
            len(message),
        )
        return None
    data = message.encode("utf-8")
    if b"\n" in data or b"\r" in data:
        data = data.replace(b"\r", b" ").replace(b"\n", b" ")
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug("%s < %r", description, data[:2000])
    return data + b"\n"


# ------------------------------------------------------------------------------------ client


def connect_websocket(
    url: str,
    *,
    headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    cookies: CookieJar | None = None,
    open_timeout: float | None = DEFAULT_OPEN_TIMEOUT,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    compression: bool = False,
    ping_interval: float | None = DEFAULT_PING_INTERVAL,
    close_timeout: float | None = DEFAULT_CLOSE_TIMEOUT,
    ssl: ssl_module.SSLContext | None = None,
) -> WebSocketTransport:
    """Open a WebSocket to an ACP agent; return the transport for ``SyncClient`` (or a raw
    ``Connection``).

    ``headers`` are sent with the upgrade request (``Authorization``...). ``cookies``: a
    :class:`http.cookiejar.CookieJar` whose cookies for this URL go with the upgrade and which
    keeps the ones the server (or a load balancer in front of it) sets; pass the same jar when
    reconnecting to land on the same backend. Raises
    :class:`RemoteConnectionError` when the server is unreachable or refuses the upgrade (its
    ``status`` is then the HTTP status, e.g. 401 or 403), ``ValueError`` for a malformed URL.
    ``compression`` offers permessage-deflate (worth it on slow links; it costs CPU and about
    100 KiB per connection). Keepalive pings every ``ping_interval`` seconds detect a dead peer.
    """
    open_ws: Callable[..., ClientConnection] = _ws_connect  # legacy=True: the connection itself
    options = connect_options(
        url, headers, cookies, open_timeout, max_message_bytes, compression, ping_interval, close_timeout, ssl
    )
    try:
        ws = open_ws(url, **options, **_CONNECT_LEGACY)
    except Exception as exc:
        raise connect_error(url, exc) from exc
    connection_id = connected(url, ws.response, cookies)
    return WebSocketTransport(ws, description=f"websocket {url}", connection_id=connection_id)


# The pure pieces of connecting, shared with acp.aio.transport.websocket (same options, same errors).


def connect_options(
    url: str,
    headers: Mapping[str, str] | Iterable[tuple[str, str]] | None,
    cookies: CookieJar | None,
    open_timeout: float | None,
    max_message_bytes: int,
    compression: bool,
    ping_interval: float | None,
    close_timeout: float | None,
    ssl: ssl_module.SSLContext | None,
) -> dict[str, Any]:
    """The keyword arguments of the library's ``connect`` (sync or asyncio) for these options."""
    if cookies is not None:
        cookie = cookie_header(cookies, url)
        if cookie:
            extra = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
            headers = [*extra, ("Cookie", cookie)]
    return {
        "additional_headers": headers,
        "open_timeout": open_timeout,
        "max_size": max_message_bytes,
        "compression": "deflate" if compression else None,
        "ping_interval": ping_interval,
        "ping_timeout": ping_interval,
        "close_timeout": close_timeout,
        "ssl": ssl,
        "logger": _lib_log,
    }


def connect_error(url: str, exc: Exception) -> Exception:
    """What a failed opening handshake raises: ``ValueError`` for a malformed URL, else
    :class:`RemoteConnectionError` (with the HTTP status of a refused upgrade)."""
    if isinstance(exc, InvalidURI):
        return ValueError(f"invalid WebSocket URL {url!r}: {exc}")
    if isinstance(exc, InvalidStatus):
        refusal = exc.response
        body = refusal.body.decode("utf-8", "replace").strip() if refusal.body else ""
        reason = f"HTTP {refusal.status_code} {refusal.reason_phrase}"
        if body:
            reason += f": {body[:200]}"
        return RemoteConnectionError(url, reason, refusal.status_code)
    if isinstance(exc, (OSError, TimeoutError)):
        return RemoteConnectionError(url, str(exc) or type(exc).__name__)
    # InvalidHandshake, InvalidMessage, proxy errors...
    return RemoteConnectionError(url, f"{type(exc).__name__}: {exc}")


def connected(url: str, response: Response | None, cookies: CookieJar | None) -> str | None:
    """After the upgrade: keep the cookies it set; return its ``Acp-Connection-Id``."""
    connection_id = response.headers.get(CONNECTION_ID_HEADER) if response is not None else None
    if cookies is not None and response is not None:
        store_cookies(cookies, url, response.headers.get_all("Set-Cookie"))
    _log.debug("connected to %s (connection id %s)", url, connection_id)
    return connection_id


# ------------------------------------------------------------------------------------ server


class WebSocketServer(BackgroundServer):
    """A running WebSocket server for one :class:`~acp.agent.SyncAgent`
    (``SyncAgent.serve_websocket`` makes it).

    It accepts in a background thread from construction on. ``port`` / ``url`` say where;
    :meth:`serve_forever` blocks until :meth:`close`; ``with`` closes it. Every accepted
    WebSocket is served by ``agent.connect(transport)``: one :class:`~acp.agent.AgentConnection`
    each, nothing shared between them but the agent's handlers.

    Refusals at the upgrade: a path other than ``path`` -> 404; an ``Origin`` not allowed ->
    403; ``authenticate`` refusing -> its status; ``max_connections`` open already, or the
    server closing -> 503.
    """

    def __init__(
        self,
        agent: ConnectionServer,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        path: str | None = "/acp",
        origins: Iterable[str] | None = None,
        authenticate: Authenticator | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        idle_timeout: float | None = None,
        compression: bool = False,
        ping_interval: float | None = DEFAULT_PING_INTERVAL,
        open_timeout: float | None = DEFAULT_OPEN_TIMEOUT,
        close_timeout: float | None = DEFAULT_CLOSE_TIMEOUT,
        ssl: ssl_module.SSLContext | None = None,
    ) -> None:
        if max_connections <= 0:
            raise ValueError("max_connections must be positive")
        if max_message_bytes <= 0:
            raise ValueError("max_message_bytes must be positive")
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError("idle_timeout must be positive or None")
        self._agent = agent
        self._path = path
        self._origins = OriginPolicy(origins)
        self._authenticate = authenticate
        self._max_connections = max_connections
        self._idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._reserved: set[ServerConnection] = set()  # upgraded (101 sent or being sent)
        self._handles: set[ServedConnection] = set()
        self._closing = False
        self._closed = threading.Event()
        self._close_lock = threading.Lock()
        self._server: Server = _ws_serve(
            self._handle,
            host,
            port,
            process_request=self._process_request,
            process_response=self._process_response,
            compression="deflate" if compression else None,
            max_size=max_message_bytes,
            ping_interval=ping_interval,
            ping_timeout=ping_interval,
            open_timeout=open_timeout,
            close_timeout=close_timeout,
            ssl=ssl,
            logger=_lib_log,
            server_header=None,
        )
        address = self._server.socket.getsockname()
        self.host: str = address[0]
        """The address bound."""
        self.port: int = address[1]
        """The port bound (the one the OS picked when ``port=0``)."""
        self._scheme = "wss" if ssl is not None else "ws"
        self._thread = threading.Thread(
            target=self._accept_loop, name=f"acp-ws-accept-{self.port}", daemon=True
        )
        self._thread.start()
        _log.info("serving %s on %s", getattr(agent, "name", type(agent).__name__), self.url)

    # -- public ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``ws://host:port/path`` to give to ``SyncClient.builder().connect(...)``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self._scheme}://{host}:{self.port}{self._path or '/'}"

    @property
    def connections(self) -> list[ServedConnection]:
        """The agent connections currently served over this server."""
        with self._lock:
            return list(self._handles)

    def close(self, timeout: float | None = 5.0, *, cancel: bool = True) -> None:
        """Stop accepting, then close every connection gracefully; idempotent.

        With ``cancel=True`` (the default) turns in flight are cancelled first, so their
        prompts are answered ``cancelled`` promptly; with ``cancel=False`` they may finish.
        Either way each connection gets up to ``timeout`` seconds to send its answers before
        its WebSocket is closed (code 1000; 1001 for one still opening).
        """
        with self._close_lock:
            if self._closed.is_set():
                return
            with self._lock:
                self._closing = True  # new upgrades are refused with 503 from now on
                handles = list(self._handles)
            _log.info("closing %s (%d connections)", self.url, len(handles))
            close_connections(handles, timeout, cancel)
            self._server.shutdown()  # closes the socket, any straggler, joins handler threads
            self._thread.join(timeout)
            self._closed.set()

    def __repr__(self) -> str:
        return f"<WebSocketServer {self.url}{' closed' if self.closed else ''}>"

    # -- internals ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        try:
            self._server.serve_forever()
        except Exception:  # pragma: no cover - the library logs and returns on socket errors
            _log.exception("%s: accept loop failed", self.url)

    def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        if self._path is not None and request.path.split("?", 1)[0] != self._path:
            return _refuse(conn, 404, "Not Found: the ACP endpoint is " + self._path)
        origin = request.headers.get("Origin")
        if not self._origins.allows(origin):
            _log.warning("refused a WebSocket from origin %r", origin)
            return _refuse(conn, 403, "Forbidden: origin not allowed")
        if self._authenticate is not None:
            status = check_auth(self._authenticate, request.headers)
            if status is not None:
                return _refuse(conn, status[0], status[1])
        with self._lock:
            if self._closing:
                return _refuse(conn, 503, "Service Unavailable: the server is closing")
        return None

    def _process_response(
        self, conn: ServerConnection, request: Request, response: Response
    ) -> Response | None:
        if response.status_code != http.HTTPStatus.SWITCHING_PROTOCOLS:
            return None
        with self._lock:
            if len(self._reserved) >= self._max_connections:
                # Drop reservations of upgrades that never reached the handler.
                self._reserved = {c for c in self._reserved if c.protocol.state is not State.CLOSED}
            if len(self._reserved) >= self._max_connections:
                _log.warning("refused a WebSocket: %d connections open", self._max_connections)
                return _refuse(conn, 503, "Service Unavailable: too many connections")
            self._reserved.add(conn)
        response.headers[CONNECTION_ID_HEADER] = str(uuid.uuid4())
        return None

    def _handle(self, ws: ServerConnection) -> None:
        """Runs on the library's per-connection thread for the WebSocket's whole life."""
        try:
            response = ws.response
            connection_id = response.headers.get(CONNECTION_ID_HEADER) if response else None
            transport = WebSocketTransport(
                ws,
                description=f"websocket {connection_id} from {_peer(ws)}",
                connection_id=connection_id,
                idle_timeout=self._idle_timeout,
            )
            # Listed before its first message can be answered: under the lock, so `connections`
            # never misses a connection whose peer already got its initialize answer.
            with self._lock:
                try:
                    handle = self._agent.connect(transport)
                except RuntimeError:  # the agent was closed
                    refused = True
                else:
                    refused = False
                    self._handles.add(handle)
            if refused:
                ws.close(1001, "agent closed")
                return
            _log.debug("%s: serving %s", handle.name, transport.description)
            try:
                handle.wait_closed()
            finally:
                with self._lock:
                    self._handles.discard(handle)
        finally:
            with self._lock:
                self._reserved.discard(ws)


def _refuse(conn: ServerConnection, status: int, message: str) -> Response:
    return conn.respond(status, message + "\n")


def _peer(ws: ServerConnection) -> str:
    try:
        address = ws.remote_address
        return f"{address[0]}:{address[1]}"
    except Exception:  # pragma: no cover - a socket already gone
        return "?"

