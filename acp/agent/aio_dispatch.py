"""Wiring a built agent's handlers onto one asyncio connection (the twin of
:mod:`acp.agent.dispatch`; the protocol's rules are in :mod:`acp.agent.handling`).

An ``async def`` handler runs on the loop, as its request's task, with the async contexts
(:mod:`acp.agent.aio_context`). A plain function is blocking code: it runs on the executor
(``connection.run_blocking``), never on the loop, with the ordinary blocking contexts over a
:class:`LoopBridge` (their calls are made on the loop and waited for from the worker thread).

A prompt turn of an ``async def`` handler is cancelled as a task: ``session/cancel``,
``$/cancel_request``, ``session/close``, the prompt deadline and closing cancel the turn, which
cancels the handler's task; its CancelledError is answered ``stopReason: "cancelled"``. A
blocking handler cannot be interrupted: it sees ``ctx.cancelled`` and its calls wake, as in a
SyncAgent, and the grace period bounds the wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .. import schema
from ..errors import ConnectionClosedError, RequestCancelledError
from . import handling as h
from .aio_context import AsyncAgentRequestContext, AsyncPromptContext
from .builder import is_async_callable
from .cancellation import CancelToken
from .client_calls import Gate, Notifier
from .context import AgentRequestContext, PromptContext
from .spec import AgentSpec
from .state import Call, ConnectionState
from .turns import Turn

if TYPE_CHECKING:
    from ..aio.connection import AsyncConnection, AsyncInboundCall

__all__ = ["install", "LoopBridge"]

_log = logging.getLogger("acp.agent")


class LoopBridge:
    """The threaded connection's calling interface (``request``, ``notify``) over an
    :class:`AsyncConnection`, for blocking handlers running on the executor.

    Every call is handed to the loop the same way (a task), so the order in which the worker
    thread sends updates and requests is the order on the wire.
    """

    def __init__(self, connection: AsyncConnection) -> None:
        self._connection = connection
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.request_timeout = connection.request_timeout

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification from the worker thread (or directly, on the loop)."""
        if threading.get_ident() == self._loop_thread:
            self._connection.notify(method, params)
        else:
            self._submit(self._notify(method, params))

    def gated(self, turn: Turn, connection: Notifier, notification: schema.SessionNotification) -> bool:
        """A turn's update from the worker thread: checked against the turn's answer on the
        loop, where the answer is sent (an update never follows it). True: handed over."""
        if threading.get_ident() == self._loop_thread:
            return turn.send(connection, notification)
        self._submit(self._send(turn, connection, notification))
        return True

    def request(
        self,
        method: str,
        params: Any = None,
        result_type: Any = None,
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> Any:
        """Make the call on the loop and block this (worker) thread for its result."""
        future = self._submit(self._connection.request(method, params, result_type, timeout=timeout))
        forget = cancel.on_cancel(lambda: None if future.cancel() else None) if cancel is not None else None
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise RequestCancelledError(f"{method}: cancelled") from None
        finally:
            if forget is not None:
                forget()

    def _submit(self, coro: Awaitable[Any]) -> concurrent.futures.Future[Any]:
        try:
            return asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        except RuntimeError:  # the loop is gone: a handler thread that outlived its connection
            coro.close()  # type: ignore[attr-defined]
            raise ConnectionClosedError("connection closed") from None

    async def _notify(self, method: str, params: Any) -> None:
        self._connection.notify(method, params)

    async def _send(self, turn: Turn, connection: Notifier, notification: schema.SessionNotification) -> None:
        if not turn.send(connection, notification):
            _log.debug("session %s: update after the prompt was answered; dropped", turn.session_id)


class _BridgedPromptContext(PromptContext):
    """The PromptContext of a blocking prompt handler of an AsyncAgent."""

    def __init__(
        self, state: ConnectionState, call: Call, turn: Turn, request: schema.PromptRequest, bridge: LoopBridge
    ) -> None:
        self._bridge = bridge
        super().__init__(state, call, turn, request, connection=bridge)

    def _gate(self) -> Gate | None:
        turn, bridge = self._turn, self._bridge
        return lambda connection, notification: bridge.gated(turn, connection, notification)


def install(spec: AgentSpec, state: ConnectionState, conn: AsyncConnection) -> None:
    """Register every handler of ``spec`` on ``conn`` (the engine of ``state``)."""
    wiring = _Wiring(spec, state, conn)
    for kind, wire, fn, ptype, ext in h.routes(spec):
        if kind == h.INITIALIZE:
            conn.on_request(wire, wiring.initialize(fn), ptype)
        elif kind == h.CANCEL:
            conn.on_notification(wire, wiring.cancel(fn), ptype, immediate=True)
        elif kind == h.PROMPT:
            conn.on_request(wire, wiring.prompt(fn), ptype, on_arrival=h.begin_turn(state))
        elif kind == h.CLOSE_SESSION:
            conn.on_request(wire, wiring.close_session(wire, fn), ptype)
        elif kind == h.AUTHENTICATE:
            conn.on_request(wire, wiring.authenticate(fn), ptype)
        elif kind == h.NOTIFICATION:
            conn.on_notification(wire, wiring.notification(wire, fn), ptype)
        else:
            conn.on_request(wire, wiring.request(wire, fn, ext), ptype)


class _Wiring:
    def __init__(self, spec: AgentSpec, state: ConnectionState, conn: AsyncConnection) -> None:
        self.spec = spec
        self.state = state
        self.conn = conn
        self._bridge: LoopBridge | None = None

    @property
    def bridge(self) -> LoopBridge:
        if self._bridge is None:
            self._bridge = LoopBridge(self.conn)
        return self._bridge

    async def call(self, fn: Callable[..., Any], params: Any, call: Call) -> Any:
        """Run a request handler: awaited on the loop, or on the executor with a blocking ctx."""
        if is_async_callable(fn):
            return await fn(params, AsyncAgentRequestContext(self.state, call))
        ctx = AgentRequestContext(self.state, call, connection=self.bridge)
        return await self.conn.run_blocking(fn, params, ctx)

    async def notify_handler(self, fn: Callable[[Any], Any], params: Any) -> None:
        if is_async_callable(fn):
            await fn(params)
        else:
            await self.conn.run_blocking(fn, params)

    # ---------------------------------------------------------------- wrappers

    # The handler's kind is looked at once, here, not per call (is_async_callable costs about
    # half a microsecond), and an async handler is awaited with no coroutine in between.

    def request(self, method: str, fn: Callable[..., Any], ext: bool) -> Callable[[Any, AsyncInboundCall], Any]:
        state = self.state
        if is_async_callable(fn):

            async def run(params: Any, call: AsyncInboundCall) -> Any:
                h.before(method, params, state, ext)
                return h.answer_value(method, await fn(params, AsyncAgentRequestContext(state, call)), ext)

            return run

        async def run_blocking(params: Any, call: AsyncInboundCall) -> Any:
            h.before(method, params, state, ext)
            return h.answer_value(method, await self.call(fn, params, call), ext)

        return run_blocking

    def notification(self, method: str, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        if is_async_callable(fn):

            async def run(params: Any) -> None:
                h.log_in(method, params)
                await fn(params)

            return run

        async def run_blocking(params: Any) -> None:
            h.log_in(method, params)
            await self.notify_handler(fn, params)

        return run_blocking

    def initialize(self, user: Any) -> Callable[[Any, AsyncInboundCall], Any]:
        spec, state = self.spec, self.state
        if user is None:
            # Answered on the loop at once: no task for the SDK's own answer.
            def answer(request: schema.InitializeRequest, call: AsyncInboundCall) -> Any:
                h.log_in("initialize", request)
                return h.record_initialize(state, request, h.initialize_response(spec, request))

            return answer

        async def run(request: schema.InitializeRequest, call: AsyncInboundCall) -> Any:
            h.log_in("initialize", request)
            return h.record_initialize(state, request, await self.call(user, request, call))

        return run

    def authenticate(self, fn: Callable[..., Any]) -> Callable[[Any, AsyncInboundCall], Any]:
        async def run(request: schema.AuthenticateRequest, call: AsyncInboundCall) -> Any:
            h.check_auth_method(request, self.state)
            return h.answer_value("authenticate", await self.call(fn, request, call))

        return run

    def close_session(self, method: str, fn: Callable[..., Any]) -> Callable[[Any, AsyncInboundCall], Any]:
        # As in the threaded runtime: the session's turn is cancelled and answered before the
        # handler runs (by its handler, or by the SDK after a bounded wait).
        wait = self.spec.close_session_wait
        turns = self.state.turns

        async def run(request: Any, call: AsyncInboundCall) -> Any:
            h.log_in(method, request)
            turn = turns.begin_close(request.session_id)
            if turn is not None:
                await _wait_answered(turn, wait)
                turns.end_close(turn, wait)
            return h.answer_value(method, await self.call(fn, request, call))

        return run

    def cancel(self, hook: Any) -> Callable[[schema.CancelNotification], Any]:
        state = self.state

        async def run_hook(notification: schema.CancelNotification) -> None:
            try:
                await self.notify_handler(hook, notification)
            except Exception:
                _log.exception("cancel handler failed")

        def run(notification: schema.CancelNotification) -> Any:
            # The moment it is read: cancel the turn (its task too), then the hook, as a task
            # of its own (the runtime keeps it), never in the way of what follows.
            h.cancel_turn(state, notification)
            return run_hook(notification) if hook is not None else None

        return run

    def prompt(self, fn: Callable[..., Any]) -> Callable[[Any, AsyncInboundCall], Any]:
        state = self.state
        if not is_async_callable(fn):

            async def run_blocking(request: schema.PromptRequest, call: AsyncInboundCall) -> Any:
                h.log_in("session/prompt", request)
                turn: Turn = call.attachment
                ctx = _BridgedPromptContext(state, call, turn, request, self.bridge)
                try:
                    return h.conclude_prompt(turn, request, await self.conn.run_blocking(fn, request, ctx))
                except BaseException as exc:
                    h.prompt_failed(turn, request, exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    return None

            return run_blocking

        async def run(request: schema.PromptRequest, call: AsyncInboundCall) -> Any:
            h.log_in("session/prompt", request)
            turn: Turn = call.attachment
            # This very task (the engine set it before the task's first step; asyncio's
            # current_task() is Python code on 3.11: ~0.4 µs per prompt).
            turn.task = call.task
            try:
                if turn.is_cancelled:  # cancelled before its task started: nothing to run
                    return h.conclude_prompt(turn, request, None)
                result = await fn(request, AsyncPromptContext(state, call, turn, request))
                return h.conclude_prompt(turn, request, result)
            except BaseException as exc:
                # A cancelled task (the turn was cancelled) is answered "cancelled" here; the
                # CancelledError goes on, and the runtime finds the call answered.
                h.prompt_failed(turn, request, exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return None
            finally:
                turn.task = None

        return run


async def _wait_answered(turn: Turn, timeout: float | None) -> None:
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[None] = loop.create_future()

    def resolve() -> None:
        if not answered.done():
            answered.set_result(None)

    def wake() -> None:
        loop.call_soon_threadsafe(resolve)

    turn.when_answered(wake)
    try:
        await asyncio.wait((answered,), timeout=timeout)
    finally:
        answered.cancel()
