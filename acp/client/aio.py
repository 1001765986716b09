"""``AsyncClient``: the client side of ACP on an asyncio event loop.

The same calls as :class:`~acp.client.SyncClient` (written once, in :mod:`acp.client._calls`),
awaited: ``await client.initialize()``, ``await client.prompt(...)``... with the same local
refusals before anything is sent. The builder is the sync one's registration API
(:class:`~acp.client.registration.ClientBuilderBase`); handlers may be ``async def`` (awaited on
the loop) or plain functions, which run on the connection's executor, never on the loop (the
ready-made :class:`~acp.client.LocalFiles`, :class:`~acp.client.LocalTerminals` and
:class:`~acp.client.PermissionPolicy` are such blocking code and run there unchanged).

::

    async with acp.AsyncClient.builder().agent_process("my-agent").build() as client:
        await client.initialize()
        session = await client.new_session(cwd="/abs/project")
        print((await client.prompt(session.session_id, "Hi")).stop_reason)
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from typing_extensions import Self

from ..aio.connection import AsyncConnection, AsyncInboundCall
from ..errors import ConnectionClosedError
from ..transport._remote import kind
from ..transport.remote_spec import RemoteSpec
from ._calls import ClientCalls, closed_error, next_cursor
from ._plans import AwaitableCalls, Effect, Explain, Invoke, Notify, Send, explained
from ._turns import TurnTracker
from .client import AgentProcess
from .config import ProcessSpec
from .registration import ClientBuilderBase, is_async

if TYPE_CHECKING:
    from .. import schema
    from ..aio.transport import AsyncTransport
    from ..aio.transport.process import ProcessTransport
    from ..schema import unstable as _u
    from ..wiretap import JsonlWireTap, WireTap
    from .config import ClientConfig

__all__ = ["AsyncAgentProcess", "AsyncClient", "AsyncClientBuilder"]

R = TypeVar("R")


class AsyncAgentProcess(AgentProcess):
    """Read-only facts about an agent process spawned by ``AsyncClientBuilder.agent_process``;
    :meth:`wait` is awaited."""

    __slots__ = ()

    async def wait(self, timeout: float | None = None) -> int | None:  # type: ignore[override]
        """Wait for it to exit; its return code, or None when ``timeout`` passed first."""
        code: int | None = await self._transport.wait(timeout)
        return code


class _ThreadSafeCall:
    """An inbound call as a handler's context reads it: ``cancelled`` is a
    :class:`threading.Event` (set on the loop when the call is cancelled), so a blocking
    handler on the executor may wait on it."""

    __slots__ = ("_call", "_event")

    # Guards the lazy Event (made from the loop or from a pool thread); taken only then.
    _making = threading.Lock()

    def __init__(self, call: AsyncInboundCall) -> None:
        self._call = call
        # Made on first use: most handlers never read it (a threading.Event costs ~1.5 us,
        # about 6% of the client's CPU per fs/read_text_file).
        self._event: threading.Event | None = None
        call.on_cancel(self._set_event)

    def _set_event(self) -> None:  # on the loop, once the call's is_cancelled is True
        event = self._event
        if event is not None:
            event.set()

    @property
    def cancelled(self) -> threading.Event:
        event = self._event
        if event is None:
            with self._making:
                event = self._event
                if event is None:
                    event = self._event = threading.Event()
                    # Published first, checked second: a cancel that ran _set_event before
                    # the publication had already made is_cancelled True, so it is seen here.
                    if self._call.is_cancelled:
                        event.set()
        return event

    @property
    def method(self) -> str:
        return self._call.method

    @property
    def id(self) -> Any:
        return self._call.id

    @property
    def is_cancelled(self) -> bool:
        return self._call.is_cancelled

    def on_cancel(self, callback: Callable[[], None]) -> None:
        self._call.on_cancel(callback)  # runs on the loop


def _answer_early(call: AsyncInboundCall, result: object) -> None:
    # Answer first: the cancelled handler's task must not be the one whose answer goes out.
    call.answer(result)
    call.cancel()


class AsyncClient(AwaitableCalls, ClientCalls):
    """A connection to one agent, on the running event loop, with an awaitable method per
    client -> agent method (the names, parameters and refusals of :class:`~acp.client.SyncClient`).

    Make one with :meth:`builder` (``client = await builder.build()``, or
    ``async with builder.build() as client``); ``await client.close()`` or ``async with``
    closes it. Use it from the loop it was built on.
    """

    _builder_name = "AsyncClient.builder()"

    @staticmethod
    def builder() -> AsyncClientBuilder:
        """A new :class:`~acp.client.aio.AsyncClientBuilder`."""
        return AsyncClientBuilder()

    def __init__(
        self,
        config: ClientConfig,
        transport: AsyncTransport,
        *,
        process: ProcessTransport | None = None,
        wire_tap: WireTap | None = None,
        owned_tap: JsonlWireTap | None = None,
    ) -> None:
        """Internal: use :meth:`builder`. Starts the connection on the running loop."""
        self._conn: AsyncConnection
        self._process = AsyncAgentProcess(process) if process is not None else None
        conn = AsyncConnection(transport, **config.connection_options(wire_tap))
        self._attach(config, conn, transport, process, owned_tap, TurnTracker(_answer_early))

    # ------------------------------------------------------------------ state

    @property
    def process(self) -> AsyncAgentProcess | None:
        """The spawned agent process (``agent_process``), else None."""
        return self._process

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self, timeout: float | None = 5.0) -> None:
        """Close gracefully; idempotent.

        Stops taking agent requests, cancels every running handler (``ctx.cancelled`` is set;
        an ``async def`` handler's task is cancelled once ``timeout`` runs out), then closes
        the transport: a spawned agent gets EOF on stdin, is waited for, then terminated,
        then killed. Calls still pending fail with :class:`ConnectionClosedError`. No task of
        the client outlives it.
        """
        self._closed = True
        try:
            await self._conn.close(graceful=True, timeout=timeout)
        finally:
            if self._owned_tap is not None:
                self._owned_tap.close()

    # ------------------------------------------------------------------ the runtime

    async def _closed_error(self, method: str) -> ConnectionClosedError:
        """Why ``method`` cannot go out: closed by us, or how the agent (process) went away."""
        process = self._process_transport
        if process is None or self._closed:
            return closed_error(method, self._closed)
        # It is going or gone: how it ended and its last stderr lines come quickly.
        error: ConnectionClosedError = await process.closed_error(method, timeout=1.0)
        return error

    _handlers_inline = False  # a handler is awaited on the loop or run on the executor

    def _call_view(self, call: AsyncInboundCall) -> _ThreadSafeCall:
        return _ThreadSafeCall(call)

    def _direct(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        # An async handler is awaited by the connection, in order; a plain one must not run
        # on the loop: the connection awaits it on its executor.
        return fn if is_async(fn) else self._conn.blocking(fn)

    def _ends_turn(self, exc: BaseException) -> bool:
        return isinstance(exc, asyncio.CancelledError)

    async def _invoke(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        if is_async(fn):
            return await fn(*args)
        result = await self._conn.run_blocking(fn, *args)
        if inspect.isawaitable(result):  # a plain function that returned a coroutine
            result = await result
        return result

    async def _perform(self, effect: Effect) -> Any:
        kind_ = type(effect)
        if kind_ is Invoke:
            return await self._invoke(effect.fn, effect.args)  # type: ignore[union-attr]
        if kind_ is Explain:
            return await self._closed_error(effect.method)  # type: ignore[union-attr]
        try:
            if kind_ is Send:
                assert isinstance(effect, Send)
                return await self._conn.request(
                    effect.method, effect.params, effect.result_type, timeout=effect.timeout
                )
            if kind_ is Notify:
                assert isinstance(effect, Notify)
                return self._conn.notify(effect.method, effect.params)
        except ConnectionClosedError as exc:
            if not explained(effect, exc):
                raise
            raise (await self._closed_error(effect.method)) from exc  # type: ignore[union-attr]
        return await self.close()

    # ------------------------------------------------------------------ sessions

    def iter_sessions(
        self,
        cwd: str | None = None,
        *,
        archived: _u.SessionArchiveFilter | None = None,
        meta: dict[str, Any] | None = None,
    ) -> AsyncIterator[schema.SessionInfo]:
        """Every session ``session/list`` knows, following ``nextCursor`` page by page:
        ``async for info in client.iter_sessions(): ...``.

        The capability is checked now (``CapabilityError`` before anything is sent), the
        pages are fetched as the iterator is consumed; a cursor the agent already returned
        raises :class:`AcpError` instead of looping forever.
        """
        self._check_listing(archived)
        return self._pages(cwd, archived, meta)

    async def _pages(
        self, cwd: str | None, archived: Any, meta: dict[str, Any] | None
    ) -> AsyncIterator[schema.SessionInfo]:
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            page = await self.list_sessions(cwd, cursor, archived=archived, meta=meta)
            for info in page.sessions:
                yield info
            cursor = next_cursor(page, seen)
            if cursor is None:
                return

    def __repr__(self) -> str:
        return f"AsyncClient({self._transport.description!r}, {self._state_name()})"


class _Building:
    """What :meth:`AsyncClientBuilder.build` returns: await it for the client, or use it as
    ``async with builder.build() as client`` (closed on exit)."""

    __slots__ = ("_builder", "_client")

    def __init__(self, builder: AsyncClientBuilder) -> None:
        self._builder = builder
        self._client: AsyncClient | None = None

    def __await__(self) -> Generator[Any, None, AsyncClient]:
        return self._builder._build().__await__()

    async def __aenter__(self) -> AsyncClient:
        self._client = await self._builder._build()
        return self._client

    async def __aexit__(self, *exc_info: object) -> None:
        if self._client is not None:
            await self._client.close()


class AsyncClientBuilder(ClientBuilderBase):
    """Collects an async client's transport, handlers and options (the registration methods of
    :class:`~acp.client.SyncClientBuilder`); :meth:`build` makes the client.

    Handlers may be ``async def`` (awaited on the loop: a request handler as its own task,
    session updates one at a time in arrival order) or plain functions (run on the executor,
    ``handler_executor`` or the connection's own pool, never on the loop).
    """

    _async_handlers = True

    def transport(self, transport: AsyncTransport) -> Self:
        """Talk over an existing :class:`~acp.aio.transport.AsyncTransport`
        (``acp.aio.transport.memory_pair()``...); the client owns it from :meth:`build` on and
        closes it."""
        self._transports.append(transport)
        return self

    def build(self) -> _Building:
        """Validate, open the transport (spawning the agent), start the connection on the
        running loop: ``client = await builder.build()`` or
        ``async with builder.build() as client``.

        Raises ``ValueError`` naming every problem (before anything is spawned or opened), as
        the sync builder does.
        """
        return _Building(self)

    async def _build(self) -> AsyncClient:
        config = self.config()
        source = config.source
        process: ProcessTransport | None = None
        transport: AsyncTransport
        with config.opening() as (tap, owned_tap):
            if isinstance(source, ProcessSpec):
                transport = process = await _spawn(source)
            elif isinstance(source, RemoteSpec):
                transport = await _connect(source)
            else:
                transport = source
        return AsyncClient(config, transport, process=process, wire_tap=tap, owned_tap=owned_tap)


async def _spawn(spec: ProcessSpec) -> ProcessTransport:
    from ..aio.transport.process import ProcessTransport

    return await ProcessTransport.spawn(
        list(spec.argv),
        cwd=spec.cwd,
        env=spec.env,
        inherit_env=spec.inherit_env,
        start_new_session=spec.start_new_session,
    )


async def _connect(spec: RemoteSpec) -> AsyncTransport:
    from ..aio import transport as aio_transport

    connect = aio_transport.connect_websocket if kind(spec.url) == "websocket" else aio_transport.connect_http
    result: AsyncTransport = await connect(
        spec.url,
        headers=spec.headers,
        cookies=spec.cookies,
        open_timeout=spec.open_timeout,
        max_message_bytes=spec.max_message_bytes,
        **spec.options,
    )
    return result
