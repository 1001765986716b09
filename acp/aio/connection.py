"""The asyncio runtime: one JSON-RPC connection over an :class:`~acp.aio.transport.AsyncTransport`.

The twin of :mod:`acp.connection` over the same sans-I/O :class:`acp.rpc.Scheduler`, which
decides everything about messages and their order; this module reads, writes, waits, keeps
time and runs handlers as tasks, on one event loop (it owns the scheduler from there: no lock).
Nothing here starts a thread: blocking work goes to :attr:`AsyncConnection.executor`.

Tasks and what they do::

    reader      transport.read (or the transport pushes: no task) ->
                scheduler.decode_read -> scheduler.route, then: completes the callers and
                starts the requests nothing is queued ahead of, runs arrival hooks and
                ``immediate`` notifications, wakes the drainers
    dispatcher  ordering "connection": drains the gate, awaiting notification handlers one at
                a time in arrival order; ordering "session": a task per lane with work instead
    handlers    an ``async def`` request handler runs as its own task; a plain function is
                called on the loop (it must not block: wrap blocking code with
                :meth:`AsyncConnection.blocking`)

Notifications are written once per loop iteration (or at once past 64 KiB); a request or an
answer goes out at once, after them, so the order on the wire is the order of the calls.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, TypeVar

from typing_extensions import ParamSpec

from .. import rpc
from ..errors import ConnectionClosedError, RequestCancelledError
from ..rpc import scheduler as _sched
from .blocking import run_on
from .inbound import AsyncInboundCall, Timer
from .transport.base import AsyncTransport

if TYPE_CHECKING:  # the tap module is imported only when a tap is used
    from ..wiretap import WireTap

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "MAX_QUEUED_MESSAGES",
    "ORDERINGS",
    "AsyncConnection",
    "AsyncInboundCall",
    "Timer",
]

_log = logging.getLogger("acp.aio.connection")

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_REQUEST_TIMEOUT = 60.0
MAX_QUEUED_MESSAGES = _sched.MAX_QUEUED_MESSAGES
#: The ordering modes of :class:`AsyncConnection` (the same as :class:`acp.Connection`'s).
ORDERINGS = rpc.ORDERINGS

_USE_DEFAULT: Any = object()

# True while a drainer awaits a notification handler: requests made there are answered
# without waiting for the queue (the deadlock rule).
_serial: contextvars.ContextVar[bool] = contextvars.ContextVar("acp_aio_serial", default=False)

_Pending = rpc.Pending
_Updates = rpc.Updates
_Decoded = rpc.Decoded
_Response = rpc.Response
_ErrorResponse = rpc.ErrorResponse
_UNDECODED = rpc.UNDECODED
_GATE = _sched.GATE
_EOF = _sched.EOF
_DRAIN = _sched.DRAIN
_FLUSH_NOW = _sched.FLUSH_NOW
_EAGER = sys.version_info >= (3, 12)
# Finished request tasks held at most (beyond twice the running ones) before they are dropped.
_TASKS_PRUNED_AT = 64


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
    session and handles sessions concurrently (see :mod:`acp.rpc.scheduler`).
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
        self._transport = transport
        self.name = name
        """Labels log lines and the executor's threads."""
        self.request_timeout = request_timeout
        """The default timeout of :meth:`request` (None: wait forever)."""
        # Every rule; owned from the loop.
        self._sched = rpc.Scheduler(functools.partial(AsyncInboundCall, self), name=name, ordering=ordering,
                                    max_line_bytes=max_message_bytes)
        self.ordering: rpc.Ordering = ordering
        """``"connection"`` or ``"session"`` (fixed at construction)."""
        self._close_callbacks: list[Callable[[], None]] = []
        # A tap sees every line (imported only when asked for: a debugging aid).
        self._wire_tap: Callable[[str, bytes], None] | None = None
        owned_tap_close = None
        if wire_tap is not None:
            from ..wiretap import open_tap, tap_lines, tap_read

            self._wire_tap, owned_tap_close = open_tap(wire_tap)
            self._tap_lines = tap_lines
            self._tap_read = tap_read
        if owned_tap_close is not None:
            self._close_callbacks.append(owned_tap_close)
        self._executor = executor
        self._own_executor: Any = None  # the HandlerPool created on first use
        self._loop: asyncio.AbstractEventLoop | None = None

        # The dispatcher (ordering "connection") sleeps on this Future while the gate is idle.
        self._gate_wake: asyncio.Future[None] | None = None
        self._gate_woken = False
        # Backpressure: the reader is held (and, reading with read(), the Future it sleeps on).
        self._reader_held = False
        self._held: asyncio.Future[None] | None = None
        # Set when the transport pushes what it reads (set_receiver): no reader task then.
        self._pushed = False
        self._flush_scheduled = False
        # The loop timer armed for the scheduler's next deadline, and when it fires.
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._deadline_at: float | None = None

        self._reader: asyncio.Task[None] | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        # Request handler tasks (close cancels and waits for those still running; finished
        # ones are dropped in batches, see _track), and the tasks draining session lanes.
        self._tasks: set[asyncio.Task[Any]] = set()
        self._tasks_limit = _TASKS_PRUNED_AT
        self._lane_tasks: set[asyncio.Task[None]] = set()
        self._timers: set[Timer] = set()

        self._started = False
        self._closed = False
        # Resolved when the drainer reaches the end of input (or a graceful close's mark).
        self._drained: asyncio.Future[None] | None = None
        self._drain_done: asyncio.Future[None] | None = None
        self._close_done: asyncio.Future[None] | None = None
        self._transport_closing = False

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
        record = self._sched.on_request(method, handler, params_type, on_arrival)
        record.is_async = inspect.iscoroutinefunction(handler)

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
        record = self._sched.on_notification(method, handler, params_type, immediate)
        record.is_async = inspect.iscoroutinefunction(handler)

    def on_unknown_request(self, handler: Callable[[str, Any, AsyncInboundCall], Any]) -> None:
        """Handle requests no method handler matches: ``handler(method, params, call)``."""
        self._sched.on_unknown_request(handler)

    def on_unknown_notification(self, handler: Callable[[str, Any], Any]) -> None:
        """Handle notifications no method handler matches: ``handler(method, params)``."""
        self._sched.on_unknown_notification(handler).is_async = inspect.iscoroutinefunction(handler)

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
        executor = self.executor
        return await run_on(self._loop or asyncio.get_running_loop(), executor, executor is self._own_executor, fn, args)

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
        if self.ordering == "connection":  # by session, lane tasks come and go instead
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
        return self._sched.endpoint.eof or self._closed

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

        Every call still pending fails with ConnectionClosedError and every running handler
        sees its call cancelled, at once. ``graceful=False`` then cancels the handlers' tasks:
        queued work is dropped. ``graceful=True`` first stops taking new requests, drains the
        queue and waits for running handlers (which may still answer, and whose own new calls
        are still answered). Either way close waits about ``timeout`` at most, in all.
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
        sched = self._sched
        current = asyncio.current_task()
        if graceful and self._started and not self._closed:
            failed, calls = sched.start_closing()
            self._wake_all(failed)
            # Cancelled first, so handlers waiting on a user or a peer give up now instead of
            # at the end of the wait; their answers still go out.
            for call in calls:
                assert isinstance(call, AsyncInboundCall)
                call._set_cancelled()
            self._wake_drainers()
            done = self._drain_done
            assert done is not None
            # Not from a drainer: the mark would wait behind the very handler that is closing.
            if not sched.endpoint.eof and current is not self._dispatcher and current not in self._lane_tasks:
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
            failed, inbound = self._sched.close()
            for call in inbound:
                assert isinstance(call, AsyncInboundCall)
                call._set_cancelled()
            self._flush()
            self._wake_all(failed)
        for timer in list(self._timers):
            timer.cancel()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = self._deadline_at = None
        self._release_reader()
        tasks = [t for t in self._tasks if t is not current and not t.done()]
        for task in (self._reader, self._dispatcher, *self._lane_tasks):
            if task is not None and task is not current and not task.done():
                tasks.append(task)
        for task in tasks:
            task.cancel()
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
        sched = self._sched
        if timeout is _USE_DEFAULT:
            timeout = self.request_timeout
        waiter = loop.create_future()
        serial = _serial.get()
        now = loop.time() if timeout is not None else 0.0
        pending, data = sched.send_request(method, params, result_type, waiter, serial, timeout, now)
        if serial and self._reader_held:
            self._release_reader()  # a drainer waits for this answer: only the reader reads it
        try:
            self._write_now(data)
            if timeout is not None and (self._deadline_at is None or now + timeout < self._deadline_at):
                self._arm_deadline(now + timeout)
            # Flow control: a caller sending faster than the peer reads waits here.
            await self._transport.drain()
            await waiter
        except asyncio.CancelledError:
            self._write_answer(sched.abandon(pending, RequestCancelledError(f"{method}: cancelled")))
            raise
        except BaseException:
            sched.abandon(pending, ConnectionClosedError(f"{method}: not sent"))  # the write failed
            raise
        return rpc.Endpoint.outcome(pending)

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification; never blocks. Lines are written at the end of the current loop
        iteration (and always before the next request or answer), so order is unchanged."""
        when = self._sched.notify(method, params)
        if when:
            if when == _FLUSH_NOW:
                self._flush()
            elif not self._flush_scheduled:
                self._flush_scheduled = True
                loop = self._loop
                if loop is None:
                    loop = self._loop = asyncio.get_running_loop()
                loop.call_soon(self._flush)

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
        pending = self._sched.endpoint.pending.get(msg_id)
        if pending is not None and self._write_answer(
            self._sched.abandon(pending, RequestCancelledError(f"{pending.method}: cancelled"))
        ):
            self._wake(pending)

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

    def _arm_deadline(self, when: float) -> None:
        loop = self._loop
        assert loop is not None
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadline_at = when
        self._deadline_timer = loop.call_at(when, self._on_deadline)

    def _on_deadline(self) -> None:
        """The loop's clock reached the scheduler's next deadline."""
        self._deadline_timer = self._deadline_at = None
        loop = self._loop
        assert loop is not None
        sched = self._sched
        expired = sched.expire(loop.time())
        self._flush()  # their $/cancel_request lines
        self._wake_all(expired)
        later = sched.next_deadline()
        if later is not None and not self._closed:
            self._arm_deadline(later)

    @staticmethod
    def _wake(pending: rpc.Pending) -> None:
        waiter = pending.waiter
        if not waiter.done():
            waiter.set_result(None)

    def _wake_all(self, failed: list[rpc.Pending]) -> None:
        for pending in failed:
            self._wake(pending)

    # ------------------------------------------------------------------ writing

    def _write_now(self, data: bytes | bytearray) -> None:
        if self._wire_tap is not None:
            self._tap_lines(self._wire_tap, "out", data)
        self._transport.write(data)

    def _answer(self, call: rpc.InboundRequest, result: Any) -> bool:
        """Answer ``call`` now (AsyncInboundCall.answer); False when answered already."""
        return self._write_answer(self._sched.answer(call, result))

    def _answer_error(self, call: rpc.InboundRequest, code: int, message: str | None, data: Any) -> bool:
        """Answer ``call`` with an error now; False when it was answered already."""
        return self._write_answer(self._sched.answer_error(call, code, message, data))

    def _write_answer(self, data: bytes | bytearray | None) -> bool:
        """Write bytes the scheduler produced for an answer; False when it had none."""
        if data is None:
            return False
        if data:
            try:
                self._write_now(data)
            except ConnectionClosedError:
                _log.debug("%s: answer not sent: connection closed", self.name)
        return True

    def _flush(self) -> None:
        self._flush_scheduled = False
        data = self._sched.data_to_send()
        if data:
            try:
                self._write_now(data)
            except ConnectionClosedError:
                _log.debug("%s: notifications not sent: connection closed", self.name)

    # ------------------------------------------------------------------ reading

    async def _read_loop(self) -> None:
        read = self._transport.read
        sched = self._sched
        try:
            while True:
                if sched.paused and not self._closed:
                    await self._hold_reading()
                try:
                    data = await read()
                except OSError as exc:
                    _log.debug("%s: read failed: %r", self.name, exc)
                    break
                if not data:
                    break
                self._receive(data)
                # Not kept while awaiting the next read: a read's bytes (a line may be up to
                # max_message_bytes) are freed as soon as they are routed.
                del data
            if not self._closed:
                self._receive(b"")
        except asyncio.CancelledError:
            if self._closed:
                return
            raise
        except Exception:
            _log.exception("%s: reader failed", self.name)
        if not self._closed:
            self._on_eof()

    async def _hold_reading(self) -> None:
        """Stop reading while the scheduler says so (a slow notification consumer), so the
        peer's writes back up instead of this process buffering without bound."""
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
        if self._closed or self._sched.endpoint.eof:
            return
        try:
            if data:
                self._receive(data)
                if self._sched.paused and not self._reader_held:
                    self._reader_held = True
                    self._transport.pause_reading()  # type: ignore[attr-defined]
                return
            self._receive(b"")
        except Exception:
            _log.exception("%s: reader failed", self.name)
        if not self._closed and not self._sched.endpoint.eof:
            self._on_eof()

    def _receive(self, data: bytes) -> None:
        """Route the messages of one read (b"": the input ended) and do what the scheduler
        says."""
        sched = self._sched
        msgs = sched.decode_read(data) if self._wire_tap is None else self._tap_read(self._wire_tap, sched, data)
        if not msgs:
            return  # a part of a line
        resume = 0
        while True:
            now = sched.route(msgs, resume)
            routed = sched.routed
            if routed is not None:
                if routed.flush:
                    self._flush()  # refusals and -32800 answers
                for call in routed.cancelled:
                    assert isinstance(call, AsyncInboundCall)
                    call.cancel()
            if sched.woken:
                self._wake_drainers()
            if now:
                self._act(now)
            hook = routed.hook if routed is not None else None
            if hook is None:
                return
            resume = routed.resume  # type: ignore[union-attr]
            if type(hook) is _Decoded:  # an immediate notification: here, now
                awaitable = self._call_notification(hook)
                if awaitable is not None:  # it should be plain; if not, let it run on its own
                    self._spawn(self._await_notification(awaitable, hook.method))
                continue
            try:  # an arrival hook: here, now, before anything read after its request
                hook[1].on_arrival(hook[3], hook[0])
                refused = None
            except Exception as exc:
                refused = exc
            if (routed.placed and refused is None) or sched.arrived(hook, refused):  # type: ignore[union-attr]
                self._start_request(hook)
            elif refused is not None:
                self._flush()
            if resume >= len(msgs):  # a read of one prompt, most of them: nothing left to route
                if sched.woken:
                    self._wake_drainers()
                return

    def _act(self, now: list[Any]) -> None:
        """Complete the callers and start the requests nothing is queued ahead of."""
        for item in now:
            if type(item) is _Pending:
                waiter = item.waiter
                if not waiter.done():
                    waiter.set_result(None)
            else:
                self._start_request(item)

    def _on_eof(self) -> None:
        failed, calls = self._sched.receive_eof()
        self._wake_all(failed)
        # The peer is gone: no handler need wait for it (or for a user) any longer; they may
        # still answer (the peer may only have half-closed).
        for call in calls:
            assert isinstance(call, AsyncInboundCall)
            call._set_cancelled()
        self._wake_drainers()

    # ------------------------------------------------------------------ draining

    def _wake_drainers(self) -> None:
        """Start a drainer for each lane the scheduler woke."""
        loop = self._loop
        assert loop is not None
        for key in self._sched.pop_woken():
            if key is _GATE and self._dispatcher is not None:
                self._gate_woken = True
                wake = self._gate_wake
                if wake is not None:
                    self._gate_wake = None
                    wake.set_result(None)
            else:
                task = loop.create_task(self._drain(key))
                self._lane_tasks.add(task)
                task.add_done_callback(self._lane_tasks.discard)

    async def _dispatch_loop(self) -> None:
        loop = self._loop
        assert loop is not None
        while not self._closed:
            if not self._gate_woken:
                wake = self._gate_wake = loop.create_future()
                await wake
                continue
            self._gate_woken = False
            await self._drain(_GATE)

    async def _drain(self, key: Any) -> None:
        """Handle the items of one lane in order, until the scheduler says it is idle."""
        if _serial.get():  # copied from a context a notification handler marked
            _serial.set(False)
        sched = self._sched
        while True:
            items = sched.take(key)
            if sched.woken:
                self._wake_drainers()
            if self._reader_held and not sched.paused:
                self._release_reader()
            if items is None or self._closed:
                return
            for item in items:
                cls = type(item)
                if cls is _Updates:  # a read of streamed updates, decoded in one go
                    handler = item.handler
                    if handler.is_async:
                        for params in item:
                            await self._await_notification(handler.fn(params), item.method)
                    else:
                        fn = handler.fn
                        for params in item:
                            try:
                                result = fn(params)
                            except BaseException as exc:  # SystemExit too: logged, the order goes on
                                sched.notification_failed(item.method, exc)
                            else:
                                if result is not None and inspect.isawaitable(result):
                                    await self._await_notification(result, item.method)
                elif cls is _Decoded:
                    awaitable = self._call_notification(item)
                    if awaitable is not None:
                        await self._await_notification(awaitable, item.method)
                elif cls is tuple:
                    if sched.startable(item):
                        self._start_request(item)
                elif cls is _Response or cls is _ErrorResponse:
                    pending = sched.deliver(item)
                    if pending is not None:
                        self._wake(pending)
                elif item is _EOF:
                    # Everything read before the end was handled: the calls still pending fail now.
                    self._wake_all(sched.eof_reached())
                    for fut in (self._drain_done, self._drained):
                        if fut is not None and not fut.done():
                            fut.set_result(None)
                    self._run_close_callbacks()
                elif item is _DRAIN:
                    if self._drain_done is not None and not self._drain_done.done():
                        self._drain_done.set_result(None)
                if self._closed:
                    return  # closed from a handler run here
            del items

    def _call_notification(self, item: rpc.Decoded) -> Awaitable[Any] | None:
        """Call a notification's handler; returns the awaitable it gave back (an ``async def``
        handler's coroutine) for the caller to await in order, else None."""
        try:
            result = item.handler.fn(item.method, item.params) if item.fallback else item.handler.fn(item.params)
        except BaseException as exc:  # SystemExit too: logged, the order goes on
            self._sched.notification_failed(item.method, exc)
            return None
        if result is not None and inspect.isawaitable(result):
            return result
        return None

    async def _await_notification(self, awaitable: Awaitable[Any], method: str) -> None:
        token = _serial.set(True)  # requests made here are answered when read
        try:
            await awaitable
        except asyncio.CancelledError:
            if self._closed:
                raise
            _log.debug("%s: %s notification handler was cancelled", self.name, method)
        except BaseException as exc:  # SystemExit too: logged, the order goes on
            self._sched.notification_failed(method, exc)
        finally:
            _serial.reset(token)

    # ------------------------------------------------------------------ running requests

    def _start_request(self, start: rpc.Start) -> None:
        """Run a request's handler: an ``async def`` as the call's task (its coroutine made
        there, so a task cancelled before its first step leaves none behind); a plain
        function here, its result answered at once (an awaitable it returns: as a task)."""
        call, handler = start[0], start[1]
        assert isinstance(call, AsyncInboundCall)
        loop = self._loop
        assert loop is not None
        coro_close: Callable[[], None] | None = None
        if handler is not None and handler.is_async and not handler.notification:
            coro = self._run_request(call, start, None)
        else:
            try:
                fn, args = self._sched.endpoint.request_params(start)
                result = fn(*args)
            except BaseException as exc:  # SystemExit too: answered, and the connection goes on
                self._write_answer(self._sched.request_failed(call, exc))
                return
            if result is None or not inspect.isawaitable(result):
                self._write_answer(self._sched.answer(call, result))
                return
            coro = self._run_request(call, start, result)
            if inspect.iscoroutine(result):
                coro_close = result.close  # a task cancelled before its first step never awaits it
        if _EAGER:
            # Eager: the handler runs here up to its first real wait, like a plain function
            # would (a quick handler is answered without a loop iteration).
            task = asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg]
        else:
            task = loop.create_task(coro)
        if call.task is None:
            call.task = task
        if not task.done():
            self._track(task)
        if coro_close is not None:
            task.add_done_callback(lambda t: coro_close() if t.cancelled() else None)

    async def _run_request(self, call: AsyncInboundCall, start: rpc.Start, awaitable: Awaitable[Any] | None) -> None:
        """A request's task: await ``awaitable`` (what a plain handler returned) or, when
        None, the ``async def`` handler of ``start`` called here; answer with the outcome."""
        sched = self._sched
        if call.task is None:  # started eagerly: the task is not assigned yet
            call.task = asyncio.current_task()
        if awaitable is None and _serial.get():
            # The task copied a context marked by a notification handler: a request handler's
            # own calls must wait their turn like any other.
            _serial.set(False)
        try:
            if awaitable is None:
                fn, args = sched.endpoint.request_params(start)  # (params that do not decode raise)
                awaitable = fn(*args)
            result = await awaitable
        except asyncio.CancelledError:
            # Cancelled by $/cancel_request, call.cancel() or close: answered already, or the
            # canceller answers. Cancelled by anyone else: the peer must still get an answer.
            self._write_answer(sched.request_cancelled(call, call._is_cancelled))
            raise
        except BaseException as exc:  # SystemExit too: answered, and the connection goes on
            self._write_answer(sched.request_failed(call, exc))
        else:
            self._write_answer(sched.answer(call, result))

    def _track(self, task: asyncio.Task[Any]) -> None:
        """Hold a handler's running task (for close). Finished tasks are dropped in batches
        once the set doubled, instead of by a done callback each: that would be one more loop
        callback per request."""
        tasks = self._tasks
        tasks.add(task)
        if len(tasks) > self._tasks_limit:
            running = self._tasks = {t for t in tasks if not t.done()}
            self._tasks_limit = 2 * len(running) + _TASKS_PRUNED_AT

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        loop = self._loop
        assert loop is not None
        task = loop.create_task(coro)
        self._track(task)
        return task


def _remaining(loop: asyncio.AbstractEventLoop, deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return max(0.0, deadline - loop.time())
