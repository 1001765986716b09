"""Raw, typed agent -> client calls: one method per client-side ACP method.

Every call first checks what the client advertised on *this* connection and raises
:class:`~acp.errors.CapabilityError` before anything is sent. A proxy bound to a prompt turn
(``ctx.client``) also wakes on cancellation: the pending request is abandoned (the client gets
``$/cancel_request``) and :class:`~acp.errors.RequestCancelledError` is raised, except for
``session/request_permission``, which resolves as the ``cancelled`` outcome as the spec says.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from .. import schema
from ..capabilities import UPDATE_CAPABILITY, NegotiatedCapabilities, gated_update_tag
from ..errors import CapabilityError, RequestCancelledError
from .cancellation import CancelToken
from .state import ConnectionState

if TYPE_CHECKING:
    from ..schema import unstable as _unstable

__all__ = ["ClientProxy"]

_log = logging.getLogger("acp.agent")

_DEFAULT: Any = object()

# Calls that wait on a human or on a command: no default timeout (the turn's cancel still
# wakes them, and max_prompt_duration bounds a whole turn).
_UNBOUNDED = frozenset({"session/request_permission", "terminal/wait_for_exit", "elicitation/create"})

# Session updates of the unstable schema: sent only after the agent's opt-in.
_UNSTABLE_UPDATE_TAGS = frozenset({"subagent_update", "session_message", "session_message_chunk"})


class ClientProxy:
    """The client's methods, typed, for one connection (and optionally one prompt turn)."""

    def __init__(
        self,
        state: ConnectionState,
        token: CancelToken | None = None,
        gate: Callable[[Callable[[], None]], bool] | None = None,
    ) -> None:
        self._state = state
        self._token = token
        self._gate = gate  # the turn's "send unless answered", for session/update

    @property
    def capabilities(self) -> NegotiatedCapabilities:
        """What was negotiated in ``initialize`` on this connection."""
        return self._state.capabilities

    def uncancellable(self) -> ClientProxy:
        """The same proxy without cancellation, for clean-up calls that must go out even after
        the turn was cancelled (releasing a terminal)."""
        return ClientProxy(self._state, None, self._gate)

    # ---------------------------------------------------------------- plumbing

    def _call(
        self,
        method: str,
        params: Any,
        result_type: Any,
        timeout: float | None = _DEFAULT,
        abandon_on_cancel: bool = True,
    ) -> Any:
        if timeout is _DEFAULT:
            timeout = None if method in _UNBOUNDED else self._state.connection.request_timeout
        token = self._token
        if token is not None and token.is_cancelled:
            raise RequestCancelledError(f"{method}: the prompt turn was cancelled")
        if not abandon_on_cancel:
            token = None
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("-> %s %s", method, schema.encode(params).decode(errors="replace"))
        try:
            # A cancelled turn abandons the call ($/cancel_request; a late answer is dropped);
            # an answer that arrived first still wins.
            return self._state.connection.request(method, params, result_type, timeout=timeout, cancel=token)
        except RequestCancelledError:
            raise RequestCancelledError(f"{method}: the prompt turn was cancelled") from None

    def _require(self, method: str) -> None:
        self._state.capabilities.require_client_method(method)

    def _require_unstable(self, method: str) -> None:
        if not self._state.unstable:
            raise CapabilityError(
                f"{method} is an unstable ACP method: opt in with SyncAgent.builder().unstable(True)"
            )

    # ---------------------------------------------------------------- session

    def request_permission(
        self, request: schema.RequestPermissionRequest
    ) -> schema.RequestPermissionResponse:
        """``session/request_permission``; resolves as the ``cancelled`` outcome if the turn is
        cancelled while waiting (the request is then abandoned with ``$/cancel_request``)."""
        try:
            result: schema.RequestPermissionResponse = self._call(
                "session/request_permission", request, schema.RequestPermissionResponse
            )
        except RequestCancelledError:
            return schema.RequestPermissionResponse(outcome=schema.CancelledPermissionOutcome())
        return result

    def session_update(self, notification: schema.SessionNotification) -> bool:
        """``session/update``; False (nothing sent) if this turn was already answered.

        Raises :class:`CapabilityError` (nothing sent) for an update kind the client did not
        advertise: ``notice`` needs ``session.notices``, ``compaction_update`` /
        ``compaction_summary_chunk`` need ``session.compaction``, and the unstable
        ``subagent_update`` / ``session_message*`` need ``subagents`` (and the opt-in).
        """
        tag = gated_update_tag(notification.update)
        if tag is not None:  # baseline kinds (chunks, tool calls...) need nothing
            what = f"session/update {tag!r}"
            if tag in _UNSTABLE_UPDATE_TAGS:
                self._require_unstable(what)
            self._state.capabilities.require(UPDATE_CAPABILITY[tag], what)
        connection = self._state.connection

        def emit() -> None:
            connection.notify("session/update", notification)

        if self._gate is None:
            emit()
            return True
        if self._gate(emit):
            return True
        _log.debug("session %s: update after the prompt was answered; dropped", notification.session_id)
        return False

    # ---------------------------------------------------------------- files

    def read_text_file(self, request: schema.ReadTextFileRequest) -> schema.ReadTextFileResponse:
        """``fs/read_text_file`` (needs ``fs.readTextFile``)."""
        self._require("fs/read_text_file")
        result: schema.ReadTextFileResponse = self._call(
            "fs/read_text_file", request, schema.ReadTextFileResponse
        )
        return result

    def write_text_file(self, request: schema.WriteTextFileRequest) -> schema.WriteTextFileResponse:
        """``fs/write_text_file`` (needs ``fs.writeTextFile``)."""
        self._require("fs/write_text_file")
        result: schema.WriteTextFileResponse = self._call(
            "fs/write_text_file", request, schema.WriteTextFileResponse
        )
        return result

    # ---------------------------------------------------------------- terminals

    def create_terminal(self, request: schema.CreateTerminalRequest) -> schema.CreateTerminalResponse:
        """``terminal/create`` (needs ``terminal``); the id is then usable on this connection.

        Refused if the turn is already cancelled, but once sent it is not abandoned on cancel:
        the terminal may exist on the client, and only its id lets the agent release it.
        """
        self._require("terminal/create")
        result: schema.CreateTerminalResponse = self._call(
            "terminal/create", request, schema.CreateTerminalResponse, abandon_on_cancel=False
        )
        self._state.terminals.add(result.terminal_id)
        return result

    def terminal_output(self, request: schema.TerminalOutputRequest) -> schema.TerminalOutputResponse:
        """``terminal/output`` for a terminal created on this connection."""
        self._require("terminal/output")
        self._state.terminals.require(request.terminal_id, "terminal/output")
        result: schema.TerminalOutputResponse = self._call(
            "terminal/output", request, schema.TerminalOutputResponse
        )
        return result

    def wait_for_terminal_exit(
        self, request: schema.WaitForTerminalExitRequest
    ) -> schema.WaitForTerminalExitResponse:
        """``terminal/wait_for_exit`` (no timeout; wakes on the turn's cancellation)."""
        self._require("terminal/wait_for_exit")
        self._state.terminals.require(request.terminal_id, "terminal/wait_for_exit")
        result: schema.WaitForTerminalExitResponse = self._call(
            "terminal/wait_for_exit", request, schema.WaitForTerminalExitResponse
        )
        return result

    def kill_terminal(self, request: schema.KillTerminalRequest) -> schema.KillTerminalResponse:
        """``terminal/kill`` for a terminal created on this connection."""
        self._require("terminal/kill")
        self._state.terminals.require(request.terminal_id, "terminal/kill")
        result: schema.KillTerminalResponse = self._call(
            "terminal/kill", request, schema.KillTerminalResponse
        )
        return result

    def release_terminal(self, request: schema.ReleaseTerminalRequest) -> schema.ReleaseTerminalResponse:
        """``terminal/release``; the id is forgotten first, so a terminal is released once."""
        self._require("terminal/release")
        self._state.terminals.release(request.terminal_id)
        result: schema.ReleaseTerminalResponse = self._call(
            "terminal/release", request, schema.ReleaseTerminalResponse
        )
        return result

    # ---------------------------------------------------------------- elicitation

    def create_elicitation(self, request: schema.CreateElicitationRequest) -> schema.CreateElicitationResponse:
        """``elicitation/create`` (needs the client's elicitation capability for the mode)."""
        if isinstance(request, schema.CreateElicitationRequestUrl):
            self._state.capabilities.require("elicitation_url", "elicitation/create (url mode)")
        elif isinstance(request, schema.CreateElicitationRequestForm):
            self._state.capabilities.require("elicitation_form", "elicitation/create (form mode)")
        else:
            self._require("elicitation/create")
        result: schema.CreateElicitationResponse = self._call(
            "elicitation/create", request, schema.CreateElicitationResponse
        )
        return result

    def complete_elicitation(self, notification: schema.CompleteElicitationNotification) -> None:
        """``elicitation/complete`` notification (needs URL-mode elicitation)."""
        self._require("elicitation/complete")
        self._state.connection.notify("elicitation/complete", notification)

    # ---------------------------------------------------------------- extensions

    def ext_request(self, method: str, params: Any = None, timeout: float | None = _DEFAULT) -> Any:
        """An extension request (``method`` must start with ``_``); returns plain JSON values."""
        _check_ext(method)
        return self._call(method, params, None, timeout)

    def ext_notification(self, method: str, params: Any = None) -> None:
        """An extension notification (``method`` must start with ``_``)."""
        _check_ext(method)
        self._state.connection.notify(method, params)

    # ---------------------------------------------------------------- unstable (opt-in)

    def auth_status_update(self, notification: _unstable.AuthStatusUpdateNotification) -> bool:
        """Unstable ``auth/status_update``: tell the client the agent's authentication state
        changed. Needs ``.unstable(True)`` and an ``auth_status`` handler (it advertises
        ``auth.status``). As the spec asks, a status equal to the last one sent on this
        connection is not sent again: returns False then, True when sent."""
        self._require_unstable("auth/status_update")
        self._state.capabilities.require("auth_status", "auth/status_update")
        encoded = schema.encode(notification)
        with self._state.lock:
            if self._state.last_auth_status == encoded:
                _log.debug("auth/status_update: same status as last sent; not sent again")
                return False
            self._state.last_auth_status = encoded
            self._state.connection.notify("auth/status_update", notification)
        return True

    def message_mcp(self, request: _unstable.MessageMcpRequest) -> _unstable.MessageMcpResponse:
        """Unstable ``mcp/message`` (needs ``.unstable(True)``)."""
        from ..schema import unstable

        self._require_unstable("mcp/message")
        result: _unstable.MessageMcpResponse = self._call("mcp/message", request, unstable.MessageMcpResponse)
        return result


def _check_ext(method: str) -> None:
    if not method.startswith("_"):
        raise ValueError(f"extension method names start with '_': {method!r}")
