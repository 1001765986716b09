"""ACP over WebSocket for the asyncio runtime: the client side, on ``websockets.asyncio``.

Install the extra: ``pip install 'acp-sync[ws]'``. The wire is the one of
:mod:`acp.transport.websocket` (the same options, the same errors, the same framing: each line
written is one text frame, each text frame received is one line, binary frames are dropped):
the pure pieces are imported from there. Nothing here starts a thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from http.cookiejar import CookieJar
from typing import TYPE_CHECKING

from ..._extras import need

with need("ws", "WebSocket"):
    from websockets.asyncio.client import ClientConnection
    from websockets.asyncio.client import connect as _ws_connect
    from websockets.exceptions import ConnectionClosed
    from websockets.protocol import State

from ...errors import ConnectionClosedError
from ...transport._remote import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_OPEN_TIMEOUT
from ...transport.websocket import (
    DEFAULT_CLOSE_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    closed_reason,
    connect_error,
    connect_options,
    connected,
    frame_line,
)

if TYPE_CHECKING:
    import ssl as ssl_module

__all__ = ["AsyncWebSocketTransport", "connect_websocket"]

_log = logging.getLogger("acp.aio.transport.websocket")


class AsyncWebSocketTransport:
    """An :class:`~acp.aio.transport.AsyncTransport` over one open asyncio WebSocket.

    ``read`` returns one received text frame as one ``\\n``-terminated line; ``write`` frames
    each line at once (the socket's buffer takes it; :meth:`drain` waits for it to shrink).
    WebSocket has no half-close, so :meth:`close_write` closes the whole WebSocket.
    """

    def __init__(self, ws: ClientConnection, *, description: str = "websocket", connection_id: str | None = None) -> None:
        self._ws = ws
        self._description = description
        self.connection_id = connection_id
        """The ``Acp-Connection-Id`` of this connection (None if the server sent none)."""
        self._closed = False
        self._write_closed = False
        self._eof = False
        self._closing: asyncio.Future[None] | None = None  # close_write's handshake

    @property
    def description(self) -> str:
        """A short name for logs, e.g. ``"websocket ws://127.0.0.1:8765/acp"``."""
        return self._description

    @property
    def websocket(self) -> ClientConnection:
        """The underlying ``websockets`` connection (headers, remote address, latency...)."""
        return self._ws

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called or the WebSocket closed."""
        return self._closed or self._eof

    async def read(self) -> bytes:
        """Wait for the next text frame; ``b""`` once the WebSocket is closed."""
        while not (self._closed or self._eof):
            try:
                message = await self._ws.recv()
            except ConnectionClosed as exc:
                if not self._eof:
                    self._eof = True
                    _log.debug("%s: %s", self._description, closed_reason(exc))
                break
            line = frame_line(message, self._description)
            if line is not None:
                return line
        return b""

    def write(self, data: bytes | bytearray) -> None:
        """Send each ``\\n``-terminated line of ``data`` as one text frame, now.

        Raises :class:`~acp.errors.ConnectionClosedError` once the WebSocket is closed (or
        closing).
        """
        if self._write_closed or self._closed:
            raise ConnectionClosedError(f"{self._description}: transport is closed")
        ws = self._ws
        protocol = ws.protocol
        if protocol.state is not State.OPEN:
            reason = closed_reason(ConnectionClosed(protocol.close_rcvd, protocol.close_sent))
            raise ConnectionClosedError(f"{self._description}: {reason}")
        debug = _log.isEnabledFor(logging.DEBUG)
        for line in bytes(data).split(b"\n"):
            if line and not line.isspace():
                if debug:
                    _log.debug("%s > %r", self._description, line[:2000])
                protocol.send_text(line)
        # What the library's own send() does inside its send_context, minus the await: the
        # frames go to the socket's buffer in the order written; drain() is the flow control.
        try:
            ws.send_data()
        except Exception as exc:  # the socket failed under the write: it is gone
            ws.transport.abort()
            raise ConnectionClosedError(f"{self._description}: {exc!r}") from exc

    async def drain(self) -> None:
        """Wait until the socket's write buffer is below its high-water mark."""
        try:
            await self._ws.drain()
        except OSError as exc:
            raise ConnectionClosedError(f"{self._description}: {exc!r}") from exc

    def close_write(self) -> None:
        """No more writes. WebSocket has no half-close: this starts closing the WebSocket (code
        1000), so the peer reads end of input, and so does :meth:`read` once it is closed."""
        if self._write_closed:
            return
        self._write_closed = True
        self._closing = asyncio.ensure_future(self._close_ws())

    async def close(self) -> None:
        """Close the WebSocket (closing handshake, bounded by the close timeout); a pending
        :meth:`read` returns ``b""``. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._write_closed = True
        await (self._closing if self._closing is not None else self._close_ws())
        _log.debug("%s: closed", self._description)

    async def _close_ws(self) -> None:
        try:
            await self._ws.close()
        except Exception as exc:  # a socket error while closing: it is closed either way
            _log.debug("%s: error while closing: %r", self._description, exc)

    def __repr__(self) -> str:
        return f"<AsyncWebSocketTransport {self._description}{' closed' if self.closed else ''}>"


async def connect_websocket(
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
) -> AsyncWebSocketTransport:
    """Open a WebSocket to an ACP agent; return the transport for ``AsyncClient`` (or a raw
    ``AsyncConnection``). The options and errors of :func:`acp.transport.websocket.connect_websocket`:
    :class:`~acp.transport.websocket.RemoteConnectionError` when the server is unreachable or
    refuses the upgrade (its ``status`` the HTTP status), ``ValueError`` for a malformed URL.
    """
    options = connect_options(
        url, headers, cookies, open_timeout, max_message_bytes, compression, ping_interval, close_timeout, ssl
    )
    try:
        ws = await _ws_connect(url, **options)
    except Exception as exc:
        raise connect_error(url, exc) from exc
    connection_id = connected(url, ws.response, cookies)
    return AsyncWebSocketTransport(ws, description=f"websocket {url}", connection_id=connection_id)
