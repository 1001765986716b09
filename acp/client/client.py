"""``SyncClient``: typed, blocking calls from a client (editor, script) to an ACP agent.

Every call is refused locally, with nothing sent, when it cannot be valid: before
``initialize()`` (:class:`CapabilityError`), for an optional method the agent did not advertise
(:class:`CapabilityError`), for an unstable method without the builder's opt-in
(:class:`CapabilityError`), and for content or parameters the agent's capabilities exclude
(images, ``additionalDirectories``, HTTP MCP servers...).
"""

from __future__ import annotations

import logging
import ntpath
import os
import posixpath
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Union

import msgspec

from .. import schema
from ..capabilities import NegotiatedCapabilities
from ..connection import Connection
from ..errors import AcpError, CapabilityError, ConnectionClosedError
from ._handlers import install_handlers
from ._turns import TurnTracker
from ._unstable import UnstableMethods, system_prompt_value
from .context import AgentProxy

if TYPE_CHECKING:
    from typing_extensions import Self

    from ..connection import WireTap
    from ..schema import unstable as _u
    from ..transport.base import Transport
    from ..transport.process import ProcessTransport
    from ..wiretap import JsonlWireTap
    from .builder import SyncClientBuilder
    from .config import ClientConfig

__all__ = [
    "AgentProcess",
    "PromptInput",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "SyncClient",
    "UnsupportedProtocolVersionError",
]

_log = logging.getLogger("acp.client")

#: Protocol versions this client speaks (the ``initialize`` answer must be one of them).
SUPPORTED_PROTOCOL_VERSIONS: frozenset[int] = frozenset({schema.PROTOCOL_VERSION})

#: What ``prompt()`` accepts: a string (one text block) or a sequence of content blocks
#: (plain strings in it become text blocks too).
PromptInput = Union[str, Sequence[Union[schema.ContentBlock, str]]]

_DEFAULT: Any = object()  # "use the configured timeout"


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


class AgentProcess:
    """Read-only facts about a spawned agent process."""

    __slots__ = ("_transport",)

    def __init__(self, transport: ProcessTransport) -> None:
        self._transport = transport

    @property
    def pid(self) -> int:
        """The agent's process id."""
        return self._transport.pid

    @property
    def argv(self) -> tuple[str, ...]:
        """The command line it was started with."""
        return self._transport.argv

    @property
    def returncode(self) -> int | None:
        """Its exit status (negative: killed by that signal), or None while it runs."""
        return self._transport.returncode

    @property
    def stderr_tail(self) -> str:
        """The last lines it wrote to stderr (at most 20 non-blank lines, 8 KiB); "" if none."""
        return self._transport.stderr_tail

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for it to exit; its return code, or None when ``timeout`` passed first."""
        return self._transport.wait(timeout)

    def __repr__(self) -> str:
        return f"AgentProcess(pid={self.pid}, returncode={self.returncode})"


def _agent_method(method: str) -> schema.MethodSpec:
    spec = schema.STABLE_AGENT_METHODS.get(method)
    return spec if spec is not None else schema.AGENT_METHODS[method]


def _content(prompt: PromptInput) -> list[schema.ContentBlock]:
    if isinstance(prompt, str):
        return [schema.TextContent(text=prompt)]
    return [schema.TextContent(text=b) if isinstance(b, str) else b for b in prompt]


def _check_absolute(what: str, path: str) -> str:
    path = os.fspath(path)
    # The agent may run elsewhere: accept an absolute path in either convention.
    if not (posixpath.isabs(path) or ntpath.isabs(path)):
        raise ValueError(f"{what} must be an absolute path (got {path!r})")
    return path


class SyncClient(UnstableMethods):
    """A connection to one agent, with a typed blocking method per client -> agent method.

    Make one with :meth:`builder`; use it as a context manager (or call :meth:`close`).
    Thread-safe: calls may come from several threads (e.g. ``cancel`` while ``prompt`` blocks).
    """

    @staticmethod
    def builder() -> SyncClientBuilder:
        """A new :class:`~acp.client.SyncClientBuilder`."""
        from .builder import SyncClientBuilder

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
        self._config = config
        self._transport = transport
        self._process_transport = process
        self._owned_tap = owned_tap
        self._conn = Connection(
            transport,
            executor=config.executor,
            request_timeout=config.request_timeout,
            wire_tap=wire_tap,
            name=config.name,
        )
        self._agent = AgentProxy(self._conn)
        self._turns = TurnTracker()
        self._negotiated: NegotiatedCapabilities | None = None
        self._init_lock = threading.Lock()
        self._closed = False
        self._process = AgentProcess(process) if process is not None else None
        install_handlers(self._conn, self, config.handlers, self._turns)
        self._conn.start()

    # ------------------------------------------------------------------ state

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

    @property
    def process(self) -> AgentProcess | None:
        """The spawned agent process (``agent_process``), else None."""
        return self._process

    @property
    def agent(self) -> AgentProxy:
        """Raw requests/notifications to the agent, without any local checks."""
        return self._agent

    @property
    def is_closed(self) -> bool:
        """True once closed, or once the agent went away."""
        return self._closed or self._conn.is_closed

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

    # ------------------------------------------------------------------ core

    def _closed_error(self, method: str) -> ConnectionClosedError:
        """Why ``method`` cannot go out: closed by us, or how the agent (process) went away."""
        if self._closed:
            return ConnectionClosedError(f"{method}: the client is closed")
        process = self._process_transport
        if process is not None:
            # It is going or gone: how it ended and its last stderr lines come quickly.
            return process.closed_error(method, timeout=1.0)
        return ConnectionClosedError(f"{method}: the agent closed the connection")

    def _check(self, method: str, unstable: bool = False) -> NegotiatedCapabilities:
        """Refuse locally whatever cannot be sent now (nothing goes out)."""
        if unstable and not self._config.unstable:
            raise CapabilityError(
                f"{method} is an unstable ACP method: opt in with SyncClient.builder().unstable(True)"
            )
        if self.is_closed:
            raise self._closed_error(method)
        negotiated = self._negotiated
        if negotiated is None:
            raise CapabilityError(f"{method}: call initialize() first")
        negotiated.require_agent_method(method)
        return negotiated

    def _check_params(self, negotiated: NegotiatedCapabilities, method: str, params: Any) -> None:
        """Parameters the agent's capabilities rule out (the spec's MUST NOTs)."""
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
        if isinstance(params, schema.PromptRequest):
            for block in params.prompt:
                if type(block) is schema.TextContent:  # always allowed; the common case
                    continue
                if isinstance(block, schema.ImageContent):
                    negotiated.require("image_prompts", "session/prompt with image content")
                elif isinstance(block, schema.AudioContent):
                    negotiated.require("audio_prompts", "session/prompt with audio content")
                elif isinstance(block, schema.EmbeddedResource):
                    negotiated.require("embedded_context_prompts", "session/prompt with an embedded resource")

    def _check_unstable_param(self, method: str, name: str) -> None:
        if not self._config.unstable:
            raise CapabilityError(
                f"{method}: {name} is an unstable ACP feature: opt in with SyncClient.builder().unstable(True)"
            )

    def _send(self, method: str, params: Any, *, timeout: Any = _DEFAULT) -> Any:
        """Check, send ``method`` and block for its typed result."""
        spec = _agent_method(method)
        negotiated = self._check(method, spec.unstable)
        self._check_params(negotiated, method, params)
        if timeout is _DEFAULT:
            timeout = self._conn.request_timeout
        debug = _log.isEnabledFor(logging.DEBUG)
        if debug:
            _log.debug("-> %s %s", method, schema.encode(params).decode("utf-8", "replace"))
        try:
            result = self._conn.request(method, params, spec.result_type, timeout=timeout)
        except ConnectionClosedError as exc:
            raise self._closed_error(method) from exc
        if debug:
            _log.debug("<- %s %r", method, result)
        return result

    def _notify(self, method: str, params: Any) -> None:
        """Check and send the notification ``method``."""
        spec = _agent_method(method)
        self._check(method, spec.unstable)
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("-> %s %s", method, schema.encode(params).decode("utf-8", "replace"))
        try:
            self._conn.notify(method, params)
        except ConnectionClosedError as exc:
            raise self._closed_error(method) from exc

    def call(self, request: Any, *, timeout: float | None = _DEFAULT) -> Any:
        """Send a full request object (``schema.NewSessionRequest(...)``...) with the same
        checks as the typed methods; the method is found from the request's type. Returns the
        typed response (None for a notification such as ``CancelNotification``)."""
        if isinstance(request, schema.InitializeRequest):
            return self._initialize(request, timeout)
        if isinstance(request, schema.PromptRequest):
            return self._prompt(request, timeout)
        if isinstance(request, schema.CancelNotification):
            self.cancel(request.session_id, meta=request.field_meta)
            return None
        spec = _method_for_type(type(request))
        if spec.result_type is None:
            self._notify(spec.name, request)
            return None
        return self._send(spec.name, request, timeout=timeout)

    # ------------------------------------------------------------------ initialization

    def initialize(
        self,
        protocol_version: int = schema.PROTOCOL_VERSION,
        *,
        meta: dict[str, Any] | None = None,
        timeout: float | None = _DEFAULT,
    ) -> schema.InitializeResponse:
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

    def _initialize(self, request: schema.InitializeRequest, timeout: Any) -> schema.InitializeResponse:
        if request.protocol_version not in SUPPORTED_PROTOCOL_VERSIONS:
            raise ValueError(f"protocol version {request.protocol_version} is not supported by this client")
        with self._init_lock:
            if self._negotiated is not None:
                raise AcpError("initialize: this connection is already initialized")
            if self.is_closed:
                raise self._closed_error("initialize")
            if timeout is _DEFAULT:
                timeout = self._conn.request_timeout
            _log.debug("-> initialize %r", request)
            try:
                response: schema.InitializeResponse = self._conn.request(
                    "initialize", request, schema.InitializeResponse, timeout=timeout
                )
            except ConnectionClosedError as exc:
                if type(exc) is not ConnectionClosedError:  # e.g. a remote refusal, with its status
                    raise
                raise self._closed_error("initialize") from exc
            if response.protocol_version not in SUPPORTED_PROTOCOL_VERSIONS:
                error = UnsupportedProtocolVersionError(request.protocol_version, response.protocol_version)
                _log.warning("%s", error)
                self.close()
                raise error
            self._negotiated = NegotiatedCapabilities.from_initialize(request, response)
        info = response.agent_info
        _log.debug(
            "initialized: protocol %d, agent %s", response.protocol_version,
            f"{info.name} {info.version}" if info is not None else "(no agentInfo)",
        )
        return response

    def authenticate(self, method_id: str, *, meta: dict[str, Any] | None = None) -> schema.AuthenticateResponse:
        """``authenticate`` with one of the agent's ``auth_methods``."""
        request = schema.AuthenticateRequest(method_id=method_id, field_meta=meta)
        result: schema.AuthenticateResponse = self._send("authenticate", request)
        return result

    def logout(self, *, meta: dict[str, Any] | None = None) -> schema.LogoutResponse:
        """``logout`` (only if the agent advertised ``auth.logout``)."""
        result: schema.LogoutResponse = self._send("logout", schema.LogoutRequest(field_meta=meta))
        return result

    # ------------------------------------------------------------------ sessions

    def new_session(
        self,
        cwd: str,
        mcp_servers: Sequence[schema.McpServer] = (),
        additional_directories: Sequence[str] | None = None,
        *,
        system_prompt: _u.SystemPrompt | str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> schema.NewSessionResponse:
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
        result: schema.NewSessionResponse = self._send("session/new", request)
        return result

    def load_session(
        self,
        session_id: str,
        cwd: str,
        mcp_servers: Sequence[schema.McpServer] = (),
        additional_directories: Sequence[str] | None = None,
        *,
        system_prompt: _u.SystemPrompt | str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> schema.LoadSessionResponse:
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
        result: schema.LoadSessionResponse = self._send("session/load", request)
        return result

    def list_sessions(
        self,
        cwd: str | None = None,
        cursor: str | None = None,
        *,
        archived: _u.SessionArchiveFilter | None = None,
        meta: dict[str, Any] | None = None,
    ) -> schema.ListSessionsResponse:
        """One page of ``session/list`` (if advertised); see :meth:`iter_sessions`.
        ``archived`` (unstable; needs ``sessionCapabilities.archive``): ``"exclude"`` (the
        agent's default), ``"include"`` or ``"only"``."""
        request = schema.ListSessionsRequest(
            cwd=None if cwd is None else _check_absolute("cwd", cwd),
            cursor=cursor,
            archived=archived,
            field_meta=meta,
        )
        result: schema.ListSessionsResponse = self._send("session/list", request)
        return result

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
        negotiated = self._check("session/list")
        self._check_params(negotiated, "session/list", schema.ListSessionsRequest(archived=archived))
        return self._pages(cwd, archived, meta)

    def _pages(
        self, cwd: str | None, archived: str | None, meta: dict[str, Any] | None
    ) -> Iterator[schema.SessionInfo]:
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            page = self.list_sessions(cwd, cursor, archived=archived, meta=meta)
            yield from page.sessions
            cursor = page.next_cursor
            if not cursor:
                return
            if cursor in seen:
                raise AcpError(f"session/list: the agent returned the cursor {cursor!r} twice")
            seen.add(cursor)

    def resume_session(
        self,
        session_id: str,
        cwd: str,
        mcp_servers: Sequence[schema.McpServer] | None = None,
        additional_directories: Sequence[str] | None = None,
        *,
        system_prompt: _u.SystemPrompt | str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> schema.ResumeSessionResponse:
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
        result: schema.ResumeSessionResponse = self._send("session/resume", request)
        return result

    def close_session(self, session_id: str, *, meta: dict[str, Any] | None = None) -> schema.CloseSessionResponse:
        """``session/close`` (if advertised): the agent frees the session."""
        request = schema.CloseSessionRequest(session_id=session_id, field_meta=meta)
        result: schema.CloseSessionResponse = self._send("session/close", request)
        return result

    def delete_session(self, session_id: str, *, meta: dict[str, Any] | None = None) -> schema.DeleteSessionResponse:
        """``session/delete`` (if advertised): remove the session from ``session/list``."""
        request = schema.DeleteSessionRequest(session_id=session_id, field_meta=meta)
        result: schema.DeleteSessionResponse = self._send("session/delete", request)
        return result

    def set_session_mode(
        self, session_id: str, mode_id: str, *, meta: dict[str, Any] | None = None
    ) -> schema.SetSessionModeResponse:
        """``session/set_mode``: switch to one of the modes the session offered."""
        request = schema.SetSessionModeRequest(session_id=session_id, mode_id=mode_id, field_meta=meta)
        result: schema.SetSessionModeResponse = self._send("session/set_mode", request)
        return result

    def set_session_config_option(
        self, session_id: str, config_id: str, value: str | bool, *, meta: dict[str, Any] | None = None
    ) -> schema.SetSessionConfigOptionResponse:
        """``session/set_config_option``: a select option takes a value id, a boolean one a bool."""
        request = schema.SetSessionConfigOptionRequest(
            session_id=session_id,
            config_id=config_id,
            value=value,
            type="boolean" if isinstance(value, bool) else None,
            field_meta=meta,
        )
        result: schema.SetSessionConfigOptionResponse = self._send("session/set_config_option", request)
        return result

    # ------------------------------------------------------------------ prompt turns

    def prompt(
        self,
        session_id: str,
        prompt: PromptInput,
        *,
        meta: dict[str, Any] | None = None,
        timeout: float | None = _DEFAULT,
    ) -> schema.PromptResponse:
        """``session/prompt``: run one turn and block until the agent answers.

        ``prompt`` is a string (one text block) or a sequence of content blocks. When this
        returns, every ``session/update`` the agent sent during the turn has been handled.
        No timeout unless the builder set ``prompt_timeout`` (or ``timeout`` is given). If the
        agent goes away mid-turn, :class:`ConnectionClosedError` is raised.
        """
        request = schema.PromptRequest(session_id=session_id, prompt=_content(prompt), field_meta=meta)
        return self._prompt(request, timeout)

    def _prompt(self, request: schema.PromptRequest, timeout: Any) -> schema.PromptResponse:
        if timeout is _DEFAULT:
            timeout = self._config.prompt_timeout
        self._turns.prompt_started(request.session_id)
        try:
            result: schema.PromptResponse = self._send("session/prompt", request, timeout=timeout)
            return result
        finally:
            self._turns.prompt_finished(request.session_id)

    def cancel(self, session_id: str, *, meta: dict[str, Any] | None = None) -> None:
        """``session/cancel``: ask the agent to stop the session's turn.

        The turn still ends with the prompt's answer (normally ``stop_reason="cancelled"``).
        As the spec requires, the SDK answers the session's pending permission requests
        ``cancelled`` (their handlers see ``ctx.cancelled``; their late answers are dropped).
        """
        self._notify("session/cancel", schema.CancelNotification(session_id=session_id, field_meta=meta))
        count = self._turns.cancel_permissions(session_id)
        if count:
            _log.debug("session %s cancelled: %d permission request(s) answered 'cancelled'", session_id, count)

    # ------------------------------------------------------------------ extensions

    def ext_request(self, method: str, params: Any = None, *, timeout: float | None = _DEFAULT) -> Any:
        """Send the extension request ``method`` (starts with ``_``); plain JSON in and out."""
        _check_ext(method, params)
        self._check(method)
        if timeout is _DEFAULT:
            timeout = self._conn.request_timeout
        try:
            return self._conn.request(method, params, None, timeout=timeout)
        except ConnectionClosedError as exc:
            raise self._closed_error(method) from exc

    def ext_notification(self, method: str, params: Any = None) -> None:
        """Send the extension notification ``method`` (starts with ``_``)."""
        _check_ext(method, params)
        self._check(method)
        try:
            self._conn.notify(method, params)
        except ConnectionClosedError as exc:
            raise self._closed_error(method) from exc

    def __repr__(self) -> str:
        state = "closed" if self.is_closed else "initialized" if self.is_initialized else "new"
        return f"SyncClient({self._transport.description!r}, {state})"


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
