"""The client -> agent calls, written once for ``SyncClient`` and ``AsyncClient``.

Each call is a plan (:mod:`acp.client._plans`): it builds the request, refuses locally what
cannot be sent (before ``initialize``, a method or parameter the agent's capabilities exclude,
an unstable method without the opt-in) and yields the sending to its runtime. So a refusal,
a default, a check of the answer is written here once and holds for both runtimes.
"""

from __future__ import annotations

import functools
import logging
import os
import posixpath
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Union

import msgspec

from .. import schema
from ..capabilities import AGENT_METHOD_CAPABILITY, NegotiatedCapabilities
from ..errors import AcpError, CapabilityError, ConnectionClosedError
from ..polling import SEVERAL_CPUS
from ..rpc.handlers import warm_decoders
from ._handlers import install_handlers
from ._plans import Call, Close, Explain, Notify, Plan, Send, operation
from ._turns import TurnTracker
from ._unstable import UnstableMethods, system_prompt_value
from .config import ClientConfig
from .context import AgentProxy

if TYPE_CHECKING:
    from ..schema import unstable as _u

__all__ = [
    "DEFAULT",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "ClientCalls",
    "PromptInput",
    "UnsupportedProtocolVersionError",
    "closed_error",
    "next_cursor",
]

_log = logging.getLogger("acp.client")

#: Protocol versions this client speaks (the ``initialize`` answer must be one of them).
SUPPORTED_PROTOCOL_VERSIONS: frozenset[int] = frozenset({schema.PROTOCOL_VERSION})

#: What ``prompt()`` accepts: a string (one text block) or a sequence of content blocks
#: (plain strings in it become text blocks too).
PromptInput = Union[str, Sequence[Union[schema.ContentBlock, str]]]

DEFAULT: Any = object()  # "use the configured timeout"


class UnsupportedProtocolVersionError(AcpError):
    """The agent answered ``initialize`` with a protocol version this client does not speak.

    As the spec asks, the client closed the connection; tell the user which versions differ.
    """

    def __init__(self, requested: int, answered: int) -> None:
        self.requested = requested
        self.answered = answered
        supported = ", ".join(str(v) for v in sorted(SUPPORTED_PROTOCOL_VERSIONS))
        super().__init__(
            f"the agent answered protocol version {answered}, which this client does not support "
            f"(requested {requested}; supported: {supported}); the connection was closed"
        )


# ---------------------------------------------------------------------- helpers


#: The stable methods, looked up first (``_STABLE_AGENT_METHODS.get(m) or _agent_method(m)``
#: in the hot path: a call less for nearly every call).
_STABLE_AGENT_METHODS = schema.STABLE_AGENT_METHODS


def _agent_method(method: str) -> schema.MethodSpec:
    spec = _STABLE_AGENT_METHODS.get(method)
    return spec if spec is not None else schema.AGENT_METHODS[method]


def _content(prompt: PromptInput) -> list[schema.ContentBlock]:
    if isinstance(prompt, str):
        return [schema.TextContent(text=prompt)]
    return [schema.TextContent(text=b) if isinstance(b, str) else b for b in prompt]


def _check_absolute(what: str, path: str) -> str:
    path = os.fspath(path)
    # The agent may run elsewhere: accept an absolute path in either convention.
    if posixpath.isabs(path):
        return path
    import ntpath  # only now: importing it costs ~0.1 ms

    if not ntpath.isabs(path):
        raise ValueError(f"{what} must be an absolute path (got {path!r})")
    return path


def _dirs(directories: Sequence[str] | None) -> list[str] | None:
    if directories is None:
        return None
    return [_check_absolute("additional directory", d) for d in directories]


def _check_ext(method: str, params: Any) -> None:
    if not method.startswith("_"):
        raise ValueError(f"extension method names start with '_' (got {method!r})")
    # JSON-RPC params are structured: refuse here rather than get -32600 from the agent.
    if params is not None and not isinstance(params, (dict, list, tuple, msgspec.Struct)):
        raise TypeError(f"{method}: params must be a JSON object or array, not {type(params).__name__}")


_BY_TYPE: dict[Any, schema.MethodSpec] = {}


def _method_for_type(tp: type) -> schema.MethodSpec:
    """The client -> agent method whose params have type ``tp``."""
    if not _BY_TYPE:
        for row in schema.STABLE_AGENT_METHODS.values():
            _BY_TYPE.setdefault(row.params_type, row)
    spec = _BY_TYPE.get(tp)
    if spec is None and tp.__module__.endswith("unstable"):
        for row in schema.AGENT_METHODS.values():
            _BY_TYPE.setdefault(row.params_type, row)
        spec = _BY_TYPE.get(tp)
    if spec is None or spec.name == "$/cancel_request":
        raise TypeError(f"{tp.__name__} is not the params type of a client -> agent method")
    return spec


def closed_error(method: str, by_us: bool) -> ConnectionClosedError:
    """Why ``method`` cannot go out when no process can say more: closed by us, or by the agent."""
    if by_us:
        return ConnectionClosedError(f"{method}: the client is closed")
    return ConnectionClosedError(f"{method}: the agent closed the connection")


def next_cursor(page: schema.ListSessionsResponse, seen: set[str]) -> str | None:
    """The cursor of the page after ``page`` (None: the listing is complete); a cursor the
    agent already returned raises :class:`AcpError` instead of looping forever."""
    cursor = page.next_cursor
    if not cursor:
        return None
    if cursor in seen:
        raise AcpError(f"session/list: the agent returned the cursor {cursor!r} twice")
    seen.add(cursor)
    return cursor


def _first_turn_types(config: ClientConfig) -> list[Any]:
    """What a first turn decodes: the answers to initialize, session/new and session/prompt,
    the updates (every client takes them), and the params of each client method it handles."""
    answers = [schema.STABLE_AGENT_METHODS[m].result_type for m in ("initialize", "session/new", "session/prompt")]
    handled = sorted(m for m in config.handlers.methods() if m in schema.CLIENT_METHODS)
    return [*answers, schema.SessionNotification, *(schema.CLIENT_METHODS[m].params_type for m in handled)]


# ---------------------------------------------------------------------- the calls


class ClientCalls(UnstableMethods):
    """Everything a client does that does not depend on its runtime: state, checks, calls.

    A runtime subclass hands its (unstarted) connection to :meth:`_attach` and says how effects
    are performed (it derives from :class:`BlockingCalls` or :class:`AwaitableCalls` too).
    """

    _config: ClientConfig
    _turns: TurnTracker
    #: How the runtime's builder is spelled in error messages.
    _builder_name = "SyncClient.builder()"

    def _attach(
        self, config: ClientConfig, conn: Any, transport: Any, process: Any, owned_tap: Any, turns: TurnTracker
    ) -> None:
        """Take over ``conn`` (not started yet, over ``transport``): register the handlers, start it."""
        self._config = config
        self._turns = turns
        self._negotiated: NegotiatedCapabilities | None = None
        self._initializing = False
        self._state_lock = threading.Lock()  # only around the flags, never across a call
        self._closed = False
        self._conn = conn
        self._transport = transport
        self._process_transport = process
        self._owned_tap = owned_tap
        self._agent = AgentProxy(conn)
        install_handlers(conn, self, config.handlers, turns)  # type: ignore[arg-type]  # a runtime subclass
        conn.start()
        if process is not None and SEVERAL_CPUS:
            # While the agent process starts (tens of ms, idle here), build the decoders of
            # what a first turn receives, which each cost a few ms on first use: the
            # session/update decoder alone takes ~4.5 ms (msgspec builds the union once). On
            # one CPU this would only delay the agent's start: the decoders come when used.
            conn.call_later(0.0, functools.partial(warm_decoders, _first_turn_types(config)))

    # ------------------------------------------------------------------ state

    @property
    def is_closed(self) -> bool:
        """True once closed, or once the agent went away."""
        return self._closed or bool(self._conn.is_closed)

    @property
    def agent(self) -> AgentProxy:
        """Raw requests/notifications to the agent, without any local checks (awaitable
        requests on an ``AsyncClient``)."""
        return self._agent

    def _state_name(self) -> str:
        return "closed" if self.is_closed else "initialized" if self.is_initialized else "new"

    def _ends_turn(self, exc: BaseException) -> bool:
        """Whether ``exc``, interrupting ``prompt()``, means the user gave up on the turn (the
        asyncio runtime: the awaiting task was cancelled), so ``session/cancel`` goes out."""
        return False

    @property
    def capabilities(self) -> NegotiatedCapabilities:
        """What both sides declared in ``initialize`` (raises :class:`CapabilityError` before)."""
        negotiated = self._negotiated
        if negotiated is None:
            raise CapabilityError("not initialized yet: call initialize() first")
        return negotiated

    @property
    def is_initialized(self) -> bool:
        """True once ``initialize()`` succeeded."""
        return self._negotiated is not None

    @property
    def agent_info(self) -> schema.Implementation | None:
        """The agent's ``agentInfo`` (None before ``initialize`` or when it sent none)."""
        negotiated = self._negotiated
        return negotiated.agent_info if negotiated is not None else None

    @property
    def client_capabilities(self) -> schema.ClientCapabilities:
        """The capabilities this client advertises (derived from its handlers)."""
        return self._config.capabilities

    # ------------------------------------------------------------------ checks

    def _check_unstable(self, method: str) -> None:
        if not self._config.unstable:
            raise CapabilityError(
                f"{method} is an unstable ACP method: opt in with {self._builder_name}.unstable(True)"
            )

    def _refuse(self, method: str) -> NegotiatedCapabilities:
        """Refuse locally what the negotiation rules out (the closed state aside)."""
        negotiated = self._negotiated
        if negotiated is None:
            raise CapabilityError(f"{method}: call initialize() first")
        negotiated.require_agent_method(method)
        return negotiated

    def _check(self, method: str, unstable: bool = False) -> Plan[NegotiatedCapabilities]:
        """Refuse locally whatever cannot be sent now (nothing goes out)."""
        if unstable:
            self._check_unstable(method)
        if self.is_closed:
            raise (yield Explain(method))
        return self._refuse(method)

    def _check_params(self, negotiated: NegotiatedCapabilities, method: str, params: Any) -> None:
        """Parameters the agent's capabilities rule out (the spec's MUST NOTs)."""
        if type(params) is schema.PromptRequest:
            # Every prompt: only its content blocks can need a capability (no getattr probes).
            for block in params.prompt:
                if type(block) is not schema.TextContent:  # always allowed; the common case
                    self._check_block(negotiated, block)
            return
        system_prompt = getattr(params, "system_prompt", None)
        if system_prompt is not None:
            self._check_unstable_param(method, "system_prompt")
            negotiated.require("system_prompt", f"{method} with a system_prompt")
            if system_prompt.mode == "override":
                negotiated.require("system_prompt_override", f"{method} with a system_prompt in 'override' mode")
            if not system_prompt.content:
                raise ValueError(f"{method}: system_prompt.content must not be empty")
        if isinstance(params, schema.ListSessionsRequest) and params.archived is not None:
            self._check_unstable_param(method, "archived")
            negotiated.require("archive_session", f"{method} with an archived filter")
        if getattr(params, "additional_directories", None) is not None:
            negotiated.require("additional_directories", f"{method} with additional_directories")
        for server in getattr(params, "mcp_servers", None) or ():
            if isinstance(server, schema.McpServerHttp):
                negotiated.require("mcp_http", f"{method} with an HTTP MCP server")
            elif isinstance(server, schema.McpServerSse):
                negotiated.require("mcp_sse", f"{method} with an SSE MCP server")
        if isinstance(params, schema.PromptRequest):  # one with fields this SDK does not know
            for block in params.prompt:
                self._check_block(negotiated, block)

    @staticmethod
    def _check_block(negotiated: NegotiatedCapabilities, block: Any) -> None:
        if isinstance(block, schema.ImageContent):
            negotiated.require("image_prompts", "session/prompt with image content")
        elif isinstance(block, schema.AudioContent):
            negotiated.require("audio_prompts", "session/prompt with audio content")
        elif isinstance(block, schema.EmbeddedResource):
            negotiated.require("embedded_context_prompts", "session/prompt with an embedded resource")

    def _check_unstable_param(self, method: str, name: str) -> None:
        if not self._config.unstable:
            raise CapabilityError(
                f"{method}: {name} is an unstable ACP feature: opt in with {self._builder_name}.unstable(True)"
            )

    def _check_listing(self, archived: Any) -> None:
        """``iter_sessions``' checks, made when it is called (the pages come later)."""
        negotiated = self._refuse("session/list")
        self._check_params(negotiated, "session/list", schema.ListSessionsRequest(archived=archived))

    # ------------------------------------------------------------------ core

    def _request(self, method: str, params: Any, *, timeout: Any = DEFAULT) -> Call[Any]:
        """Check ``method`` with ``params`` and describe its sending: the ``Send`` itself (the
        common case: no generator to create and resume), or a plan when the connection is
        closed (the runtime explains why) or DEBUG logging wants the answer."""
        spec = _STABLE_AGENT_METHODS.get(method) or _agent_method(method)
        if spec.unstable:
            self._check_unstable(method)
        negotiated = self._negotiated
        if negotiated is None or method in AGENT_METHOD_CAPABILITY:
            # Refused, or gated by a capability: a closed connection is the first reason given.
            if self.is_closed:
                return self._explain(method)
            negotiated = self._refuse(method)
        # Else a closed connection refuses the sending itself, and the runtime explains it
        # as it explains an Explain (no look at the closed state on every call).
        self._check_params(negotiated, method, params)
        if timeout is DEFAULT:
            timeout = self._config.request_timeout
        effect = Send(method, params, spec.result_type, timeout)
        if _log.isEnabledFor(logging.DEBUG):
            return self._logged(effect)
        return effect

    def _explain(self, method: str) -> Plan[Any]:
        raise (yield Explain(method))

    def _logged(self, effect: Send) -> Plan[Any]:
        _log.debug("-> %s %s", effect.method, schema.encode(effect.params).decode("utf-8", "replace"))
        result = yield effect
        _log.debug("<- %s %r", effect.method, result)
        return result

    def _send(self, method: str, params: Any, *, timeout: Any = DEFAULT) -> Plan[Any]:
        """Check, send ``method`` and resume with its typed result (inside a larger plan)."""
        call = self._request(method, params, timeout=timeout)
        return (yield call) if isinstance(call, Send) else (yield from call)

    def _notify(self, method: str, params: Any) -> Plan[None]:
        """Check and send the notification ``method``."""
        spec = _agent_method(method)
        yield from self._check(method, spec.unstable)
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("-> %s %s", method, schema.encode(params).decode("utf-8", "replace"))
        yield Notify(method, params)

    @operation
    def call(self, request: Any, *, timeout: float | None = DEFAULT) -> Plan[Any]:
        """Send a full request object (``schema.NewSessionRequest(...)``...) with the same
        checks as the typed methods; the method is found from the request's type. Returns the
        typed response (None for a notification such as ``CancelNotification``)."""
        if isinstance(request, schema.InitializeRequest):
            return (yield from self._initialize(request, timeout))
        if isinstance(request, schema.PromptRequest):
            call = self._prompt(request, timeout)
            return (yield call) if isinstance(call, Send) else (yield from call)
        if isinstance(request, schema.CancelNotification):
            yield from self._cancel(request.session_id, request.field_meta)
            return None
        spec = _method_for_type(type(request))
        if spec.result_type is None:
            yield from self._notify(spec.name, request)
            return None
        return (yield from self._send(spec.name, request, timeout=timeout))

    # ------------------------------------------------------------------ initialization

    @operation
    def initialize(
        self,
        protocol_version: int = schema.PROTOCOL_VERSION,
        *,
        meta: dict[str, Any] | None = None,
        timeout: float | None = DEFAULT,
    ) -> Plan[schema.InitializeResponse]:
        """``initialize``: negotiate the protocol version and capabilities; call it first.

        Sends the derived client capabilities and the builder's ``client_info``. If the agent
        answers a version this client does not speak, the connection is closed and
        :class:`UnsupportedProtocolVersionError` raised.
        """
        request = schema.InitializeRequest(
            protocol_version=protocol_version,
            client_capabilities=self._config.capabilities,
            client_info=self._config.client_info,
            field_meta=meta,
        )
        return self._initialize(request, timeout)

    def _initialize(self, request: schema.InitializeRequest, timeout: Any) -> Plan[schema.InitializeResponse]:
        if request.protocol_version not in SUPPORTED_PROTOCOL_VERSIONS:
            raise ValueError(f"protocol version {request.protocol_version} is not supported by this client")
        with self._state_lock:
            if self._negotiated is not None:
                raise AcpError("initialize: this connection is already initialized")
            if self._initializing:
                raise AcpError("initialize: already in progress on this connection")
            self._initializing = True
        try:
            if self.is_closed:
                raise (yield Explain("initialize"))
            if timeout is DEFAULT:
                timeout = self._config.request_timeout
            _log.debug("-> initialize %r", request)
            response: schema.InitializeResponse = yield Send(
                "initialize", request, schema.InitializeResponse, timeout, keep_subclass=True
            )
            if response.protocol_version not in SUPPORTED_PROTOCOL_VERSIONS:
                error = UnsupportedProtocolVersionError(request.protocol_version, response.protocol_version)
                _log.warning("%s", error)
                yield Close()
                raise error
            self._negotiated = NegotiatedCapabilities.from_initialize(request, response)
        finally:
            self._initializing = False
        info = response.agent_info
        _log.debug(
            "initialized: protocol %d, agent %s", response.protocol_version,
            f"{info.name} {info.version}" if info is not None else "(no agentInfo)",
        )
        return response

    @operation
    def authenticate(
        self, method_id: str, *, meta: dict[str, Any] | None = None, timeout: float | None = DEFAULT
    ) -> Call[schema.AuthenticateResponse]:
        """``authenticate`` with one of the agent's ``auth_methods``. An agent may wait for
        the user to sign in (in a browser) before it answers: ``timeout`` (default: the
        client's request timeout) gives up, sending ``$/cancel_request``."""
        request = schema.AuthenticateRequest(method_id=method_id, field_meta=meta)
        return self._request("authenticate", request, timeout=timeout)

    @operation
    def logout(self, *, meta: dict[str, Any] | None = None) -> Call[schema.LogoutResponse]:
        """``logout`` (only if the agent advertised ``auth.logout``)."""
        return self._request("logout", schema.LogoutRequest(field_meta=meta))

    # ------------------------------------------------------------------ sessions

    @operation
    def new_session(
        self,
        cwd: str,
        mcp_servers: Sequence[schema.McpServer] = (),
        additional_directories: Sequence[str] | None = None,
        *,
        system_prompt: _u.SystemPrompt | str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Call[schema.NewSessionResponse]:
        """``session/new`` in the absolute directory ``cwd``; answers the new ``session_id``.

        ``system_prompt`` (unstable; needs the opt-in and the agent's
        ``sessionCapabilities.systemPrompt``): instructions for the session, a
        ``schema.unstable.SystemPrompt`` or a string (one text block, ``append`` mode);
        ``override`` mode also needs ``systemPrompt.mode.override``."""
        request = schema.NewSessionRequest(
            cwd=_check_absolute("cwd", cwd),
            mcp_servers=list(mcp_servers),
            additional_directories=_dirs(additional_directories),
            system_prompt=system_prompt_value(system_prompt),
            field_meta=meta,
        )
        return self._request("session/new", request)

    @operation
    def load_session(
        self,
        session_id: str,
        cwd: str,
        mcp_servers: Sequence[schema.McpServer] = (),
        additional_directories: Sequence[str] | None = None,
        *,
        system_prompt: _u.SystemPrompt | str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Call[schema.LoadSessionResponse]:
        """``session/load`` (if the agent advertised ``loadSession``). The agent replays the
        conversation as ``session/update`` notifications; all of them have been handled when
        this returns. ``system_prompt``: as for :meth:`new_session` (send the same one)."""
        request = schema.LoadSessionRequest(
            session_id=session_id,
            cwd=_check_absolute("cwd", cwd),
            mcp_servers=list(mcp_servers),
            additional_directories=_dirs(additional_directories),
            system_prompt=system_prompt_value(system_prompt),
            field_meta=meta,
        )
        return self._request("session/load", request)

    @operation
    def list_sessions(
        self,
        cwd: str | None = None,
        cursor: str | None = None,
        *,
        archived: _u.SessionArchiveFilter | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Call[schema.ListSessionsResponse]:
        """One page of ``session/list`` (if advertised); see :meth:`iter_sessions`.
        ``archived`` (unstable; needs ``sessionCapabilities.archive``): ``"exclude"`` (the
        agent's default), ``"include"`` or ``"only"``."""
        request = schema.ListSessionsRequest(
            cwd=None if cwd is None else _check_absolute("cwd", cwd),
            cursor=cursor,
            archived=archived,
            field_meta=meta,
        )
        return self._request("session/list", request)

    @operation
    def resume_session(
        self,
        session_id: str,
        cwd: str,
        mcp_servers: Sequence[schema.McpServer] | None = None,
        additional_directories: Sequence[str] | None = None,
        *,
        system_prompt: _u.SystemPrompt | str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Call[schema.ResumeSessionResponse]:
        """``session/resume`` (if advertised): reattach without replaying the history.
        ``system_prompt``: as for :meth:`new_session` (send the same one)."""
        request = schema.ResumeSessionRequest(
            session_id=session_id,
            cwd=_check_absolute("cwd", cwd),
            mcp_servers=None if mcp_servers is None else list(mcp_servers),
            additional_directories=_dirs(additional_directories),
            system_prompt=system_prompt_value(system_prompt),
            field_meta=meta,
        )
        return self._request("session/resume", request)

    @operation
    def close_session(self, session_id: str, *, meta: dict[str, Any] | None = None) -> Call[schema.CloseSessionResponse]:
        """``session/close`` (if advertised): the agent frees the session."""
        request = schema.CloseSessionRequest(session_id=session_id, field_meta=meta)
        return self._request("session/close", request)

    @operation
    def delete_session(self, session_id: str, *, meta: dict[str, Any] | None = None) -> Call[schema.DeleteSessionResponse]:
        """``session/delete`` (if advertised): remove the session from ``session/list``."""
        request = schema.DeleteSessionRequest(session_id=session_id, field_meta=meta)
        return self._request("session/delete", request)

    @operation
    def set_session_mode(
        self, session_id: str, mode_id: str, *, meta: dict[str, Any] | None = None
    ) -> Call[schema.SetSessionModeResponse]:
        """``session/set_mode``: switch to one of the modes the session offered."""
        request = schema.SetSessionModeRequest(session_id=session_id, mode_id=mode_id, field_meta=meta)
        return self._request("session/set_mode", request)

    @operation
    def set_session_config_option(
        self, session_id: str, config_id: str, value: str | bool, *, meta: dict[str, Any] | None = None
    ) -> Call[schema.SetSessionConfigOptionResponse]:
        """``session/set_config_option``: a select option takes a value id, a boolean one a bool."""
        request = schema.SetSessionConfigOptionRequest(
            session_id=session_id,
            config_id=config_id,
            value=value,
            type="boolean" if isinstance(value, bool) else None,
            field_meta=meta,
        )
        return self._request("session/set_config_option", request)

    # ------------------------------------------------------------------ prompt turns

    @operation
    def prompt(
        self,
        session_id: str,
        prompt: PromptInput,
        *,
        meta: dict[str, Any] | None = None,
        timeout: float | None = DEFAULT,
    ) -> Call[schema.PromptResponse]:
        """``session/prompt``: run one turn until the agent answers.

        ``prompt`` is a string (one text block) or a sequence of content blocks. When this
        returns, every ``session/update`` the agent sent during the turn has been handled.
        No timeout unless the builder set ``prompt_timeout`` (or ``timeout`` is given). If the
        agent goes away mid-turn, :class:`ConnectionClosedError` is raised.
        """
        request = schema.PromptRequest(session_id=session_id, prompt=_content(prompt), field_meta=meta)
        return self._prompt(request, timeout)

    #: True on a runtime whose prompt() is never abandoned mid-turn (``_ends_turn`` is always
    #: False): its turn is then one ``Send``, with no plan to create and drive per prompt.
    _turn_is_one_send = False

    def _prompt(self, request: schema.PromptRequest, timeout: Any) -> Call[schema.PromptResponse]:
        if timeout is DEFAULT:
            timeout = self._config.prompt_timeout
        if self._turns.cancelled:  # (most prompts: no cancel before them, nothing to do)
            self._turns.prompt_starting(request.session_id)
        call = self._request("session/prompt", request, timeout=timeout)
        if self._turn_is_one_send and type(call) is Send:
            return call
        return self._prompt_plan(request, call)

    def _prompt_plan(self, request: schema.PromptRequest, call: Call[Any]) -> Plan[schema.PromptResponse]:
        try:
            result: schema.PromptResponse = (yield call) if isinstance(call, Send) else (yield from call)
            return result
        except BaseException as exc:
            if self._ends_turn(exc) and not self.is_closed:
                # The agent would go on with a turn nobody awaits: stop it the ACP way (the
                # engine has sent $/cancel_request for the prompt itself).
                try:
                    yield from self._cancel(request.session_id, None)
                except Exception:  # pragma: no cover - closed meanwhile
                    _log.debug("session/cancel after an abandoned prompt failed", exc_info=True)
            raise

    @operation
    def cancel(self, session_id: str, *, meta: dict[str, Any] | None = None) -> Plan[None]:
        """``session/cancel``: ask the agent to stop the session's turn.

        The turn still ends with the prompt's answer (normally ``stop_reason="cancelled"``).
        As the spec requires, the SDK answers the session's pending permission requests
        ``cancelled`` (their handlers see ``ctx.cancelled``; their late answers are dropped).
        """
        yield from self._cancel(session_id, meta)

    def _cancel(self, session_id: str, meta: dict[str, Any] | None) -> Plan[None]:
        yield from self._notify("session/cancel", schema.CancelNotification(session_id=session_id, field_meta=meta))
        count = self._turns.cancel_permissions(session_id)
        if count:
            _log.debug("session %s cancelled: %d permission request(s) answered 'cancelled'", session_id, count)

    # ------------------------------------------------------------------ extensions

    @operation
    def ext_request(self, method: str, params: Any = None, *, timeout: float | None = DEFAULT) -> Plan[Any]:
        """Send the extension request ``method`` (starts with ``_``); plain JSON in and out."""
        _check_ext(method, params)
        yield from self._check(method)
        if timeout is DEFAULT:
            timeout = self._config.request_timeout
        return (yield Send(method, params, None, timeout))

    @operation
    def ext_notification(self, method: str, params: Any = None) -> Plan[None]:
        """Send the extension notification ``method`` (starts with ``_``)."""
        _check_ext(method, params)
        yield from self._check(method)
        yield Notify(method, params)

