"""The asyncio JSON-RPC engine over one :class:`~acp.aio.transport.AsyncTransport`.

The twin of :mod:`acp.connection` on the same sans-I/O core (:class:`acp.rpc.Endpoint`), with
tasks instead of threads. Everything runs on one event loop; nothing here starts a thread
(blocking work goes to :attr:`AsyncConnection.executor` through ``loop.run_in_executor``).

Tasks and who does what::

    reader      transport.read -> LineFramer -> decode_line -> route:
                  response        complete the caller now if nothing is queued ahead, else queue
                  request         start its handler now if nothing is queued ahead, else queue
                  notification    run a plain handler now if nothing is queued ahead, else queue
                                  (``immediate`` handlers always run now)
                  $/cancel_request  acted on here, never stuck behind a busy handler
    dispatcher  one task: drains the queue in arrival order, awaiting notification handlers one
                at a time, completing responses and starting request handlers
    handlers    an async request handler runs as its own task; a plain function is called on
                the loop (it must not block: wrap blocking code with :meth:`AsyncConnection.blocking`)

Ordering guarantee: a response completes its caller only after every notification that arrived
before it was handled, and a request's handler starts only after them. "Nothing queued ahead"
is an empty queue: the dispatcher removes an item only once it is done with it, so a
notification handler being awaited keeps the queue non-empty.

Deadlock rule: a request made while a notification handler is awaited (a contextvar marks it)
is completed as soon as its answer is read, not queued behind that handler.

Backpressure: while the dispatcher is ``MAX_QUEUED_MESSAGES`` behind, the reader stops reading
until it is halfway caught up, except while a notification handler awaits an answer.

Ordering by session (``ordering="session"``, opt-in, as in :mod:`acp.connection`; chosen once
in ``__init__``: the reader then uses ``_on_lines_by_session`` and there is no dispatcher
task): an inbound message's session is its params' ``sessionId``; an answer's is the one of the
request it answers (recorded on ``rpc.Pending`` when it is sent). Each session with work has a
*lane*: a deque drained in arrival order by a task of its own, created when the lane gets work
and ended when it is empty (an idle session costs no task). The reader still acts itself (calls
a plain handler, completes an answer, starts a request) when nothing of that session is ahead.
A *session-less* message (no ``sessionId``: initialize, session/new's answer, most ext methods,
the end-of-input and drain marks) keeps the connection-wide rule: it waits in the *gate* until
every lane is empty, and everything read after it waits behind it. The deadlock rule holds per
lane (a request made while a lane awaits a notification handler is completed when read), and
backpressure counts the items of every lane and of the gate.

Writing: notifications are collected and written once per loop iteration (``call_soon``), or
as soon as 64 KiB are waiting; a request or an answer is written at once, after them, so the
order on the wire is the order of the calls.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import os
import sys
import types
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import msgspec
from typing_extensions import ParamSpec

from .. import rpc
from ..errors import (
    REQUEST_CANCELLED,
    ConnectionClosedError,
    RequestCancelledError,
    RequestError,
    RequestTimeoutError,
)
from .transport.base import AsyncTransport

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "MAX_QUEUED_MESSAGES",
    "ORDERINGS",
    "AsyncConnection",
    "AsyncInboundCall",
    "Timer",
    "WireTap",
]

_log = logging.getLogger("acp.aio.connection")

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_REQUEST_TIMEOUT = 60.0
#: Messages the reader lets wait for the dispatcher before it stops reading (backpressure).
MAX_QUEUED_MESSAGES = 10_000
_FLUSH_BYTES = 64 * 1024
#: The ordering modes of :class:`AsyncConnection` (the same as :class:`acp.Connection`'s).
ORDERINGS = rpc.ORDERINGS

WireTap = Callable[[str, bytes], None]
"""Receives ("in" | "out", line) for every line, for debugging."""

_USE_DEFAULT: Any = object()

# True while a notification handler is awaited by the dispatcher: requests made there are
# answered without waiting for the queue (the deadlock rule).
_Coroutine = types.CoroutineType  # the common awaitable: checked before inspect.isawaitable
_serial: contextvars.ContextVar[bool] = contextvars.ContextVar("acp_aio_serial", default=False)


class _Mark:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_EOF_MARK = _Mark("EOF")
_DRAIN_MARK = _Mark("DRAIN")

_Response = rpc.Response
_ErrorResponse = rpc.ErrorResponse
_Notification = rpc.Notification
_MISS = rpc.MISS
_Request = rpc.Request


class AsyncInboundCall(rpc.InboundRequest):
    """One inbound request while its handler runs: its id, method and cancellation state.

    ``cancelled`` is set when the peer sends ``$/cancel_request`` for it (its handler's task is
    then cancelled too), when the input ends (the peer is gone: the task goes on and may still
    answer) and as soon as :meth:`AsyncConnection.close` starts. ``on_cancel`` callbacks run on
    the loop, at that moment. :attr:`task` is the handler's task (None for a plain-function
    handler, which runs to completion on the loop, and before the handler starts).
    """

    __slots__ = ("connection", "task", "_is_cancelled", "_event", "_callbacks")

    def __init__(self, connection: AsyncConnection, call_id: rpc.RequestId, method: str) -> None:
        super().__init__(call_id, method)
        self.connection = connection
        self.task: asyncio.Task[Any] | None = None
        self._is_cancelled = False
        self._event: asyncio.Event | None = None
        self._callbacks: list[Callable[[], None]] | None = None

    @property
    def cancelled(self) -> asyncio.Event:
        """An :class:`asyncio.Event` set once the request is cancelled."""
        event = self._event
        if event is None:
            event = self._event = asyncio.Event()
            if self._is_cancelled:
                event.set()
        return event

    @property
    def is_cancelled(self) -> bool:
        """True once the request was cancelled (a plain bool: safe to read from any thread)."""
        return self._is_cancelled

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop when the request is cancelled (at once if it already is)."""
        if self._is_cancelled:
            callback()
            return
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(callback)

    def answer(self, result: Any) -> bool:
        """Answer the request now, instead of (or before) its handler. False, sending nothing,
        when it was already answered (or cancelled, or the connection closed); whatever the
        handler returns afterwards is dropped."""
        line = self.connection._endpoint.answer(self, result)
        if line is None:
            return False
        self.connection._write_answer(line)
        return True

    def answer_error(self, code: int, message: str | None = None, data: Any = None) -> bool:
        """Answer the request with an error now; False (nothing sent) if it was already answered."""
        line = self.connection._endpoint.answer_error(self, code, message, data)
        if line is None:
            return False
        self.connection._write_answer(line)
        return True

    def cancel(self) -> None:
        """Cancel the request as ``$/cancel_request`` does, without answering it: set
        :attr:`cancelled`, run the callbacks, cancel :attr:`task`. The handler's
        CancelledError then sends nothing: the caller answers (e.g. a prompt turn's
        ``stopReason: "cancelled"``) with :meth:`answer`."""
        self._set_cancelled()
        task = self.task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            # Cancelled before its first step, its coroutine never runs to remove it.
            task.add_done_callback(self.connection._tasks.discard)

    def _set_cancelled(self) -> None:
        if self._is_cancelled:
            return
        self._is_cancelled = True
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            try:
                callback()
            except Exception:
                _log.exception("on_cancel callback failed for %s", self.method)


class Timer:
    """A callback scheduled with :meth:`AsyncConnection.call_later`."""

    __slots__ = ("_handle", "_timers")

    def __init__(self, handle: asyncio.TimerHandle | None, timers: set[Timer]) -> None:
        self._handle = handle
        self._timers = timers

    def cancel(self) -> None:
        """Do not run the callback (no effect once it has run)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._timers.discard(self)


class AsyncConnection:
    """A JSON-RPC connection over an :class:`~acp.aio.transport.AsyncTransport`, on one loop.

    Register handlers with :meth:`on_request` / :meth:`on_notification`, then :meth:`start`
    (on the running loop) or ``async with``. Handlers: ``handler(params, call)`` for requests,
    ``handler(params)`` for notifications. An ``async def`` handler (any callable returning an
    awaitable) is awaited: a request handler as its own task, notification handlers one at a
    time in arrival order. A plain function is called on the loop and must not block.

    ``executor`` runs blocking work (:meth:`blocking`, :meth:`run_blocking`); by default the
    connection creates a :class:`~acp.executor.HandlerPool` on first use and shuts it down on
    close. A user-supplied executor is never shut down by the connection.

    ``ordering="connection"`` (the default) handles inbound notifications one at a time in
    arrival order, connection-wide; ``ordering="session"`` keeps arrival order within each
    session and handles sessions concurrently (see the module docstring).
    """

    def __init__(
        self,
        transport: AsyncTransport,
        *,
        executor: Executor | None = None,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        max_message_bytes: int = rpc.DEFAULT_MAX_LINE_BYTES,
        wire_tap: WireTap | str | os.PathLike[str] | None = None,
        name: str = "acp",
        ordering: rpc.Ordering = "connection",
    ) -> None:
        if ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {ORDERINGS}, not {ordering!r}")
        self._transport = transport
        self.name = name
        """Labels log lines and the executor's threads."""
        self.request_timeout = request_timeout
        """The default timeout of :meth:`request` (None: wait forever)."""
        self._endpoint = rpc.Endpoint(self._make_call, name=name)
        self._encode_notification = rpc.Encoder().notification  # stateless (see rpc.Encoder)
        self._framer = rpc.LineFramer(max_message_bytes)
        self._close_callbacks: list[Callable[[], None]] = []
        if isinstance(wire_tap, (str, os.PathLike)):
            from ..wiretap import JsonlWireTap

            tap = JsonlWireTap(wire_tap)
            wire_tap = tap
            self._close_callbacks.append(tap.close)
        self._wire_tap: WireTap | None = wire_tap
        self._executor = executor
        self._own_executor: Any = None  # the HandlerPool created on first use
        self._loop: asyncio.AbstractEventLoop | None = None

        # Inbound messages waiting for the dispatcher, in arrival order; the dispatcher removes
        # an item only once it is done with it (so "empty" means "nothing ahead").
        self._queue: deque[Any] = deque()
        self._max_queued = MAX_QUEUED_MESSAGES
        # The Future the idle dispatcher sleeps on (None while it works).
        self._wake: asyncio.Future[None] | None = None
        # Backpressure: the reader is held (and, reading with read(), the Future it sleeps on).
        self._reader_held = False
        self._held: asyncio.Future[None] | None = None
        # Set when the transport pushes what it reads (set_receiver): no reader task then.
        self._pushed = False
        # A notification handler awaits an answer: the reader must not be held.
        self._dispatcher_asked = False

        # Notification lines waiting for the end of this loop iteration.
        self._wbuf: list[bytes] = []
        self._wbuf_size = 0

        self._reader: asyncio.Task[None] | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        # Request handler tasks still running.
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: set[Timer] = set()
        # Request timeouts, by duration: the calls of one duration expire in the order they
        # were made, so each duration needs one loop timer (for its oldest call), not one per
        # call. id -> (deadline, pending), in insertion (= deadline) order.
        self._timeouts: dict[float, dict[int, tuple[float, rpc.Pending]]] = {}
        self._sweeps: dict[float, asyncio.TimerHandle] = {}

        self._started = False
        self._closed = False
        # Resolved when the dispatcher reaches the end of input (or a graceful close's mark).
        self._drained: asyncio.Future[None] | None = None
        self._drain_done: asyncio.Future[None] | None = None
        self._close_done: asyncio.Future[None] | None = None
        self._transport_closing = False

        self.ordering: rpc.Ordering = ordering
        """``"connection"`` or ``"session"`` (fixed at construction)."""
        self._by_session = ordering == "session"
        self._serial_waits = 0  # requests awaited by notification handlers right now
        # The tasks draining the session lanes and the gate (ordering="session").
        self._lane_tasks: set[asyncio.Task[None]] = set()
        if self._by_session:
            # Chosen once: the default path never tests the mode per message.
            self._sessions = _Sessions()
            # The reader's backpressure check reads len(self._queue), and close clears it:
            # by session, that is the lanes and the gate.
            self._queue = self._sessions  # type: ignore[assignment]
            self._on_lines = self._on_lines_by_session  # type: ignore[method-assign]
            self._enqueue_mark = self._post_mark  # type: ignore[method-assign]

    def _make_call(self, call_id: rpc.RequestId, method: str) -> AsyncInboundCall:
        return AsyncInboundCall(self, call_id, method)

    # ------------------------------------------------------------------ registration

    def on_request(
        self,
        method: str,
        handler: Callable[[Any, AsyncInboundCall], Any],
        params_type: Any = None,
        *,
        on_arrival: Callable[[Any, AsyncInboundCall], None] | None = None,
    ) -> None:
        """Handle requests for ``method``: ``handler(params, call)`` returns (or, async, resolves
        to) the result. Raise :class:`RequestError` to answer with a specific error; any other
        exception is answered -32603 "Internal error" (and logged).

        ``on_arrival(params, call)`` runs on the loop the moment the request is read, before
        anything read after it; it must not block, and raising RequestError refuses the request.
        """
        self._endpoint.on_request(method, handler, params_type, on_arrival)

    def on_notification(
        self,
        method: str,
        handler: Callable[[Any], Any],
        params_type: Any = None,
        *,
        immediate: bool = False,
    ) -> None:
        """Handle notifications for ``method`` in arrival order, one at a time.

        ``immediate=True`` calls the (plain, non-blocking) handler the moment the notification
        is read, never queued (for cancellation).
        """
        self._endpoint.on_notification(method, handler, params_type, immediate)

    def on_unknown_request(self, handler: Callable[[str, Any, AsyncInboundCall], Any]) -> None:
        """Handle requests no method handler matches: ``handler(method, params, call)``."""
        self._endpoint.fallback_request = handler

    def on_unknown_notification(self, handler: Callable[[str, Any], Any]) -> None:
        """Handle notifications no method handler matches: ``handler(method, params)``."""
        self._endpoint.fallback_notification = handler

    def on_close(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once (on the loop) when the input ends or the connection closes."""
        self._close_callbacks.append(callback)

    # ------------------------------------------------------------------ executor

    @property
    def executor(self) -> Executor:
        """Where blocking work runs: the user's executor, or one the connection owns (created
        on first use, shut down on close)."""
        executor = self._executor
        if executor is None:
            if self._closed:
                raise ConnectionClosedError("connection closed")
            from ..executor import HandlerPool  # imported late: threads only when asked for

            executor = self._executor = self._own_executor = HandlerPool(thread_name_prefix=f"{self.name}-handler")
        return executor

    async def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run the blocking ``fn(*args)`` on :attr:`executor` and await its result.

        Cancelling the awaiting task does not stop ``fn`` (a thread cannot be interrupted):
        its result is then dropped."""
        loop = self._loop or asyncio.get_running_loop()
        executor = self.executor
        if executor is self._own_executor:
            # The SDK's pool runs work without a concurrent Future (run_in_executor would
            # chain one to the loop's): one loop Future, completed from the pool thread.
            waiter: asyncio.Future[T] = loop.create_future()
            executor.execute(_run_and_report, loop, waiter, fn, args)
            return await waiter
        return await loop.run_in_executor(executor, fn, *args)

    def blocking(self, fn: Callable[P, T]) -> Callable[P, Awaitable[T]]:
        """Wrap a blocking function as an async callable that runs it on :attr:`executor`:
        ``conn.on_request("m", conn.blocking(handler))``. Facades use it for users' plain
        handlers (which must never run on the loop)."""

        @functools.wraps(fn)
        async def run(*args: P.args, **kwargs: P.kwargs) -> T:
            if kwargs:
                return await self.run_blocking(functools.partial(fn, *args, **kwargs))
            return await self.run_blocking(fn, *args)

        return run

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> AsyncConnection:
        """Start the reader and dispatcher tasks; call it on the running loop."""
        if self._started:
            return self
        loop = self._loop = asyncio.get_running_loop()
        self._started = True
        self._drained = loop.create_future()
        self._drain_done = loop.create_future()
        if not self._by_session:  # by session, lane tasks come and go instead
            self._dispatcher = loop.create_task(self._dispatch_loop(), name=f"{self.name}-dispatcher")
        set_receiver = getattr(self._transport, "set_receiver", None)
        if set_receiver is not None:
            # The transport calls us with each chunk (ReceivingTransport): one loop callback
            # per read instead of waking a reader task.
            self._pushed = True
            set_receiver(self._data_received)
        else:
            self._reader = loop.create_task(self._read_loop(), name=f"{self.name}-reader")
        return self

    @property
    def is_closed(self) -> bool:
        """True once the input ended or close() was called."""
        return self._endpoint.eof or self._closed

    async def __aenter__(self) -> AsyncConnection:
        return self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close(graceful=True)

    async def wait_closed(self, timeout: float | None = None) -> bool:
        """Wait until the input ended and everything received was handled and answered (or
        the connection closed). False when ``timeout`` ran out first."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        drained = self._drained
        if drained is None:
            return self._closed
        if not drained.done():
            await asyncio.wait((drained,), timeout=timeout)
            if not drained.done():
                return False
        return await self._wait_tasks(deadline)

    async def close(self, graceful: bool = False, timeout: float | None = 5.0) -> None:
        """Close the connection; idempotent.

        Every running handler sees its call cancelled at once. ``graceful=False`` then cancels
        the handlers' tasks: queued work is dropped, pending calls fail with
        ConnectionClosedError. ``graceful=True`` first stops taking new requests, drains the
        queue and waits for running handlers (which may still answer), while still reading
        the answers they wait for. Either way close waits about ``timeout`` at most, in all.
        """
        if self._close_done is not None:
            if not self._close_done.done():
                await asyncio.wait((self._close_done,), timeout=timeout)
            return
        loop = self._loop = self._loop or asyncio.get_running_loop()
        done = self._close_done = loop.create_future()
        try:
            await self._close(loop, graceful, timeout)
        except asyncio.CancelledError:
            # Cancelled mid-way (e.g. asyncio.run cancelling the task that closes): close
            # anyway, without waiting (the transport's close goes on in the background).
            self._shut_down()
            if not self._transport_closing:
                self._transport_closing = True
                loop.create_task(self._close_transport())
            self._finish_close()
            raise
        finally:
            if not done.done():
                done.set_result(None)

    async def _close(self, loop: asyncio.AbstractEventLoop, graceful: bool, timeout: float | None) -> None:
        deadline = None if timeout is None else loop.time() + timeout
        ep = self._endpoint
        current = asyncio.current_task()
        if graceful and self._started and not self._closed:
            # Cancelled first, so handlers waiting on a user or a peer give up now instead of
            # at the end of the wait; their answers still go out.
            for call in ep.start_closing():
                assert isinstance(call, AsyncInboundCall)
                call._set_cancelled()
            done = self._drain_done
            assert done is not None
            # Not from the dispatcher (or a lane): the mark would wait behind the very
            # handler that is closing.
            if not ep.eof and current is not self._dispatcher and current not in self._lane_tasks:
                self._enqueue_mark(_DRAIN_MARK)
                if not done.done():
                    await asyncio.wait((done,), timeout=_remaining(loop, deadline))
            await self._wait_tasks(deadline)
        tasks = self._shut_down()
        self._transport_closing = True
        await self._close_transport()
        if tasks:
            # A little past the deadline, so tasks that are merely finishing are still awaited.
            wait = _remaining(loop, deadline)
            await asyncio.wait(tasks, timeout=None if wait is None else max(wait, 0.1))
            if any(not t.done() for t in tasks):
                _log.warning("%s: a handler task is still running after close", self.name)
        pool = self._own_executor
        if pool is not None:
            pool.shutdown(wait=False)
            # The pool's threads end when their work does; wait for them without blocking the
            # loop (short polls, only on close of a connection that ran blocking work).
            while not pool.join(0):
                if deadline is not None and loop.time() >= deadline:
                    _log.warning("%s: a blocking handler is still running after close", self.name)
                    break
                await asyncio.sleep(0.005)
        self._finish_close()

    def _shut_down(self) -> list[asyncio.Task[Any]]:
        """The part of close that does not wait: mark closed, fail pending calls, cancel
        timers and tasks (all but the current one). Returns the tasks cancelled. Idempotent."""
        current = asyncio.current_task()
        if not self._closed:
            self._closed = True
            inbound, pending = self._endpoint.close()
            for call in inbound:
                assert isinstance(call, AsyncInboundCall)
                call._set_cancelled()
            self._flush()
            error = self._endpoint.closed_error()
            for record in pending:
                self._fail(record, error)
        for timer in list(self._timers):
            timer.cancel()
        for sweep in self._sweeps.values():
            sweep.cancel()
        self._sweeps.clear()
        self._timeouts.clear()
        self._release_reader()
        tasks = [t for t in self._tasks if t is not current and not t.done()]
        for task in (self._reader, self._dispatcher, *self._lane_tasks):
            if task is not None and task is not current and not task.done():
                tasks.append(task)
        for task in tasks:
            task.cancel()
        self._queue.clear()
        return tasks

    async def _close_transport(self) -> None:
        try:
            await self._transport.close()
        except Exception:
            _log.exception("%s: closing the transport failed", self.name)

    def _finish_close(self) -> None:
        self._tasks.clear()
        if self._own_executor is not None:
            self._own_executor.shutdown(wait=False)
        for fut in (self._drained, self._drain_done):
            if fut is not None and not fut.done():
                fut.set_result(None)
        self._run_close_callbacks()

    async def _wait_tasks(self, deadline: float | None) -> bool:
        """Wait for the running handler tasks (not the current one) until ``deadline``."""
        loop = asyncio.get_running_loop()
        current = asyncio.current_task()
        while True:
            tasks = [t for t in self._tasks if t is not current and not t.done()]
            if not tasks:
                return True
            remaining = _remaining(loop, deadline)
            if remaining is not None and remaining <= 0:
                return False
            await asyncio.wait(tasks, timeout=remaining)

    def _run_close_callbacks(self) -> None:
        callbacks, self._close_callbacks = self._close_callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                _log.exception("%s: close callback failed", self.name)

    # ------------------------------------------------------------------ outbound calls

    async def request(
        self,
        method: str,
        params: Any = None,
        result_type: Any = None,
        *,
        timeout: float | None = _USE_DEFAULT,
    ) -> Any:
        """Send a request and await its result, decoded as ``result_type``.

        ``timeout`` defaults to the connection's ``request_timeout``; None waits forever. On
        timeout a ``$/cancel_request`` is sent, the late answer is dropped and
        :class:`RequestTimeoutError` is raised. An error answer raises :class:`RequestError`.
        Cancelling the awaiting task sends ``$/cancel_request`` and re-raises CancelledError.
        """
        if not self._started:
            raise ConnectionClosedError("connection not started")
        loop = self._loop
        assert loop is not None
        ep = self._endpoint
        waiter = loop.create_future()
        serial = _serial.get()
        pending = ep.register(method, result_type, waiter, serial)
        if self._by_session:
            # Before the line goes out: the answer is ordered with this session's messages.
            pending.session = rpc.session_of_params(params)
        line = ep.request_line(pending, params)  # forgets the call if it raises
        if serial:
            # A notification handler waits for this answer: the reader must keep reading.
            self._dispatcher_asked = True
            self._serial_waits += 1  # until the finally below
            if self._reader_held:
                self._release_reader()
        if timeout is _USE_DEFAULT:
            timeout = self.request_timeout
        deadlines = None
        try:
            self._write(line)
            if timeout is not None:
                deadlines = self._timeouts.get(timeout)
                if deadlines is None:
                    deadlines = self._timeouts[timeout] = {}
                deadline = loop.time() + timeout
                deadlines[pending.id] = (deadline, pending)
                if timeout not in self._sweeps:
                    self._sweeps[timeout] = loop.call_at(deadline, self._sweep, timeout)
            # Flow control: a caller sending faster than the peer reads waits here.
            await self._transport.drain()
            msg = await waiter
        except asyncio.CancelledError:
            if ep.abandon(pending.id) is not None:
                self._send_cancel(pending.id)
            raise
        except BaseException:
            ep.abandon(pending.id)  # the write failed: nothing left pending
            raise
        finally:
            if deadlines is not None:
                deadlines.pop(pending.id, None)
            if serial:
                self._serial_waits -= 1
                if self._by_session and not self._serial_waits:
                    # By session no dispatcher clears the flag: it holds while any lane waits.
                    self._dispatcher_asked = False
        if type(msg) is _Response:
            return ep.decode_result(pending, msg.result)
        raise ep.response_error(msg)

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification; never blocks. Lines are written at the end of the current loop
        iteration (and always before the next request or answer), so order is unchanged."""
        ep = self._endpoint
        if ep.eof or ep.closed:  # notification_line, inlined: once per streamed update
            raise ep.closed_error()
        line = self._encode_notification(method, params)
        if self._wire_tap is not None:
            self._tap("out", line)
        wbuf = self._wbuf
        wbuf.append(line)
        self._wbuf_size += len(line)
        if len(wbuf) == 1:
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            loop.call_soon(self._flush)
        elif self._wbuf_size >= _FLUSH_BYTES:
            self._flush()

    async def drain(self) -> None:
        """Write the batched notifications now and wait until the transport's write buffer is
        below its high-water mark (e.g. every so often while streaming many updates).
        ConnectionClosedError if the pipe closed with data still unwritten. (An addition to
        the threaded Connection's API, for async streaming.)"""
        self._flush()
        await self._transport.drain()

    def cancel_request(self, msg_id: int) -> None:
        """Abandon an outbound request: the peer gets ``$/cancel_request``, the caller
        :class:`RequestCancelledError`."""
        pending = self._endpoint.abandon(msg_id)
        if pending is not None:
            self._send_cancel(msg_id)
            self._fail(pending, RequestCancelledError(f"{pending.method}: cancelled"))

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` on the loop after ``delay`` seconds (never once the connection is
        closed); :meth:`Timer.cancel` stops it. Facades use it for their timers."""
        if self._closed:
            return Timer(None, self._timers)
        loop = self._loop or asyncio.get_running_loop()
        timer = Timer(None, self._timers)
        timer._handle = loop.call_later(delay, self._fire_timer, timer, callback)
        self._timers.add(timer)
        return timer

    def _fire_timer(self, timer: Timer, callback: Callable[[], None]) -> None:
        self._timers.discard(timer)
        timer._handle = None
        if self._closed:
            return
        try:
            callback()
        except Exception:
            _log.exception("%s: a timer callback failed", self.name)

    def _sweep(self, timeout: float) -> None:
        """Expire the calls of duration ``timeout`` whose deadline passed (oldest first), then
        wait for the next one."""
        del self._sweeps[timeout]
        deadlines = self._timeouts.get(timeout)
        if not deadlines:
            self._timeouts.pop(timeout, None)
            return
        loop = self._loop
        assert loop is not None
        now = loop.time()
        expired = []
        for deadline, pending in deadlines.values():
            if deadline > now:
                self._sweeps[timeout] = loop.call_at(deadline, self._sweep, timeout)
                break
            expired.append(pending)
        for pending in expired:
            del deadlines[pending.id]
            self._expire(pending)
        if not deadlines:
            del self._timeouts[timeout]

    def _expire(self, pending: rpc.Pending) -> None:
        if self._endpoint.abandon(pending.id) is not None:
            self._send_cancel(pending.id)
            self._fail(pending, RequestTimeoutError(f"{pending.method}: no answer in time"))

    def _send_cancel(self, msg_id: int) -> None:
        line = self._endpoint.cancel_line(msg_id)
        if line is not None:
            self._write_answer(line)

    @staticmethod
    def _fail(pending: rpc.Pending, error: BaseException) -> None:
        waiter = pending.waiter
        if not waiter.done():
            waiter.set_exception(error)

    def _complete(self, msg: rpc.ResponseLike) -> None:
        pending = self._endpoint.take(msg.id)
        if pending is not None:
            waiter = pending.waiter
            if not waiter.done():
                waiter.set_result(msg)

    # ------------------------------------------------------------------ writing

    def _write(self, line: bytes) -> None:
        """Write a request or answer line now, after any batched notifications."""
        if self._wire_tap is not None:
            self._tap("out", line)
        if self._wbuf:
            self._wbuf.append(line)
            line = b"".join(self._wbuf)
            self._wbuf.clear()
            self._wbuf_size = 0
        self._transport.write(line)

    def _write_answer(self, line: bytes) -> None:
        try:
            self._write(line)
        except ConnectionClosedError:
            _log.debug("%s: answer not sent: connection closed", self.name)

    def _flush(self) -> None:
        if self._wbuf:
            data = b"".join(self._wbuf)
            self._wbuf.clear()
            self._wbuf_size = 0
            try:
                self._transport.write(data)
            except ConnectionClosedError:
                _log.debug("%s: notifications not sent: connection closed", self.name)

    def _write_outbox(self) -> None:
        for line in self._endpoint.data_to_send():
            self._write_answer(line)

    def _tap(self, direction: str, line: bytes) -> None:
        try:
            assert self._wire_tap is not None
            self._wire_tap(direction, line)
        except Exception:
            _log.exception("wire tap failed")

    # ------------------------------------------------------------------ reading

    async def _read_loop(self) -> None:
        read = self._transport.read
        feed = self._framer.feed
        queue = self._queue
        try:
            while True:
                if len(queue) >= self._max_queued and not self._dispatcher_asked and not self._closed:
                    await self._hold_reading()
                try:
                    data = await read()
                except OSError as exc:
                    _log.debug("%s: read failed: %r", self.name, exc)
                    break
                if not data:
                    break
                lines = feed(data)
                if lines:
                    self._on_lines(lines)
                # Not kept while awaiting the next read: a read's bytes and lines (a line may be
                # up to max_message_bytes) are freed as soon as they are routed.
                del data, lines
            if not self._closed:
                self._on_lines(self._framer.end())
        except asyncio.CancelledError:
            if self._closed:
                return
            raise
        except Exception:
            _log.exception("%s: reader failed", self.name)
        if not self._closed:
            self._on_eof()

    async def _hold_reading(self) -> None:
        """Stop reading while the dispatcher is far behind (a slow notification consumer), so
        the peer's writes back up instead of this process buffering without bound."""
        loop = self._loop
        assert loop is not None
        held = self._held = loop.create_future()
        self._reader_held = True
        try:
            await held
        finally:
            self._held = None
            self._reader_held = False

    def _release_reader(self) -> None:
        if self._pushed:
            if self._reader_held:
                self._reader_held = False
                try:
                    self._transport.resume_reading()  # type: ignore[attr-defined]
                except Exception:
                    _log.debug("%s: resume_reading failed", self.name, exc_info=True)
            return
        held = self._held
        if held is not None and not held.done():
            held.set_result(None)

    def _data_received(self, data: bytes) -> None:
        """What a ReceivingTransport read (b"": end of stream), pushed on the loop."""
        if self._closed or self._endpoint.eof:
            return
        try:
            if data:
                lines = self._framer.feed(data)
                if lines:
                    self._on_lines(lines)
                if len(self._queue) >= self._max_queued and not self._dispatcher_asked and not self._reader_held:
                    self._reader_held = True
                    self._transport.pause_reading()  # type: ignore[attr-defined]
                return
            self._on_lines(self._framer.end())
        except Exception:
            _log.exception("%s: reader failed", self.name)
        if not self._closed and not self._endpoint.eof:
            self._on_eof()

    def _on_lines(self, lines: list[bytes | rpc.LineTooLong]) -> None:
        """Route the lines of one read."""
        queue = self._queue
        handlers = self._endpoint.handlers
        tap = self._wire_tap
        decode_line = rpc.decode_line
        one_pass = self._endpoint.one_pass
        prefix = one_pass.prefix if one_pass is not None else None
        if one_pass is not None and tap is None:
            # A stream's read: hundreds of updates and nothing else, decoded in one go.
            updates = one_pass.decode_read(lines)
            if updates is not _MISS:
                hot, hot_method = one_pass.handler, one_pass.method
                for params in updates:
                    if queue:  # called by the dispatcher, in order
                        queue.append((hot, params, hot_method))
                    else:
                        self._call_now(hot, params, hot_method)
                lines = []  # nothing left for the loop below; the dispatcher is woken
        for line in lines:
            if type(line) is not bytes:
                assert isinstance(line, rpc.LineTooLong)
                _log.warning("%s: discarded a line of %d bytes (over the limit)", self.name, line.size)
                continue
            if tap is not None:
                self._tap("in", line)
            if prefix is not None and line.startswith(prefix):
                # The streamed updates: envelope and typed params in one decode.
                assert one_pass is not None
                params = one_pass.decode(line)
                if params is not _MISS:
                    if queue:  # called by the dispatcher, in order
                        queue.append((one_pass.handler, params, one_pass.method))
                        continue
                    self._call_now(one_pass.handler, params, one_pass.method)
                    continue
            msg = decode_line(line)
            cls = type(msg)
            if cls is _Notification:
                # Inlined: notifications are the bulk of a stream.
                handler = handlers.get(msg.method)  # type: ignore[union-attr]
                if handler is not None and handler.notification and not handler.immediate and not queue:
                    try:
                        params = handler.decode(msg.params)  # type: ignore[union-attr]
                    except (msgspec.DecodeError, RecursionError) as exc:  # ValidationError, bad UTF-8...
                        _log.warning("%s: %s notification with invalid params: %s", self.name, msg.method, exc)  # type: ignore[union-attr]
                        continue
                    self._call_now(handler, params, msg.method)  # type: ignore[union-attr]
                elif handler is not None and handler.immediate:
                    self._run_immediate(msg)  # type: ignore[arg-type]
                elif msg.method == rpc.CANCEL_REQUEST:  # type: ignore[union-attr]
                    self._on_cancel_request(msg)  # type: ignore[arg-type]
                elif queue:
                    queue.append(msg)
                else:
                    self._run_notification_now(msg)  # type: ignore[arg-type]
            elif cls is list:
                for item in msg:  # type: ignore[union-attr]
                    self._route(item)
            else:
                self._route(msg)  # type: ignore[arg-type]
        if queue:
            wake = self._wake
            if wake is not None:
                self._wake = None
                wake.set_result(None)

    def _call_now(self, handler: rpc.Handler, params: Any, method: str) -> None:
        """Nothing queued ahead: call a notification's handler from the reader; an awaitable
        it returns goes to the head of the queue, awaited before anything read after it."""
        try:
            result = handler.fn(params)
        except Exception:
            _log.exception("%s: %s notification handler failed", self.name, method)
            return
        if result is not None and inspect.isawaitable(result):
            self._queue.append((result, method))

    def _route(self, msg: rpc.Message) -> None:
        queue = self._queue
        cls = type(msg)
        if cls is _Response or cls is _ErrorResponse:
            if not queue:
                self._complete(msg)  # type: ignore[arg-type]
                return
            pending = self._endpoint.peek(msg.id)  # type: ignore[union-attr]
            if pending is not None and pending.serial:
                self._complete(msg)  # type: ignore[arg-type]
            else:
                queue.append(msg)
        elif cls is _Request:
            # Registered now, in arrival order, even when it has to wait its turn in the
            # queue: a $/cancel_request or an arrival hook's state then finds it.
            start = self._endpoint.receive_request(msg)  # type: ignore[arg-type]
            if start is None:
                self._write_outbox()
            elif queue:
                queue.append(start)
            else:
                self._start_request(start)
        elif cls is _Notification:
            assert isinstance(msg, _Notification)
            handler = self._endpoint.handlers.get(msg.method)
            if handler is not None and handler.immediate:
                self._run_immediate(msg)
            elif msg.method == rpc.CANCEL_REQUEST:
                self._on_cancel_request(msg)
            elif queue:
                queue.append(msg)
            else:
                self._run_notification_now(msg)
        else:
            assert isinstance(msg, rpc.Invalid)
            answer = self._endpoint.receive_invalid(msg)
            if answer is not None:
                self._route(answer)
            else:
                self._write_outbox()

    def _on_cancel_request(self, msg: rpc.Notification) -> None:
        call = self._endpoint.receive_cancel(msg)
        self._write_outbox()
        if call is not None:
            assert isinstance(call, AsyncInboundCall)
            call.cancel()

    def _on_eof(self) -> None:
        ep = self._endpoint
        error = None
        for pending in ep.receive_eof():
            if error is None:
                error = ep.closed_error()
            self._fail(pending, error)
        # The peer is gone: no handler need wait for it (or for a user) any longer; they may
        # still answer (the peer may only have half-closed).
        for call in list(ep.inbound.values()):
            assert isinstance(call, AsyncInboundCall)
            call._set_cancelled()
        self._enqueue_mark(_EOF_MARK)

    def _enqueue_mark(self, mark: _Mark) -> None:
        self._queue.append(mark)
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set_result(None)

    # ------------------------------------------------------------------ handlers

    def _call_notification(self, msg: rpc.Notification) -> Awaitable[Any] | None:
        """Call a notification's handler; returns the awaitable it gave back (an ``async def``
        handler's coroutine) for the caller to await in order, else None."""
        target = self._endpoint.notification_params(msg)
        if target is None:
            return None
        fn, args = target
        try:
            result = fn(*args)
        except Exception:
            _log.exception("%s: %s notification handler failed", self.name, msg.method)
            return None
        if result is not None and (type(result) is _Coroutine or inspect.isawaitable(result)):
            return result
        return None

    def _run_immediate(self, msg: rpc.Notification) -> None:
        awaitable = self._call_notification(msg)
        if awaitable is not None:
            # An immediate handler should be plain; if it is not, let it run on its own.
            self._spawn(self._await_notification(awaitable, msg.method))

    def _run_notification_now(self, msg: rpc.Notification) -> None:
        """Nothing is queued ahead: call the handler here; an awaitable it returns goes to the
        head of the queue, for the dispatcher to await before anything read after it."""
        awaitable = self._call_notification(msg)
        if awaitable is not None:
            self._queue.append((awaitable, msg.method))

    async def _await_notification(self, awaitable: Awaitable[Any], method: str) -> None:
        token = _serial.set(True)
        try:
            await awaitable
        except asyncio.CancelledError:
            if self._closed:
                raise
            _log.debug("%s: %s notification handler was cancelled", self.name, method)
        except Exception:
            _log.exception("%s: %s notification handler failed", self.name, method)
        finally:
            _serial.reset(token)
            if not self._by_session:  # by session, request() keeps the flag
                self._dispatcher_asked = False

    def _start_request(self, start: rpc.Start) -> None:
        """Call a request's handler: a plain function's result is answered at once; an
        awaitable runs as the call's task."""
        call = start[0]
        assert isinstance(call, AsyncInboundCall)
        ep = self._endpoint
        try:
            fn, args = ep.request_params(start)
            result = fn(*args)
        except Exception as exc:
            if not isinstance(exc, RequestError):
                _log.exception("%s: %s handler failed", self.name, call.method)
            line = ep.answer_exception(call, exc)
            if line is not None:
                self._write_answer(line)
            return
        if result is not None and inspect.isawaitable(result):
            loop = self._loop
            assert loop is not None
            # No done callback (one more loop callback per request): _run_request removes
            # its task itself; a task cancelled before its first step is removed by cancel().
            if sys.version_info >= (3, 12):
                # Eager: the handler runs here up to its first real wait, like a plain
                # function would (a quick handler is answered without a loop iteration).
                task = asyncio.Task(self._run_request(call, result), loop=loop, eager_start=True)
            else:
                task = loop.create_task(self._run_request(call, result))
            call.task = task
            if not task.done():
                self._tasks.add(task)
            return
        line = ep.answer(call, result)
        if line is not None:
            self._write_answer(line)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        loop = self._loop
        assert loop is not None
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run_request(self, call: AsyncInboundCall, awaitable: Awaitable[Any]) -> None:
        ep = self._endpoint
        if call.task is None:  # started eagerly: the task is not assigned yet
            call.task = asyncio.current_task()
        if _serial.get():
            # The task copied a context marked by a notification handler (a loop callback
            # scheduled from one, e.g. an in-process peer's write): a request handler's own
            # calls must wait their turn like any other.
            _serial.set(False)
        try:
            result = await awaitable
        except asyncio.CancelledError:
            self._tasks.discard(call.task)
            # Cancelled by $/cancel_request, call.cancel() or close: answered already, or the
            # canceller answers. Cancelled by anyone else: the peer must still get an answer.
            if not call._is_cancelled and not self._closed:
                line = ep.answer_error(call, REQUEST_CANCELLED, "Request cancelled")
                if line is not None:
                    self._write_answer(line)
            raise
        except Exception as exc:
            self._tasks.discard(call.task)
            if not isinstance(exc, RequestError):
                _log.exception("%s: %s handler failed", self.name, call.method)
            line = ep.answer_exception(call, exc)
        else:
            self._tasks.discard(call.task)
            line = ep.answer(call, result)
        if line is not None:
            self._write_answer(line)

    # ------------------------------------------------------------------ dispatching

    async def _dispatch_loop(self) -> None:
        loop = self._loop
        assert loop is not None
        queue = self._queue
        handlers = self._endpoint.handlers
        # The _serial mark stays set from one awaited notification handler to the next (one
        # set/reset per run of them, not per update); it is reset before anything else runs
        # here: a plain function (whose tasks would copy it), a request handler's start...
        serial: contextvars.Token[bool] | None = None
        is_async: dict[Any, bool] = {}  # handler -> its fn is an `async def` (calling it runs no code)
        while True:
            if not queue:
                if self._closed:
                    return
                wake = self._wake = loop.create_future()
                await wake
                continue
            item = queue[0]
            try:
                cls = type(item)
                if cls is _Notification or (cls is tuple and len(item) < 4):
                    # Inlined (_call_notification): a stream's updates mostly queue behind the
                    # one being awaited and are called from here.
                    awaitable = None
                    handler = None
                    if cls is _Notification:
                        method = item.method
                        handler = handlers.get(method)
                        if handler is not None and handler.notification:
                            try:
                                params = handler.decode(item.params)
                            except (msgspec.DecodeError, RecursionError) as exc:
                                _log.warning("%s: %s notification with invalid params: %s", self.name, method, exc)
                                handler = None
                        else:
                            handler = None
                            if serial is not None:
                                _serial.reset(serial)
                                serial = None
                            awaitable = self._call_notification(item)
                    elif len(item) == 3:  # decoded by the reader in one pass
                        handler, params, method = item
                    else:  # an awaitable a notification handler returned when run by the reader
                        awaitable, method = item
                    if handler is not None:
                        if serial is not None:
                            coro_fn = is_async.get(handler)
                            if coro_fn is None:
                                coro_fn = is_async[handler] = inspect.iscoroutinefunction(handler.fn)
                            if not coro_fn:
                                _serial.reset(serial)
                                serial = None
                        try:
                            awaitable = handler.fn(params)
                        except Exception:
                            _log.exception("%s: %s notification handler failed", self.name, method)
                            awaitable = None
                        else:
                            if awaitable is not None and not (
                                type(awaitable) is _Coroutine or inspect.isawaitable(awaitable)
                            ):
                                awaitable = None
                    if awaitable is not None:
                        # Awaited here, not through _await_notification (which only an
                        # immediate handler's stray awaitable uses): one coroutine less per
                        # update, ~0.1 us (6%) of the client's CPU per streamed chunk.
                        if serial is None:
                            serial = _serial.set(True)
                        try:
                            await awaitable
                        except asyncio.CancelledError:
                            if self._closed:
                                raise
                            _log.debug("%s: %s notification handler was cancelled", self.name, method)
                        except Exception:
                            _log.exception("%s: %s notification handler failed", self.name, method)
                        finally:
                            self._dispatcher_asked = False
                elif serial is not None:  # not a notification: handled with the mark cleared
                    _serial.reset(serial)
                    serial = None
                    continue
                elif cls is tuple:
                    if not item[0].is_answered:  # a $/cancel_request answered it while queued
                        self._start_request(item)
                elif cls is _Response or cls is _ErrorResponse:
                    self._complete(item)
                elif item is _DRAIN_MARK:
                    if self._drain_done is not None and not self._drain_done.done():
                        self._drain_done.set_result(None)
                elif item is _EOF_MARK:
                    queue.popleft()
                    for fut in (self._drain_done, self._drained):
                        if fut is not None and not fut.done():
                            fut.set_result(None)
                    self._run_close_callbacks()
                    return
            except Exception:  # a bug here must not stop the queue: everything behind would hang
                _log.exception("%s: dispatching %r failed", self.name, type(item).__name__)
            if self._closed:
                return  # closed from a handler run here (close() cleared the queue)
            queue.popleft()
            if self._reader_held and len(queue) < self._max_queued // 2:
                self._release_reader()

    # ------------------------------------------------------------------ ordering by session

    def _on_lines_by_session(self, lines: list[bytes | rpc.LineTooLong]) -> None:
        """``_on_lines`` for ``ordering="session"``: each message goes to its session's lane."""
        tap = self._wire_tap
        decode_line = rpc.decode_line
        session_of = rpc.session_id_of
        handlers = self._endpoint.handlers
        admit = self._admit
        route = self._route_by_session
        one_pass = self._endpoint.one_pass
        if one_pass is not None and tap is None:
            # A stream's read: hundreds of updates and nothing else, decoded in one go (see
            # _on_lines), each queued in its session's lane with its typed params.
            updates = one_pass.decode_read(lines)
            if updates is not _MISS:
                session_of_params, hot, hot_method = rpc.session_of_params, one_pass.handler, one_pass.method
                for p in updates:
                    admit(session_of_params(p), rpc.Decoded(hot, p, hot_method))
                return
        for line in lines:
            if type(line) is not bytes:
                assert isinstance(line, rpc.LineTooLong)
                _log.warning("%s: discarded a line of %d bytes (over the limit)", self.name, line.size)
                continue
            if tap is not None:
                self._tap("in", line)
            msg = decode_line(line)
            if type(msg) is _Notification:
                # Inlined (_route_by_session): notifications are the bulk of a stream.
                handler = handlers.get(msg.method)
                if (handler is None or not handler.immediate) and msg.method != rpc.CANCEL_REQUEST:
                    admit(session_of(msg.params), msg)
                    continue
                route(msg)
            elif type(msg) is list:
                for item in msg:
                    route(item)
            else:
                route(msg)  # type: ignore[arg-type]

    def _route_by_session(self, msg: rpc.Message) -> None:
        """Act on one message now, or queue it with its session (or behind the gate)."""
        ep = self._endpoint
        cls = type(msg)
        if cls is _Notification:
            assert isinstance(msg, _Notification)
            handler = ep.handlers.get(msg.method)
            if handler is not None and handler.immediate:
                self._run_immediate(msg)
            elif msg.method == rpc.CANCEL_REQUEST:
                self._on_cancel_request(msg)
            else:
                self._admit(rpc.session_id_of(msg.params), msg)
        elif cls is _Response or cls is _ErrorResponse:
            pending = ep.peek(msg.id)  # type: ignore[union-attr]
            if pending is None or pending.serial:
                # Unknown (dropped when delivered), or the deadlock rule (a notification
                # handler awaits it): completed now; otherwise ordered with the call's session.
                self._complete(msg)  # type: ignore[arg-type]
            else:
                self._admit(pending.session, msg)
        elif cls is _Request:
            assert isinstance(msg, _Request)
            # Registered now, in arrival order, even when it has to wait its turn.
            start = ep.receive_request(msg)
            if start is None:
                self._write_outbox()
            else:
                self._admit(rpc.session_id_of(msg.params), start)
        else:
            assert isinstance(msg, rpc.Invalid)
            answer = ep.receive_invalid(msg)
            if answer is not None:
                self._route_by_session(answer)  # a malformed answer: its caller fails, in order
            else:
                self._write_outbox()

    def _admit(self, key: str | None, item: Any) -> None:
        """Place one inbound item of session ``key`` (None: session-less): acted on now when
        nothing is ahead of it, else queued in its lane (or behind the gate)."""
        sessions = self._sessions
        if sessions.gate or sessions.gate_busy:
            # A session-less message waits or runs: everything read after it waits too.
            sessions.gate.append((key, item))
            sessions.queued += 1
            return
        if key is None:
            if sessions.lanes:
                sessions.gate.append((None, item))  # the last lane to finish runs the gate
                sessions.queued += 1
                return
            awaiting = self._act(item)
            if awaiting is not None:  # a handler's awaitable: awaited before anything after it
                sessions.gate.append((None, awaiting))
                sessions.queued += 1
                sessions.gate_busy = True
                self._spawn_lane(self._drain_gate())
            return
        lane = sessions.lanes.get(key)
        if lane is None:
            item = self._act(item)
            if item is None:
                return
            lane = sessions.lanes[key] = deque()
            self._spawn_lane(self._drain_lane(key, lane))
        lane.append(item)
        sessions.queued += 1

    def _act(self, item: Any) -> tuple[Awaitable[Any], str] | None:
        """Handle an item whose turn it is, as far as that goes without awaiting: a
        notification's handler is called (its awaitable, with the method, is returned for the
        caller to await in order), an answer completes its caller, a request starts."""
        cls = type(item)
        if cls is _Notification or cls is rpc.Decoded:
            method = item.method
            if cls is rpc.Decoded:  # the reader decoded it in one pass
                handler, params = item.handler, item.params
            else:
                handler = self._endpoint.handlers.get(method)
                if handler is None or not handler.notification:
                    awaitable = self._call_notification(item)  # the fallback, or nobody
                    return None if awaitable is None else (awaitable, method)
                # Inlined (_call_notification): one call per streamed update instead of three.
                try:
                    params = handler.decode(item.params)
                except (msgspec.DecodeError, RecursionError) as exc:  # a ValidationError, invalid UTF-8...
                    _log.warning("%s: %s notification with invalid params: %s", self.name, method, exc)
                    return None
            try:
                awaitable = handler.fn(params)
            except Exception:
                _log.exception("%s: %s notification handler failed", self.name, method)
                return None
            if awaitable is None or not (type(awaitable) is _Coroutine or inspect.isawaitable(awaitable)):
                return None
            return awaitable, method
        if cls is tuple:
            if len(item) == 2:  # an awaitable the reader got from a handler
                return item  # type: ignore[no-any-return]
            if not item[0].is_answered:  # a $/cancel_request answered it while queued
                self._start_request(item)
        elif cls is _Response or cls is _ErrorResponse:
            self._complete(item)
        elif item is _DRAIN_MARK:
            if self._drain_done is not None and not self._drain_done.done():
                self._drain_done.set_result(None)
        elif item is _EOF_MARK:
            for fut in (self._drain_done, self._drained):
                if fut is not None and not fut.done():
                    fut.set_result(None)
            self._run_close_callbacks()
        return None

    def _post_mark(self, mark: _Mark) -> None:
        """``_enqueue_mark`` by session: the end-of-input or drain mark waits like a
        session-less message (behind everything read before it)."""
        self._admit(None, mark)

    def _spawn_lane(self, coro: Any) -> None:
        loop = self._loop
        assert loop is not None
        task = loop.create_task(coro)
        self._lane_tasks.add(task)
        task.add_done_callback(self._lane_tasks.discard)

    async def _drain_lane(self, key: str, lane: deque[Any]) -> None:
        """One session's items, one at a time in arrival order, as this lane's own task (at
        most one per session: the lane stays in ``lanes`` until the task empties it). An item
        leaves the lane only once handled, so "a lane exists" means "something is ahead"."""
        if _serial.get():  # copied from a context a notification handler marked (see _run_request)
            _serial.set(False)
        sessions = self._sessions
        act = self._act
        while lane:
            item = lane[0]
            try:
                awaiting = act(item)
                if awaiting is not None:
                    # Inlined (the gate uses _await_notification): one coroutine less per update.
                    token = _serial.set(True)  # requests made there are answered when read
                    try:
                        await awaiting[0]
                    except asyncio.CancelledError:
                        if self._closed:
                            raise
                        _log.debug("%s: %s notification handler was cancelled", self.name, awaiting[1])
                    except Exception:
                        _log.exception("%s: %s notification handler failed", self.name, awaiting[1])
                    finally:
                        _serial.reset(token)
            except Exception:  # a bug here must not stop the lane: everything behind would hang
                _log.exception("%s: dispatching %r failed", self.name, type(item).__name__)
            if self._closed:
                return  # close() dropped the lanes
            lane.popleft()
            sessions.queued -= 1
            if self._reader_held and sessions.queued < self._max_queued // 2:
                self._release_reader()
        del sessions.lanes[key]
        if not sessions.lanes and sessions.gate and not sessions.gate_busy:
            sessions.gate_busy = True  # the last lane to finish runs the gate, in this task
            await self._drain_gate()

    async def _drain_gate(self) -> None:
        """Run the gate (this task owns it): hand what waits behind it to its lanes, up to the
        first session-less message; run that once no lane has work left; and so on."""
        sessions = self._sessions
        gate = sessions.gate
        while True:
            while gate:
                key, item = gate[0]
                if key is None:
                    break
                gate.popleft()  # still counted as queued, now in its lane
                lane = sessions.lanes.get(key)
                if lane is None:
                    lane = sessions.lanes[key] = deque()
                    self._spawn_lane(self._drain_lane(key, lane))
                lane.append(item)
            if not gate or sessions.lanes:
                sessions.gate_busy = False  # the last lane to finish runs the gate again
                return
            item = gate[0][1]
            try:
                awaiting = self._act(item)
                if awaiting is not None:
                    await self._await_notification(*awaiting)
            except Exception:
                _log.exception("%s: dispatching %r failed", self.name, type(item).__name__)
            if self._closed:
                return
            gate.popleft()
            sessions.queued -= 1
            if self._reader_held and sessions.queued < self._max_queued // 2:
                self._release_reader()


def _run_and_report(loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[Any], fn: Callable[..., Any],
                    args: tuple[Any, ...]) -> None:
    """On a pool thread: run ``fn(*args)`` and hand its outcome to ``waiter`` on the loop."""
    outcome: Callable[[asyncio.Future[Any], Any], None]
    try:
        value = fn(*args)
        outcome = _set_result
    except BaseException as exc:  # handed over whole, as run_in_executor would
        value, outcome = exc, _set_exception
    try:
        loop.call_soon_threadsafe(outcome, waiter, value)
    except RuntimeError:  # the loop is closed: nobody waits any more
        pass


def _set_result(waiter: asyncio.Future[Any], value: Any) -> None:
    if not waiter.done():  # cancelled meanwhile
        waiter.set_result(value)


def _set_exception(waiter: asyncio.Future[Any], exc: BaseException) -> None:
    if not waiter.done():
        waiter.set_exception(exc)


def _remaining(loop: asyncio.AbstractEventLoop, deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return max(0.0, deadline - loop.time())


class _Sessions:
    """The inbound queues of ``ordering="session"``, in place of the dispatcher's one queue:
    a lane (a deque drained by a task of its own) per session with work, and the gate where
    session-less messages and everything read after them wait. ``len()`` is what
    backpressure counts: the items queued or being handled in all of them."""

    __slots__ = ("lanes", "gate", "gate_busy", "queued")

    def __init__(self) -> None:
        self.lanes: dict[str, deque[Any]] = {}
        self.gate: deque[tuple[str | None, Any]] = deque()
        self.gate_busy = False  # a task owns the gate (hands it out, runs its head)
        self.queued = 0

    def __len__(self) -> int:
        return self.queued

    def clear(self) -> None:
        """Close: what is still queued never runs."""
        self.lanes.clear()
        self.gate.clear()
        self.gate_busy = False
        self.queued = 0
