"""The agent builders' shared half: register handlers, declare what they accept, check it all.

:class:`AgentBuilder` holds every registration method; ``SyncAgent.builder()`` and
``AsyncAgent.builder()`` return its two subclasses, which add only ``build()`` and what their
runtime accepts (the async one also takes ``async def`` handlers). ``build()`` produces an
:class:`~acp.agent.spec.AgentSpec` (runtime-neutral) and hands it to the runtime.

Registration style is uniform: a REQUEST handler is called ``handler(request, ctx)`` with the
typed params and an :class:`~acp.agent.AgentRequestContext` (a
:class:`~acp.agent.PromptContext` for ``session/prompt``) and returns the typed response (or
None where every response field is optional, answered ``{}``). A NOTIFICATION handler (the
cancel hook, extension and unstable notifications) is called ``handler(notification)``.

Each ``x_handler(fn)`` has a decorator twin ``@builder.on_x`` that registers the function and
returns it unchanged. Mistakes fail early with ``ValueError``: a None handler, a second
handler for the same method, an unstable method without ``.unstable(True)``, an extension name
without the leading ``_``; ``build()`` refuses a capability declared without its handler.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Union, overload

from typing_extensions import Self

from .. import schema
from .._options import DEFAULT_WAIT_SPIN, OrderingOption
from ..capabilities import ARCHIVE_METHODS, derive_agent_capabilities
from .methods import AGENT_HANDLERS
from .spec import (
    DEFAULT_CANCEL_GRACE_PERIOD,
    DEFAULT_CLOSE_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    AgentSpec,
)

if TYPE_CHECKING:
    from ..schema import unstable as _unstable

__all__ = ["AgentBuilder", "AgentSpec", "DEFAULT_CANCEL_GRACE_PERIOD", "is_async_callable"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
C = TypeVar("C")  # the request context a runtime's handlers get
P = TypeVar("P")  # the prompt context

MaybeAwaitable = Union[T, Awaitable[T]]
"""A handler's return: the value, or (on the async builder) an awaitable of it."""


class AgentBuilder(OrderingOption, Generic[C, P]):
    """Collects handlers and options (the registration methods of both agent builders);
    a subclass's ``build()`` turns :meth:`_spec` into its runtime's agent."""

    # What the threaded runtime polls (the sync builder offers wait_spin(); the asyncio one never polls).
    _wait_spin: float = DEFAULT_WAIT_SPIN

    def __init__(self) -> None:
        self._handlers: dict[str, Callable[..., Any]] = {}
        self._ext_requests: dict[str, Callable[[Any, C], Any]] = {}
        self._ext_notifications: dict[str, Callable[[Any], Any]] = {}
        self._prompt_caps: schema.PromptCapabilities | None = None
        self._mcp: schema.McpCapabilities | None = None
        self._additional_directories = False
        self._system_prompt: tuple[bool, bool] = (False, False)  # (accepted, override too)
        self._auth_methods: tuple[schema.AuthMethod, ...] | None = None
        self._agent_info: schema.Implementation | None = None
        self._executor: Executor | None = None
        self._request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT
        self._grace: float | None = DEFAULT_CANCEL_GRACE_PERIOD
        self._max_prompt: float | None = None
        self._close_timeout = DEFAULT_CLOSE_TIMEOUT
        self._unstable = False
        self._name = "acp-agent"

    # ---------------------------------------------------------------- plumbing

    def _register(self, name: str, fn: Callable[..., Any] | None) -> Self:
        row = AGENT_HANDLERS[name]
        if fn is None:
            raise ValueError(f"{name}_handler: the handler is None")
        if not callable(fn):
            raise ValueError(f"{name}_handler: {fn!r} is not callable")
        self._check_handler(f"{name}_handler", fn)
        if row.unstable and not self._unstable:
            raise ValueError(
                f"{name}_handler: {row.wire!r} is an unstable ACP method; "
                "call .unstable(True) on the builder first to opt in"
            )
        if row.wire in self._handlers:
            raise ValueError(f"{name}_handler: a handler for {row.wire!r} is already registered")
        self._handlers[row.wire] = fn
        return self

    def _check_handler(self, what: str, fn: Callable[..., Any]) -> None:
        """What the runtime refuses of a handler (the sync builder: ``async def``)."""

    # ---------------------------------------------------------------- stable methods

    def initialize_handler(self, fn: Callable[[schema.InitializeRequest, C], MaybeAwaitable[schema.InitializeResponse]]) -> Self:
        """Replace the default ``initialize`` answer. Its answer is used as-is; the SDK still
        records both sides' capabilities for this connection."""
        return self._register("initialize", fn)

    def authenticate_handler(
        self, fn: Callable[[schema.AuthenticateRequest, C], MaybeAwaitable[schema.AuthenticateResponse | None]]
    ) -> Self:
        """Handle ``authenticate``; advertise the methods with :meth:`auth_methods`."""
        return self._register("authenticate", fn)

    def auth_methods(self, *methods: schema.AuthMethod) -> Self:
        """The authentication methods the ``initialize`` answer lists (needs an authenticate handler)."""
        self._auth_methods = tuple(methods)
        return self

    def logout_handler(self, fn: Callable[[schema.LogoutRequest, C], MaybeAwaitable[schema.LogoutResponse | None]]) -> Self:
        """Handle ``logout`` (advertises ``auth.logout``)."""
        return self._register("logout", fn)

    def new_session_handler(
        self, fn: Callable[[schema.NewSessionRequest, C], MaybeAwaitable[schema.NewSessionResponse]]
    ) -> Self:
        """Handle ``session/new``."""
        return self._register("new_session", fn)

    def load_session_handler(
        self, fn: Callable[[schema.LoadSessionRequest, C], MaybeAwaitable[schema.LoadSessionResponse | None]]
    ) -> Self:
        """Handle ``session/load`` (advertises ``loadSession``); replay history with
        ``ctx.session(request.session_id).send_update(...)`` before returning."""
        return self._register("load_session", fn)

    def list_sessions_handler(
        self, fn: Callable[[schema.ListSessionsRequest, C], MaybeAwaitable[schema.ListSessionsResponse]]
    ) -> Self:
        """Handle ``session/list`` (advertises ``sessionCapabilities.list``)."""
        return self._register("list_sessions", fn)

    def resume_session_handler(
        self, fn: Callable[[schema.ResumeSessionRequest, C], MaybeAwaitable[schema.ResumeSessionResponse | None]]
    ) -> Self:
        """Handle ``session/resume`` (advertises ``sessionCapabilities.resume``)."""
        return self._register("resume_session", fn)

    def close_session_handler(
        self, fn: Callable[[schema.CloseSessionRequest, C], MaybeAwaitable[schema.CloseSessionResponse | None]]
    ) -> Self:
        """Handle ``session/close`` (advertises ``sessionCapabilities.close``)."""
        return self._register("close_session", fn)

    def delete_session_handler(
        self, fn: Callable[[schema.DeleteSessionRequest, C], MaybeAwaitable[schema.DeleteSessionResponse | None]]
    ) -> Self:
        """Handle ``session/delete`` (advertises ``sessionCapabilities.delete``)."""
        return self._register("delete_session", fn)

    def set_session_mode_handler(
        self, fn: Callable[[schema.SetSessionModeRequest, C], MaybeAwaitable[schema.SetSessionModeResponse | None]]
    ) -> Self:
        """Handle ``session/set_mode``."""
        return self._register("set_session_mode", fn)

    def set_session_config_option_handler(
        self,
        fn: Callable[[schema.SetSessionConfigOptionRequest, C], MaybeAwaitable[schema.SetSessionConfigOptionResponse]],
    ) -> Self:
        """Handle ``session/set_config_option``."""
        return self._register("set_session_config_option", fn)

    def prompt_handler(
        self,
        fn: Callable[[schema.PromptRequest, P], MaybeAwaitable[schema.PromptResponse | str | None]],
        image: bool = False,
        audio: bool = False,
        embedded_context: bool = False,
    ) -> Self:
        """Handle ``session/prompt``: ``fn(request, ctx: PromptContext)`` returns a
        PromptResponse, a stop reason string, or None (``end_turn``; ``cancelled`` if the turn
        was cancelled). ``image``/``audio``/``embedded_context``: the prompt content it accepts."""
        self._register("prompt", fn)
        if image or audio or embedded_context:
            self.prompt_capabilities(image=image, audio=audio, embedded_context=embedded_context)
        return self

    def prompt_capabilities(self, image: bool = False, audio: bool = False, embedded_context: bool = False) -> Self:
        """Declare the prompt content accepted (needs a prompt handler)."""
        self._prompt_caps = schema.PromptCapabilities(image=image, audio=audio, embedded_context=embedded_context)
        return self

    def cancel_handler(self, fn: Callable[[schema.CancelNotification], MaybeAwaitable[None]]) -> Self:
        """An optional hook called on ``session/cancel`` after the SDK cancelled the turn. On a
        SyncAgent it runs on the connection's reader thread: keep it short and non-blocking (on
        an AsyncAgent an ``async def`` hook runs as a task of its own, a plain one on the
        executor)."""
        return self._register("cancel", fn)

    # ---------------------------------------------------------------- extensions

    def ext_request_handler(self, name: str, fn: Callable[[Any, C], Any]) -> Self:
        """Handle extension request ``name`` (must start with ``_``): ``fn(params, ctx)`` gets
        and returns plain JSON values."""
        self._check_ext(name, fn, self._ext_requests)
        self._ext_requests[name] = fn
        return self

    def ext_notification_handler(self, name: str, fn: Callable[[Any], Any]) -> Self:
        """Handle extension notification ``name`` (must start with ``_``): ``fn(params)``."""
        self._check_ext(name, fn, self._ext_notifications)
        self._ext_notifications[name] = fn
        return self

    def _check_ext(self, name: str, fn: object, table: dict[str, Any]) -> None:
        if not isinstance(name, str) or not name.startswith("_"):
            raise ValueError(f"extension method names must start with '_': {name!r}")
        if fn is None or not callable(fn):
            raise ValueError(f"extension handler for {name!r} is {fn!r}, not a function")
        self._check_handler(f"extension handler for {name!r}", fn)
        if name in self._ext_requests or name in self._ext_notifications:
            raise ValueError(f"a handler for extension method {name!r} is already registered")

    # ---------------------------------------------------------------- unstable (opt-in)

    def unstable(self, enabled: bool = True) -> Self:
        """Opt in to unstable ACP methods (fork, providers, MCP-over-ACP, session status,
        archive, titles, auth status, system prompts, subagent updates...).
        Without it their registration raises, and the wire answers them -32601."""
        if not enabled and (any(AGENT_HANDLERS[n].unstable for n in self._names()) or self._system_prompt[0]):
            raise ValueError("unstable(False): unstable handlers are already registered")
        self._unstable = enabled
        return self

    def _names(self) -> list[str]:
        return [row.name for row in AGENT_HANDLERS.values() if row.wire in self._handlers]

    def fork_session_handler(self, fn: Callable[[_unstable.ForkSessionRequest, C], MaybeAwaitable[_unstable.ForkSessionResponse]]) -> Self:
        """Unstable ``session/fork``."""
        return self._register("fork_session", fn)

    def list_providers_handler(self, fn: Callable[[_unstable.ListProvidersRequest, C], MaybeAwaitable[_unstable.ListProvidersResponse]]) -> Self:
        """Unstable ``providers/list``."""
        return self._register("list_providers", fn)

    def set_provider_handler(self, fn: Callable[[_unstable.SetProviderRequest, C], Any]) -> Self:
        """Unstable ``providers/set``."""
        return self._register("set_provider", fn)

    def disable_provider_handler(self, fn: Callable[[_unstable.DisableProviderRequest, C], Any]) -> Self:
        """Unstable ``providers/disable``."""
        return self._register("disable_provider", fn)

    def mcp_message_handler(self, fn: Callable[[_unstable.MessageMcpRequest, C], Any]) -> Self:
        """Unstable ``mcp/message`` (client to agent)."""
        return self._register("mcp_message", fn)

    def session_status_handler(
        self, fn: Callable[[_unstable.SessionStatusRequest, C], MaybeAwaitable[_unstable.SessionStatusResponse]]
    ) -> Self:
        """Unstable ``session/status`` (advertises ``sessionCapabilities.status``): answer
        ``open`` (in memory) or ``saved`` (resumable) without side effects; raise
        ``RequestError.resource_not_found`` for a session the agent does not know."""
        return self._register("session_status", fn)

    def archive_session_handler(
        self, fn: Callable[[_unstable.ArchiveSessionRequest, C], MaybeAwaitable[_unstable.ArchiveSessionResponse | None]]
    ) -> Self:
        """Unstable ``session/archive``; with :meth:`unarchive_session_handler` (both or
        neither) it advertises ``sessionCapabilities.archive``. The SDK cancels the session's
        running turn before the handler runs, as the spec asks of an active session."""
        return self._register("archive_session", fn)

    def unarchive_session_handler(
        self,
        fn: Callable[[_unstable.UnarchiveSessionRequest, C], MaybeAwaitable[_unstable.UnarchiveSessionResponse | None]],
    ) -> Self:
        """Unstable ``session/unarchive`` (see :meth:`archive_session_handler`)."""
        return self._register("unarchive_session", fn)

    def set_session_title_handler(
        self,
        fn: Callable[[_unstable.SetSessionTitleRequest, C], MaybeAwaitable[_unstable.SetSessionTitleResponse]],
    ) -> Self:
        """Unstable ``session/set_title`` (advertises ``sessionCapabilities.title``): store
        the title and answer it as stored (possibly normalised)."""
        return self._register("set_session_title", fn)

    def auth_status_handler(
        self, fn: Callable[[_unstable.AuthStatusRequest, C], MaybeAwaitable[_unstable.AuthStatusResponse]]
    ) -> Self:
        """Unstable ``auth/status`` (advertises ``auth.status``, which also lets the agent send
        ``auth/status_update`` with ``ctx.client.auth_status_update(...)``). It is answered
        even before ``authenticate``: never raise auth-required here."""
        return self._register("auth_status", fn)

    def system_prompt(self, enabled: bool = True, *, override: bool = False) -> Self:
        """Unstable: advertise ``sessionCapabilities.systemPrompt``, i.e. the session handlers
        accept a client ``system_prompt`` (``append`` mode; ``override=True``: also
        ``override`` mode). Needs ``.unstable(True)`` and a new_session handler. A request
        with a mode not advertised is answered -32602 before any handler runs."""
        if enabled and not self._unstable:
            raise ValueError(
                "system_prompt: client system prompts are an unstable ACP feature; "
                "call .unstable(True) on the builder first to opt in"
            )
        self._system_prompt = (bool(enabled), bool(enabled and override))
        return self

    # ---------------------------------------------------------------- options

    def agent_info(self, name: str, version: str, title: str | None = None) -> Self:
        """The ``agentInfo`` of the ``initialize`` answer."""
        self._agent_info = schema.Implementation(name=name, version=version, title=title)
        self._name = name
        return self

    def handler_executor(self, executor: Executor) -> Self:
        """Run handlers on ``executor`` (never shut down by the SDK) instead of an SDK pool."""
        if executor is None:
            raise ValueError("handler_executor: executor is None")
        self._executor = executor
        return self

    def request_timeout(self, seconds: float | None) -> Self:
        """Timeout of agent -> client calls (default 60 s; None: wait forever). Permission,
        elicitation and terminal/wait_for_exit never time out (they wait on a human or a
        command; cancellation wakes them)."""
        self._request_timeout = _positive_or_none("request_timeout", seconds)
        return self

    def cancel_grace_period(self, seconds: float | None) -> Self:
        """After ``session/cancel``, answer ``cancelled`` ourselves if the handler has not
        answered within this time (default 60 s; None: never)."""
        self._grace = _positive_or_none("cancel_grace_period", seconds, allow_zero=True)
        return self

    def max_prompt_duration(self, seconds: float | None) -> Self:
        """End any turn running longer than this with error -32800 (default: no limit)."""
        self._max_prompt = _positive_or_none("max_prompt_duration", seconds)
        return self

    def close_timeout(self, seconds: float) -> Self:
        """How long closing waits for running handlers once the client went away (default 5 s)."""
        value = _positive_or_none("close_timeout", seconds, allow_zero=True)
        if value is None:
            raise ValueError("close_timeout: a number of seconds is required")
        self._close_timeout = value
        return self

    def mcp_capabilities(self, http: bool = False, sse: bool = False) -> Self:
        """The MCP transports accepted in ``session/new`` (needs a new_session handler)."""
        self._mcp = schema.McpCapabilities(http=http, sse=sse)
        return self

    def additional_directories(self, enabled: bool = True) -> Self:
        """Advertise ``sessionCapabilities.additionalDirectories`` (needs a new_session handler)."""
        self._additional_directories = enabled
        return self

    # ---------------------------------------------------------------- decorators

    def on_initialize(self, fn: F) -> F:
        """Decorator form of :meth:`initialize_handler`."""
        self.initialize_handler(fn)
        return fn

    def on_authenticate(self, fn: F) -> F:
        """Decorator form of :meth:`authenticate_handler`."""
        self.authenticate_handler(fn)
        return fn

    def on_logout(self, fn: F) -> F:
        """Decorator form of :meth:`logout_handler`."""
        self.logout_handler(fn)
        return fn

    def on_new_session(self, fn: F) -> F:
        """Decorator form of :meth:`new_session_handler`."""
        self.new_session_handler(fn)
        return fn

    def on_load_session(self, fn: F) -> F:
        """Decorator form of :meth:`load_session_handler`."""
        self.load_session_handler(fn)
        return fn

    def on_list_sessions(self, fn: F) -> F:
        """Decorator form of :meth:`list_sessions_handler`."""
        self.list_sessions_handler(fn)
        return fn

    def on_resume_session(self, fn: F) -> F:
        """Decorator form of :meth:`resume_session_handler`."""
        self.resume_session_handler(fn)
        return fn

    def on_close_session(self, fn: F) -> F:
        """Decorator form of :meth:`close_session_handler`."""
        self.close_session_handler(fn)
        return fn

    def on_delete_session(self, fn: F) -> F:
        """Decorator form of :meth:`delete_session_handler`."""
        self.delete_session_handler(fn)
        return fn

    def on_set_session_mode(self, fn: F) -> F:
        """Decorator form of :meth:`set_session_mode_handler`."""
        self.set_session_mode_handler(fn)
        return fn

    def on_set_session_config_option(self, fn: F) -> F:
        """Decorator form of :meth:`set_session_config_option_handler`."""
        self.set_session_config_option_handler(fn)
        return fn

    @overload
    def on_prompt(self, fn: F) -> F: ...
    @overload
    def on_prompt(
        self, fn: None = None, *, image: bool = False, audio: bool = False, embedded_context: bool = False
    ) -> Callable[[F], F]: ...
    def on_prompt(
        self,
        fn: F | None = None,
        *,
        image: bool = False,
        audio: bool = False,
        embedded_context: bool = False,
    ) -> F | Callable[[F], F]:
        """Decorator form of :meth:`prompt_handler`: ``@on_prompt`` or ``@on_prompt(image=True)``."""

        def register(f: F) -> F:
            self.prompt_handler(f, image=image, audio=audio, embedded_context=embedded_context)
            return f

        return register if fn is None else register(fn)

    def on_cancel(self, fn: F) -> F:
        """Decorator form of :meth:`cancel_handler`."""
        self.cancel_handler(fn)
        return fn

    def on_ext_request(self, name: str) -> Callable[[F], F]:
        """Decorator form of :meth:`ext_request_handler`: ``@on_ext_request("_x/y")``."""

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

    def on_fork_session(self, fn: F) -> F:
        """Decorator form of :meth:`fork_session_handler` (unstable)."""
        self.fork_session_handler(fn)
        return fn

    def on_unstable(self, name: str) -> Callable[[F], F]:
        """Decorator for any unstable method by builder name, e.g. ``@on_unstable("list_providers")``."""
        row = AGENT_HANDLERS.get(name)
        if row is None or not row.unstable:
            raise ValueError(f"on_unstable: {name!r} is not an unstable agent method")

        def register(f: F) -> F:
            self._register(name, f)
            return f

        return register

    # ---------------------------------------------------------------- build

    def _spec(self) -> AgentSpec:
        """Check the configuration; the spec a runtime serves."""
        has = self._handlers.__contains__
        if self._prompt_caps is not None and not has("session/prompt"):
            raise ValueError("prompt capabilities were declared but no prompt handler is registered")
        if self._additional_directories and not has("session/new"):
            raise ValueError("additional_directories(True) needs a new_session handler")
        if self._mcp is not None and (self._mcp.http or self._mcp.sse) and not has("session/new"):
            raise ValueError("mcp_capabilities(...) needs a new_session handler (MCP servers come with session/new)")
        if self._auth_methods and not has("authenticate"):
            raise ValueError("auth_methods(...) were declared but no authenticate handler is registered")
        archive = [m for m in ARCHIVE_METHODS if has(m)]
        if archive and len(archive) != len(ARCHIVE_METHODS):
            raise ValueError(
                "archive_session and unarchive_session handlers are both or neither "
                "(one capability, sessionCapabilities.archive, covers the two)"
            )
        if self._system_prompt[0] and not has("session/new"):
            raise ValueError("system_prompt(True) needs a new_session handler")
        if has("session/load") and not has("session/prompt"):
            pass  # loading without prompting is odd but legal (a read-only history viewer)
        capabilities = derive_agent_capabilities(
            self._handlers.keys(),
            prompt=self._prompt_caps,
            mcp=self._mcp,
            additional_directories=self._additional_directories,
            system_prompt=self._system_prompt[0],
            system_prompt_override=self._system_prompt[1],
        )
        return AgentSpec(
            handlers=dict(self._handlers),
            ext_requests=dict(self._ext_requests),
            ext_notifications=dict(self._ext_notifications),
            capabilities=capabilities,
            auth_methods=self._auth_methods or (),
            agent_info=self._agent_info,
            executor=self._executor,
            request_timeout=self._request_timeout,
            ordering=self._ordering,
            wait_spin=self._wait_spin,
            cancel_grace_period=self._grace,
            max_prompt_duration=self._max_prompt,
            close_timeout=self._close_timeout,
            unstable=self._unstable,
            name=self._name,
        )


def is_async_callable(fn: object) -> bool:
    """True for an ``async def`` function (also behind ``functools.partial``, or as the
    ``__call__`` of an object): the async runtime awaits it on the loop."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = vars(type(fn)).get("__call__")  # an object whose __call__ is async
    return call is not None and inspect.iscoroutinefunction(call)


def _positive_or_none(what: str, seconds: float | None, allow_zero: bool = False) -> float | None:
    if seconds is None:
        return None
    value = float(seconds)
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{what}: expected a positive number of seconds or None, got {seconds!r}")
    return value
