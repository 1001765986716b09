"""Shared pieces of the remote transports (``acp.transport.websocket``,
``acp.transport.http_client``, ``acp.transport.http_server``).

Nothing here imports a third-party library: the builder imports this module to remember a URL
and opens the connection in ``build()``, and only then is ``websockets`` (or ``httpx``) imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConnectionClosedError
from ..rpc import DEFAULT_MAX_LINE_BYTES, session_id_of

if TYPE_CHECKING:
    from http.cookiejar import CookieJar  # the cookie support imports it when used


__all__ = [
    "CONNECTION_ID_HEADER",
    "SESSION_ID_HEADER",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_OPEN_TIMEOUT",
    "RemoteConnectionError",
    "cookie_header",
    "session_id_of",
    "store_cookies",
]

#: The header naming one ACP connection (RFD "Streamable HTTP & WebSocket transport").
CONNECTION_ID_HEADER = "Acp-Connection-Id"
#: The header naming the session of a session-scoped HTTP request.
SESSION_ID_HEADER = "Acp-Session-Id"
#: Largest message accepted by default (same cap as a stdio line): big file contents pass.
DEFAULT_MAX_MESSAGE_BYTES = DEFAULT_MAX_LINE_BYTES
#: Seconds allowed for the TCP connect + TLS + upgrade handshake.
DEFAULT_OPEN_TIMEOUT = 10.0

_SCHEMES = {"ws": "websocket", "wss": "websocket", "http": "http", "https": "http"}


class RemoteConnectionError(ConnectionClosedError):
    """A remote connection could not be opened.

    The server was unreachable (``status`` is None; the cause is chained), or it answered the
    handshake with an HTTP error (``status`` is that code: 401, 403, 404, 503...). A subclass of
    :class:`~acp.errors.ConnectionClosedError`, so code that handles a vanished peer handles
    this too.
    """

    def __init__(self, url: str, reason: str, status: int | None = None) -> None:
        self.url = url
        self.status = status
        self.reason = reason
        super().__init__(f"cannot connect to {url}: {reason}")


def kind(url: str) -> str:
    """``"websocket"`` for a ``ws://`` / ``wss://`` URL, ``"http"`` for ``http://`` /
    ``https://`` (Streamable HTTP); ``ValueError`` for anything else."""
    if not isinstance(url, str):
        raise TypeError(f"a URL must be a str (got {type(url).__name__})")
    from urllib.parse import urlsplit  # here: urllib.parse (and ipaddress) cost ~1.5 ms to import

    parts = urlsplit(url)
    transport = _SCHEMES.get(parts.scheme.lower())
    if transport is None:
        raise ValueError(
            f"unsupported URL {url!r}: use ws://, wss:// (WebSocket), http:// or https:// "
            "(Streamable HTTP), e.g. ws://127.0.0.1:8765/acp"
        )
    if not parts.hostname:
        raise ValueError(f"URL without a host: {url!r}")
    return transport


# Cookies (the RFD: clients keep the cookies a server sets, for the connection's lifetime, so a
# load balancer can pin a connection to one backend). A standard-library CookieJar holds them;
# WebSocket URLs are judged as their HTTP twins (ws -> http, wss -> https).


def _http_url(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme.lower(), parts.scheme)
    return parts._replace(scheme=scheme).geturl()


def cookie_header(jar: CookieJar, url: str) -> str | None:
    """The ``Cookie`` header ``jar`` holds for ``url``, or None."""
    import urllib.request

    request = urllib.request.Request(_http_url(url))
    jar.add_cookie_header(request)
    return request.get_header("Cookie")


def store_cookies(jar: CookieJar, url: str, set_cookie: list[str]) -> None:
    """Keep in ``jar`` the ``Set-Cookie`` values a response to ``url`` carried."""
    if not set_cookie:
        return
    import email.message
    import urllib.request

    request = urllib.request.Request(_http_url(url))
    headers = email.message.Message()
    for value in set_cookie:
        headers["Set-Cookie"] = value

    class _Response:
        def info(self) -> email.message.Message:
            return headers

    jar.extract_cookies(_Response(), request)  # type: ignore[arg-type]
