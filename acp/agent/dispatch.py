"""Wiring a built agent's handlers onto one threaded connection's engine.

Each wrapper adapts the engine's ``fn(params, call)`` to the SDK's ``handler(request, ctx)``
and turns the handler's return value into the answer (the rules are in
:mod:`acp.agent.handling`, shared with the asyncio runtime). ``session/prompt`` also runs the
turn rules (see :mod:`acp.agent.turns`) and ``session/cancel`` is registered ``immediate`` so
it runs on the reader thread the moment it arrives, never behind a busy handler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .. import schema
from ..connection import Connection, InboundCall
from . import handling as h
from .context import AgentRequestContext, PromptContext
from .spec import AgentSpec
from .state import ConnectionState
from .turns import Turn

__all__ = ["install"]

_log = logging.getLogger("acp.agent")


def install(spec: AgentSpec, state: ConnectionState, conn: Connection) -> None:
    """Register every handler of ``spec`` on ``conn`` (the engine of ``state``)."""
    for kind, wire, fn, ptype, ext in h.routes(spec):
        if kind == h.INITIALIZE:
            conn.on_request(wire, _initialize(spec, state, fn), ptype)
        elif kind == h.CANCEL:
            conn.on_notification(wire, _cancel(state, fn), ptype, immediate=True)
        elif kind == h.PROMPT:
            conn.on_request(wire, _prompt(fn, state), ptype, on_arrival=h.begin_turn(state))
        elif kind == h.CLOSE_SESSION:
            conn.on_request(wire, _close_session(wire, fn, state, spec), ptype)
        elif kind == h.AUTHENTICATE:
            conn.on_request(wire, _authenticate(fn, state), ptype)
        elif kind == h.NOTIFICATION:
            conn.on_notification(wire, _notification(wire, fn), ptype)
        else:
            conn.on_request(wire, _request(wire, fn, state, ext), ptype)


def _request(
    method: str, fn: Callable[[Any, AgentRequestContext], Any], state: ConnectionState, ext: bool = False
) -> Callable[[Any, InboundCall], Any]:
    def run(params: Any, call: InboundCall) -> Any:
        h.before(method, params, state, ext)
        return h.answer_value(method, fn(params, AgentRequestContext(state, call)), ext)

    return run


def _notification(method: str, fn: Callable[[Any], Any]) -> Callable[[Any], None]:
    def run(params: Any) -> None:
        h.log_in(method, params)
        fn(params)

    return run


def _initialize(spec: AgentSpec, state: ConnectionState, user: Any) -> Callable[[Any, InboundCall], Any]:
    def run(request: schema.InitializeRequest, call: InboundCall) -> schema.InitializeResponse:
        h.log_in("initialize", request)
        if user is None:
            response = h.initialize_response(spec, request)
        else:
            response = user(request, AgentRequestContext(state, call))
        return h.record_initialize(state, request, response)

    return run


def _authenticate(fn: Callable[..., Any], state: ConnectionState) -> Callable[[Any, InboundCall], Any]:
    def run(request: schema.AuthenticateRequest, call: InboundCall) -> Any:
        h.check_auth_method(request, state)
        return h.answer_value("authenticate", fn(request, AgentRequestContext(state, call)))

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
        h.log_in(method, request)
        state.turns.close_session(request.session_id, wait)
        return h.answer_value(method, fn(request, AgentRequestContext(state, call)))

    return run


def _cancel(state: ConnectionState, hook: Any) -> Callable[[schema.CancelNotification], None]:
    def run(notification: schema.CancelNotification) -> None:
        # On the reader thread: cancel first (wakes the turn's blocking calls), then the hook.
        h.cancel_turn(state, notification)
        if hook is not None:
            try:
                hook(notification)
            except Exception:
                _log.exception("cancel handler failed")

    return run


def _prompt(fn: Callable[..., Any], state: ConnectionState) -> Callable[[Any, InboundCall], Any]:
    def run(request: schema.PromptRequest, call: InboundCall) -> Any:
        h.log_in("session/prompt", request)
        turn: Turn = call.attachment
        try:
            # The engine drops the response if the prompt was already answered.
            return h.conclude_prompt(turn, request, fn(request, PromptContext(state, call, turn, request)))
        except BaseException as exc:
            h.prompt_failed(turn, request, exc)
            return None

    return run
