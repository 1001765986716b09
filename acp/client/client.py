"""``SyncClient``: typed, blocking calls from a client (editor, script) to an ACP agent.

Every call is refused locally, with nothing sent, when it cannot be valid: before
``initialize()`` (:class:`CapabilityError`), for an optional method the agent did not advertise
(:class:`CapabilityError`), for an unstable method without the builder's opt-in
(:class:`CapabilityError`), and for content or parameters the agent's capabilities exclude
(images, ``additionalDirectories``, HTTP MCP servers...). The calls themselves are written once,
for both runtimes, in :mod:`acp.client._calls`; this module performs them on threads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from typing_extensions import Self

from .. import schema
from .._options import WaitSpinOption
from ..connection import Connection
from ..errors import ConnectionClosedError
from ..transport.base import Transport
from ..transport.remote_spec import RemoteSpec
from ._calls import (
    SUPPORTED_PROTOCOL_VERSIONS,
    ClientCalls,
    PromptInput,
    UnsupportedProtocolVersionError,
    closed_error,
    next_cursor,
)
from ._plans import BlockingCalls, Effect, Explain, Invoke, Notify, Send, explained
from ._turns import TurnTracker
from .config import ProcessSpec
from .registration import ClientBuilderBase

if TYPE_CHECKING:

    from ..aio.transport.process import ProcessTransport as AioProcessTransport
    from ..connection import InboundCall
    from ..schema import unstable as _u
    from ..transport.process import ProcessTransport
    from ..wiretap import JsonlWireTap, WireTap
    from .config import ClientConfig

__all__ = [
    "AgentProcess",
    "PromptInput",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "SyncClient",
    "UnsupportedProtocolVersionError",
]

_log = logging.getLogger("acp.client")


class AgentProcess:
    """Read-only facts about a spawned agent process."""

    __slots__ = ("_transport",)

    def __init__(self, transport: ProcessTransport | AioProcessTransport) -> None:
        self._transport: Any = transport  # either runtime's: the same facts, wait() differs

    @property
    def pid(self) -> int:
        """The agent's process id."""
        pid: int = self._transport.pid
        return pid

    @property
    def argv(self) -> tuple[str, ...]:
        """The command line it was started with."""
        argv: tuple[str, ...] = self._transport.argv
        return argv

    @property
    def returncode(self) -> int | None:
        """Its exit status (negative: killed by that signal), or None while it runs."""
        code: int | None = self._transport.returncode
        return code

    @property
    def stderr_tail(self) -> str:
        """The last lines it wrote to stderr (at most 20 non-blank lines, 8 KiB); "" if none."""
        tail: str = self._transport.stderr_tail
        return tail

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for it to exit; its return code, or None when ``timeout`` passed first."""
        code: int | None = self._transport.wait(timeout)
        return code

    def __repr__(self) -> str:
        return f"AgentProcess(pid={self.pid}, returncode={self.returncode})"


class SyncClient(BlockingCalls, ClientCalls):
    """A connection to one agent, with a typed blocking method per client -> agent method.

    Make one with :meth:`builder`; use it as a context manager (or call :meth:`close`).
    Thread-safe: calls may come from several threads (e.g. ``cancel`` while ``prompt`` blocks).
    """

    # A blocking prompt() cannot be abandoned mid-turn, so a turn is one Send.
    _turn_is_one_send = True

    @staticmethod
    def builder() -> SyncClientBuilder:
        """A new :class:`~acp.client.SyncClientBuilder`."""
        return SyncClientBuilder()

    def __init__(
        self,
        config: ClientConfig,
        transport: Transport,
        *,
        process: ProcessTransport | None = None,
        wire_tap: WireTap | None = None,
        owned_tap: JsonlWireTap | None = None,
    ) -> None:
        """Internal: use :meth:`builder`. Starts the connection over ``transport`` at once."""
        self._conn: Connection
        self._process = AgentProcess(process) if process is not None else None
        conn = Connection(transport, **config.connection_options(wire_tap), wait_spin=config.wait_spin)
        self._attach(config, conn, transport, process, owned_tap, TurnTracker())

    # ------------------------------------------------------------------ state

    @property
    def process(self) -> AgentProcess | None:
        """The spawned agent process (``agent_process``), else None."""
        return self._process

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self, timeout: float | None = 5.0) -> None:
        """Close gracefully; idempotent.

        Stops taking agent requests, sets every running handler's ``ctx.cancelled`` at once,
        lets them finish (up to ``timeout``; what they answer still goes out), then
        closes the transport: a spawned agent gets EOF on stdin, is waited for, then
        terminated, then killed. Calls still pending fail with :class:`ConnectionClosedError`.
        """
        self._closed = True
        try:
            self._conn.close(graceful=True, timeout=timeout)
        finally:
            if self._owned_tap is not None:
                self._owned_tap.close()

    # ------------------------------------------------------------------ the runtime

    def _closed_error(self, method: str) -> ConnectionClosedError:
        """Why ``method`` cannot go out: closed by us, or how the agent (process) went away."""
        process = self._process_transport
        if process is None or self._closed:
            return closed_error(method, self._closed)
        # It is going or gone: how it ended and its last stderr lines come quickly.
        error: ConnectionClosedError = process.closed_error(method, timeout=1.0)
        return error

    #: Request handlers run where the engine calls their adapter (see _settle, _call_view).
    _handlers_inline = True

    def _call_view(self, call: InboundCall) -> InboundCall:
        return call  # its cancelled is already a threading.Event

    def _direct(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn  # handlers are plain functions, run where the engine runs them

    def _settle(self, effect: Invoke, finish: Callable[[Invoke, Any, BaseException | None], Any]) -> Any:
        # BlockingCalls._settle with _perform(Invoke) inlined: the handler is called right here
        # (once per inbound request, e.g. every fs/read_text_file).
        try:
            value = effect.fn(*effect.args)
        except BaseException as exc:
            return finish(effect, None, exc)
        return finish(effect, value, None)

    def _perform(self, effect: Effect) -> Any:
        kind = type(effect)
        if kind is Send or kind is Notify:  # first: nearly every effect
            try:
                if type(effect) is not Send:
                    return self._conn.notify(effect.method, effect.params)  # type: ignore[union-attr]
                return self._conn.request(effect.method, effect.params, effect.result_type, timeout=effect.timeout)
            except ConnectionClosedError as exc:
                if not explained(effect, exc):
                    raise  # e.g. a remote refusal, with its status
                raise self._closed_error(effect.method) from exc  # type: ignore[union-attr]
        if kind is Invoke:
            return effect.fn(*effect.args)  # type: ignore[union-attr]
        if kind is Explain:
            return self._closed_error(effect.method)  # type: ignore[union-attr]
        return self.close()

    # ------------------------------------------------------------------ sessions

    def iter_sessions(
        self,
        cwd: str | None = None,
        *,
        archived: _u.SessionArchiveFilter | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Iterator[schema.SessionInfo]:
        """Every session ``session/list`` knows, following ``nextCursor`` page by page.

        A missing (or empty) ``nextCursor`` ends the listing; a cursor the agent already
        returned raises :class:`AcpError` instead of looping forever. The capability is checked
        now, the pages are fetched as the iterator is consumed.
        """
        self._run(self._check("session/list"))
        self._check_listing(archived)
        return self._pages(cwd, archived, meta)

    def _pages(
        self, cwd: str | None, archived: Any, meta: dict[str, Any] | None
    ) -> Iterator[schema.SessionInfo]:
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            page = self.list_sessions(cwd, cursor, archived=archived, meta=meta)
            yield from page.sessions
            cursor = next_cursor(page, seen)
            if cursor is None:
                return

    def __repr__(self) -> str:
        return f"SyncClient({self._transport.description!r}, {self._state_name()})"


class SyncClientBuilder(WaitSpinOption, ClientBuilderBase):
    """Collects a client's transport, handlers and options; :meth:`build` makes the client.

    Every method returns the builder, so calls chain; the ``on_...`` variants register the
    same handlers as decorators. :meth:`build` validates everything before it spawns anything.
    Handlers are plain functions, run on the handler executor (``async def`` ones are refused:
    use :class:`~acp.client.aio.AsyncClientBuilder`).
    """

    def transport(self, transport: Transport) -> Self:
        """Talk over an existing transport (``memory_pair()``, a socket...); the client owns
        it from :meth:`build` on and closes it."""
        self._transports.append(transport)
        return self

    def build(self) -> SyncClient:
        """Validate, open the transport (spawning the agent), start the connection.

        Raises ``ValueError`` naming every problem: no transport or more than one, a partial
        set of terminal handlers, a capability declared without its handler.
        """
        from ..transport.process import ProcessTransport

        config = self.config()
        source = config.source
        process: ProcessTransport | None = None
        transport: Transport
        with config.opening() as (tap, owned_tap):
            if isinstance(source, ProcessSpec):
                transport = process = ProcessTransport(
                    source.argv,
                    cwd=source.cwd,
                    env=source.env,
                    inherit_env=source.inherit_env,
                    start_new_session=source.start_new_session,
                )
            elif isinstance(source, RemoteSpec):
                transport = source.open()
            else:
                transport = source
        return SyncClient(config, transport, process=process, wire_tap=tap, owned_tap=owned_tap)
