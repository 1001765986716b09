"""What every ACP server endpoint checks before it serves a connection, whatever the profile
(WebSocket upgrade, Streamable HTTP request): the Origin, the authentication hook, and the
refusal they produce. No third-party import: both ``acp.transport.websocket`` (websockets) and
``acp.transport.http_server`` (plain ASGI) use it.
"""

from __future__ import annotations

import http
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, Union
from urllib.parse import urlsplit

from typing_extensions import Self

from .. import interruptible

if TYPE_CHECKING:
    from ..aio.transport.base import AsyncTransport
    from .base import Transport

__all__ = [
    "AsyncConnectionServer",
    "AsyncServedConnection",
    "Authenticator",
    "BackgroundServer",
    "ConnectionServer",
    "Headers",
    "OriginPolicy",
    "RefuseConnection",
    "ServedConnection",
    "check_auth",
    "close_connection",
    "close_connections",
]

_log = logging.getLogger("acp.transport")

_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class ServedConnection(Protocol):
    """What a server needs of one served connection (``acp.agent.AgentConnection`` is one).
    Declared here so the transport layer never depends on the agent layer above it."""

    name: str

    def wait_closed(self, timeout: float | None = None) -> bool: ...

    def cancel_turns(self) -> None: ...

    def close(self, graceful: bool = False, timeout: float | None = 5.0) -> None: ...


class ConnectionServer(Protocol):
    """Something that serves a connection over a transport (``acp.SyncAgent`` is one)."""

    def connect(self, transport: Transport) -> ServedConnection: ...


class AsyncServedConnection(Protocol):
    """What the ASGI endpoint needs of one connection served on its event loop
    (``acp.AsyncAgent``'s connections are such)."""

    async def wait_closed(self, timeout: float | None = None) -> bool: ...

    def cancel_turns(self) -> None: ...

    async def close(self, graceful: bool = False, timeout: float | None = 5.0) -> None: ...


class AsyncConnectionServer(Protocol):
    """Something that serves a connection over an asyncio transport, on the running loop
    (``acp.AsyncAgent`` is one). ``AcpAsgiApp`` tells it from a :class:`ConnectionServer` by
    its ``connect_async``."""

    async def connect_async(self, transport: AsyncTransport) -> AsyncServedConnection: ...


class RefuseConnection(Exception):
    """Raised by an ``authenticate`` callback to refuse the connection with ``status``
    (default 401) and a short plain-text ``message`` for the client."""

    def __init__(self, status: int = 401, message: str = "") -> None:
        self.status = int(status)
        self.message = message or http.HTTPStatus(self.status).phrase
        super().__init__(f"{self.status} {self.message}")


Authenticator = Callable[[Mapping[str, str]], Union[None, bool, int]]
"""``authenticate(headers)``: the request's headers (case-insensitive). Return None (or True)
to accept; return False (401) or an HTTP status to refuse; or raise :class:`RefuseConnection`.
Any other exception refuses with 500 (and is logged)."""


def check_auth(authenticate: Authenticator, headers: Mapping[str, str]) -> tuple[int, str] | None:
    """Run the hook: None to accept, else the ``(status, message)`` to refuse with."""
    try:
        verdict = authenticate(headers)
    except RefuseConnection as exc:
        return exc.status, exc.message
    except Exception:
        _log.exception("authenticate failed; refusing the connection")
        return 500, "Internal Server Error"
    if verdict is None or verdict is True:
        return None
    status = 401 if verdict is False else int(verdict)
    if not 400 <= status <= 599:
        _log.error("authenticate returned %r; refusing with 500", verdict)
        status = 500
    return status, http.HTTPStatus(status).phrase


class OriginPolicy:
    """Which browser origins may connect. ``None``: only pages served from this machine.
    Browsers always send ``Origin``, so this stops a web page elsewhere from driving a local
    agent; non-browser clients send none and are judged by ``authenticate`` alone."""

    def __init__(self, origins: Iterable[str] | None) -> None:
        if isinstance(origins, str):
            raise TypeError("origins must be a collection of origins, not one string")
        self._origins = None if origins is None else frozenset(o.lower().rstrip("/") for o in origins)

    def allows(self, origin: str | None) -> bool:
        """True for a request without ``Origin`` or with an allowed one."""
        if origin is None:
            return True
        normalized = origin.lower().rstrip("/")
        if self._origins is None:
            return urlsplit(normalized).hostname in _LOOPBACK_HOSTS
        return "*" in self._origins or normalized in self._origins


class Headers(Mapping[str, str]):
    """Request headers as a case-insensitive read-only mapping (repeated headers joined with
    ``", "``), built from ASGI's list of ``(name, value)`` byte pairs."""

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        items: dict[str, str] = {}
        for name, value in raw:
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
            items[key] = f"{items[key]}, {text}" if key in items else text
        self._items = items

    def __getitem__(self, key: str) -> str:
        return self._items[key.lower()]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


class BackgroundServer:
    """What the servers that run in background threads share (``WebSocketServer``,
    ``HttpServer``): :meth:`serve_forever`, :attr:`closed` and ``with``. A subclass sets
    ``self._closed`` when its :meth:`close` has finished."""

    _closed: threading.Event

    def close(self, timeout: float | None = 5.0, *, cancel: bool = True) -> None:
        """Stop serving (see the subclass)."""
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        """True once :meth:`close` finished."""
        return self._closed.is_set()

    def serve_forever(self) -> None:
        """Block until :meth:`close` (from another thread, or a signal handler) finished.
        A ``KeyboardInterrupt`` closes the server, then propagates."""
        try:
            interruptible.wait_event(self._closed, None)
        except KeyboardInterrupt:
            self.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def close_connection(handle: ServedConnection, timeout: float | None, cancel: bool) -> None:
    """Close one served connection gracefully; with ``cancel`` its turns are cancelled first,
    so their prompts are answered ``cancelled`` before the transport closes."""
    try:
        if cancel:
            handle.cancel_turns()
        handle.close(graceful=True, timeout=timeout)
    except Exception:
        _log.exception("%s: close failed", handle.name)


def close_connections(handles: list[ServedConnection], timeout: float | None, cancel: bool) -> None:
    """Close every connection at once (one thread each), so the total time is one ``timeout``."""
    closers = [
        threading.Thread(target=close_connection, args=(h, timeout, cancel), name=f"acp-close-{h.name}")
        for h in handles
    ]
    for closer in closers:
        closer.start()
    for closer in closers:
        closer.join()
