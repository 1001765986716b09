"""ACP over Streamable HTTP, the client side, on ``httpx``'s sync client.

Install the extra: ``pip install 'acp-sync[http]'``. Importing :mod:`acp` never imports ``httpx``;
this module does, when it is imported.

The wire (RFD "Streamable HTTP & WebSocket transport"), one endpoint (``/acp``):

- every message the client sends is one ``POST`` with a JSON body. ``initialize`` is answered
  ``200`` with the JSON-RPC answer as the body and an ``Acp-Connection-Id`` header; every later
  ``POST`` carries that header (and ``Acp-Session-Id`` when the message names a session) and is
  answered ``202`` at once;
- everything the agent sends (answers, notifications, its own requests) arrives on one
  long-lived ``GET`` stream of server-sent events, opened right after ``initialize``;
- ``DELETE`` ends the connection.

The connection engine speaks newline-delimited lines, so :class:`HttpTransport` adapts: each line
written becomes one ``POST`` (in order: a ``POST`` returns before the next is sent, so the agent
reads the messages in the order they were written), and each event read from the stream becomes
one line. Cookies the server or a load balancer sets are kept for the connection's lifetime and
sent back on every request (the RFD requires it; it is how sticky sessions work).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
from collections.abc import Iterator, Mapping
from http.cookiejar import CookieJar
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar

from .._extras import need

with need("http", "the Streamable HTTP client"):
    import httpx
import msgspec

from ..errors import INTERNAL_ERROR, ConnectionClosedError
from ..rpc import messages as rpc
from ._remote import (
    CONNECTION_ID_HEADER,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_OPEN_TIMEOUT,
    SESSION_ID_HEADER,
    RemoteConnectionError,
    session_id_of,
)
from .base import READ_CHUNK

if TYPE_CHECKING:
    import ssl as ssl_module

__all__ = ["DEFAULT_REQUEST_TIMEOUT", "HttpTransport", "SseParser", "connect_http"]

_log = logging.getLogger("acp.transport.http")

#: Seconds one POST may take (the server answers 202 at once; this bounds a stuck server).
DEFAULT_REQUEST_TIMEOUT = 30.0
#: Seconds of silence on the event stream before the server is taken for dead (servers send a
#: keep-alive comment every 15 s).
DEFAULT_STREAM_TIMEOUT = 120.0

#: The RFD: clients SHOULD send the negotiated protocol version on every request after initialize.
PROTOCOL_VERSION_HEADER = "Acp-Protocol-Version"

_JSON = "application/json"
_SSE = "text/event-stream"
_INITIALIZE = "initialize"
_EOF = b""


class SseParser:
    """Incremental parser of a ``text/event-stream`` body: bytes in, one JSON line per event out.

    Only ``data:`` fields matter (several in one event are joined, as the SSE standard says);
    comments (keep-alives), ``event:``, ``id:`` and ``retry:`` are skipped. A line break inside
    the data of one event is read as a space, so the engine sees one message per line.
    """

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self._max = max_event_bytes
        self._tail = b""
        self._data: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        """Parse ``chunk``; return the events it completed, each a ``\\n``-terminated line.

        Raises ``ValueError`` when one event grows past ``max_event_bytes``.
        """
        buf = self._tail + chunk if self._tail else chunk
        lines = buf.split(b"\n")
        self._tail = lines.pop()
        if len(self._tail) > self._max:
            raise ValueError(f"an event of more than {self._max} bytes")
        out: list[bytes] = []
        data = self._data
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:  # a blank line ends the event
                if data:
                    out.append(b" ".join(data) + b"\n")
                    data.clear()
                    self._size = 0
                continue
            if line.startswith(b"data:"):
                value = line[6:] if line[5:6] == b" " else line[5:]
                self._size += len(value)
                if self._size > self._max:
                    raise ValueError(f"an event of more than {self._max} bytes")
                data.append(value)
            # ":" comments and the other fields are not ACP's business
        return out


ClientT = TypeVar("ClientT", httpx.Client, httpx.AsyncClient)


class _Flag(Protocol):
    def set(self) -> None: ...


class _Post(NamedTuple):
    msg: rpc.Message
    headers: dict[str, str]
    initialize: bool  # the first POST: no connection yet
    open_first: str | None  # a session whose stream must be open before this POST


class HttpWire(Generic[ClientT]):
    """What both Streamable HTTP transports (:class:`HttpTransport` here, on threads, and
    ``acp.aio.transport.http_client``'s, on the event loop) decide without doing I/O: the
    headers of every request, what each answer means, which stream an event came on.

    A subclass does the I/O over ``client`` (an ``httpx.Client`` or ``httpx.AsyncClient``),
    sets up its own state in :meth:`_init_io`, gives read() what arrives through :meth:`_put`
    (``b""`` ends the reads); :meth:`_stop_streams` cuts its event streams.
    """

    def __init__(
        self,
        url: str,
        client: ClientT,
        *,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        stream_timeout: float | None = DEFAULT_STREAM_TIMEOUT,
        open_timeout: float | None = DEFAULT_OPEN_TIMEOUT,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        session_streams: bool = False,
    ) -> None:
        self._url = url
        self._client: ClientT = client
        self._post_timeout = httpx.Timeout(request_timeout, connect=open_timeout)
        self._stream_timeout = httpx.Timeout(stream_timeout, connect=open_timeout)
        self._max = max_message_bytes
        self._description = f"http {url}"
        self.connection_id: str | None = None
        """The ``Acp-Connection-Id`` the server gave at ``initialize`` (None before)."""
        self._closed = False
        self._write_closed = False
        self._deleted = False
        self._protocol_version: str | None = None  # sent as Acp-Protocol-Version once known
        # Session-scoped streams (opt-in, for servers of the RFD's earlier revision).
        self._session_streams = session_streams
        self._opened: set[str] = set()
        self._asked_on: dict[object, str] = {}  # agent request id -> the session stream it came on
        self._init_io()

    @property
    def description(self) -> str:
        """A short name for logs, e.g. ``"http http://127.0.0.1:8765/acp"``."""
        return self._description

    @property
    def url(self) -> str:
        """The endpoint."""
        return self._url

    @property
    def cookies(self) -> httpx.Cookies:
        """The cookies kept for this connection."""
        return self._client.cookies

    # -- what the subclass does --------------------------------------------------------------

    def _init_io(self) -> None:
        """Set up the subclass's own state (called at the end of ``__init__``)."""
        raise NotImplementedError

    def _put(self, data: bytes) -> None:
        """Give read() ``data`` (whole lines); ``b""``: the end."""
        raise NotImplementedError

    def _stop_streams(self) -> None:
        """Cut the event streams (the server is gone)."""
        raise NotImplementedError

    # -- POST --------------------------------------------------------------------------------

    def _prepare(self, line: bytes) -> _Post:
        decoded = rpc.decode_line(line)  # our own encoding: one message, never a batch
        msg = decoded[0] if isinstance(decoded, list) else decoded
        initialize = self.connection_id is None
        headers = {"Content-Type": _JSON, "Accept": _JSON}
        if not initialize:
            headers.update(self._connection_headers())
        session_id: str | None = None
        if isinstance(msg, (rpc.Request, rpc.Notification)):
            session_id = session_id_of(msg.params)
        elif self._session_streams and isinstance(msg, (rpc.Response, rpc.ErrorResponse)):
            session_id = self._asked_on.pop(msg.id, None)
        open_first: str | None = None
        if session_id is not None:
            headers[SESSION_ID_HEADER] = session_id
            if self._session_streams and not initialize and session_id not in self._opened:
                self._opened.add(session_id)
                open_first = session_id
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("%s > %r", self._description, line[:2000])
        return _Post(msg, headers, initialize, open_first)

    def _failed(self, exc: httpx.HTTPError, post: _Post) -> ConnectionClosedError:
        """The error to raise when a POST did not get through."""
        reason = str(exc) or type(exc).__name__
        if post.initialize:
            self._end()
            return RemoteConnectionError(self._url, reason)
        self._lost(reason)
        return ConnectionClosedError(f"{self._description}: {reason}")

    def _answered(self, post: _Post, response: httpx.Response) -> bool:
        """Act on a POST's answer; True when it made the connection (open its event stream).
        Raises :class:`RemoteConnectionError` when initialize was refused, and
        :class:`~acp.errors.ConnectionClosedError` when the server no longer knows the
        connection."""
        status = response.status_code
        if post.initialize:
            return self._on_initialize_answer(post.msg, response)
        if status == 404:
            # The server no longer knows this connection (restarted, or reaped it as idle).
            self._lost("the server does not know this connection (HTTP 404)")
            raise ConnectionClosedError(f"{self._description}: connection unknown to the server (HTTP 404)")
        if 200 <= status < 300:
            body = response.content
            if body.strip():  # a server that answers inline: read it like the stream
                self._put(body if body.endswith(b"\n") else body + b"\n")
        else:
            self._refused(post.msg, response)
        return False

    def _on_initialize_answer(self, msg: rpc.Message, response: httpx.Response) -> bool:
        status = response.status_code
        if status != 200:
            self._end()
            raise RemoteConnectionError(self._url, _reason(response), status)
        body = response.content.strip()
        connection_id = response.headers.get(CONNECTION_ID_HEADER)
        if not connection_id:
            if isinstance(msg, rpc.Request) and msg.method == _INITIALIZE and body:
                # An error answer to initialize: no connection was made. The caller reads it.
                self._put(body + b"\n")
                self._end()
                return False
            self._end()
            raise RemoteConnectionError(self._url, f"the answer to {_method(msg)} has no {CONNECTION_ID_HEADER} header", 200)
        self.connection_id = connection_id
        self._protocol_version = _negotiated_version(body)
        self._description = f"http {self._url} ({connection_id})"
        _log.debug("%s: connected", self._description)
        if body:
            self._put(body + b"\n")
        return True

    def _refused(self, msg: rpc.Message, response: httpx.Response) -> None:
        reason = _reason(response)
        _log.warning("%s: %s refused: %s", self._description, _method(msg), reason)
        body = response.content.strip()
        if body[:1] == b"{" and response.headers.get("content-type", "").startswith("application/json"):
            if isinstance(rpc.decode_line(body), rpc.ErrorResponse):
                # The server answered in JSON-RPC terms (-32700 for a body that is not JSON...):
                # read that answer like any other.
                self._put(body + b"\n")
                return
        if isinstance(msg, rpc.Request):
            answer = rpc.Encoder().error(
                msg.id, INTERNAL_ERROR, f"the server refused {msg.method}: {reason}",
                {"httpStatus": response.status_code},
            )
            self._put(answer)

    def _connection_headers(self) -> dict[str, str]:
        assert self.connection_id is not None
        headers = {CONNECTION_ID_HEADER: self.connection_id}
        if self._protocol_version is not None:
            headers[PROTOCOL_VERSION_HEADER] = self._protocol_version
        return headers

    # -- GET (event streams) -----------------------------------------------------------------

    def _stream_headers(self, session_id: str | None) -> dict[str, str]:
        headers = {"Accept": _SSE, **self._connection_headers()}
        if session_id is not None:
            headers[SESSION_ID_HEADER] = session_id
        return headers

    @contextlib.contextmanager
    def _streaming(self, session_id: str | None, opened: _Flag) -> Iterator[None]:
        """Around one event stream's life: its end (or loss) logged, ``opened`` set whatever
        happens. The end of the connection's stream is the end of the connection; a session
        stream's is not."""
        scope = "" if session_id is None else f" of session {session_id}"
        try:
            yield
            _log.debug("%s: the server ended the event stream%s", self._description, scope)
        except (httpx.HTTPError, OSError, ValueError) as exc:
            if not self._closed:
                _log.warning("%s: event stream%s lost: %s", self._description, scope, str(exc) or type(exc).__name__)
        finally:
            opened.set()
            if session_id is None:
                self._put(_EOF)

    def _stream_refused(self, session_id: str | None, response: httpx.Response) -> None:
        scope = "" if session_id is None else f" of session {session_id}"
        _log.error("%s: the event stream%s was refused: %s", self._description, scope, _reason(response))

    def _feed_stream(self, parser: SseParser, chunk: bytes, session_id: str | None) -> None:
        """Parse what a stream delivered; give read() the events it completed."""
        events = parser.feed(chunk)
        if events:
            if _log.isEnabledFor(logging.DEBUG):
                for event in events:
                    _log.debug("%s < %r", self._description, event[:2000])
            if session_id is not None:
                self._note_requests(events, session_id)
            self._put(b"".join(events))

    def _note_requests(self, events: list[bytes], session_id: str) -> None:
        # The agent's requests that came on a session stream are answered with that session's
        # Acp-Session-Id (servers that route by session expect it).
        for event in events:
            if b'"method"' in event and b'"id"' in event:
                decoded = rpc.decode_line(event)
                if isinstance(decoded, rpc.Request):
                    self._asked_on[decoded.id] = session_id

    # -- the end -----------------------------------------------------------------------------

    def _must_delete(self) -> bool:
        """True once: when a DELETE is due (the connection exists and was not ended)."""
        if self._deleted or self.connection_id is None:
            return False
        self._deleted = True
        return True

    def _lost(self, reason: str) -> None:
        _log.warning("%s: connection lost: %s", self._description, reason)
        self._deleted = True  # nothing to delete on the server any more
        self._stop_streams()
        self._end()

    def _end(self) -> None:
        self._write_closed = True
        self._put(_EOF)


class HttpTransport(HttpWire[httpx.Client]):
    """A :class:`~acp.transport.Transport` over Streamable HTTP (see the module docstring).

    Made by :func:`connect_http` (or ``SyncClient.builder().connect("http://...")``) from the
    endpoint's URL and an ``httpx.Client``. ``connection_id`` is None until ``initialize`` was
    answered.
    """

    def _init_io(self) -> None:
        self._inbound: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._eof = False  # read() saw the end
        self._lock = threading.Lock()
        self._readers: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []

    # -- Transport ---------------------------------------------------------------------------

    def read(self) -> bytes:
        """Block until the agent sent something; ``b""`` once the connection ended."""
        if self._eof:
            return _EOF
        item = self._inbound.get()
        if item is _EOF or not item:
            self._eof = True
            return _EOF
        parts = [item]
        size = len(item)
        while size < READ_CHUNK:  # whatever else is queued goes with it: one engine wake-up
            try:
                more = self._inbound.get_nowait()
            except queue.Empty:
                break
            if not more:
                self._inbound.put(_EOF)  # seen by the next read()
                break
            parts.append(more)
            size += len(more)
        return b"".join(parts) if len(parts) > 1 else item

    def write(self, data: bytes | bytearray) -> None:
        """POST each line of ``data``, in order.

        Raises :class:`RemoteConnectionError` when ``initialize`` cannot be delivered (the
        server is unreachable or refused it, with its HTTP ``status``), and
        :class:`~acp.errors.ConnectionClosedError` once the connection is closed or lost.
        A request the server refuses (4xx/5xx) is answered locally with a JSON-RPC error that
        carries the HTTP status, so its caller gets a ``RequestError`` instead of waiting.
        """
        if self._write_closed or self._closed:
            raise ConnectionClosedError(f"{self._description}: transport is closed")
        for line in bytes(data).split(b"\n"):
            if line and not line.isspace():
                self._post(line)

    def close_write(self) -> None:
        """End the connection (``DELETE``): the server closes it, answers what it can, and
        ends the event stream, so :meth:`read` returns ``b""``. Idempotent."""
        with self._lock:
            if self._write_closed:
                return
            self._write_closed = True
        self._delete()
        if self.connection_id is None:
            self._inbound.put(_EOF)  # no stream was ever opened: nothing else will end reads

    def close(self) -> None:
        """``DELETE`` the connection (if not yet), stop the event stream, release the HTTP
        client. A :meth:`read` blocked in another thread returns ``b""``; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._write_closed = True
        self._delete()
        readers = [r for r in self._readers if r is not threading.current_thread()]
        for reader in readers:
            reader.join(2.0)  # the server ends the streams after DELETE
        if any(r.is_alive() for r in readers):
            self._shutdown_stream()  # unreachable server: cut the sockets under the reads
            for reader in readers:
                reader.join()
        self._client.close()
        self._inbound.put(_EOF)
        _log.debug("%s: closed", self._description)

    # -- internals ---------------------------------------------------------------------------

    def _put(self, data: bytes) -> None:
        self._inbound.put(data)

    def _stop_streams(self) -> None:
        self._shutdown_stream()

    def _post(self, line: bytes) -> None:
        post = self._prepare(line)
        if post.open_first is not None:
            self._open_stream(post.open_first)
        try:
            response = self._client.post(self._url, content=line, headers=post.headers, timeout=self._post_timeout)
        except httpx.HTTPError as exc:
            raise self._failed(exc, post) from exc
        if self._answered(post, response):
            self._open_stream(None)

    def _open_stream(self, session_id: str | None) -> None:
        """Start the thread of the connection's event stream, or of one session's (then wait
        until the server accepted it, so what the next POST causes is routed to it)."""
        opened = threading.Event()
        assert self.connection_id is not None
        name = f"acp-http-stream-{self.connection_id[:8]}" + (f"-{session_id[:8]}" if session_id else "")
        reader = threading.Thread(target=self._read_stream, args=(session_id, opened), name=name, daemon=True)
        self._readers.append(reader)
        reader.start()
        if session_id is not None:
            opened.wait(self._stream_timeout.connect)

    def _read_stream(self, session_id: str | None, opened: threading.Event) -> None:
        """An event stream's thread: parse events into lines for :meth:`read`."""
        parser = SseParser(self._max)
        with self._streaming(session_id, opened):
            headers = self._stream_headers(session_id)
            with self._client.stream("GET", self._url, headers=headers, timeout=self._stream_timeout) as response:
                if response.status_code != 200:
                    _read_quietly(response)
                    self._stream_refused(session_id, response)
                    return
                stream = response.extensions.get("network_stream")
                if stream is not None:
                    sock = stream.get_extra_info("socket")
                    if sock is not None:
                        self._sockets.append(sock)
                opened.set()
                if self._closed:
                    return
                for chunk in response.iter_bytes():
                    self._feed_stream(parser, chunk, session_id)

    def _delete(self) -> None:
        with self._lock:
            if not self._must_delete():
                return
        try:
            self._client.delete(self._url, headers=self._connection_headers(), timeout=self._post_timeout)
        except httpx.HTTPError as exc:
            _log.debug("%s: DELETE failed: %r", self._description, exc)

    def _shutdown_stream(self) -> None:
        for sock in list(self._sockets):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"<HttpTransport {self._description}{' closed' if self._closed else ''}>"


class _InitializeAnswer(msgspec.Struct):
    result: dict[str, Any] = {}


def _negotiated_version(body: bytes) -> str | None:
    try:
        version = msgspec.json.decode(body, type=_InitializeAnswer).result.get("protocolVersion")
    except (msgspec.DecodeError, RecursionError):
        return None
    return str(version) if isinstance(version, int) and not isinstance(version, bool) else None


def _method(msg: rpc.Message) -> str:
    if isinstance(msg, (rpc.Request, rpc.Notification)):
        return msg.method
    return "an answer"


def _read_quietly(response: httpx.Response) -> None:
    # A refusal's body, for the log; a stream that breaks meanwhile just has none.
    try:
        response.read()
    except httpx.HTTPError:
        pass


def _reason(response: httpx.Response) -> str:
    reason = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
    try:
        body = response.content.decode("utf-8", "replace").strip()
    except httpx.ResponseNotRead:
        body = ""
    if body:
        reason += f": {body[:200]}"
    return reason


def connect_http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    cookies: CookieJar | None = None,
    open_timeout: float | None = DEFAULT_OPEN_TIMEOUT,
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    stream_timeout: float | None = DEFAULT_STREAM_TIMEOUT,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    http2: bool = False,
    verify: bool | str | ssl_module.SSLContext = True,
    check: bool = True,
    session_streams: bool = False,
) -> HttpTransport:
    """Open a Streamable HTTP connection to an ACP agent at ``url`` (``http(s)://host:port/acp``).

    ``headers`` go with every request (``Authorization``...). ``cookies``: a
    :class:`http.cookiejar.CookieJar` to use (and fill) for this connection; pass the same jar
    when reconnecting to land on the same backend behind a sticky load balancer. ``http2``:
    speak HTTP/2 (the RFD asks for it; needs ``pip install 'httpx[http2]'``): negotiated by ALPN
    over ``https``, with prior knowledge over plain ``http``. ``verify``: TLS verification (a CA
    bundle path or an ``ssl.SSLContext``). ``check``: probe the endpoint now, so an unreachable
    server, a wrong path or a refused credential raises :class:`RemoteConnectionError` here
    rather than at ``initialize``. ``session_streams``: besides the connection's event stream,
    open one per session (a ``GET`` with ``Acp-Session-Id``, before the first message about that
    session) and answer the agent's requests with the session of the stream they came on: the
    RFD's earlier revision, which the official Python and TypeScript SDK servers (0.12 / 2.4)
    still follow (they send a session's traffic only on its own stream).
    """
    client = httpx.Client(**client_options(url, headers, cookies, open_timeout, request_timeout, http2, verify))
    try:
        if check:
            _probe(client, url, open_timeout)
    except BaseException:
        client.close()
        raise
    return HttpTransport(
        url,
        client,
        request_timeout=request_timeout,
        stream_timeout=stream_timeout,
        open_timeout=open_timeout,
        max_message_bytes=max_message_bytes,
        session_streams=session_streams,
    )


def client_options(
    url: str,
    headers: Mapping[str, str] | None,
    cookies: CookieJar | None,
    open_timeout: float | None,
    request_timeout: float | None,
    http2: bool,
    verify: bool | str | ssl_module.SSLContext,
) -> dict[str, Any]:
    """The keyword arguments of ``httpx.Client`` (or ``httpx.AsyncClient``) for these options."""
    base_headers = {"User-Agent": "acp-sync"}
    base_headers.update(headers or {})
    return {
        "headers": base_headers,
        "cookies": cookies,
        "http1": not (http2 and url.lower().startswith("http:")),
        "http2": http2,
        "verify": verify,
        "timeout": httpx.Timeout(request_timeout, connect=open_timeout),
        "follow_redirects": False,
    }


def _probe(client: httpx.Client, url: str, timeout: float | None) -> None:
    # A GET without a connection id: an ACP endpoint answers 400 (RFD); a refused credential
    # gives 401/403, a wrong path 404, an overloaded server 503. Cookies it sets are kept.
    try:
        response = client.get(url, headers={"Accept": _SSE}, timeout=timeout)
    except httpx.HTTPError as exc:
        raise RemoteConnectionError(url, str(exc) or type(exc).__name__) from exc
    check_probe(url, response)


def check_probe(url: str, response: httpx.Response) -> None:
    status = response.status_code
    if status in (401, 403, 404, 407) or status >= 500:
        raise RemoteConnectionError(url, _reason(response), status)
