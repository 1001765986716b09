"""The blocking JSON-RPC engine over one transport. Threads live here (and in the executor).

One :class:`Connection` serves both ACP roles; ``SyncAgent`` and ``SyncClient`` are typed
facades over it. The JSON-RPC state and rules (ids, pending calls, inbound requests and their
answer-once claim, refusals, ``$/cancel_request``, bad input, payload decoding) are one
sans-I/O :class:`acp.rpc.Endpoint`; this module adds what threads need: the reader, the
ordered dispatcher, the executor hand-off and leader/follower, write batching, the clock,
backpressure and close. Ordinary notifications never enter the core on the hot path: the
reader batches them and the dispatcher calls their handler itself.

Threads and who does what::

    reader      transport.read -> LineFramer -> decode_line -> route:
                  response        complete the caller now if nothing is queued ahead, else queue
                  request         start it now (on the executor) if nothing is queued ahead, else queue
                  notification    queue it (or run it here when registered ``immediate``)
                  $/cancel_request  acted on here, never stuck behind a busy handler
    dispatcher  drains the queue one batch at a time, in arrival order: runs notification
                handlers, completes responses, starts requests on the executor
    executor    runs request handlers concurrently (the SDK's HandlerPool, or the user's)
    housekeeper started on first use: flushes batched notification writes within 1 ms and
                expires the timeouts of Future-style calls

Ordering guarantee: a response completes its caller only after every notification that arrived
before it was handled, and a request starts only after them. The reader may act itself only
when nothing is queued ahead (``_enqueued == _handled``: each counter has a single writer, so a
stale read only ever makes the reader queue when it need not).

Deadlock rule: a response to a request sent from inside a notification handler (on the
dispatcher) is completed by the reader at once, since the dispatcher is busy with that handler
and everything queued behind it waits for it.

Waiting callers: a blocking :meth:`Connection.request` first polls for its answer for up to
``wait_spin`` seconds (100 µs by default), yielding the CPU between looks, and only then sleeps
on its lock. An answer that comes within that time then costs no thread wake-up on the way back
(the reader's release finds nobody asleep), which is most of a quick round trip's latency on a
machine where a wake-up costs tens of µs; the price is that CPU time while waiting. One thread
per process polls at a time; the others sleep at once. With a single CPU nobody polls.

Backpressure: when the dispatcher falls ``MAX_QUEUED_MESSAGES`` behind (a slow notification
consumer), the reader stops reading until it is halfway caught up, so the peer's writes block
instead of this process buffering a burst without bound. The deadlock rule wins: while a
notification handler waits for an answer, the reader reads regardless.

Ordering by session (``ordering="session"``, opt-in; chosen once in ``__init__``: the reader
then uses ``_on_lines_by_session`` and there is no dispatcher thread): an inbound message's
session is its params' ``sessionId``; an answer's is the one of the request it answers
(recorded on ``rpc.Pending`` when it is sent). Each session with work has a *lane*: a queue
drained in arrival order by one executor task at a time, so sessions never wait on each other.
The reader still acts itself (completes an answer, starts a request) when nothing of that
session is queued ahead. A *session-less* message (no ``sessionId``: initialize, session/new's
answer, most ext methods) keeps the connection-wide rule: it waits in the *gate* until every
lane is idle, and everything read after it waits behind it. The deadlock rule holds per lane
(a notification handler's request is answered by the reader at once), and backpressure counts
the items of every lane and of the gate.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from queue import SimpleQueue
from typing import Any, Protocol, cast

import msgspec

from . import rpc
from .errors import (
    INTERNAL_ERROR,
    AcpError,
    ConnectionClosedError,
    RequestCancelledError,
    RequestError,
    RequestTimeoutError,
)
from .executor import HandlerPool
from .transport.base import Transport

__all__ = [
    "MAX_QUEUED_MESSAGES",
    "ORDERINGS",
    "CancelSource",
    "Connection",
    "InboundCall",
    "TimerHandle",
    "WireTap",
    "DEFAULT_REQUEST_TIMEOUT",
    "CANCEL_REQUEST",
]

_log = logging.getLogger("acp.connection")

DEFAULT_REQUEST_TIMEOUT = 60.0
#: How long a blocking request polls for its answer before it sleeps (see the module docstring).
DEFAULT_WAIT_SPIN = 0.0001
CANCEL_REQUEST = rpc.CANCEL_REQUEST
_MISS = rpc.MISS
#: Messages the reader lets wait for the dispatcher before it stops reading (backpressure).
MAX_QUEUED_MESSAGES = 10_000
_FLUSH_DELAY = 0.001  # batched notifications reach the wire within this bound
_FLUSH_BYTES = 64 * 1024
# A reader that runs a request handler itself hands reading over once the handler makes a
# request, or at the latest after this long (checked by the housekeeper).
_PARK_LIMIT = 0.001
_PARK_WATCH = 0.05  # the housekeeper keeps checking this long after the last park
_STOP_GRACE = 0.1  # close() joins threads at least this long, even past its timeout

#: The ordering modes of :class:`Connection` (see "Ordering by session" in the module docstring;
#: defined in the core, which both runtimes share).
ORDERINGS = rpc.ORDERINGS
Ordering = rpc.Ordering

WireTap = Callable[[str, bytes], None]
"""Receives ("in" | "out", line) for every line, for debugging."""


class CancelSource(Protocol):
    """Something that can cancel a blocking call: ``on_cancel(fn)`` runs ``fn`` when it fires
    (at once if it already has) and returns a function that unregisters ``fn`` (whatever that
    function returns is ignored)."""

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], object]: ...

_USE_DEFAULT: Any = object()


class TimerHandle:
    """A callback scheduled with :meth:`Connection.call_later`."""

    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        """Do not run the callback (no effect once it has run)."""
        self.cancelled = True


class InboundCall(rpc.InboundRequest):
    """One inbound request while its handler runs: its id, method and cancellation state.

    ``cancelled`` is set when the peer sends ``$/cancel_request`` for it, when the input ends
    (the peer is gone) and as soon as :meth:`Connection.close` starts; ``on_cancel`` callbacks
    then run on the thread that cancelled it, so keep them short and non-blocking. After the
    end of input or during a graceful close the request can still be answered
    (:attr:`is_answered` tells).
    """

    __slots__ = ("connection", "_cancelled", "_callbacks")

    def __init__(self, connection: Connection, call_id: rpc.RequestId, method: str) -> None:
        # rpc.InboundRequest.__init__'s fields, set here: one call less per inbound request.
        self.id = call_id
        self.method = method
        self.attachment = None
        self._token = [None]
        self.connection = connection
        self._cancelled: threading.Event | None = None
        self._callbacks: list[Callable[[], None]] | None = None

    @property
    def cancelled(self) -> threading.Event:
        """An event set once the request is cancelled."""
        event = self._cancelled
        if event is None:
            with self.connection._state_lock:
                if self._cancelled is None:
                    self._cancelled = threading.Event()
                event = self._cancelled
        return event

    @property
    def is_cancelled(self) -> bool:
        """True once the request was cancelled."""
        event = self._cancelled
        return event is not None and event.is_set()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the request is cancelled (at once if it already is)."""
        # acquire/release and is_cancelled inlined: every prompt turn registers one.
        lock = self.connection._state_lock
        lock.acquire()
        event = self._cancelled
        if event is None or not event.is_set():
            callbacks = self._callbacks
            if callbacks is None:
                self._callbacks = [callback]
            else:
                callbacks.append(callback)
            lock.release()
            return
        lock.release()
        callback()

    def answer(self, result: Any) -> bool:
        """Answer the request now, from any thread, instead of (or before) its handler.

        Returns False, sending nothing, when the request was already answered (or cancelled,
        or the connection closed). Exactly one answer ever goes out: whatever the handler
        returns afterwards is dropped (logged at DEBUG).
        """
        return self.connection._answer(self, result)

    def answer_error(self, code: int, message: str | None = None, data: Any = None) -> bool:
        """Answer the request with an error now; False (nothing sent) if it was already answered."""
        connection = self.connection
        return connection._write_answer(connection._endpoint.answer_error(self, code, message, data))

    def _cancel(self) -> None:
        with self.connection._state_lock:
            if self._cancelled is None:
                self._cancelled = threading.Event()
            if self._cancelled.is_set():
                return
            self._cancelled.set()
            callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            try:
                callback()
            except Exception:
                _log.exception("on_cancel callback failed for %s", self.method)


def _cancel_all(calls: Iterable[rpc.InboundRequest]) -> None:
    """Set ``cancelled`` on calls the core handed back (all of them are InboundCalls)."""
    for call in calls:
        cast(InboundCall, call)._cancel()


class _ThreadFlags(threading.local):
    """Per-thread flags of a connection. The default is a class attribute: reading a flag
    never set on this thread costs no AttributeError (getattr with a default: ~310 ns, this
    ~45, once per outbound request)."""

    serial = False  # True on the threads that run notification handlers (the deadlock rule)


class Connection:
    """A JSON-RPC connection over a :class:`~acp.transport.Transport`, with blocking calls.

    Register handlers with :meth:`on_request` / :meth:`on_notification`, then :meth:`start`.
    ``executor`` runs request handlers; by default the connection owns a :class:`HandlerPool`
    (shut down on close). A user-supplied executor is never shut down by the connection.

    ``ordering="connection"`` (the default) handles inbound notifications one at a time in
    arrival order, connection-wide; ``ordering="session"`` keeps arrival order within each
    session and handles sessions concurrently (see the module docstring).

    The protocol state (ids, pending calls, inbound requests, answer-once, refusals, payload
    decoding) is one :class:`acp.rpc.Endpoint`; this class adds the threads, the queue, the
    clock and the writes around it.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        executor: Executor | None = None,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        max_message_bytes: int = rpc.DEFAULT_MAX_LINE_BYTES,
        wire_tap: WireTap | str | os.PathLike[str] | None = None,
        name: str = "acp",
        ordering: Ordering = "connection",
        wait_spin: float = DEFAULT_WAIT_SPIN,
    ) -> None:
        if ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {ORDERINGS}, not {ordering!r}")
        if not wait_spin >= 0:
            raise ValueError(f"wait_spin must be 0 or more seconds, not {wait_spin!r}")
        self._transport = transport
        self.name = name
        self.request_timeout = request_timeout
        self.wait_spin = wait_spin
        self._framer = rpc.LineFramer(max_message_bytes)
        # The protocol state, shared by every thread (see the thread contract in acp.rpc.endpoint).
        self._endpoint = ep = rpc.Endpoint(functools.partial(InboundCall, self), name)
        # Outbound calls waiting for an answer: the core's table, under its old name (tests
        # and debugging look at it).
        self._pending = ep.pending
        # notify() encodes here instead of through the core (one call less per notification;
        # msgspec encoders may be shared by threads).
        self._encoder = rpc.Encoder()
        if isinstance(wire_tap, (str, os.PathLike)):
            from .wiretap import JsonlWireTap

            tap = JsonlWireTap(wire_tap)
            wire_tap = tap
            owned_tap_close: Callable[[], None] | None = tap.close
        else:
            owned_tap_close = None
        self._wire_tap: WireTap | None = wire_tap

        self._own_executor = executor is None
        self._executor: Executor = executor if executor is not None else HandlerPool(
            thread_name_prefix=f"{name}-handler"
        )
        pool = self._executor
        self._execute: Callable[..., None] = (
            pool.execute if isinstance(pool, HandlerPool) else self._submit_to_user_executor
        )
        # Leader/follower needs threads we own: a user's executor only ever runs handlers.
        self._leader_follower = self._own_executor

        # Guards the runtime's own state: cancel events and callbacks, close() (and _idle, its condition).
        self._state_lock = threading.Lock()

        self._queue: SimpleQueue[list[Any] | None] = SimpleQueue()
        self._enqueued = 0  # written by the reader only
        self._handled = 0  # written by the dispatcher only
        # Backpressure: the reader stops reading while the dispatcher is this far behind.
        self._queued_in = 0  # messages queued (written by the reader only)
        self._queued_out = 0  # messages dispatched (written by the dispatcher only)
        self._backlog = threading.Condition(threading.Lock())
        self._reader_held = False  # the reader waits for the backlog to shrink
        self._dispatcher_asked = False  # a notification handler made a request (dispatcher only)
        self._tls = _ThreadFlags()  # .serial is True inside a notification handler

        self._write_lock = threading.Lock()
        self._wbuf = bytearray()  # batched notifications, encoded lines (under _write_lock)

        self._park_lock = threading.Lock()
        self._parked: int | None = None  # ident of the reader running a handler itself
        self._parked_since = 0.0
        self._last_park = 0.0
        self._house_idle = False  # the housekeeper waits without a timeout

        self._house_cond = threading.Condition(threading.Lock())
        self._house_thread: threading.Thread | None = None
        self._flush_at: float | None = None
        self._deadlines: list[tuple[float, int, TimerHandle]] = []
        self._timer_seq = itertools.count()

        self._started = False
        # One item per request handler started and not finished: deque.append and pop are
        # atomic, so counting costs no lock (two lock rounds less per inbound request).
        self._running: deque[None] = deque()
        self._idle = threading.Condition(self._state_lock)
        self._idle_waiters = 0  # threads in wait_closed / graceful close (guarded by the lock)
        self._drained = threading.Event()  # dispatcher finished the queue after EOF/close
        self._drain_done = threading.Event()  # dispatcher reached the EOF or drain mark
        self._reader: threading.Thread | None = None
        self._dispatcher: threading.Thread | None = None
        self._close_callbacks: list[Callable[[], None]] = []
        if owned_tap_close is not None:
            self._close_callbacks.append(owned_tap_close)

        self.ordering: Ordering = ordering
        self._by_session = ordering == "session"
        if self._by_session:
            # Chosen once: the default path never tests the mode per message.
            self._lane_lock = threading.Lock()  # guards everything below, and the backlog counters
            self._lanes: dict[str, _Lane] = {}  # the sessions with work queued or being handled
            self._busy_lanes = 0  # len(self._lanes), kept apart for the barrier test
            # Everything that arrived at or after a session-less message still waiting its turn.
            self._gate: deque[tuple[str | None, Any]] = deque()
            self._gate_busy = False  # a thread owns the gate (runs a session-less message)
            self._on_lines = self._on_lines_by_session  # type: ignore[method-assign]
            self._send_request = self._send_request_by_session  # type: ignore[method-assign]

    # ------------------------------------------------------------------ registration

    def on_request(
        self,
        method: str,
        handler: Callable[[Any, InboundCall], Any],
        params_type: Any = None,
        *,
        on_arrival: Callable[[Any, InboundCall], None] | None = None,
    ) -> None:
        """Handle requests for ``method``: ``handler(params, call)`` returns the result.

        ``params_type`` is the type params decode into (None: plain JSON values). Raise
        :class:`RequestError` to answer with a specific error.

        ``on_arrival(params, call)``, if given, runs on the reader thread the moment the
        request is read, in arrival order with everything else (before a notification read
        after it, even an ``immediate`` one). It must not block; raising RequestError answers
        the request at once and its handler never runs. Facades use it to register state that
        a following notification must find (a prompt turn that a ``session/cancel`` read in
        the same chunk cancels).
        """
        self._endpoint.on_request(method, handler, params_type, on_arrival)

    def on_notification(
        self,
        method: str,
        handler: Callable[[Any], None],
        params_type: Any = None,
        *,
        immediate: bool = False,
    ) -> None:
        """Handle notifications for ``method`` in arrival order, one at a time.

        ``immediate=True`` runs the handler on the reader thread as soon as the notification
        arrives (for cancellation); such a handler must not block.
        """
        self._endpoint.on_notification(method, handler, params_type, immediate)

    def on_unknown_request(self, handler: Callable[[str, Any, InboundCall], Any]) -> None:
        """Handle requests no method handler matches: ``handler(method, params, call)``."""
        self._endpoint.fallback_request = handler

    def on_unknown_notification(self, handler: Callable[[str, Any], None]) -> None:
        """Handle notifications no method handler matches: ``handler(method, params)``."""
        self._endpoint.fallback_notification = handler

    def on_close(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once when the input ends or the connection closes."""
        self._close_callbacks.append(callback)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Connection:
        """Start the reader and dispatcher threads."""
        if self._started:
            return self
        self._started = True
        if not self._by_session:  # by session, drains run on the executor instead
            self._dispatcher = threading.Thread(target=self._dispatch_loop, name=f"{self.name}-dispatcher", daemon=True)
            self._dispatcher.start()
        if self._leader_follower:
            # Reading moves between pool threads (see _on_lines); the pool is joined on close.
            self._execute(self._read_loop)
        else:
            self._reader = threading.Thread(target=self._read_loop, name=f"{self.name}-reader", daemon=True)
            self._reader.start()
        return self

    @property
    def is_closed(self) -> bool:
        """True once the input ended or close() was called."""
        endpoint = self._endpoint  # not endpoint.can_send: one property call less per client call
        return endpoint.eof or endpoint.closed

    def __enter__(self) -> Connection:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close(graceful=True)

    def wait_closed(self, timeout: float | None = None) -> bool:
        """Block until the input ended and everything received was handled and answered."""
        if not self._drained.wait(timeout):
            return False
        with self._idle:
            self._idle_waiters += 1
            try:
                return self._idle.wait_for(lambda: not self._running, timeout)
            finally:
                self._idle_waiters -= 1

    def close(self, graceful: bool = False, timeout: float | None = 5.0) -> None:
        """Close the connection; idempotent.

        Every running handler sees its call cancelled at once. ``graceful=False`` then stops:
        queued work is dropped, pending calls fail with ConnectionClosedError.
        ``graceful=True`` first stops taking new requests, drains the queue and waits for
        running handlers (which may still answer), while still reading the answers they wait
        for. Either way close waits about ``timeout`` at most, in all.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        ep = self._endpoint
        if graceful and not ep.closed and self._started:
            # Cancelled first, so handlers blocked on a user or a peer give up now instead of
            # at the end of the wait; their answers still go out.
            _cancel_all(ep.start_closing())
            if not ep.eof:
                # The dispatcher (or by session: the gate) flags the drain when it gets here.
                if self._by_session:
                    self._post_mark(_DRAIN_MARK)
                else:
                    self._queue.put([_DRAIN_MARK])
            self._drain_done.wait(_remaining(deadline))
            with self._idle:
                self._idle_waiters += 1
                try:
                    self._idle.wait_for(lambda: not self._running, _remaining(deadline))
                finally:
                    self._idle_waiters -= 1
            self._flush()
        with self._state_lock:
            if ep.closed:
                return
            # Every inbound request is taken as answered, every pending call taken to fail.
            inbound, pending = ep.close()
        _cancel_all(inbound)
        try:
            self._flush()
        except AcpError:
            pass
        self._transport.close()
        self._release_reader()
        self._fail(pending)
        self._queue.put(None)
        with self._house_cond:
            self._house_cond.notify()
        # One deadline for every join below (a little past ``timeout`` when the graceful wait
        # used it all up, so threads that are merely finishing are still waited for).
        if deadline is not None:
            deadline = max(deadline, time.monotonic() + _STOP_GRACE)
        current = threading.current_thread()
        for thread in (self._reader, self._dispatcher, self._house_thread):
            if thread is not None and thread is not current:
                thread.join(_remaining(deadline))
        # Requests still queued never run: they no longer count as running. (The stop mark
        # goes back in: close() may run on the dispatcher itself, which still has to see it.)
        while not self._queue.empty():
            for item in self._queue.get() or ():
                if type(item) is tuple:
                    self._handler_done()
        self._queue.put(None)
        if self._by_session:
            self._drop_lanes()
        if self._own_executor:
            pool = self._executor
            assert isinstance(pool, HandlerPool)
            pool.shutdown(wait=False)
            if not pool.join(_remaining(deadline)):
                _log.warning("%s: a handler is still running after close", self.name)
        self._drained.set()
        self._run_close_callbacks()

    def _cancel_inbound(self) -> None:
        """Set every inbound call's ``cancelled`` (the peer is gone, or we are closing); the
        calls stay answerable."""
        _cancel_all(list(self._endpoint.inbound.values()))  # one C-level copy: atomic

    # ------------------------------------------------------------------ outbound calls

    def request(
        self,
        method: str,
        params: Any = None,
        result_type: Any = None,
        *,
        timeout: float | None = _USE_DEFAULT,
        cancel: CancelSource | None = None,
    ) -> Any:
        """Send a request and block for its result, decoded as ``result_type``.

        ``timeout`` defaults to the connection's ``request_timeout``; None waits forever. On
        timeout a ``$/cancel_request`` is sent, the late answer is dropped and
        :class:`RequestTimeoutError` is raised. An error answer raises :class:`RequestError`.
        ``cancel`` (anything with ``on_cancel(fn) -> unregister``) abandons the call when it
        fires: ``$/cancel_request`` goes out and :class:`RequestCancelledError` is raised.
        """
        if timeout is _USE_DEFAULT:
            timeout = self.request_timeout
        # The waiter is a pre-acquired lock (cheaper than an Event or a Future).
        lock = threading.Lock()
        lock.acquire()
        pending = self._register(method, result_type, lock)
        self._send_request(pending, params)
        # Cancelling abandons the call like cancel_request(): the waiter below wakes at once.
        forget = cancel.on_cancel(lambda: self.cancel_request(pending.id)) if cancel is not None else None
        try:
            # Poll first (see the module docstring), within the timeout; then sleep for the rest.
            spin = self.wait_spin if timeout is None or self.wait_spin < timeout else timeout
            spent = _spin_for(lock, spin) if spin and _SEVERAL_CPUS else 0.0  # None: it has the answer
            if spent is not None and not lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout - spent)):
                if self._endpoint.abandon(pending.id) is not None:
                    self._send_cancel(pending.id)
                    raise RequestTimeoutError(f"{method}: no answer within {timeout} s")
                lock.acquire()  # the answer is being delivered right now: take it
        finally:
            if forget is not None:
                forget()
        # The endpoint's outcome(), inlined (one call less per request).
        if pending.error is not None:
            raise pending.error
        assert pending.raw is not None
        return self._endpoint.decode_result(pending, pending.raw)

    def request_future(
        self,
        method: str,
        params: Any = None,
        result_type: Any = None,
        *,
        timeout: float | None = _USE_DEFAULT,
    ) -> Future[Any]:
        """Send a request; return a Future of its decoded result.

        Cancelling the Future sends ``$/cancel_request`` and drops the late answer. The timeout
        (default: the connection's) fails the Future with :class:`RequestTimeoutError`.
        """
        if timeout is _USE_DEFAULT:
            timeout = self.request_timeout
        future: Future[Any] = Future()
        pending = self._register(method, result_type, future)
        msg_id = pending.id
        future.add_done_callback(lambda f: self._give_up(msg_id, None) if f.cancelled() else None)
        if timeout is not None:
            self.call_later(timeout, lambda: self._give_up(msg_id, RequestTimeoutError))
        self._send_request(pending, params)
        return future

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification. Writes may be batched briefly (flushed within 1 ms, and always
        before the next request or response), so order on the wire is unchanged."""
        ep = self._endpoint
        if ep.eof or ep.closed:
            raise ConnectionClosedError("connection closed")
        # Two branches, not one with a test on the tapped line: that test measured ~30 ns per
        # update on the untapped path, which is the one that matters.
        if self._wire_tap is not None:
            line = self._encoder.notification(method, params)
            self._tap("out", line)
            with self._write_lock:
                buf = self._wbuf
                first = not buf
                buf += line
        else:
            # acquire/release rather than ``with``: about half the cost (~50 ns), per update.
            lock = self._write_lock
            lock.acquire()
            try:
                buf = self._wbuf
                first = not buf
                # Encoded straight into the batch: no line object, no join at the flush.
                self._encoder.notification_into(buf, method, params)
            finally:
                lock.release()
        if len(buf) >= _FLUSH_BYTES:
            self._flush()
        elif first:
            self._schedule_flush()

    def cancel_request(self, msg_id: int) -> None:
        """Abandon an outbound request: the peer gets ``$/cancel_request``, the caller
        :class:`RequestCancelledError`."""
        self._give_up(msg_id, RequestCancelledError)

    def _register(self, method: str, result_type: Any, waiter: threading.Lock | Future[Any]) -> rpc.Pending:
        if self._parked is not None:
            # A handler running on the parked reader is about to wait for an answer that
            # only a reader can deliver.
            self._unpark(threading.get_ident())
        if not self._started:
            raise ConnectionClosedError("connection not started")
        serial = self._tls.serial
        pending = self._endpoint.register(method, result_type, waiter, serial)
        if serial:
            # A notification handler (on the dispatcher) will wait for this answer: the reader
            # must not be held for the backlog, or nobody would ever read it.
            self._dispatcher_asked = True
            if self._reader_held:
                self._release_reader()
        return pending

    def _send_request(self, pending: rpc.Pending, params: Any) -> None:
        # The endpoint's request_line(), inlined (one call less per request): params that
        # cannot be encoded forget the call and raise.
        try:
            line = self._encoder.request(pending.id, pending.method, params)
        except BaseException:
            self._pending.pop(pending.id, None)
            raise
        try:
            self._write(line)
        except BaseException:  # closed: nothing pending
            self._endpoint.abandon(pending.id)
            raise

    def _send_cancel(self, msg_id: int) -> None:
        line = self._endpoint.cancel_line(msg_id)
        if line is not None:
            self._write_answer(line)  # written at once (after any batched notifications)

    def _give_up(self, msg_id: int, error: type[AcpError] | None) -> None:
        """Abandon a call (cancelled or timed out): if it was still pending, tell the peer and
        fail the caller with ``error`` (None: a cancelled Future, already done)."""
        pending = self._endpoint.abandon(msg_id)
        if pending is None:
            return  # answered, failed or abandoned already: whoever took it completed it
        self._send_cancel(msg_id)
        if error is not None:
            reason = "no answer in time" if error is RequestTimeoutError else "cancelled"
            self._complete(pending, None, error(f"{pending.method}: {reason}"))

    def _complete(self, pending: rpc.Pending, raw: msgspec.Raw | None, error: BaseException | None) -> None:
        waiter = pending.waiter
        if type(waiter) is not Future:
            pending.raw = raw
            pending.error = error
            waiter.release()
            return
        if not waiter.set_running_or_notify_cancel():
            return
        if error is not None:
            waiter.set_exception(error)
            return
        assert raw is not None
        try:
            waiter.set_result(self._endpoint.decode_result(pending, raw))
        except RequestError as exc:
            waiter.set_exception(exc)

    def _complete_response(self, msg: rpc.ResponseLike) -> None:
        msg_id = msg.id
        # The endpoint's take(), inlined (one call less per answer): whoever pops it completes it.
        pending = self._pending.pop(msg_id, None) if type(msg_id) is int else None
        if pending is None:
            self._endpoint.take(msg_id)  # logs the dropped answer
            return
        waiter = pending.waiter
        if type(waiter) is not Future and type(msg) is rpc.Response:
            # _complete()'s blocking-caller case, inlined (once per answer): the caller decodes.
            pending.raw = msg.result
            waiter.release()
            return
        if type(msg) is rpc.Response:
            self._complete(pending, msg.result, None)
        else:
            assert isinstance(msg, rpc.ErrorResponse)
            self._complete(pending, None, rpc.Endpoint.response_error(msg))

    def _fail(self, taken: list[rpc.Pending]) -> None:
        """Fail calls the core took from the pending table (end of input, close)."""
        if taken:
            error = self._endpoint.closed_error()
            for pending in taken:
                self._complete(pending, None, error)

    # ------------------------------------------------------------------ writing

    def _write(self, line: bytes) -> None:
        """Write a request or response line, after any batched notifications."""
        if self._wire_tap is not None:
            self._tap("out", line)
        lock = self._write_lock  # acquire/release rather than ``with``: ~50 ns less per message
        lock.acquire()
        try:
            buf = self._wbuf
            if buf:
                buf += line
                line = bytes(buf)
                buf.clear()
            self._transport.write(line)
        finally:
            lock.release()

    def _flush(self) -> None:
        with self._write_lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        buf = self._wbuf
        if buf:
            data = bytes(buf)
            buf.clear()
            self._transport.write(data)

    def _answer(self, call: rpc.InboundRequest, result: Any) -> bool:
        """Answer ``call`` with ``result`` unless it was answered already (the facades use it
        to answer on behalf of a still-running handler)."""
        return self._write_answer(self._endpoint.answer(call, result))

    def _write_answer(self, line: bytes | None) -> bool:
        """Write a line the core produced (None: nothing to send). False if there was none."""
        if line is None:
            return False
        try:
            self._write(line)
        except ConnectionClosedError:
            _log.debug("%s: answer not sent: connection closed", self.name)
        return True

    def _write_decided(self) -> None:
        """Write what the core decided while receiving (refusals, -32800 answers)."""
        for line in self._endpoint.data_to_send():
            self._write_answer(line)

    # ------------------------------------------------------------------ housekeeping thread

    def _schedule_flush(self) -> None:
        with self._house_cond:
            if self._flush_at is None:
                self._flush_at = time.monotonic() + _FLUSH_DELAY
                self._ensure_housekeeper()
                self._house_cond.notify()

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` after ``delay`` seconds on the connection's housekeeping thread
        (never once the connection is closed). Keep it short; :meth:`TimerHandle.cancel`
        stops it. Facades use this for their timers instead of a thread of their own."""
        handle = TimerHandle(callback)
        with self._house_cond:
            if self._endpoint.closed:
                handle.cancel()
                return handle
            heapq.heappush(self._deadlines, (time.monotonic() + delay, next(self._timer_seq), handle))
            self._ensure_housekeeper()
            self._house_cond.notify()
        return handle

    def _wake_housekeeper(self) -> None:
        with self._house_cond:
            self._ensure_housekeeper()
            self._house_cond.notify()

    def _ensure_housekeeper(self) -> None:
        if self._house_thread is None and not self._endpoint.closed:
            self._house_thread = threading.Thread(
                target=self._housekeep, name=f"{self.name}-housekeeper", daemon=True
            )
            self._house_thread.start()

    def _housekeep(self) -> None:
        cond = self._house_cond
        ep = self._endpoint
        while True:
            expired: list[TimerHandle] = []
            with cond:
                while not ep.closed:
                    now = time.monotonic()
                    wake = self._flush_at
                    if self._deadlines and (wake is None or self._deadlines[0][0] < wake):
                        wake = self._deadlines[0][0]
                    if now - self._last_park < _PARK_WATCH:
                        # Handlers run on the reader lately: look again within _PARK_LIMIT.
                        if self._parked is not None and now - self._parked_since >= _PARK_LIMIT:
                            break
                        park_check = now + _PARK_LIMIT
                        wake = park_check if wake is None else min(wake, park_check)
                    if wake is not None and wake <= now:
                        break
                    self._house_idle = wake is None
                    cond.wait(None if wake is None else wake - now)
                    self._house_idle = False
                if ep.closed:
                    return
                if self._parked is not None and now - self._parked_since >= _PARK_LIMIT:
                    parked: int | None = self._parked
                else:
                    parked = None
                flush = self._flush_at is not None and self._flush_at <= now
                if flush:
                    self._flush_at = None
                while self._deadlines and self._deadlines[0][0] <= now:
                    expired.append(heapq.heappop(self._deadlines)[2])
            if parked is not None:
                self._unpark(parked)
            if flush:
                try:
                    self._flush()
                except ConnectionClosedError:
                    pass
            for handle in expired:
                if not handle.cancelled:
                    try:
                        handle.callback()
                    except Exception:
                        _log.exception("%s: a timer callback failed", self.name)

    # ------------------------------------------------------------------ reading

    def _tap(self, direction: str, line: bytes) -> None:
        try:
            assert self._wire_tap is not None
            self._wire_tap(direction, line)
        except Exception:
            _log.exception("wire tap failed")

    def _hold_reading(self) -> None:
        """Stop reading while the dispatcher is far behind (a slow notification consumer):
        the peer's writes then block instead of this process buffering without bound. Reading
        goes on at once while a notification handler waits for an answer (only this reader can
        read it) and when the connection closes."""
        asked = self._serial_waiting if self._by_session else lambda: self._dispatcher_asked
        with self._backlog:
            self._reader_held = True
            try:
                self._backlog.wait_for(
                    lambda: self._queued_in - self._queued_out < MAX_QUEUED_MESSAGES // 2
                    or asked()
                    or self._endpoint.closed
                )
            finally:
                self._reader_held = False

    def _release_reader(self) -> None:
        with self._backlog:
            self._backlog.notify()

    def _read_loop(self) -> None:
        read = self._transport.read
        feed = self._framer.feed
        try:
            while True:
                if self._queued_in - self._queued_out >= MAX_QUEUED_MESSAGES:
                    self._hold_reading()
                try:
                    data = read()
                except OSError as exc:
                    _log.debug("%s: read failed: %r", self.name, exc)
                    break
                if not data:
                    break
                lines = feed(data)
                if lines and self._on_lines(lines):
                    return  # reading was handed to another thread
                # Not kept while blocked in the next read: a read's bytes and lines (a line may
                # be up to max_message_bytes) are freed as soon as they are routed.
                del data, lines
            self._on_lines(self._framer.end(), final=True)
        except BaseException:
            _log.exception("%s: reader failed", self.name)
        self._on_eof()

    def _on_lines(self, lines: list[bytes | rpc.LineTooLong], final: bool = False) -> bool:
        """Route the lines of one read. Returns True when this thread handed reading over to
        another one and ran a request handler itself (leader/follower)."""
        tap = self._wire_tap
        one_pass = self._endpoint.one_pass
        prefix = one_pass.prefix if one_pass is not None else None
        if one_pass is not None and tap is None:
            # A stream's read: hundreds of updates and nothing else, decoded in one go.
            params = one_pass.decode_read(lines)
            if params is not _MISS:
                self._enqueued += 1
                self._queued_in += len(params)
                self._queue.put(_Updates(one_pass.handler, one_pass.method, params))
                return False
        batch: list[Any] = []
        starts: list[rpc.Start] = []
        ready: list[rpc.ResponseLike] = []  # answers to complete once every line is routed
        decode_line = rpc.decode_line
        handlers = self._endpoint.handlers
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
                    batch.append((one_pass.handler, params, one_pass.method))
                    continue
            msg = decode_line(line)
            if type(msg) is rpc.Notification:
                # Inlined: notifications are the bulk of a stream.
                handler = handlers.get(msg.method)
                if handler is None or not handler.immediate:
                    if msg.method != CANCEL_REQUEST:
                        batch.append(msg)
                        continue
                self._route(msg, batch, starts, ready)
            elif type(msg) is list:
                for item in msg:
                    self._route(item, batch, starts, ready)
            else:
                self._route(msg, batch, starts, ready)  # type: ignore[arg-type]
        if batch:
            self._enqueued += 1
            self._queued_in += len(batch)
            self._queue.put(batch)
        # Callers are woken last: a woken caller needs the GIL this thread holds until it
        # blocks in its next read, so less work after the wake means less waiting.
        for msg in ready:
            self._complete_response(msg)
        if not starts:
            return False
        return self._start_requests(starts, final)

    def _start_requests(self, starts: list[rpc.Start], final: bool) -> bool:
        """Start the requests one read routed (in order); the reader may run the last one itself."""
        last = starts.pop()
        for start in starts:
            self._launch(start)
        if final or not self._leader_follower:
            self._launch(last)
            return False
        # Leader/follower, lazily: this thread already holds the request, so it runs it
        # itself (no thread wake-up between a request and its handler) with reading "parked".
        # Reading moves to a pool thread only if the handler makes a request of its own or
        # runs longer than _PARK_LIMIT; a quick handler costs no hand-over at all.
        # Every line of this read was routed above, so a new reader cannot overtake it.
        me = threading.get_ident()
        now = time.monotonic()
        # Parking needs no lock: nobody can take reading over from this thread before
        # _parked names it, and it is written last, so whoever sees it sees _parked_since too.
        # Only the end of the park races a hand-over, so that is decided under the lock.
        self._parked_since = now
        self._last_park = now
        self._parked = me
        if self._house_idle or self._house_thread is None:
            self._wake_housekeeper()
        self._run_request(last)
        lock = self._park_lock  # acquire/release rather than ``with``: ~50 ns less, per request
        lock.acquire()
        try:
            if self._parked == me:
                self._parked = None
                return False  # nobody took reading over: carry on reading here
        finally:
            lock.release()
        return True

    def _unpark(self, only: int | None = None) -> None:
        """Hand parked reading to a pool thread (``only``: if parked by that thread)."""
        with self._park_lock:
            if self._parked is None or (only is not None and self._parked != only):
                return
            self._parked = None
        try:
            self._execute(self._read_loop)
        except RuntimeError:  # the pool is shut down: the connection is closing
            pass

    def _route(self, msg: rpc.Message, batch: list[Any], starts: list[rpc.Start], ready: list[rpc.ResponseLike]) -> None:
        """Act on one message now, or append it to the batch for the dispatcher."""
        # Nothing queued ahead: the reader may act itself without breaking the order.
        free = not batch and self._enqueued == self._handled
        ep = self._endpoint
        cls = type(msg)
        if cls is rpc.Response or cls is rpc.ErrorResponse:
            # Peeked, not taken: the call is taken when its answer is delivered, so its
            # timeout keeps running while the answer waits in the queue.
            if free:
                ready.append(msg)  # type: ignore[arg-type]
            else:
                pending = ep.peek(msg.id)  # type: ignore[union-attr]
                if pending is not None and pending.serial:
                    ready.append(msg)  # type: ignore[arg-type]
                else:
                    batch.append(msg)
        elif cls is rpc.Notification:
            assert isinstance(msg, rpc.Notification)
            if msg.method == CANCEL_REQUEST:
                call = ep.receive_cancel(msg)
                if call is not None:
                    cast(InboundCall, call)._cancel()
                    self._write_decided()  # the -32800 answer
                return
            handler = ep.handlers.get(msg.method)
            if handler is not None and handler.immediate:
                self._run_notification(msg, handler)
            else:
                batch.append(msg)
        elif cls is rpc.Request:
            # Registered here, in arrival order, even when it has to wait its turn in the
            # queue: a $/cancel_request or an arrival hook's state then finds it.
            start = ep.receive_request(msg)  # type: ignore[arg-type]
            if start is None:
                self._write_decided()  # refused
                return
            self._running.append(None)
            if free:
                starts.append(start)
            else:
                batch.append(start)
        else:
            assert isinstance(msg, rpc.Invalid)
            failed = ep.receive_invalid(msg)
            if failed is not None:
                # A malformed answer: its caller fails now, in order like any answer.
                self._route(failed, batch, starts, ready)
            else:
                self._write_decided()

    def _on_eof(self) -> None:
        self._fail(self._endpoint.receive_eof())
        # The peer is gone: no handler need wait for it (or for a user) any longer.
        self._cancel_inbound()
        if self._by_session:
            self._post_mark(_EOF_MARK)
        else:
            self._queue.put([_EOF_MARK])

    # ------------------------------------------------------------------ ordering by session

    def _send_request_by_session(self, pending: rpc.Pending, params: Any) -> None:
        # Recorded before the line goes out: the answer is ordered with this session's messages.
        pending.session = rpc.session_of_params(params)
        Connection._send_request(self, pending, params)

    def _on_lines_by_session(self, lines: list[bytes | rpc.LineTooLong], final: bool = False) -> bool:
        """``_on_lines`` for ``ordering="session"``: each message goes to its session's lane."""
        arrivals: list[tuple[str | None, Any]] = []  # (session, item) in arrival order
        tap = self._wire_tap
        decode_line = rpc.decode_line
        session_of = rpc.session_id_of
        handlers = self._endpoint.handlers
        route = self._route_by_session
        one_pass = self._endpoint.one_pass
        if one_pass is not None and tap is None:
            # A stream's read: hundreds of updates and nothing else, decoded in one go (see
            # _on_lines), each queued in its session's lane with its typed params.
            updates = one_pass.decode_read(lines)
            if updates is not _MISS:
                session_of_params, hot, hot_method = rpc.session_of_params, one_pass.handler, one_pass.method
                arrivals = [(session_of_params(p), rpc.Decoded(hot, p, hot_method)) for p in updates]
                lines = []
        for line in lines:
            if type(line) is not bytes:
                assert isinstance(line, rpc.LineTooLong)
                _log.warning("%s: discarded a line of %d bytes (over the limit)", self.name, line.size)
                continue
            if tap is not None:
                self._tap("in", line)
            msg = decode_line(line)
            if type(msg) is rpc.Notification:
                # Inlined: notifications are the bulk of a stream.
                handler = handlers.get(msg.method)
                if (handler is None or not handler.immediate) and msg.method != CANCEL_REQUEST:
                    arrivals.append((session_of(msg.params), msg))
                    continue
                route(msg, arrivals)
            elif type(msg) is list:
                for item in msg:
                    route(item, arrivals)
            else:
                route(msg, arrivals)  # type: ignore[arg-type]
        if not arrivals:
            return False
        starts: list[rpc.Start] = []
        ready: list[rpc.ResponseLike] = []
        wake: list[tuple[str | None, _Lane | None]] = []  # lanes (None: the gate) to drain
        with self._lane_lock:  # once per read
            admit = self._admit
            for key, item in arrivals:
                cls = type(item)
                if cls is rpc.Notification or cls is rpc.Decoded:
                    admit(key, item, False, wake)
                elif cls is tuple:
                    if admit(key, item, True, wake):
                        starts.append(item)
                elif admit(key, item, True, wake):
                    ready.append(item)
        for key, lane in wake:
            self._schedule_drain(key, lane)
        for msg in ready:
            self._complete_response(msg)
        if not starts:
            return False
        return self._start_requests(starts, final)

    def _route_by_session(self, msg: rpc.Message, arrivals: list[tuple[str | None, Any]]) -> None:
        """Act on one message now, or append it to ``arrivals`` with its session, to be
        placed in its session's lane (or behind the gate)."""
        ep = self._endpoint
        cls = type(msg)
        if cls is rpc.Response or cls is rpc.ErrorResponse:
            pending = ep.peek(msg.id)  # type: ignore[union-attr]
            # Unknown (dropped when delivered), or the deadlock rule (a notification handler
            # waits for it): completed now; otherwise ordered with the call's session.
            arrivals.append((pending.session, msg) if pending is not None and not pending.serial else (_NOW, msg))
        elif cls is rpc.Notification:
            assert isinstance(msg, rpc.Notification)
            if msg.method == CANCEL_REQUEST:
                call = ep.receive_cancel(msg)
                if call is not None:
                    cast(InboundCall, call)._cancel()
                    self._write_decided()
                return
            handler = ep.handlers.get(msg.method)
            if handler is not None and handler.immediate:
                self._run_notification(msg, handler)
            else:
                arrivals.append((rpc.session_id_of(msg.params), msg))
        elif cls is rpc.Request:
            assert isinstance(msg, rpc.Request)
            # Registered here, in arrival order (a $/cancel_request or an arrival hook's
            # state finds it), even when it has to wait its turn.
            start = ep.receive_request(msg)
            if start is None:
                self._write_decided()
                return
            self._running.append(None)
            arrivals.append((rpc.session_id_of(msg.params), start))
        else:
            assert isinstance(msg, rpc.Invalid)
            failed = ep.receive_invalid(msg)
            if failed is not None:
                self._route_by_session(failed, arrivals)
            else:
                self._write_decided()

    def _admit(self, key: str | None, item: Any, quick: bool, wake: list[tuple[str | None, _Lane | None]]) -> bool:
        """Place one inbound item of session ``key`` (None: session-less; _NOW: no order at
        all), under ``_lane_lock``. True: nothing is ahead of it, act on it now (``quick``
        items only: an answer to complete, a request to start). Otherwise it is queued, and a
        lane (or the gate) that must start draining is appended to ``wake``."""
        if key is _NOW:
            return True
        if self._gate or self._gate_busy:
            # A session-less message is waiting or running: everything after it waits too.
            self._gate.append((key, item))
        elif key is None:
            if not self._busy_lanes and quick:
                return True
            self._gate.append((key, item))
            if not self._busy_lanes:
                self._gate_busy = True
                wake.append((None, None))
        else:
            lane = self._lanes.get(key)
            if lane is None:
                if quick:
                    return True
                lane = self._lanes[key] = _Lane()
                self._busy_lanes += 1
                wake.append((key, lane))
            lane.append(item)
        self._queued_in += 1
        return False

    def _post_mark(self, mark: _Mark) -> None:
        """Queue the end-of-input or drain mark behind everything (it waits like a
        session-less notification)."""
        wake: list[tuple[str | None, _Lane | None]] = []
        with self._lane_lock:
            self._admit(None, mark, False, wake)
        for key, lane in wake:
            self._schedule_drain(key, lane)

    def _schedule_drain(self, key: str | None, lane: _Lane | None) -> None:
        try:
            if lane is None:
                self._execute(self._drain_gate)
            else:
                self._execute(self._drain_lane, key, lane)
        except RuntimeError:  # the executor was shut down
            if self._endpoint.closed:
                return  # close() drops what is queued
            if lane is None:
                self._drain_gate()
            else:
                assert key is not None
                self._drain_lane(key, lane)

    def _drain_lane(self, key: str, lane: _Lane) -> None:
        """Handle one session's queued items one at a time, in arrival order (at most one
        drain per session: the lane exists while one is scheduled or running)."""
        lock = self._lane_lock
        tls = self._tls
        tls.serial = True  # requests made here are answered at once (the deadlock rule)
        handle = self._handle_queued
        try:
            while True:
                with lock:
                    if not lane:
                        del self._lanes[key]
                        self._busy_lanes -= 1
                        gate = not self._busy_lanes and bool(self._gate) and not self._gate_busy
                        if gate:
                            self._gate_busy = True
                        break
                    # Everything queued so far, taken at once (one lock per batch, not per item);
                    # what arrives meanwhile queues in the lane behind it.
                    items = list(lane)
                    lane.clear()
                for item in items:
                    handle(item)
                with lock:
                    self._queued_out += len(items)
                if self._reader_held:
                    self._release_reader()
        finally:
            tls.serial = False
        if gate:
            self._drain_gate()

    def _drain_gate(self) -> None:
        """Run the gate (this thread owns it): a session-less message once no session has
        work left, then hand what came after it to its lanes, up to the next session-less
        message that has to wait."""
        lock = self._lane_lock
        tls = self._tls
        tls.serial = True
        try:
            while True:
                wake: list[tuple[str, _Lane]] = []
                item: Any = _NOTHING
                with lock:
                    gate = self._gate
                    while gate:
                        key, queued = gate[0]
                        if key is None:
                            if not self._busy_lanes:
                                gate.popleft()
                                self._queued_out += 1
                                item = queued
                            break
                        gate.popleft()  # still counted as queued, now in its lane
                        lane = self._lanes.get(key)
                        if lane is None:
                            lane = self._lanes[key] = _Lane()
                            self._busy_lanes += 1
                            wake.append((key, lane))
                        lane.append(queued)
                    if item is _NOTHING:
                        self._gate_busy = False  # the last lane to finish runs the gate again
                for key, lane in wake:
                    self._schedule_drain(key, lane)
                if item is _NOTHING:
                    return
                self._handle_queued(item)
                if self._reader_held:
                    self._release_reader()
        finally:
            tls.serial = False

    def _handle_queued(self, item: Any) -> None:
        cls = type(item)
        if cls is rpc.Decoded:
            self._call_notification(item.handler, item.params, item.method)
        elif cls is rpc.Notification:
            self._run_notification(item, self._endpoint.handlers.get(item.method))
        elif cls is tuple:
            if item[0].is_answered:  # $/cancel_request while queued: answered already
                self._handler_done()
            else:
                self._launch(item)
        elif cls is rpc.Response or cls is rpc.ErrorResponse:
            self._complete_response(item)
        elif item is _EOF_MARK or item is _DRAIN_MARK:
            self._drain_done.set()
            if item is _EOF_MARK:
                self._drained.set()
                self._run_close_callbacks()

    def _serial_waiting(self) -> bool:
        """A notification handler waits for an answer (only the reader can deliver it)."""
        return any(pending.serial for pending in list(self._pending.values()))

    def _drop_lanes(self) -> None:
        """Close: what is still queued never runs (its requests no longer count as running)."""
        with self._lane_lock:
            items = [item for _, item in self._gate]
            self._gate.clear()
            for lane in self._lanes.values():
                items.extend(lane)
                lane.clear()
        for item in items:
            if type(item) is tuple:
                self._handler_done()

    # ------------------------------------------------------------------ dispatching

    def _dispatch_loop(self) -> None:
        get = self._queue.get
        dispatch = self._dispatch
        # Requests sent from here (by notification handlers) are answered without waiting
        # for the queue: see the deadlock rule in the module docstring.
        self._tls.serial = True
        while True:
            batch = get()
            if batch is None:
                break
            dispatch(batch)
            # Not kept while waiting for the next batch (nor are _dispatch's locals: the last
            # message and its params, which may hold a line of up to max_message_bytes).
            del batch

    def _dispatch(self, batch: list[Any]) -> None:
        """Handle one read's queued messages, in order (the dispatcher thread)."""
        if type(batch) is _Updates:  # a read of updates, decoded by the reader in one go
            fn = batch.handler.fn
            for params in batch:
                try:
                    fn(params)
                except Exception:
                    _log.exception("%s: %s notification handler failed", self.name, batch.method)
                except SystemExit:
                    _log.error("%s: %s notification handler raised SystemExit; ignored (sys.exit() "
                               "in a handler does not end the process)", self.name, batch.method)
                self._dispatcher_asked = False
        else:
            handlers = self._endpoint.handlers
            call_notification = self._call_notification
            for msg in batch:
                cls = type(msg)
                if cls is tuple and len(msg) == 3:  # decoded by the reader in one pass: most updates
                    call_notification(*msg)
                    self._dispatcher_asked = False
                elif cls is rpc.Notification:  # inlined: the rest of a stream
                    handler = handlers.get(msg.method)
                    if handler is not None and handler.notification:
                        # _run_notification's common case, inlined too: one call less per update.
                        try:
                            params = handler.decode(msg.params)
                        except Exception:
                            self._run_notification(msg, handler)  # decodes again, and says why it failed
                        else:
                            try:
                                handler.fn(params)
                            except Exception:
                                _log.exception("%s: %s notification handler failed", self.name, msg.method)
                            except SystemExit:
                                _log.error("%s: %s notification handler raised SystemExit; ignored (sys.exit() "
                                           "in a handler does not end the process)", self.name, msg.method)
                    else:
                        self._run_notification(msg, handler)
                    self._dispatcher_asked = False
                else:
                    self._handle_queued(msg)
        self._handled += 1
        self._queued_out += len(batch)
        if self._reader_held:
            self._release_reader()

    def _run_notification(self, msg: rpc.Notification, handler: rpc.Handler | None) -> None:
        try:
            if handler is not None and handler.notification:
                # Inlined (the core's notification_params is the same): one per streamed chunk.
                try:
                    params = handler.decode(msg.params)
                except (msgspec.DecodeError, RecursionError) as exc:  # a ValidationError, invalid UTF-8...
                    _log.warning("%s: %s notification with invalid params: %s", self.name, msg.method, exc)
                    return
                handler.fn(params)
            else:
                found = self._endpoint.notification_params(msg)  # the fallback, or nobody
                if found is not None:
                    found[0](*found[1])
        except Exception:
            _log.exception("%s: %s notification handler failed", self.name, msg.method)
        except SystemExit:
            _log.error("%s: %s notification handler raised SystemExit; ignored (sys.exit() in a "
                       "handler does not end the process)", self.name, msg.method)

    def _call_notification(self, handler: rpc.Handler, params: Any, method: str) -> None:
        """_run_notification for params the reader decoded already (Endpoint.one_pass)."""
        try:
            handler.fn(params)
        except Exception:
            _log.exception("%s: %s notification handler failed", self.name, method)
        except SystemExit:
            _log.error("%s: %s notification handler raised SystemExit; ignored (sys.exit() in a "
                       "handler does not end the process)", self.name, method)

    def _launch(self, start: rpc.Start) -> None:
        """Run a prepared request on the executor."""
        try:
            self._execute(self._run_request, start)
        except RuntimeError:  # the executor was shut down
            self._handler_done()
            self._write_answer(self._endpoint.answer_error(start[0], INTERNAL_ERROR, "Internal error"))

    def _submit_to_user_executor(self, fn: Callable[..., Any], *args: Any) -> None:
        self._executor.submit(fn, *args)

    def _run_request(self, start: rpc.Start) -> None:
        ep = self._endpoint
        call = start[0]
        try:
            try:
                handler = start[1]
                if handler is None or handler.notification:
                    fn, args = ep.request_params(start)  # the fallback (params that do not decode raise)
                    result = fn(*args)
                else:
                    # The endpoint's request_params(), inlined for a handler (once per request).
                    params = start[3]
                    if params is rpc.UNDECODED:
                        try:
                            params = handler.decode(start[2])
                        except (msgspec.DecodeError, RecursionError):
                            ep.request_params(start)  # decodes again: raises the RequestError to answer with
                            raise
                    result = handler.fn(params, call)
            except RequestError as exc:
                line = ep.answer_exception(call, exc)
            except Exception as exc:
                _log.exception("%s: %s handler failed", self.name, call.method)
                line = ep.answer_exception(call, exc)
            except BaseException as exc:
                # sys.exit() (or a KeyboardInterrupt raised by hand) in a handler thread would end
                # only that thread (the reader, when it ran the handler itself) and leave the
                # request unanswered: answer it instead.
                _log.error("%s: %s handler raised %s; answered as an internal error%s", self.name, call.method,
                           type(exc).__name__,
                           " (sys.exit() in a handler does not end the process)" if isinstance(exc, SystemExit) else "")
                line = ep.answer_exception(call, exc)
            else:
                line = ep.answer(call, result)
            self._write_answer(line)
        finally:
            self._handler_done()

    def _handler_done(self) -> None:
        running = self._running
        running.pop()
        # A waiter registers (under the lock) before it looks at the count, and this looks at
        # the waiters after the pop: one of the two sees the other, so no wake-up is lost.
        if not running and self._idle_waiters:
            with self._idle:
                self._idle.notify_all()

    def _run_close_callbacks(self) -> None:
        with self._state_lock:
            callbacks, self._close_callbacks = self._close_callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                _log.exception("close callback failed")


class _Mark:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_EOF_MARK = _Mark("EOF")
_DRAIN_MARK = _Mark("DRAIN")
_NOTHING = _Mark("NOTHING")
_NOW: Any = _Mark("NOW")  # the "session" of an answer that is completed at once


class _Updates(list[Any]):
    """The params of a read's worth of one notification (``OnePass.decode_lines``): one queue
    item, which the dispatcher hands to ``handler`` one by one."""

    __slots__ = ("handler", "method")

    def __init__(self, handler: rpc.Handler, method: str, params: list[Any]) -> None:
        super().__init__(params)
        self.handler = handler
        self.method = method


class _Lane(deque[Any]):
    """One session's queued items (``ordering="session"``), oldest first."""

    __slots__ = ()


# The thread polling for its answer, if any (one per process: pollers would only take the CPU
# from the threads that produce the answers). Set and cleared without a lock: a race lets two
# threads poll for a moment, which is harmless.
_spinner: list[int] = []
# sched_yield lets the other threads of this CPU run (and releases the GIL); POSIX only.
_yield_cpu: Callable[[], None] = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may run on (Linux)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# With one CPU a poller could only delay the thread (or the peer process) that delivers the
# answer: requests then sleep at once, whatever wait_spin says.
_SEVERAL_CPUS = _cpus() > 1


def _spin_for(lock: threading.Lock, seconds: float) -> float | None:
    """Take ``lock`` (a pre-acquired waiter) by polling it for up to ``seconds``, yielding the
    CPU (and the GIL) between looks. None once taken; else the seconds spent polling (0.0 when
    another thread is polling already: this one does not)."""
    if lock.acquire(False):
        return None
    if _spinner:
        return 0.0
    _spinner.append(1)
    try:
        clock = time.perf_counter
        start = clock()
        end = start + seconds
        yield_cpu = _yield_cpu
        while True:
            yield_cpu()
            if lock.acquire(False):
                return None
            now = clock()
            if now >= end:
                return now - start
    finally:
        _spinner.clear()


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())

