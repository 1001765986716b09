"""What the agent does around its handlers, written once for both runtimes.

The runtimes' wiring (:mod:`acp.agent.dispatch` over threads, :mod:`acp.agent.aio_dispatch`
over asyncio) only differs in how a handler is called (directly, or awaited / run on the
executor) and how a cancelled turn's handler is woken. Everything the protocol asks of the
agent is here: which methods get which treatment (:func:`routes`), the checks before a handler
runs, the interpretation of what it returned, the ``initialize`` record, the turn's arrival
and its one answer (:func:`conclude_prompt` / :func:`prompt_failed`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from .. import schema
from ..errors import INTERNAL_ERROR, INVALID_PARAMS, RequestError
from . import initialize as init
from .methods import BY_WIRE, params_type, result_type
from .spec import AgentSpec
from .state import Call, ConnectionState
from .turns import Turn

__all__ = [
    "Route",
    "routes",
    "log_in",
    "before",
    "answer_value",
    "check_auth_method",
    "initialize_response",
    "record_initialize",
    "begin_turn",
    "conclude_prompt",
    "prompt_failed",
    "prompt_response",
]

_log = logging.getLogger("acp.agent")

# Route kinds: how each registered method is wired.
INITIALIZE, CANCEL, PROMPT, CLOSE_SESSION, AUTHENTICATE, REQUEST, NOTIFICATION = (
    "initialize", "cancel", "prompt", "close_session", "authenticate", "request", "notification"
)

Route = tuple[str, str, Any, Any, bool]
"""(kind, wire method, user function or None, params type, is an extension method)."""


def routes(spec: AgentSpec) -> Iterator[Route]:
    """Every method ``spec`` serves, with the treatment it needs. ``initialize`` and
    ``session/cancel`` always (the SDK answers / acts on them itself)."""
    yield INITIALIZE, "initialize", spec.handlers.get("initialize"), schema.InitializeRequest, False
    yield CANCEL, "session/cancel", spec.handlers.get("session/cancel"), schema.CancelNotification, False
    for wire, fn in spec.handlers.items():
        if wire in ("initialize", "session/cancel"):
            continue
        if wire == "session/prompt":
            kind = PROMPT
        elif wire in ("session/close", "session/archive"):
            kind = CLOSE_SESSION
        elif wire == "authenticate":
            kind = AUTHENTICATE
        elif BY_WIRE[wire].notification:
            kind = NOTIFICATION
        else:
            kind = REQUEST
        yield kind, wire, fn, params_type(wire), False
    for name, fn in spec.ext_requests.items():
        yield REQUEST, name, fn, None, True
    for name, fn in spec.ext_notifications.items():
        yield NOTIFICATION, name, fn, None, True


def log_in(method: str, params: Any) -> None:
    """The DEBUG line of an inbound message (payloads only at DEBUG)."""
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug("<- %s %s", method, schema.encode(params).decode(errors="replace"))


def answer_value(method: str, result: Any, ext: bool = False) -> Any:
    """Check a handler's return value: None only where every response field is optional."""
    if ext:
        return result
    rtype = result_type(method)
    if result is not None:
        if isinstance(rtype, type) and not isinstance(result, rtype):
            # Sent as is, a wrong value would reach the client as a malformed answer.
            _log.error("%s handler returned %s, not %s", method, type(result).__name__, rtype.__name__)
            raise RequestError(INTERNAL_ERROR, "Internal error")
        return result
    if isinstance(rtype, type) and issubclass(rtype, msgspec.Struct):
        required = [f.name for f in msgspec.structs.fields(rtype) if f.required]
        if required:
            _log.error("%s handler returned None, but %s requires %s", method, rtype.__name__, required)
            raise RequestError(INTERNAL_ERROR, "Internal error")
    return None


# Session lifecycle requests that may carry a client system prompt (unstable).
_SYSTEM_PROMPT_METHODS = frozenset({"session/new", "session/load", "session/resume", "session/fork"})


def before(method: str, params: Any, state: ConnectionState, ext: bool = False) -> None:
    """What the spec asks of the agent before a request handler runs (and the DEBUG line)."""
    log_in(method, params)
    if not ext and method in _SYSTEM_PROMPT_METHODS:
        _check_system_prompt(method, getattr(params, "system_prompt", None), state)


def _check_system_prompt(method: str, system_prompt: Any, state: ConnectionState) -> None:
    """Spec: an agent that cannot apply a system prompt MUST answer an error instead of
    creating (loading, resuming, forking) the session; -32602 before the handler runs."""
    if system_prompt is None:
        return
    caps = state.capabilities
    mode = system_prompt.mode
    problem = None
    if not caps.supports_system_prompt():
        problem = "this agent does not accept a client systemPrompt"
    elif mode == "override" and not caps.supports_system_prompt_override():
        problem = "this agent does not support systemPrompt mode 'override'"
    elif mode not in ("append", "override"):
        problem = f"unsupported systemPrompt mode {mode!r}"
    elif not system_prompt.content:
        problem = "systemPrompt.content must not be empty"
    if problem is not None:
        raise RequestError(INVALID_PARAMS, f"{method}: {problem}", {"systemPrompt": {"mode": mode}})


def check_auth_method(request: schema.AuthenticateRequest, state: ConnectionState) -> None:
    """``authenticate`` with a method the ``initialize`` answer did not offer: -32602."""
    log_in("authenticate", request)
    offered = state.capabilities.auth_methods
    if state.initialized and offered:
        ids = {getattr(m, "id", None) if not isinstance(m, dict) else m.get("id") for m in offered}
        if request.method_id not in ids:
            raise RequestError(
                INVALID_PARAMS,
                f"Unknown authentication method {request.method_id!r}",
                {"methodId": request.method_id},
            )


def initialize_response(spec: AgentSpec, request: schema.InitializeRequest) -> schema.InitializeResponse:
    """The SDK's own ``initialize`` answer (no initialize handler registered)."""
    return init.default_initialize(request, spec.capabilities, spec.auth_methods, spec.agent_info)


def record_initialize(
    state: ConnectionState, request: schema.InitializeRequest, response: Any
) -> schema.InitializeResponse:
    """Record what was negotiated; called before the answer goes out (the client may call
    back at once). A user handler's answer that is not an InitializeResponse is -32603."""
    if not isinstance(response, schema.InitializeResponse):
        _log.error("initialize handler returned %r, not an InitializeResponse", type(response))
        raise RequestError(INTERNAL_ERROR, "Internal error")
    state.capabilities = init.record(request, response)
    state.initialized = True
    _log.info(
        "initialized: protocol %s (client asked %s), client %s",
        response.protocol_version,
        request.protocol_version,
        request.client_info.name if request.client_info else "?",
    )
    return response


def cancel_turn(state: ConnectionState, notification: schema.CancelNotification) -> None:
    """``session/cancel``, the moment it is read: cancel the session's turn (grace period on)."""
    _log.debug("<- session/cancel %s", notification.session_id)
    state.turns.cancel(notification.session_id)


def begin_turn(state: ConnectionState) -> Callable[[Any, Any], None]:
    """The prompt's arrival hook: the turn exists before any line read after this prompt is
    handled, so a ``session/cancel`` sent right behind it finds it. A busy session raises
    -32600 here, answered at once."""

    def arrived(request: schema.PromptRequest, call: Call) -> None:
        call.attachment = state.turns.begin(request.session_id, call)

    return arrived


def conclude_prompt(turn: Turn, request: schema.PromptRequest, result: Any) -> schema.PromptResponse | None:
    """The handler returned ``result``: claim the turn's one answer. Returns what the runtime
    should answer, or None when the answer went out here (a cancelled turn: answered at once,
    so it is on the wire when the turn counts as answered; session/close waits for that) or
    someone answered first (the runtime then finds the call answered and sends nothing)."""
    # Looked at once: a cancel that comes later than this came after the handler's answer.
    cancelled = turn.is_cancelled
    response = prompt_response(result, cancelled)
    if cancelled:
        if not turn.answer(response):
            _log.debug("session %s: the prompt was already answered; handler's answer dropped", request.session_id)
        return None
    if not turn.finish():
        _log.debug("session %s: the prompt was already answered; handler's answer dropped", request.session_id)
    return response


def prompt_failed(turn: Turn, request: schema.PromptRequest, exc: BaseException) -> None:
    """The handler raised ``exc`` (SystemExit and task cancellation too: the turn must end, or
    the session stays busy). Re-raises it for the runtime to answer (RequestError keeps its
    code) unless the turn was cancelled: then the answer is ``cancelled``, sent here."""
    if not turn.is_cancelled:
        if turn.finish():
            raise exc
        _log.debug("session %s: handler failed after the prompt was answered: %r", request.session_id, exc)
        return
    # Spec: a cancelled turn is answered "cancelled" even if cancelling made it fail.
    _log.debug("session %s: handler raised after cancel (%r); answering cancelled", request.session_id, exc)
    if not turn.answer(schema.PromptResponse(stop_reason=schema.StopReasons.CANCELLED)):
        _log.debug("session %s: the prompt was already answered", request.session_id)


def prompt_response(result: Any, cancelled: bool) -> schema.PromptResponse:
    """A prompt handler's return value as the PromptResponse to send."""
    if isinstance(result, schema.PromptResponse):
        response = result
    elif result is None:
        response = schema.PromptResponse(stop_reason=schema.StopReasons.END_TURN)
    elif isinstance(result, str):
        response = schema.PromptResponse(stop_reason=result)
    else:
        _log.error("prompt handler returned %r; expected PromptResponse, a stop reason or None", type(result))
        raise RequestError(INTERNAL_ERROR, "Internal error")
    if cancelled and response.stop_reason != schema.StopReasons.CANCELLED:
        # Spec (prompt-turn): once the client cancelled, the answer MUST be "cancelled".
        _log.debug("turn was cancelled; answering 'cancelled' instead of %r", response.stop_reason)
        response.stop_reason = schema.StopReasons.CANCELLED
    return response
