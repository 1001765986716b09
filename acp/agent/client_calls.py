"""The agent -> client calls, written once for both runtimes.

Each request is a small generator (its *steps*, a plan of :mod:`acp.effects`, as the client's
calls to the agent are): it checks what the client advertised on this connection (raising
:class:`~acp.errors.CapabilityError` before anything is sent), yields one
:class:`~acp.effects.Send` per request it needs, and interprets the answers. A runtime drives
the steps with the shared drivers: :class:`~acp.agent.ClientProxy` blocks on the threaded
connection (:func:`acp.effects.run`), :class:`~acp.agent.AsyncClientProxy` awaits the asyncio
one (:func:`acp.effects.run_awaiting`). Answers are sent
back into the generator, errors thrown into it (a cancelled call as
:class:`~acp.errors.RequestCancelledError` in both runtimes), so clean-up written here with
``try``/``except``/``finally`` runs the same way in both. Notifications never wait: they are
plain methods here, shared as they are.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from .. import schema
from ..capabilities import (
    _BASELINE_UPDATE_TYPES,
    UPDATE_CAPABILITY,
    NegotiatedCapabilities,
    gated_update_tag,
)
from ..effects import DEFAULT, Plan, Send
from ..errors import CapabilityError, RequestCancelledError
from .protocols import Notifier
from .state import ConnectionState

if TYPE_CHECKING:
    from ..schema import unstable as _unstable

__all__ = ["DEFAULT", "CallsToClient", "Gate", "Notifier", "Send", "Steps", "timeout_for"]

_log = logging.getLogger("acp.agent")

T = TypeVar("T")

# Calls that wait on a human or on a command: no default timeout (the turn's cancel still
# wakes them, and max_prompt_duration bounds a whole turn).
_UNBOUNDED = frozenset({"session/request_permission", "terminal/wait_for_exit", "elicitation/create"})

# Session updates of the unstable schema: sent only after the agent's opt-in.
_UNSTABLE_UPDATE_TAGS = frozenset({"subagent_update", "session_message", "session_message_chunk"})


def timeout_for(call: Send, default: float | None) -> float | None:
    """The timeout of an agent -> client call, given the connection's ``request_timeout``."""
    if call.timeout is not DEFAULT:
        return call.timeout
    return None if call.method in _UNBOUNDED else default


Steps = Plan[T]
"""Runtime-neutral steps (a plan of :mod:`acp.effects`): yield calls, receive their results,
return a value."""


Gate = Callable[[Notifier, "schema.SessionNotification"], bool]
"""A prompt turn's "send this ``session/update`` on this connection unless the prompt was
answered" (:meth:`~acp.agent.turns.Turn.send`); True if sent (or handed over to be)."""


class CallsToClient:
    """The client's methods for one connection (and optionally one prompt turn): the shared
    half of :class:`~acp.agent.ClientProxy` and :class:`~acp.agent.AsyncClientProxy`."""

    def __init__(
        self,
        state: ConnectionState,
        gate: Gate | None = None,
        connection: Notifier | None = None,
        cancellable: bool = True,
    ) -> None:
        self._state = state
        self._gate = gate  # the turn's "send unless answered", for session/update
        self._connection: Notifier = connection if connection is not None else state.connection
        self._cancellable = cancellable

    @property
    def capabilities(self) -> NegotiatedCapabilities:
        """What was negotiated in ``initialize`` on this connection."""
        return self._state.capabilities

    def uncancellable(self) -> CallsToClient:
        """The same proxy without cancellation, for clean-up calls that must go out even after
        the turn was cancelled (releasing a terminal)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- plumbing

    def _op(self, method: str, params: Any, result_type: Any, timeout: float | None = DEFAULT,
            abandon: bool = True) -> Send:
        # An uncancellable proxy (clean-up) neither refuses nor abandons its calls.
        cancellable = self._cancellable
        return Send(method, params, result_type, timeout, abandon=abandon and cancellable, refuse=cancellable)

    def _require(self, method: str) -> None:
        self._state.capabilities.require_client_method(method)

    def _require_unstable(self, method: str) -> None:
        if not self._state.unstable:
            raise CapabilityError(
                f"{method} is an unstable ACP method: opt in with .unstable(True) on the agent builder"
            )

    # ---------------------------------------------------------------- notifications

    def session_update(self, notification: schema.SessionNotification) -> bool:
        """``session/update``; False (nothing sent) if this turn was already answered.

        Raises :class:`CapabilityError` (nothing sent) for an update kind the client did not
        advertise: ``notice`` needs ``session.notices``, ``compaction_update`` /
        ``compaction_summary_chunk`` need ``session.compaction``, and the unstable
        ``subagent_update`` / ``session_message*`` need ``subagents`` (and the opt-in).
        """
        # Baseline kinds (chunks, tool calls...) need nothing: checked inline, as this runs
        # once per streamed chunk.
        if type(notification.update) not in _BASELINE_UPDATE_TYPES:
            tag = gated_update_tag(notification.update)
            if tag is not None:
                what = f"session/update {tag!r}"
                if tag in _UNSTABLE_UPDATE_TAGS:
                    self._require_unstable(what)
                self._state.capabilities.require(UPDATE_CAPABILITY[tag], what)
        gate = self._gate
        if gate is None:
            self._connection.notify("session/update", notification)
            return True
        if gate(self._connection, notification):
            return True
        _log.debug("session %s: update after the prompt was answered; dropped", notification.session_id)
        return False

    def complete_elicitation(self, notification: schema.CompleteElicitationNotification) -> None:
        """``elicitation/complete`` notification (needs URL-mode elicitation)."""
        self._require("elicitation/complete")
        self._connection.notify("elicitation/complete", notification)

    def ext_notification(self, method: str, params: Any = None) -> None:
        """An extension notification (``method`` must start with ``_``)."""
        _check_ext(method)
        self._connection.notify(method, params)

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
            self._connection.notify("auth/status_update", notification)
        return True

    # ---------------------------------------------------------------- the steps of each request

    def _request_permission(self, request: schema.RequestPermissionRequest) -> Steps[schema.RequestPermissionResponse]:
        try:
            result: schema.RequestPermissionResponse = yield self._op(
                "session/request_permission", request, schema.RequestPermissionResponse
            )
        except RequestCancelledError:
            return schema.RequestPermissionResponse(outcome=schema.CancelledPermissionOutcome())
        return result

    def _read_text_file(self, request: schema.ReadTextFileRequest) -> Steps[schema.ReadTextFileResponse]:
        result: schema.ReadTextFileResponse = yield self._read_text_file_call(request)
        return result

    def _read_text_file_call(self, request: schema.ReadTextFileRequest) -> Send:
        """The one call of ``fs/read_text_file``, checked: a runtime may perform it directly,
        with no steps to drive (the blocking ``read_file`` does, once per read)."""
        self._state.capabilities.require_client_method("fs/read_text_file")
        cancellable = self._cancellable  # self._op(), inlined
        return Send("fs/read_text_file", request, schema.ReadTextFileResponse, DEFAULT, abandon=cancellable, refuse=cancellable)

    def _write_text_file(self, request: schema.WriteTextFileRequest) -> Steps[schema.WriteTextFileResponse]:
        self._require("fs/write_text_file")
        result: schema.WriteTextFileResponse = yield self._op(
            "fs/write_text_file", request, schema.WriteTextFileResponse
        )
        return result

    def _create_terminal(self, request: schema.CreateTerminalRequest) -> Steps[schema.CreateTerminalResponse]:
        self._require("terminal/create")
        # Not abandoned on cancel: the terminal may exist on the client, and only its id lets
        # the agent release it.
        result: schema.CreateTerminalResponse = yield self._op(
            "terminal/create", request, schema.CreateTerminalResponse, abandon=False
        )
        self._state.terminals.add(result.terminal_id)
        return result

    def _terminal_call(self, method: str, request: Any, result_type: Any) -> Steps[Any]:
        # terminal/output, wait_for_exit, kill: only for a terminal created on this connection.
        self._require(method)
        self._state.terminals.require(request.terminal_id, method)
        return (yield self._op(method, request, result_type))

    def _release_terminal(self, request: schema.ReleaseTerminalRequest) -> Steps[schema.ReleaseTerminalResponse]:
        self._require("terminal/release")
        self._state.terminals.release(request.terminal_id)  # forgotten first: released once
        result: schema.ReleaseTerminalResponse = yield self._op(
            "terminal/release", request, schema.ReleaseTerminalResponse
        )
        return result

    def _create_elicitation(self, request: schema.CreateElicitationRequest) -> Steps[schema.CreateElicitationResponse]:
        if isinstance(request, schema.CreateElicitationRequestUrl):
            self._state.capabilities.require("elicitation_url", "elicitation/create (url mode)")
        elif isinstance(request, schema.CreateElicitationRequestForm):
            self._state.capabilities.require("elicitation_form", "elicitation/create (form mode)")
        else:
            self._require("elicitation/create")
        result: schema.CreateElicitationResponse = yield self._op(
            "elicitation/create", request, schema.CreateElicitationResponse
        )
        return result

    def _ext_request(self, method: str, params: Any, timeout: float | None) -> Steps[Any]:
        _check_ext(method)
        return (yield self._op(method, params, None, timeout))

    def _message_mcp(self, request: _unstable.MessageMcpRequest) -> Steps[_unstable.MessageMcpResponse]:
        from ..schema import unstable

        self._require_unstable("mcp/message")
        result: _unstable.MessageMcpResponse = yield self._op("mcp/message", request, unstable.MessageMcpResponse)
        return result


def _check_ext(method: str) -> None:
    if not method.startswith("_"):
        raise ValueError(f"extension method names start with '_': {method!r}")
