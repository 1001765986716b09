"""The blocking JSON-RPC engine over one transport. Threads live here (and in the executor).

One :class:`Connection` serves both ACP roles; ``SyncAgent`` and ``SyncClient`` are typed
facades over it.

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

Backpressure: when the dispatcher falls ``MAX_QUEUED_MESSAGES`` behind (a slow notification
consumer), the reader stops reading until it is halfway caught up, so the peer's writes block
instead of this process buffering a burst without bound. The deadlock rule wins: while a
notification handler waits for an answer, the reader reads regardless.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from queue import SimpleQueue
from typing import Any, Protocol, Union

import msgspec

from . import rpc
from .errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
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
CANCEL_REQUEST = "$/cancel_request"
#: Messages the reader lets wait for the dispatcher before it stops reading (backpressure).
MAX_QUEUED_MESSAGES = 10_000
_FLUSH_DELAY = 0.001  # batched notifications reach the wire within this bound
_FLUSH_BYTES = 64 * 1024
# A reader that runs a request handler itself hands reading over once the handler makes a
# request, or at the latest after this long (checked by the housekeeper).
_PARK_LIMIT = 0.001
_PARK_WATCH = 0.05  # the housekeeper keeps checking this long after the last park
_STOP_GRACE = 0.1  # close() joins threads at least this long, even past its timeout

WireTap = Callable[[str, bytes], None]
"""Receives ("in" | "out", line) for every line, for debugging."""


class CancelSource(Protocol):
    """Something that can cancel a blocking call: ``on_cancel(fn)`` runs ``fn`` when it fires
    (at once if it already has) and returns a function that unregisters ``fn``."""

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]: ...

_USE_DEFAULT: Any = object()


def _decoder_for(tp: Any) -> Any:
    """A decoder with ``.decode(raw)`` for a params/result type (None: plain JSON values)."""
    if tp is None:
        return _ANY_DECODER
    decoder = _DECODERS.get(tp)
    if decoder is None:
        from . import schema  # imported late: the engine itself never needs the types

        decoder = _DECODERS[tp] = schema.decoder(tp)
    return decoder


_DECODERS: dict[Any, Any] = {}


_ANY_DECODER = msgspec.json.Decoder()


class TimerHandle:
    """A callback scheduled with :meth:`Connection.call_later`."""

    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        """Do not run the callback (no effect once it has run)."""
        self.cancelled = True


class InboundCall:
    """One inbound request while its handler runs: its id, method and cancellation state.

    ``cancelled`` is set when the peer sends ``$/cancel_request`` for it, when the input ends
    (the peer is gone) and as soon as :meth:`Connection.close` starts; ``on_cancel`` callbacks
    then run on the thread that cancelled it, so keep them short and non-blocking. After the
    end of input or during a graceful close the request can still be answered
    (:attr:`is_answered` tells).
    """

    __slots__ = ("connection", "id", "method", "attachment", "_cancelled", "_callbacks")

    def __init__(self, connection: Connection, call_id: rpc.RequestId, method: str) -> None:
        self.connection = connection
        self.id = call_id
        self.method = method
        self.attachment: Any = None
        """Free for the facade: e.g. what an arrival hook set up for the handler."""
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

    @property
    def is_answered(self) -> bool:
        """True once the request was answered, or can no longer be: the engine answered a
        ``$/cancel_request`` for it, or the connection closed."""
        return self.connection._inbound.get(self.id) is not self

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the request is cancelled (at once if it already is)."""
        with self.connection._state_lock:
            if not self.is_cancelled:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        callback()

    def answer(self, result: Any) -> bool:
        """Answer the request now, from any thread, instead of (or before) its handler.

        Returns False, sending nothing, when the request was already answered (or cancelled,
        or the connection closed). Exactly one answer ever goes out: whatever the handler
        returns afterwards is dropped (logged at DEBUG).
        """
        if not self.connection._claim(self):
            return False
        self.connection._write_result(self, result)
        return True

    def answer_error(self, code: int, message: str | None = None, data: Any = None) -> bool:
        """Answer the request with an error now; False (nothing sent) if it was already answered."""
        if not self.connection._claim(self):
            return False
        error = RequestError(code, message, data)
        self.connection._answer_error(self.id, error.code, error.message, error.data)
        return True

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


class _Handler:
    __slots__ = ("fn", "params_type", "decode", "notification", "immediate", "on_arrival")

    def __init__(
        self,
        fn: Callable[..., Any],
        params_type: Any,
        notification: bool,
        immediate: bool,
        on_arrival: Callable[[Any, InboundCall], None] | None = None,
    ) -> None:
        self.fn = fn
        self.on_arrival = on_arrival
        self.params_type = params_type
        self.notification = notification
        self.immediate = immediate
        # Replaced by the real decode function on first use (decoders cost time to build).
        self.decode: Callable[[msgspec.Raw], Any] = self._first_decode

    def _first_decode(self, raw: msgspec.Raw) -> Any:
        decoder = _decoder_for(self.params_type)
        if self.params_type is None:
            any_decode = decoder.decode
            self.decode = lambda raw: any_decode(raw) if raw else None
        else:
            self.decode = lambda raw: rpc.decode_payload(raw, decoder)
        return self.decode(raw)


class _Pending:
    """An outbound request waiting for its answer.

    The waiter is a pre-acquired lock (cheaper than an Event or a Future); Future-style calls
    carry a Future instead.
    """

    __slots__ = ("id", "method", "result_type", "lock", "future", "raw", "error", "serial")

    def __init__(self, msg_id: int, method: str, result_type: Any, future: Future[Any] | None, serial: bool) -> None:
        self.id = msg_id
        self.method = method
        self.result_type = result_type
        self.future = future
        self.serial = serial  # sent from a notification handler: complete without waiting
        self.raw: msgspec.Raw | None = None
        self.error: BaseException | None = None
        if future is None:
            self.lock: threading.Lock | None = threading.Lock()
            self.lock.acquire()
        else:
            self.lock = None


_ResponseLike = Union[rpc.Response, rpc.ErrorResponse]
# A registered inbound request ready to run: (call, handler or None for the fallback, raw params).
_Start = tuple["InboundCall", Union["_Handler", None], msgspec.Raw, Any]
# The 4th member of a _Start until the params are decoded (the arrival hook decodes early).
_UNDECODED: Any = object()


class Connection:
    """A JSON-RPC connection over a :class:`~acp.transport.Transport`, with blocking calls.

    Register handlers with :meth:`on_request` / :meth:`on_notification`, then :meth:`start`.
    ``executor`` runs request handlers; by default the connection owns a :class:`HandlerPool`
    (shut down on close). A user-supplied executor is never shut down by the connection.
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
    ) -> None:
        self._transport = transport
        self.name = name
        self.request_timeout = request_timeout
        self._framer = rpc.LineFramer(max_message_bytes)
        self._encoder = rpc.Encoder()
        if isinstance(wire_tap, (str, os.PathLike)):
            from .wiretap import JsonlWireTap

            tap = JsonlWireTap(wire_tap)
            wire_tap = tap
            owned_tap_close: Callable[[], None] | None = tap.close
        else:
            owned_tap_close = None
        self._wire_tap: WireTap | None = wire_tap
        self._handlers: dict[str, _Handler] = {}
        self._fallback_request: Callable[[str, Any, InboundCall], Any] | None = None
        self._fallback_notification: Callable[[str, Any], None] | None = None

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

        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._inbound: dict[rpc.RequestId, InboundCall] = {}
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
        self._tls = threading.local()  # .serial is True inside a notification handler

        self._write_lock = threading.Lock()
        self._wbuf: list[bytes] = []
        self._wbuf_size = 0

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
        self._eof = False  # no more input: pending calls failed, new calls refused
        self._closing = False  # graceful close: new inbound requests refused
        self._closed = False
        self._running = 0  # request handlers running (guarded by _state_lock)
        self._idle = threading.Condition(self._state_lock)
        self._idle_waiters = 0  # threads in wait_closed / graceful close (guarded by the lock)
        self._drained = threading.Event()  # dispatcher finished the queue after EOF/close
        self._drain_done = threading.Event()  # dispatcher reached the EOF or drain mark
        self._reader: threading.Thread | None = None
        self._dispatcher: threading.Thread | None = None
        self._close_callbacks: list[Callable[[], None]] = []
        if owned_tap_close is not None:
            self._close_callbacks.append(owned_tap_close)

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
        self._handlers[method] = _Handler(
            handler, params_type, notification=False, immediate=False, on_arrival=on_arrival
        )

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
        self._handlers[method] = _Handler(handler, params_type, notification=True, immediate=immediate)

    def on_unknown_request(self, handler: Callable[[str, Any, InboundCall], Any]) -> None:
        """Handle requests no method handler matches: ``handler(method, params, call)``."""
        self._fallback_request = handler

    def on_unknown_notification(self, handler: Callable[[str, Any], None]) -> None:
        """Handle notifications no method handler matches: ``handler(method, params)``."""
        self._fallback_notification = handler

    def on_close(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once when the input ends or the connection closes."""
        self._close_callbacks.append(callback)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Connection:
        """Start the reader and dispatcher threads."""
        if self._started:
            return self
        self._started = True
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
        return self._eof or self._closed

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
                return self._idle.wait_for(lambda: self._running == 0, timeout)
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
        if graceful and not self._closed and self._started:
            self._closing = True
            # Cancelled first, so handlers blocked on a user or a peer give up now instead of
            # at the end of the wait; their answers still go out.
            self._cancel_inbound()
            if not self._eof:
                self._queue.put([_DRAIN_MARK])  # dispatcher flags the drain when it gets here
            self._drain_done.wait(_remaining(deadline))
            with self._idle:
                self._idle_waiters += 1
                try:
                    self._idle.wait_for(lambda: self._running == 0, _remaining(deadline))
                finally:
                    self._idle_waiters -= 1
            self._flush()
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            inbound = list(self._inbound.values())
            self._inbound.clear()
        for call in inbound:
            call._cancel()
        try:
            self._flush()
        except AcpError:
            pass
        self._transport.close()
        self._release_reader()
        self._fail_pending(ConnectionClosedError("connection closed"))
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
        with self._state_lock:
            inbound = list(self._inbound.values())
        for call in inbound:
            call._cancel()

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
        pending = self._register(method, result_type, None)
        self._send_request(pending, params)
        # Cancelling abandons the call like cancel_request(): the waiter below wakes at once.
        forget = cancel.on_cancel(lambda: self.cancel_request(pending.id)) if cancel is not None else None
        lock = pending.lock
        assert lock is not None
        try:
            if not lock.acquire(timeout=-1 if timeout is None else timeout):
                if self._pending.pop(pending.id, None) is not None:
                    self._send_cancel(pending.id)
                    raise RequestTimeoutError(f"{method}: no answer within {timeout} s")
                lock.acquire()  # the answer is being delivered right now: take it
        finally:
            if forget is not None:
                forget()
        return self._outcome(pending)

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
        future.add_done_callback(lambda f: self._abandon(pending) if f.cancelled() else None)
        if timeout is not None:
            msg_id = pending.id
            self.call_later(timeout, lambda: self._expire(msg_id))
        self._send_request(pending, params)
        return future

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification. Writes may be batched briefly (flushed within 1 ms, and always
        before the next request or response), so order on the wire is unchanged."""
        if self._eof or self._closed:
            raise ConnectionClosedError("connection closed")
        line = self._encoder.notification(method, params)
        if self._wire_tap is not None:
            self._tap("out", line)
        with self._write_lock:
            self._wbuf.append(line)
            self._wbuf_size += len(line)
            if self._wbuf_size >= _FLUSH_BYTES:
                self._flush_locked()
                return
            first = len(self._wbuf) == 1
        if first:
            self._schedule_flush()

    def cancel_request(self, msg_id: int) -> None:
        """Abandon an outbound request: the peer gets ``$/cancel_request``, the caller
        :class:`RequestCancelledError`."""
        pending = self._pending.pop(msg_id, None)
        if pending is not None:
            self._send_cancel(msg_id)
            self._complete(pending, None, RequestCancelledError(f"{pending.method}: cancelled"))

    def _register(self, method: str, result_type: Any, future: Future[Any] | None) -> _Pending:
        if self._parked is not None:
            # A handler running on the parked reader is about to wait for an answer that
            # only a reader can deliver.
            self._unpark(threading.get_ident())
        if self._eof or self._closed or not self._started:
            raise ConnectionClosedError("connection closed" if self._started else "connection not started")
        msg_id = next(self._ids)
        serial = getattr(self._tls, "serial", False)
        pending = _Pending(msg_id, method, result_type, future, serial)
        if serial:
            # A notification handler (on the dispatcher) will wait for this answer: the reader
            # must not be held for the backlog, or nobody would ever read it.
            self._dispatcher_asked = True
            if self._reader_held:
                self._release_reader()
        self._pending[msg_id] = pending
        # close/EOF sets its flag before failing what is pending: re-check so nothing is missed.
        if (self._eof or self._closed) and self._pending.pop(msg_id, None) is not None:
            raise ConnectionClosedError("connection closed")
        return pending

    def _send_request(self, pending: _Pending, params: Any) -> None:
        try:
            line = self._encoder.request(pending.id, pending.method, params)
            self._write(line)
        except BaseException:  # closed, or params that cannot be encoded: nothing pending
            self._pending.pop(pending.id, None)
            raise

    def _send_cancel(self, msg_id: int) -> None:
        try:
            self.notify(CANCEL_REQUEST, {"requestId": msg_id})
        except ConnectionClosedError:
            pass

    def _abandon(self, pending: _Pending) -> None:
        if self._pending.pop(pending.id, None) is not None:
            self._send_cancel(pending.id)

    def _outcome(self, pending: _Pending) -> Any:
        if pending.error is not None:
            raise pending.error
        raw = pending.raw
        assert raw is not None
        return self._decode_result(pending, raw)

    def _decode_result(self, pending: _Pending, raw: msgspec.Raw) -> Any:
        if pending.result_type is None:
            return _ANY_DECODER.decode(raw)
        try:
            return rpc.decode_payload(raw, _decoder_for(pending.result_type))
        except msgspec.ValidationError as exc:
            raise RequestError(INTERNAL_ERROR, f"{pending.method}: malformed result: {exc}") from None

    def _complete(self, pending: _Pending, raw: msgspec.Raw | None, error: BaseException | None) -> None:
        future = pending.future
        if future is None:
            pending.raw = raw
            pending.error = error
            assert pending.lock is not None
            pending.lock.release()
            return
        if not future.set_running_or_notify_cancel():
            return
        if error is not None:
            future.set_exception(error)
            return
        assert raw is not None
        try:
            future.set_result(self._decode_result(pending, raw))
        except RequestError as exc:
            future.set_exception(exc)

    def _complete_response(self, msg: _ResponseLike) -> None:
        pending = self._pending.pop(msg.id, None) if isinstance(msg.id, int) else None
        if pending is None:
            _log.debug("%s: dropped an answer to unknown or abandoned request %r", self.name, msg.id)
            return
        if isinstance(msg, rpc.Response):
            self._complete(pending, msg.result, None)
        else:
            err = msg.error
            self._complete(pending, None, RequestError(err.code, err.message, err.data))

    def _fail_pending(self, error: AcpError) -> None:
        while self._pending:
            try:
                _, pending = self._pending.popitem()
            except KeyError:
                break
            self._complete(pending, None, error)

    # ------------------------------------------------------------------ writing

    def _write(self, line: bytes) -> None:
        """Write a request or response line, after any batched notifications."""
        if self._wire_tap is not None:
            self._tap("out", line)
        with self._write_lock:
            if self._wbuf:
                self._wbuf.append(line)
                line = b"".join(self._wbuf)
                self._wbuf.clear()
                self._wbuf_size = 0
            self._transport.write(line)

    def _flush(self) -> None:
        with self._write_lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._wbuf:
            data = b"".join(self._wbuf)
            self._wbuf.clear()
            self._wbuf_size = 0
            self._transport.write(data)

    def _claim(self, call: InboundCall) -> bool:
        """Take ``call`` out of the inbound table if it is still there: True for exactly one
        caller, so each request is answered once. Identity-checked under the lock, so a newer
        request that reuses the id is never taken by mistake."""
        with self._state_lock:
            if self._inbound.get(call.id) is not call:
                return False
            del self._inbound[call.id]
            return True

    def _answer(self, call: InboundCall, result: Any) -> None:
        if not self._claim(call):
            _log.debug("%s: %s answered after it was cancelled or answered; dropped", self.name, call.method)
            return
        self._write_result(call, result)

    def _write_result(self, call: InboundCall, result: Any) -> None:
        try:
            line = self._encoder.response(call.id, result)
        except Exception as exc:  # TypeError, EncodeError, RecursionError (nested too deeply)...
            _log.error("%s: %s returned a value that cannot be encoded: %r", self.name, call.method, exc)
            line = self._encoder.error(call.id, INTERNAL_ERROR, "Internal error")
        self._write_answer(line)

    def _answer_error(self, call_id: rpc.RequestId | None, code: int, message: str, data: Any = None) -> None:
        try:
            line = self._encoder.error(call_id, code, message, data)
        except Exception as exc:  # a handler's RequestError with data that cannot be encoded
            _log.error("%s: an error answer cannot be encoded: %r; answering -32603", self.name, exc)
            line = self._encoder.error(call_id, INTERNAL_ERROR, "Internal error")
        self._write_answer(line)

    def _write_answer(self, line: bytes) -> None:
        try:
            self._write(line)
        except ConnectionClosedError:
            _log.debug("%s: answer not sent: connection closed", self.name)

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
            if self._closed:
                handle.cancel()
                return handle
            heapq.heappush(self._deadlines, (time.monotonic() + delay, next(self._timer_seq), handle))
            self._ensure_housekeeper()
            self._house_cond.notify()
        return handle

    def _expire(self, msg_id: int) -> None:
        pending = self._pending.pop(msg_id, None)
        if pending is not None:
            self._send_cancel(msg_id)
            self._complete(pending, None, RequestTimeoutError(f"{pending.method}: no answer in time"))

    def _wake_housekeeper(self) -> None:
        with self._house_cond:
            self._ensure_housekeeper()
            self._house_cond.notify()

    def _ensure_housekeeper(self) -> None:
        if self._house_thread is None and not self._closed:
            self._house_thread = threading.Thread(
                target=self._housekeep, name=f"{self.name}-housekeeper", daemon=True
            )
            self._house_thread.start()

    def _housekeep(self) -> None:
        cond = self._house_cond
        while True:
            expired: list[TimerHandle] = []
            with cond:
                while not self._closed:
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
                if self._closed:
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
        with self._backlog:
            self._reader_held = True
            try:
                self._backlog.wait_for(
                    lambda: self._queued_in - self._queued_out < MAX_QUEUED_MESSAGES // 2
                    or self._dispatcher_asked
                    or self._closed
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
            self._on_lines(self._framer.end(), final=True)
        except BaseException:
            _log.exception("%s: reader failed", self.name)
        self._on_eof()

    def _on_lines(self, lines: list[bytes | rpc.LineTooLong], final: bool = False) -> bool:
        """Route the lines of one read. Returns True when this thread handed reading over to
        another one and ran a request handler itself (leader/follower)."""
        batch: list[Any] = []
        starts: list[_Start] = []
        ready: list[_ResponseLike] = []  # answers to complete once every line is routed
        tap = self._wire_tap
        decode_line = rpc.decode_line
        handlers = self._handlers
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
        with self._park_lock:
            self._parked = me
            self._parked_since = now
            self._last_park = now
        if self._house_idle or self._house_thread is None:
            self._wake_housekeeper()
        self._run_request(*last)
        with self._park_lock:
            if self._parked == me:
                self._parked = None
                return False  # nobody took reading over: carry on reading here
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

    def _route(self, msg: rpc.Message, batch: list[Any], starts: list[_Start], ready: list[_ResponseLike]) -> None:
        """Act on one message now, or append it to the batch for the dispatcher."""
        # Nothing queued ahead: the reader may act itself without breaking the order.
        free = not batch and self._enqueued == self._handled
        cls = type(msg)
        if cls is rpc.Response or cls is rpc.ErrorResponse:
            pending = self._pending.get(msg.id) if type(msg.id) is int else None  # type: ignore[union-attr]
            if free or (pending is not None and pending.serial):
                ready.append(msg)  # type: ignore[arg-type]
            else:
                batch.append(msg)
        elif cls is rpc.Notification:
            assert isinstance(msg, rpc.Notification)
            if msg.method == CANCEL_REQUEST:
                self._on_cancel_request(msg)
                return
            handler = self._handlers.get(msg.method)
            if handler is not None and handler.immediate:
                self._run_notification(msg, handler)
            else:
                batch.append(msg)
        elif cls is rpc.Request:
            # Registered here, in arrival order, even when it has to wait its turn in the
            # queue: a $/cancel_request or an arrival hook's state then finds it.
            start = self._prepare_request(msg)  # type: ignore[arg-type]
            if start is not None:
                if free:
                    starts.append(start)
                else:
                    batch.append(start)
        else:
            assert isinstance(msg, rpc.Invalid)
            _log.warning("%s: invalid message: %s", self.name, msg.reason)
            if msg.response:
                # A malformed answer is never answered back (its id is ours: an error carrying
                # it could complete an unrelated request of the peer). Its caller fails now,
                # in order like any answer, instead of waiting for a timeout that may be None.
                if type(msg.id) is int:
                    error = rpc.ErrorObject(INTERNAL_ERROR, f"malformed answer from the peer: {msg.reason}")
                    self._route(rpc.ErrorResponse(msg.id, error), batch, starts, ready)
                return
            self._answer_error(msg.id, msg.code, _INVALID_MESSAGES.get(msg.code, "Invalid request"), {"reason": msg.reason})

    def _on_cancel_request(self, msg: rpc.Notification) -> None:
        try:
            params = _ANY_DECODER.decode(msg.params) if msg.params else {}
            request_id = params["requestId"]
        except (msgspec.DecodeError, KeyError, TypeError, RecursionError):
            request_id = None
        if type(request_id) is not int and type(request_id) is not str:
            # Only an id can name a request (a list, say, is not even hashable).
            _log.debug("%s: malformed $/cancel_request ignored", self.name)
            return
        call = self._inbound.pop(request_id, None)
        if call is None:
            return  # already answered, or never seen: nothing to do
        call._cancel()
        self._answer_error(call.id, REQUEST_CANCELLED, "Request cancelled")

    def _on_eof(self) -> None:
        self._eof = True
        self._fail_pending(ConnectionClosedError("connection closed by peer"))
        # The peer is gone: no handler need wait for it (or for a user) any longer.
        self._cancel_inbound()
        self._queue.put([_EOF_MARK])

    # ------------------------------------------------------------------ dispatching

    def _dispatch_loop(self) -> None:
        get = self._queue.get
        handlers = self._handlers
        run_notification = self._run_notification
        # Requests sent from here (by notification handlers) are answered without waiting
        # for the queue: see the deadlock rule in the module docstring.
        self._tls.serial = True
        while True:
            batch = get()
            if batch is None:
                break
            for msg in batch:
                cls = type(msg)
                if cls is rpc.Notification:
                    run_notification(msg, handlers.get(msg.method))
                    self._dispatcher_asked = False
                elif cls is tuple:
                    if msg[0].is_answered:  # $/cancel_request while queued: answered already
                        self._handler_done()
                    else:
                        self._launch(msg)
                elif cls is rpc.Response or cls is rpc.ErrorResponse:
                    self._complete_response(msg)
                elif msg is _EOF_MARK or msg is _DRAIN_MARK:
                    self._drain_done.set()
                    if msg is _EOF_MARK:
                        self._drained.set()
                        self._run_close_callbacks()
            self._handled += 1
            self._queued_out += len(batch)
            if self._reader_held:
                self._release_reader()

    def _run_notification(self, msg: rpc.Notification, handler: _Handler | None) -> None:
        fallback = None
        try:
            if handler is None or not handler.notification:
                fallback = self._fallback_notification
                if fallback is None:
                    _log.debug("%s: ignored unknown notification %s", self.name, msg.method)
                    return
                params = _ANY_DECODER.decode(msg.params) if msg.params else None
            else:
                params = handler.decode(msg.params)
        except (msgspec.DecodeError, RecursionError) as exc:  # a ValidationError, invalid UTF-8...
            _log.warning("%s: %s notification with invalid params: %s", self.name, msg.method, exc)
            return
        try:
            if fallback is not None:
                fallback(msg.method, params)
            else:
                assert handler is not None
                handler.fn(params)
        except Exception:
            _log.exception("%s: %s notification handler failed", self.name, msg.method)
        except SystemExit:
            _log.error("%s: %s notification handler raised SystemExit; ignored (sys.exit() in a "
                       "handler does not end the process)", self.name, msg.method)

    def _prepare_request(self, msg: rpc.Request) -> _Start | None:
        """Register an inbound request; None when it was answered with an error at once."""
        if self._closing or self._closed:
            self._answer_error(msg.id, INTERNAL_ERROR, "Connection closing")
            return None
        if msg.id in self._inbound:
            self._answer_error(msg.id, INVALID_REQUEST, "Invalid request", {"reason": "duplicate request id"})
            return None
        handler = self._handlers.get(msg.method)
        if (handler is None or handler.notification) and self._fallback_request is None:
            self._answer_error(msg.id, METHOD_NOT_FOUND, "Method not found", {"method": msg.method})
            return None
        call = InboundCall(self, msg.id, msg.method)
        params = _UNDECODED
        if handler is not None and handler.on_arrival is not None:
            try:
                params = handler.decode(msg.params)
                handler.on_arrival(params, call)
            except msgspec.ValidationError as exc:
                self._answer_error(msg.id, INVALID_PARAMS, f"Invalid params: {exc}")
                return None
            except (msgspec.DecodeError, RecursionError) as exc:  # e.g. invalid UTF-8 in params
                self._answer_error(msg.id, PARSE_ERROR, "Parse error", {"reason": f"not valid JSON: {exc}"})
                return None
            except RequestError as exc:
                self._answer_error(msg.id, exc.code, exc.message, exc.data)
                return None
            except Exception:
                _log.exception("%s: %s arrival hook failed", self.name, msg.method)
                self._answer_error(msg.id, INTERNAL_ERROR, "Internal error")
                return None
        self._inbound[msg.id] = call
        with self._state_lock:
            self._running += 1
        return (call, handler, msg.params, params)

    def _launch(self, start: _Start) -> None:
        """Run a prepared request on the executor."""
        try:
            self._execute(self._run_request, *start)
        except RuntimeError:  # the executor was shut down
            call = start[0]
            self._inbound.pop(call.id, None)
            self._handler_done()
            self._answer_error(call.id, INTERNAL_ERROR, "Internal error")

    def _submit_to_user_executor(self, fn: Callable[..., Any], *args: Any) -> None:
        self._executor.submit(fn, *args)

    def _run_request(self, call: InboundCall, handler: _Handler | None, raw: msgspec.Raw, params: Any) -> None:
        try:
            try:
                if handler is None or handler.notification:
                    assert self._fallback_request is not None
                    try:
                        params = _ANY_DECODER.decode(raw) if raw else None
                    except (msgspec.DecodeError, RecursionError) as exc:  # invalid UTF-8...
                        raise RequestError(PARSE_ERROR, "Parse error", {"reason": f"not valid JSON: {exc}"}) from None
                    result = self._fallback_request(call.method, params, call)
                else:
                    if params is _UNDECODED:
                        try:
                            params = handler.decode(raw)
                        except msgspec.ValidationError as exc:
                            raise RequestError(INVALID_PARAMS, f"Invalid params: {exc}") from None
                        except (msgspec.DecodeError, RecursionError) as exc:  # invalid UTF-8...
                            raise RequestError(PARSE_ERROR, "Parse error", {"reason": f"not valid JSON: {exc}"}) from None
                    result = handler.fn(params, call)
            except RequestError as exc:
                if self._claim(call):
                    self._answer_error(call.id, exc.code, exc.message, exc.data)
            except Exception:
                _log.exception("%s: %s handler failed", self.name, call.method)
                if self._claim(call):
                    self._answer_error(call.id, INTERNAL_ERROR, "Internal error")
            except BaseException as exc:
                # sys.exit() (or a KeyboardInterrupt raised by hand) in a handler thread would end
                # only that thread (the reader, when it ran the handler itself) and leave the
                # request unanswered: answer it instead.
                _log.error("%s: %s handler raised %s; answered as an internal error%s", self.name, call.method,
                           type(exc).__name__,
                           " (sys.exit() in a handler does not end the process)" if isinstance(exc, SystemExit) else "")
                if self._claim(call):
                    self._answer_error(call.id, INTERNAL_ERROR, "Internal error")
            else:
                self._answer(call, result)
        finally:
            self._handler_done()

    def _handler_done(self) -> None:
        with self._idle:
            self._running -= 1
            if self._running == 0 and self._idle_waiters:
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

_INVALID_MESSAGES = {-32700: "Parse error", -32600: "Invalid request"}


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())

