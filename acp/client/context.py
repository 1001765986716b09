"""What a client handler sees of the agent request it is answering."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol

from typing_extensions import TypeVar

__all__ = ["AgentProxy", "CallView", "ClientRequestContext"]

_USE_DEFAULT: Any = object()

#: The client type a handler's context refers to: ``ClientRequestContext[SyncClient]`` types
#: ``ctx.client`` exactly; bare, it is ``Any`` (this module is below the clients: it imports
#: neither).
ClientT = TypeVar("ClientT", default=Any)


class CallView(Protocol):
    """What a context reads of the engine's inbound call (``acp.InboundCall``, or the asyncio
    runtime's thread-safe view of its call)."""

    @property
    def method(self) -> str: ...
    @property
    def id(self) -> Any: ...
    @property
    def cancelled(self) -> threading.Event: ...
    @property
    def is_cancelled(self) -> bool: ...
    def on_cancel(self, callback: Callable[[], None]) -> None: ...


class _Requester(Protocol):
    request_timeout: float | None

    def request(self, method: str, params: Any = None, result_type: Any = None, *, timeout: Any = ...) -> Any: ...
    def notify(self, method: str, params: Any = None) -> None: ...


class AgentProxy:
    """Raw calls to the agent over the client's connection, for what the typed API lacks.

    Nothing here checks capabilities or the initialize state: it is the escape hatch. Prefer
    the typed methods of :class:`~acp.client.SyncClient`. On an ``AsyncClient``,
    :meth:`request` returns an awaitable.
    """

    __slots__ = ("_conn",)

    def __init__(self, connection: _Requester) -> None:
        self._conn = connection

    def request(
        self,
        method: str,
        params: Any = None,
        result_type: Any = None,
        *,
        timeout: float | None = _USE_DEFAULT,
    ) -> Any:
        """Send ``method`` and block for its result (on an ``AsyncClient``: an awaitable of it),
        decoded as ``result_type`` (None: plain JSON).

        ``timeout`` defaults to the client's request timeout; None waits forever.
        """
        if timeout is _USE_DEFAULT:
            timeout = self._conn.request_timeout
        return self._conn.request(method, params, result_type, timeout=timeout)

    def notify(self, method: str, params: Any = None) -> None:
        """Send the notification ``method``."""
        self._conn.notify(method, params)


class ClientRequestContext(Generic[ClientT]):
    """The second argument of every client request handler: ``handler(request, ctx)``.

    ``session_id`` is the request's session (None when the request has none, e.g. an
    ``_`` extension request). ``cancelled`` is set when the request no longer needs an answer:
    the agent sent ``$/cancel_request`` or the user cancelled the turn with
    :meth:`SyncClient.cancel <acp.client.SyncClient.cancel>` (permission requests), and an
    answer returned after that is dropped; also the moment :meth:`SyncClient.close
    <acp.client.SyncClient.close>` begins, and when the agent goes away (its process dies, the
    connection ends). A handler blocked on a UI should watch the event (or register
    :meth:`on_cancel`) and give up. On an ``AsyncClient`` the event is the same
    :class:`threading.Event` (a blocking handler may wait on it); an ``async def`` handler is
    also cancelled as a task.
    """

    __slots__ = ("_call", "session_id", "client")

    def __init__(self, call: CallView, client: ClientT, session_id: str | None) -> None:
        self._call = call
        self.session_id = session_id
        self.client = client
        """The client this request came in on (:class:`~acp.client.SyncClient` or
        ``AsyncClient``), for typed calls."""

    @property
    def method(self) -> str:
        """The wire method being answered (``fs/read_text_file``, ``_my/ext``...)."""
        return self._call.method

    @property
    def request_id(self) -> Any:
        """The JSON-RPC id of the agent's request."""
        return self._call.id

    @property
    def cancelled(self) -> threading.Event:
        """Set once the answer is no longer wanted (see the class docstring)."""
        return self._call.cancelled

    @property
    def is_cancelled(self) -> bool:
        """True once :attr:`cancelled` is set."""
        return self._call.is_cancelled

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on cancellation (at once if already cancelled); keep it short."""
        self._call.on_cancel(callback)

    @property
    def agent(self) -> AgentProxy:
        """Raw requests and notifications to the agent (no capability checks)."""
        proxy: AgentProxy = self.client.agent  # type: ignore[attr-defined]  # both clients have it
        return proxy

    def __repr__(self) -> str:
        return (
            f"ClientRequestContext(method={self.method!r}, session_id={self.session_id!r}, "
            f"cancelled={self.is_cancelled})"
        )
