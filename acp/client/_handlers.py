"""Adapters between the user's client handlers and a connection engine, for both runtimes.

Calling convention (uniform across the SDK): a request handler is ``handler(request, ctx)``
with the typed params Struct and a :class:`ClientRequestContext`, and returns the typed
response Struct; a notification handler is ``handler(notification)``.

Each adapter is a plan (:mod:`acp.client._plans`) that yields ``Invoke(handler, args)`` (or,
for a plain request handler, that ``Invoke`` settled by one shared ``finish`` function): the
threaded runtime calls the handler there and then; the asyncio runtime awaits an ``async def``
handler on the loop and runs a plain one on its executor. The context, the answer's coercion,
the spec's error codes and the permission bookkeeping are written here once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .. import schema
from ..capabilities import UPDATE_CAPABILITY, gated_update_tag
from ..errors import RequestError
from ._plans import Invoke, Plan
from ._turns import CANCELLED_PERMISSION, TurnTracker
from .config import HandlerSet
from .context import CallView, ClientRequestContext

__all__ = ["HandlerRuntime", "Registrar", "install_handlers"]

_log = logging.getLogger("acp.client")

RequestFn = Callable[[Any, ClientRequestContext], Any]
NotificationFn = Callable[[Any], None]

PERMISSION = "session/request_permission"


def _coerce(method: str, result: Any, result_type: Any) -> Any:
    """Turn a handler's convenient return value into the response the wire expects."""
    if result is None:
        # Empty responses (write_text_file, release/kill terminal...) may be returned as None.
        try:
            return result_type()
        except TypeError:
            raise TypeError(
                f"the {method} handler returned None; it must return {result_type.__name__}"
            ) from None
    if isinstance(result, str) and result_type is schema.ReadTextFileResponse:
        return schema.ReadTextFileResponse(content=result)
    if isinstance(result_type, type) and not isinstance(result, result_type):
        # Sent as is, a wrong value would reach the agent as a malformed answer.
        raise TypeError(
            f"the {method} handler returned {type(result).__name__}; it must return {result_type.__name__}"
        )
    return result


def _session_of(params: Any) -> str | None:
    session_id = getattr(params, "session_id", None)
    return session_id if isinstance(session_id, str) else None


class HandlerRuntime(Protocol):
    """What the adapters need of a client runtime (``SyncClient`` or ``AsyncClient``)."""

    def _run(self, plan: Plan[Any]) -> Any:
        """Drive ``plan``: its result (blocking) or an awaitable of it."""
        ...

    def _settle(self, effect: Invoke, finish: Callable[[Invoke, Any, BaseException | None], Any]) -> Any:
        """Perform ``effect`` and hand its outcome to ``finish`` (blocking) or an awaitable of that."""
        ...

    def _call_view(self, call: Any) -> CallView:
        """What a handler's context reads of the connection's inbound call."""
        ...

    def _direct(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as a notification handler the connection may call itself."""
        ...

    #: True when a request handler runs right where the engine calls the adapter (the
    #: threaded runtime: its ``_settle`` calls it, its ``_call_view`` is the call itself).
    _handlers_inline: bool


class Registrar(Protocol):
    """The registration methods ``Connection`` and ``AsyncConnection`` share."""

    def on_request(self, method: str, handler: Callable[[Any, Any], Any], params_type: Any = None) -> None: ...

    def on_notification(self, method: str, handler: Callable[[Any], Any], params_type: Any = None) -> None: ...


def _request_adapter(
    client: HandlerRuntime, method: str, fn: RequestFn, result_type: Any
) -> Callable[[Any, Any], Any]:
    # One Invoke and a plain function for its outcome (no plan generator: the hot path of
    # fs/read_text_file); both runtimes settle it with the same ``finish`` (the threaded one
    # calls the handler itself and needs ``finish`` only off the common case).
    fs = method.startswith("fs/")

    def finish(effect: Invoke, result: Any, error: BaseException | None) -> Any:
        if type(result) is result_type:  # the common case, without _coerce
            return result
        if error is not None:
            if fs and isinstance(error, FileNotFoundError):
                # The spec's code for a missing file, so agents can tell it from a failure.
                params = effect.args[0]
                raise RequestError.resource_not_found(getattr(params, "path", None) or error.filename) from None
            raise error
        return _coerce(method, result, result_type)

    if client._handlers_inline:
        # The threaded runtime: _settle(Invoke(...), finish) performed right here, once per
        # inbound request (every fs/read_text_file): no effect record, three calls less.
        def handle_inline(params: Any, call: Any) -> Any:
            ctx: Any = ClientRequestContext(call, client, _session_of(params))
            try:
                result = fn(params, ctx)
            except BaseException as exc:
                return finish(Invoke(fn, (params, ctx)), None, exc)
            if type(result) is result_type:
                return result
            return finish(Invoke(fn, (params, ctx)), result, None)

        return handle_inline

    def handle(params: Any, call: Any) -> Any:
        ctx = ClientRequestContext(client._call_view(call), client, _session_of(params))
        return client._settle(Invoke(fn, (params, ctx)), finish)

    return handle


def _permission_adapter(client: HandlerRuntime, fn: RequestFn | None, turns: TurnTracker) -> Callable[[Any, Any], Any]:
    warned = False

    def plan(params: schema.RequestPermissionRequest, call: Any) -> Plan[Any]:
        nonlocal warned
        session_id = params.session_id
        if fn is None:
            if not warned:
                warned = True
                _log.warning("no request_permission handler registered: permission requests are answered 'cancelled'")
            return CANCELLED_PERMISSION
        if not turns.permission_started(session_id, call):
            _log.debug("permission request %r for cancelled session %s: answered 'cancelled'", call.id, session_id)
            return CANCELLED_PERMISSION
        try:
            result = yield Invoke(fn, (params, ClientRequestContext(client._call_view(call), client, session_id)))
        finally:
            turns.permission_finished(session_id, call)
        return _coerce(PERMISSION, result, schema.RequestPermissionResponse)

    def handle(params: schema.RequestPermissionRequest, call: Any) -> Any:
        return client._run(plan(params, call))

    return handle


def _ext_request_adapter(client: HandlerRuntime, fn: RequestFn) -> Callable[[Any, Any], Any]:
    def handle(params: Any, call: Any) -> Any:
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        ctx = ClientRequestContext(client._call_view(call), client, session_id if isinstance(session_id, str) else None)
        return client._run(_invoke(fn, params, ctx))

    return handle


def _invoke(fn: Callable[..., Any], *args: Any) -> Plan[Any]:
    return (yield Invoke(fn, args))


def _fan_out(
    client: HandlerRuntime,
    fns: list[Callable[[schema.SessionNotification], Any]],
    kinds: Sequence[tuple[str, Callable[[schema.SessionNotification], Any]]] = (),
) -> Callable[[Any], Any]:
    """One ``session/update`` handler: every generic consumer gets every update, then the
    per-kind consumers of its kind (each in registration order)."""
    consumers = tuple(fns)
    if len(consumers) == 1 and not kinds:
        return client._direct(consumers[0])  # the engine already logs a failing handler and goes on
    by_tag: dict[str, tuple[Callable[[schema.SessionNotification], Any], ...]] = {}
    for tag, capability in UPDATE_CAPABILITY.items():
        by_tag[tag] = tuple(fn for kind, fn in kinds if kind == capability)

    def plan(notification: schema.SessionNotification) -> Plan[None]:
        specific = by_tag.get(gated_update_tag(notification.update) or "", ())
        for consumer in consumers + specific if specific else consumers:
            try:
                yield Invoke(consumer, (notification,))
            except Exception:
                # One failing consumer must not starve the ones registered after it.
                _log.exception("session_update handler %r failed", consumer)

    def handle(notification: schema.SessionNotification) -> Any:
        return client._run(plan(notification))

    return handle


def install_handlers(conn: Registrar, client: HandlerRuntime, handlers: HandlerSet, turns: TurnTracker) -> None:
    """Register every handler of ``handlers`` on ``conn`` (before it starts)."""
    table = schema.STABLE_CLIENT_METHODS
    if handlers.session_update or handlers.update_kinds:
        conn.on_notification(
            "session/update", _fan_out(client, handlers.session_update, handlers.update_kinds), schema.SessionNotification
        )
    # Permission is baseline ACP (no capability): without a handler the SDK still answers,
    # and it answers "cancelled", which never grants anything.
    conn.on_request(PERMISSION, _permission_adapter(client, handlers.requests.get(PERMISSION), turns), schema.RequestPermissionRequest)
    for method, fn in handlers.requests.items():
        if method == PERMISSION:
            continue
        spec = table[method]
        conn.on_request(method, _request_adapter(client, method, fn, spec.result_type), spec.params_type)
    for method, note in handlers.notifications.items():
        spec = table[method] if method in table else schema.CLIENT_METHODS[method]  # unstable ones
        conn.on_notification(method, client._direct(note), spec.params_type)
    for method, fn in handlers.ext_requests.items():
        conn.on_request(method, _ext_request_adapter(client, fn))
    for method, note in handlers.ext_notifications.items():
        conn.on_notification(method, client._direct(note))
