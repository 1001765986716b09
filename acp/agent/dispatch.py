"""Wiring a built agent's handlers onto one connection's engine.

Each wrapper adapts the engine's ``fn(params, call)`` to the SDK's ``handler(request, ctx)``
and turns the handler's return value into the answer. ``session/prompt`` also runs the turn
rules (see :mod:`acp.agent.turns`) and ``session/cancel`` is registered ``immediate`` so it
runs on the reader thread the moment it arrives, never behind a busy handler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec

from .. import schema
from ..connection import Connection, InboundCall
from ..errors import INTERNAL_ERROR, INVALID_PARAMS, RequestError
from . import initialize as init
from .context import AgentRequestContext, PromptContext
from .methods import BY_WIRE, params_type, result_type
from .spec import AgentSpec
from .state import ConnectionState
from .turns import Turn

__all__ = ["install"]

_log = logging.getLogger("acp.agent")


def install(spec: AgentSpec, state: ConnectionState, conn: Connection) -> None:
    """Register every handler of ``spec`` on ``conn`` (the engine of ``state``)."""
    conn.on_request("initialize", _initialize(spec, state), schema.InitializeRequest)
    conn.on_notification("session/cancel", _cancel(spec, state), schema.CancelNotification, immediate=True)
    for wire, fn in spec.handlers.items():
        if wire in ("initialize", "session/cancel"):
            continue
        row = BY_WIRE[wire]
        if wire == "session/prompt":
            conn.on_request(wire, _prompt(fn, state), schema.PromptRequest, on_arrival=_prompt_arrived(state))
        elif wire in ("session/close", "session/archive"):
            conn.on_request(wire, _close_session(wire, fn, state, spec), params_type(wire))
        elif wire == "authenticate":
            conn.on_request(wire, _authenticate(fn, state), schema.AuthenticateRequest)
        elif row.notification:
            conn.on_notification(wire, _notification(wire, fn), params_type(wire))
        else:
            conn.on_request(wire, _request(wire, fn, state), params_type(wire))
    for name, fn in spec.ext_requests.items():
        conn.on_request(name, _request(name, fn, state, ext=True), None)
    for name, fn in spec.ext_notifications.items():
        conn.on_notification(name, _notification(name, fn), None)


def _answer_value(method: str, result: Any, ext: bool = False) -> Any:
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


def _log_in(method: str, params: Any) -> None:
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug("<- %s %s", method, schema.encode(params).decode(errors="replace"))


def _request(
    method: str, fn: Callable[[Any, AgentRequestContext], Any], state: ConnectionState, ext: bool = False
) -> Callable[[Any, InboundCall], Any]:
    def run(params: Any, call: InboundCall) -> Any:
        _log_in(method, params)
        if not ext:
            _before(method, params, state)
        return _answer_value(method, fn(params, AgentRequestContext(state, call)), ext)

    return run


# Session lifecycle requests that may carry a client system prompt (unstable).
_SYSTEM_PROMPT_METHODS = frozenset({"session/new", "session/load", "session/resume", "session/fork"})


def _before(method: str, params: Any, state: ConnectionState) -> None:
    """What the spec asks of the agent before its handler runs."""
    if method in _SYSTEM_PROMPT_METHODS:
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


def _notification(method: str, fn: Callable[[Any], Any]) -> Callable[[Any], None]:
    def run(params: Any) -> None:
        _log_in(method, params)
        fn(params)

    return run


def _initialize(spec: AgentSpec, state: ConnectionState) -> Callable[[Any, InboundCall], Any]:
    user = spec.handlers.get("initialize")

    def run(request: schema.InitializeRequest, call: InboundCall) -> schema.InitializeResponse:
        _log_in("initialize", request)
        if user is None:
            response = init.default_initialize(request, spec.capabilities, spec.auth_methods, spec.agent_info)
        else:
            response = user(request, AgentRequestContext(state, call))
            if not isinstance(response, schema.InitializeResponse):
                _log.error("initialize handler returned %r, not an InitializeResponse", type(response))
                raise RequestError(INTERNAL_ERROR, "Internal error")
        # Recorded before the answer goes out: the client may call back at once.
        state.capabilities = init.record(request, response)
        state.initialized = True
        _log.info(
            "initialized: protocol %s (client asked %s), client %s",
            response.protocol_version,
            request.protocol_version,
            request.client_info.name if request.client_info else "?",
        )
        return response

    return run


def _authenticate(fn: Callable[..., Any], state: ConnectionState) -> Callable[[Any, InboundCall], Any]:
    def run(request: schema.AuthenticateRequest, call: InboundCall) -> Any:
        _log_in("authenticate", request)
        offered = state.capabilities.auth_methods
        if state.initialized and offered:
            ids = {getattr(m, "id", None) if not isinstance(m, dict) else m.get("id") for m in offered}
            if request.method_id not in ids:
                raise RequestError(
                    INVALID_PARAMS,
                    f"Unknown authentication method {request.method_id!r}",
                    {"methodId": request.method_id},
                )
        return _answer_value("authenticate", fn(request, AgentRequestContext(state, call)))

    return run


def _close_session(
    method: str, fn: Callable[..., Any], state: ConnectionState, spec: AgentSpec
) -> Callable[[Any, InboundCall], Any]:
    # Spec: the agent must cancel any ongoing work of the session, then free it (session/close)
    # or archive it (session/archive, unstable). The SDK does the first half, as for
    # session/cancel: the turn is cancelled and answered "cancelled" (by its handler, or by the
    # SDK after a bounded wait) before the handler runs.
    wait = spec.close_session_wait

    def run(request: Any, call: InboundCall) -> Any:
        _log_in(method, request)
        state.turns.close_session(request.session_id, wait)
        return _answer_value(method, fn(request, AgentRequestContext(state, call)))

    return run


def _cancel(spec: AgentSpec, state: ConnectionState) -> Callable[[schema.CancelNotification], None]:
    hook = spec.handlers.get("session/cancel")

    def run(notification: schema.CancelNotification) -> None:
        # On the reader thread: cancel first (wakes the turn's blocking calls), then the hook.
        _log.debug("<- session/cancel %s", notification.session_id)
        state.turns.cancel(notification.session_id)
        if hook is not None:
            try:
                hook(notification)
            except Exception:
                _log.exception("cancel handler failed")

    return run


def _prompt_arrived(state: ConnectionState) -> Callable[[Any, InboundCall], None]:
    def arrived(request: schema.PromptRequest, call: InboundCall) -> None:
        # On the reader, in arrival order: the turn exists before any line read after this
        # prompt is handled, so a session/cancel sent right behind it finds it. A busy session
        # raises -32600 here, answered at once.
        call.attachment = state.turns.begin(request.session_id, call)

    return arrived


def _prompt(fn: Callable[..., Any], state: ConnectionState) -> Callable[[Any, InboundCall], Any]:
    def run(request: schema.PromptRequest, call: InboundCall) -> Any:
        _log_in("session/prompt", request)
        turn: Turn = call.attachment
        ctx = PromptContext(state, call, turn, request)
        try:
            response = _prompt_response(fn(request, ctx), turn.is_cancelled)
        except BaseException as exc:  # SystemExit too: the turn must end, or the session stays busy
            if not turn.is_cancelled:
                if turn.finish():
                    raise  # the engine answers with the error (RequestError keeps its code)
                _log.debug("session %s: handler failed after the prompt was answered: %r", request.session_id, exc)
                return None
            # Spec: a cancelled turn is answered "cancelled" even if cancelling made it fail.
            _log.debug("session %s: handler raised after cancel (%r); answering cancelled", request.session_id, exc)
            response = schema.PromptResponse(stop_reason=schema.StopReasons.CANCELLED)
        if turn.is_cancelled:
            # Answered here rather than by the engine once this returns, so that the answer is
            # on the wire when the turn counts as answered: session/close waits for that.
            if not turn.answer(response):
                _log.debug("session %s: the prompt was already answered; handler's answer dropped", request.session_id)
            return None  # the engine finds the call answered and sends nothing
        if not turn.finish():
            _log.debug("session %s: the prompt was already answered; handler's answer dropped", request.session_id)
        return response  # dropped by the engine if the prompt was already answered

    return run


def _prompt_response(result: Any, cancelled: bool) -> schema.PromptResponse:
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
