"""What both client builders share: every registration method, the options, the validation and
the capability derivation, written once in :class:`ClientBuilderBase`.

``SyncClientBuilder`` (:mod:`acp.client.builder`) and ``AsyncClientBuilder``
(:mod:`acp.client.aio`) derive from it and add only ``transport()`` and ``build()``; what they
build from is the runtime-neutral :class:`~acp.client.config.ClientConfig` of :meth:`config`.

Capabilities are never spelled out by hand: they are derived from the handlers registered
(``read_text_file_handler`` => ``fs.readTextFile``; all five terminal handlers => ``terminal``;
``create_elicitation_handler`` => ``elicitation`` in the modes given). Extra capabilities that
need no handler (``auth.terminal``, ``_meta`` entries...) can be given with
:meth:`ClientBuilderBase.client_capabilities`; one that needs a handler fails :meth:`build`
when the handler is missing.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, Union, overload

import msgspec
from typing_extensions import Self

from .. import schema
from .._options import DEFAULT_WAIT_SPIN, OrderingOption
from ..capabilities import TERMINAL_METHODS, derive_client_capabilities
from ..connection import DEFAULT_REQUEST_TIMEOUT
from ..transport._remote import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_OPEN_TIMEOUT
from ..transport.remote_spec import RemoteSpec
from .config import ClientConfig, HandlerSet, ProcessSpec, StrPath
from .context import ClientRequestContext

if TYPE_CHECKING:
    from http.cookiejar import CookieJar

    from ..schema import unstable as _u
    from ..wiretap import WireTap
    from .settings import AgentSettings

__all__ = ["ClientBuilderBase", "TerminalHandlers", "is_async"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
Ctx = ClientRequestContext
#: What a handler returns: the value, or (on the async builder) an awaitable of it.
MaybeAwaitable = Union[T, Awaitable[T]]

# Builder method name -> wire method, for the five terminal handlers (all or none).
_TERMINAL_HANDLERS = {
    "create_terminal_handler": "terminal/create",
    "terminal_output_handler": "terminal/output",
    "release_terminal_handler": "terminal/release",
    "wait_for_terminal_exit_handler": "terminal/wait_for_exit",
    "kill_terminal_handler": "terminal/kill",
}
assert set(_TERMINAL_HANDLERS.values()) == set(TERMINAL_METHODS)


class TerminalHandlers(Protocol):
    """An object serving the five ``terminal/*`` methods (see ``terminal_handlers``)."""

    def create_terminal(self, request: schema.CreateTerminalRequest, ctx: Ctx) -> schema.CreateTerminalResponse:
        """Start a command; answer its terminal id."""
        ...

    def terminal_output(self, request: schema.TerminalOutputRequest, ctx: Ctx) -> schema.TerminalOutputResponse:
        """Answer the output so far (and the exit status once it exited)."""
        ...

    def release_terminal(
        self, request: schema.ReleaseTerminalRequest, ctx: Ctx
    ) -> schema.ReleaseTerminalResponse | None:
        """Kill the command if still running and free the terminal."""
        ...

    def wait_for_terminal_exit(
        self, request: schema.WaitForTerminalExitRequest, ctx: Ctx
    ) -> schema.WaitForTerminalExitResponse:
        """Block until the command exits; answer its exit status."""
        ...

    def kill_terminal(self, request: schema.KillTerminalRequest, ctx: Ctx) -> schema.KillTerminalResponse | None:
        """Kill the command, keeping the terminal (and its output) until released."""
        ...


def _default_client_info() -> schema.Implementation:
    from .. import __version__

    return schema.Implementation(name="acp-python", version=__version__)


class ClientBuilderBase(OrderingOption):
    """Collects a client's transport, handlers and options; a subclass's ``build()`` makes the
    client from :meth:`config`.

    Every method returns the builder, so calls chain; the ``on_...`` variants register the
    same handlers as decorators. Everything is validated before anything is spawned or opened.
    """

    # What the threaded runtime polls (the sync builder offers wait_spin(); the asyncio one never polls).
    _wait_spin: float = DEFAULT_WAIT_SPIN

    #: Whether handlers may be ``async def`` (the asyncio runtime awaits them).
    _async_handlers = False

    def __init__(self) -> None:
        self._transports: list[Any] = []  # ProcessSpec | RemoteSpec | a transport object
        self._handlers = HandlerSet()
        self._elicitation_modes = (True, False)
        self._shown: set[str] = set()  # update kinds the generic consumers show (notices...)
        self._explicit_caps: schema.ClientCapabilities | None = None
        self._client_info: schema.Implementation | None = None
        self._request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT
        self._prompt_timeout: float | None = None
        self._executor: Executor | None = None
        self._wire_tap: WireTap | StrPath | None = None
        self._unstable = False
        self._name = "acp-client"
        self._errors: list[str] = []

    # ------------------------------------------------------------------ transport

    def agent_process(
        self,
        *argv: str,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
        start_new_session: bool = False,
    ) -> Self:
        """Spawn ``argv`` at :meth:`build` and talk to it over its stdin/stdout.

        The child inherits our environment updated with ``env`` (``inherit_env=False``: exactly
        ``env``). Its stderr goes to the ``acp.transport.process`` logger. Closing the client
        closes its stdin, waits, then terminates and finally kills it. ``start_new_session``
        keeps the terminal's Ctrl-C away from the agent (an interactive client cancels the
        turn instead).
        """
        if not argv:
            raise ValueError("agent_process needs a command")
        argv_t = tuple(os.fspath(a) for a in argv)
        self._transports.append(ProcessSpec(argv_t, cwd, env, inherit_env, start_new_session))
        return self

    def agent_from_settings(
        self, settings: Mapping[str, str] | AgentSettings | None = None, *, start_new_session: bool = False
    ) -> Self:
        """Take the transport from settings (None: ``os.environ``): ``ACP_AGENT_COMMAND`` (with
        ``ACP_AGENT_CWD``) is spawned like :meth:`agent_process`, ``ACP_AGENT_URL`` (with
        ``ACP_AGENT_HEADERS``, ``ACP_AGENT_TOKEN``) is opened like :meth:`connect`.
        ``start_new_session`` is passed to ``agent_process`` (an interactive client keeps
        Ctrl-C away from the agent).

        Exactly one of the two must be set; otherwise, or for a malformed value, raises
        :class:`~acp.client.settings.AgentSettingsError` (a ``ValueError``) naming the keys.
        Formats: :mod:`acp.client.settings`. Nothing is spawned or opened before :meth:`build`.
        """
        from .settings import AgentSettings

        if not isinstance(settings, AgentSettings):
            settings = AgentSettings.from_mapping(settings)
        if settings.command is not None:
            return self.agent_process(*settings.command, cwd=settings.cwd, start_new_session=start_new_session)
        assert settings.url is not None
        return self.connect(settings.url, headers=dict(settings.headers) or None)

    def connect(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        cookies: CookieJar | None = None,
        open_timeout: float | None = DEFAULT_OPEN_TIMEOUT,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        **options: Any,
    ) -> Self:
        """Connect to a remote agent at :meth:`build`: ``ws://`` / ``wss://`` (WebSocket, needs
        ``pip install 'acp-sync[ws]'``) or ``http://`` / ``https://`` (Streamable HTTP, needs
        ``pip install 'acp-sync[http]'``), e.g. ``ws://127.0.0.1:8765/acp``.

        ``headers`` go with the upgrade or with every HTTP request (``Authorization``...).
        Cookies the server or a load balancer sets are kept for the connection's lifetime;
        ``cookies`` (a :class:`http.cookiejar.CookieJar`) supplies the jar, so reusing it on a
        reconnect lands on the same backend. :meth:`build` raises
        :class:`acp.transport.RemoteConnectionError` (a ``ConnectionClosedError``, with the
        HTTP ``status`` when the server refused) if it cannot connect. ``options`` are those
        of :func:`acp.transport.websocket.connect_websocket` (``compression``, ``ssl``...) or
        :func:`acp.transport.http_client.connect_http` (``http2``, ``verify``...).
        """
        self._transports.append(
            RemoteSpec(
                url, dict(headers) if headers else None, open_timeout, max_message_bytes, options, cookies
            )
        )
        return self

    # ------------------------------------------------------------------ handlers

    def session_update_handler(self, fn: Callable[[schema.SessionNotification], MaybeAwaitable[None]]) -> Self:
        """Add a consumer of ``session/update`` notifications: ``fn(notification)``.

        Several may be added; each update goes to all of them in registration order, one update
        at a time, in arrival order. When a request such as ``prompt()`` returns, every update
        that arrived before its answer has been handled.
        """
        self._handlers.session_update.append(self._check_handler(fn, "session_update_handler"))
        return self

    def notice_handler(self, fn: Callable[[schema.SessionNotification], MaybeAwaitable[None]]) -> Self:
        """Show ``notice`` session updates: ``fn(notification)`` gets each notification whose
        ``update`` is a ``schema.Notice`` (after the :meth:`session_update_handler` consumers,
        which see it too). Registering one advertises ``session.notices``: without it, agents
        built with this SDK refuse to send notices."""
        return self._update_kind("notices", fn, "notice_handler")

    def compaction_handler(self, fn: Callable[[schema.SessionNotification], MaybeAwaitable[None]]) -> Self:
        """Show context compactions: ``fn(notification)`` gets each ``compaction_update`` and
        ``compaction_summary_chunk`` (``schema.CompactionUpdate`` / ``CompactionSummaryChunk``;
        updates of one ``compaction_id`` patch one entry). Advertises ``session.compaction``."""
        return self._update_kind("compaction", fn, "compaction_handler")

    def subagent_handler(self, fn: Callable[[schema.SessionNotification], MaybeAwaitable[None]]) -> Self:
        """Unstable (needs :meth:`unstable`): show subagent sessions. ``fn(notification)`` gets
        each ``subagent_update`` (and the inter-session ``session_message`` /
        ``session_message_chunk``); updates of a child then arrive under the child's session
        id, on the :meth:`session_update_handler` consumers. Advertises ``subagents``."""
        return self._update_kind("subagents", fn, "subagent_handler")

    def notices(self, enabled: bool = True) -> Self:
        """Advertise ``session.notices`` because the :meth:`session_update_handler` consumers
        show ``notice`` updates themselves (a generic renderer); :meth:`notice_handler` does
        it too."""
        return self._shows("notices", enabled)

    def compaction(self, enabled: bool = True) -> Self:
        """Advertise ``session.compaction`` because the :meth:`session_update_handler`
        consumers show compaction updates themselves; :meth:`compaction_handler` does it too."""
        return self._shows("compaction", enabled)

    def subagents(self, enabled: bool = True) -> Self:
        """Unstable: advertise ``subagents`` because the :meth:`session_update_handler`
        consumers show subagent updates themselves; :meth:`subagent_handler` does it too."""
        return self._shows("subagents", enabled)

    def _shows(self, kind: str, enabled: bool) -> Self:
        if enabled:
            self._shown.add(kind)
        else:
            self._shown.discard(kind)
        return self

    def _update_kind(self, kind: str, fn: Callable[..., Any], what: str) -> Self:
        self._handlers.update_kinds.append((kind, self._check_handler(fn, what)))
        return self

    def auth_status_update_handler(self, fn: Callable[[_u.AuthStatusUpdateNotification], MaybeAwaitable[None]]) -> Self:
        """Unstable (needs :meth:`unstable`): handle ``auth/status_update``, which an agent
        advertising ``auth.status`` sends when its authentication state changes:
        ``fn(notification)`` (``state``, ``accounts``)."""
        if "auth/status_update" in self._handlers.notifications:
            raise ValueError("auth_status_update_handler is already registered")
        self._handlers.notifications["auth/status_update"] = self._check_handler(fn, "auth_status_update_handler")
        return self

    def request_permission_handler(
        self,
        fn: Callable[[schema.RequestPermissionRequest, Ctx], MaybeAwaitable[schema.RequestPermissionResponse]],
    ) -> Self:
        """Answer ``session/request_permission``. Without one, the SDK answers ``cancelled``.

        When the user cancels the turn (``client.cancel``), the SDK answers a pending request
        ``cancelled`` itself; the handler sees ``ctx.cancelled`` and its late answer is dropped.
        """
        return self._request("session/request_permission", fn, "request_permission_handler")

    def read_text_file_handler(
        self, fn: Callable[[schema.ReadTextFileRequest, Ctx], MaybeAwaitable[schema.ReadTextFileResponse | str]]
    ) -> Self:
        """Serve ``fs/read_text_file`` (advertises ``fs.readTextFile``). May return a plain
        ``str``; raising ``FileNotFoundError`` answers the spec's -32002 resource not found."""
        return self._request("fs/read_text_file", fn, "read_text_file_handler")

    def write_text_file_handler(
        self, fn: Callable[[schema.WriteTextFileRequest, Ctx], MaybeAwaitable[schema.WriteTextFileResponse | None]]
    ) -> Self:
        """Serve ``fs/write_text_file`` (advertises ``fs.writeTextFile``); may return None."""
        return self._request("fs/write_text_file", fn, "write_text_file_handler")

    def create_terminal_handler(
        self, fn: Callable[[schema.CreateTerminalRequest, Ctx], MaybeAwaitable[schema.CreateTerminalResponse]]
    ) -> Self:
        """Serve ``terminal/create`` (one of the five terminal handlers: all or none)."""
        return self._request("terminal/create", fn, "create_terminal_handler")

    def terminal_output_handler(
        self, fn: Callable[[schema.TerminalOutputRequest, Ctx], MaybeAwaitable[schema.TerminalOutputResponse]]
    ) -> Self:
        """Serve ``terminal/output`` (one of the five terminal handlers: all or none)."""
        return self._request("terminal/output", fn, "terminal_output_handler")

    def release_terminal_handler(
        self, fn: Callable[[schema.ReleaseTerminalRequest, Ctx], MaybeAwaitable[schema.ReleaseTerminalResponse | None]]
    ) -> Self:
        """Serve ``terminal/release`` (one of the five terminal handlers: all or none)."""
        return self._request("terminal/release", fn, "release_terminal_handler")

    def wait_for_terminal_exit_handler(
        self, fn: Callable[[schema.WaitForTerminalExitRequest, Ctx], MaybeAwaitable[schema.WaitForTerminalExitResponse]]
    ) -> Self:
        """Serve ``terminal/wait_for_exit`` (one of the five terminal handlers: all or none)."""
        return self._request("terminal/wait_for_exit", fn, "wait_for_terminal_exit_handler")

    def kill_terminal_handler(
        self, fn: Callable[[schema.KillTerminalRequest, Ctx], MaybeAwaitable[schema.KillTerminalResponse | None]]
    ) -> Self:
        """Serve ``terminal/kill`` (one of the five terminal handlers: all or none)."""
        return self._request("terminal/kill", fn, "kill_terminal_handler")

    def terminal_handlers(self, handlers: TerminalHandlers) -> Self:
        """Register all five terminal handlers from one object (see :class:`TerminalHandlers`)."""
        self.create_terminal_handler(handlers.create_terminal)
        self.terminal_output_handler(handlers.terminal_output)
        self.release_terminal_handler(handlers.release_terminal)
        self.wait_for_terminal_exit_handler(handlers.wait_for_terminal_exit)
        return self.kill_terminal_handler(handlers.kill_terminal)

    def create_elicitation_handler(
        self,
        fn: Callable[[schema.CreateElicitationRequest, Ctx], MaybeAwaitable[schema.CreateElicitationResponse]],
        *,
        form: bool = True,
        url: bool = False,
    ) -> Self:
        """Serve ``elicitation/create``, advertising the ``form`` and/or ``url`` modes."""
        if not (form or url):
            raise ValueError("create_elicitation_handler: enable form and/or url mode")
        self._elicitation_modes = (form, url)
        return self._request("elicitation/create", fn, "create_elicitation_handler")

    def complete_elicitation_handler(
        self, fn: Callable[[schema.CompleteElicitationNotification], MaybeAwaitable[None]]
    ) -> Self:
        """Handle the ``elicitation/complete`` notification (URL mode): ``fn(notification)``."""
        if "elicitation/complete" in self._handlers.notifications:
            raise ValueError("complete_elicitation_handler is already registered")
        self._handlers.notifications["elicitation/complete"] = self._check_handler(fn, "complete_elicitation_handler")
        return self

    def ext_request_handler(self, name: str, fn: Callable[[Any, Ctx], MaybeAwaitable[Any]]) -> Self:
        """Answer the extension request ``name`` (must start with ``_``): ``fn(params, ctx)``
        gets and returns plain JSON values."""
        _check_ext_name(name)
        if name in self._handlers.ext_requests:
            raise ValueError(f"an ext request handler for {name!r} is already registered")
        self._handlers.ext_requests[name] = self._check_handler(fn, "ext_request_handler")
        return self

    def ext_notification_handler(self, name: str, fn: Callable[[Any], MaybeAwaitable[None]]) -> Self:
        """Handle the extension notification ``name`` (must start with ``_``): ``fn(params)``."""
        _check_ext_name(name)
        if name in self._handlers.ext_notifications:
            raise ValueError(f"an ext notification handler for {name!r} is already registered")
        self._handlers.ext_notifications[name] = self._check_handler(fn, "ext_notification_handler")
        return self

    def _request(self, method: str, fn: Callable[..., Any], what: str) -> Self:
        self._check_handler(fn, what)
        if method in self._handlers.requests:
            raise ValueError(f"{what} is already registered")
        self._handlers.requests[method] = fn
        return self

    def _check_handler(self, fn: F, what: str) -> F:
        if not callable(fn):
            raise TypeError(f"{what}: {fn!r} is not callable")
        if not self._async_handlers and is_async(fn):
            # It would return an un-awaited coroutine: say so now, not at the first message.
            raise TypeError(f"{what}: {fn!r} is an async function; register it on AsyncClient.builder()")
        return fn

    # ------------------------------------------------------------------ decorators

    def on_session_update(self, fn: F) -> F:
        """Decorator form of :meth:`session_update_handler`."""
        self.session_update_handler(fn)
        return fn

    def on_notice(self, fn: F) -> F:
        """Decorator form of :meth:`notice_handler`."""
        self.notice_handler(fn)
        return fn

    def on_compaction(self, fn: F) -> F:
        """Decorator form of :meth:`compaction_handler`."""
        self.compaction_handler(fn)
        return fn

    def on_request_permission(self, fn: F) -> F:
        """Decorator form of :meth:`request_permission_handler`."""
        self.request_permission_handler(fn)
        return fn

    def on_read_text_file(self, fn: F) -> F:
        """Decorator form of :meth:`read_text_file_handler`."""
        self.read_text_file_handler(fn)
        return fn

    def on_write_text_file(self, fn: F) -> F:
        """Decorator form of :meth:`write_text_file_handler`."""
        self.write_text_file_handler(fn)
        return fn

    def on_create_terminal(self, fn: F) -> F:
        """Decorator form of :meth:`create_terminal_handler`."""
        self.create_terminal_handler(fn)
        return fn

    def on_terminal_output(self, fn: F) -> F:
        """Decorator form of :meth:`terminal_output_handler`."""
        self.terminal_output_handler(fn)
        return fn

    def on_release_terminal(self, fn: F) -> F:
        """Decorator form of :meth:`release_terminal_handler`."""
        self.release_terminal_handler(fn)
        return fn

    def on_wait_for_terminal_exit(self, fn: F) -> F:
        """Decorator form of :meth:`wait_for_terminal_exit_handler`."""
        self.wait_for_terminal_exit_handler(fn)
        return fn

    def on_kill_terminal(self, fn: F) -> F:
        """Decorator form of :meth:`kill_terminal_handler`."""
        self.kill_terminal_handler(fn)
        return fn

    @overload
    def on_create_elicitation(self, fn: F, *, form: bool = ..., url: bool = ...) -> F: ...
    @overload
    def on_create_elicitation(self, fn: None = ..., *, form: bool = ..., url: bool = ...) -> Callable[[F], F]: ...
    def on_create_elicitation(
        self, fn: F | None = None, *, form: bool = True, url: bool = False
    ) -> F | Callable[[F], F]:
        """Decorator form of :meth:`create_elicitation_handler`: ``@b.on_create_elicitation``
        or ``@b.on_create_elicitation(form=True, url=True)``."""

        def register(f: F) -> F:
            self.create_elicitation_handler(f, form=form, url=url)
            return f

        return register if fn is None else register(fn)

    def on_complete_elicitation(self, fn: F) -> F:
        """Decorator form of :meth:`complete_elicitation_handler`."""
        self.complete_elicitation_handler(fn)
        return fn

    def on_ext_request(self, name: str) -> Callable[[F], F]:
        """Decorator form of :meth:`ext_request_handler`: ``@b.on_ext_request("_my/method")``."""

        def register(f: F) -> F:
            self.ext_request_handler(name, f)
            return f

        return register

    def on_ext_notification(self, name: str) -> Callable[[F], F]:
        """Decorator form of :meth:`ext_notification_handler`."""

        def register(f: F) -> F:
            self.ext_notification_handler(name, f)
            return f

        return register

    # ------------------------------------------------------------------ options

    def client_info(self, name: str, version: str, title: str | None = None) -> Self:
        """The ``clientInfo`` sent in ``initialize`` (default: this SDK's name and version)."""
        self._client_info = schema.Implementation(name=name, version=version, title=title)
        return self

    def client_capabilities(self, capabilities: schema.ClientCapabilities) -> Self:
        """Extra capabilities to advertise on top of the derived ones (e.g. ``auth.terminal``,
        ``session.config_options``, ``_meta``). ``fs``, ``terminal`` and ``elicitation`` always
        come from the handlers; declaring one here without its handler fails :meth:`build`."""
        self._explicit_caps = capabilities
        return self

    def request_timeout(self, seconds: float | None) -> Self:
        """Timeout of every call except ``session/prompt`` (default 60 s; None: none)."""
        self._request_timeout = _check_timeout(seconds)
        return self

    def prompt_timeout(self, seconds: float | None) -> Self:
        """Timeout of ``session/prompt`` (default None: a turn may take as long as it takes)."""
        self._prompt_timeout = _check_timeout(seconds)
        return self

    def handler_executor(self, executor: Executor) -> Self:
        """Run request handlers on ``executor`` (never shut down by the SDK) instead of the
        SDK's own thread pool."""
        self._executor = executor
        return self

    def wire_tap(self, tap: Union[WireTap, StrPath]) -> Self:
        """See every line sent and received: a callback ``tap(direction, line)`` with
        direction ``"in"``/``"out"``, or a path to append a JSONL transcript to
        (see :class:`~acp.wiretap.JsonlWireTap`)."""
        self._wire_tap = tap
        return self

    def unstable(self, enabled: bool = True) -> Self:
        """Opt in to the unstable protocol methods (``session/fork``, ``providers/*``,
        ``session/status``, ``session/archive``, ``session/set_title``, ``auth/status``,
        ``system_prompt=``...) and handlers (subagents, ``auth/status_update``); without it the
        methods raise ``CapabilityError`` and the handlers fail :meth:`build`."""
        self._unstable = bool(enabled)
        return self

    def name(self, name: str) -> Self:
        """The name used in thread names and logs (default ``acp-client``)."""
        self._name = name
        return self

    # ------------------------------------------------------------------ build

    def derived_capabilities(self) -> schema.ClientCapabilities:
        """The ``clientCapabilities`` :meth:`build` would advertise (raises like it)."""
        handlers = self._handlers
        methods = handlers.methods()
        problems: list[str] = []
        present = [m for m in TERMINAL_METHODS if m in methods]
        if present and len(present) != len(TERMINAL_METHODS):
            missing = [name for name, m in _TERMINAL_HANDLERS.items() if m not in methods]
            problems.append(
                "terminal handlers are all or none: missing " + ", ".join(missing)
            )
        if "elicitation/complete" in methods and "elicitation/create" not in methods:
            problems.append("complete_elicitation_handler needs a create_elicitation_handler")
        kinds = handlers.shown_kinds() | self._shown
        if not self._unstable:
            if "subagents" in kinds:
                problems.append("subagent updates are unstable: call unstable(True) first")
            if "auth/status_update" in methods:
                problems.append("auth_status_update_handler is unstable: call unstable(True) first")
        form, url = self._elicitation_modes
        derived = derive_client_capabilities(
            methods,
            elicitation_form=form,
            elicitation_url=url,
            notices="notices" in kinds,
            compaction="compaction" in kinds,
            subagents="subagents" in kinds and self._unstable,
        )
        explicit = self._explicit_caps
        if explicit is not None:
            problems.extend(_explicit_without_handler(explicit, derived))
            derived = msgspec.structs.replace(
                explicit,
                fs=derived.fs,
                terminal=derived.terminal,
                elicitation=derived.elicitation,
                session=_merge_session(explicit.session, derived.session),
                subagents=explicit.subagents if explicit.subagents is not None else derived.subagents,
            )
        if problems:
            raise ValueError("cannot build the client: " + "; ".join(problems))
        return derived

    def config(self) -> ClientConfig:
        """Validate everything and freeze it into a :class:`~acp.client.config.ClientConfig`
        (nothing is spawned or opened). Raises ``ValueError`` naming every problem: no
        transport or more than one, a partial set of terminal handlers, a capability declared
        without its handler."""
        if len(self._transports) != 1:
            raise ValueError(
                "cannot build the client: give exactly one transport (agent_process(...), "
                f"transport(...) or connect(...)), got {len(self._transports)}"
            )
        return ClientConfig(
            source=self._transports[0],
            handlers=self._handlers,
            capabilities=self.derived_capabilities(),
            client_info=self._client_info or _default_client_info(),
            request_timeout=self._request_timeout,
            prompt_timeout=self._prompt_timeout,
            executor=self._executor,
            ordering=self._ordering,
            wire_tap=self._wire_tap,
            unstable=self._unstable,
            name=self._name,
            wait_spin=self._wait_spin,
        )


def is_async(fn: Any) -> bool:
    """``async def`` functions and objects whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _check_ext_name(name: str) -> None:
    if not isinstance(name, str) or not name.startswith("_") or len(name) < 2:
        raise ValueError(f"extension method names start with '_' (got {name!r})")


def _check_timeout(seconds: float | None) -> float | None:
    if seconds is not None and not seconds > 0:
        raise ValueError(f"a timeout must be positive or None (got {seconds!r})")
    return seconds


def _merge_session(
    explicit: schema.ClientSessionCapabilities | None, derived: schema.ClientSessionCapabilities | None
) -> schema.ClientSessionCapabilities | None:
    """Explicit session capabilities (``configOptions``...) plus the derived notices/compaction;
    an explicit ``notices`` / ``compaction`` (a client showing every update generically) stays."""
    if explicit is None or derived is None:
        return explicit if derived is None else derived
    return msgspec.structs.replace(
        explicit,
        notices=explicit.notices if explicit.notices is not None else derived.notices,
        compaction=explicit.compaction if explicit.compaction is not None else derived.compaction,
    )


def _explicit_without_handler(
    explicit: schema.ClientCapabilities, derived: schema.ClientCapabilities
) -> list[str]:
    problems = []
    if explicit.fs.read_text_file and not derived.fs.read_text_file:
        problems.append("fs.readTextFile is declared but no read_text_file_handler is registered")
    if explicit.fs.write_text_file and not derived.fs.write_text_file:
        problems.append("fs.writeTextFile is declared but no write_text_file_handler is registered")
    if explicit.terminal and not derived.terminal:
        problems.append("terminal is declared but the five terminal handlers are not registered")
    if explicit.elicitation is not None and derived.elicitation is None:
        problems.append("elicitation is declared but no create_elicitation_handler is registered")
    return problems
