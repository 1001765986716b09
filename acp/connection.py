"""The threaded runtime: one JSON-RPC connection over a blocking transport.

Every rule (what a message means, in which order things are handled, what an error answers,
when batched writes must go out, what a timeout or a close does) is the sans-I/O
:class:`acp.rpc.Scheduler`'s. This module only reads, writes, waits, keeps time and runs
handlers on threads where the scheduler says; ``SyncAgent`` and ``SyncClient`` are facades
over it. Threads and what they do::

    reader      transport.read -> scheduler.decode_read -> scheduler.route, then:
                completes the callers and starts the requests nothing is queued ahead of,
                runs arrival hooks and ``immediate`` notifications, wakes the drainers
    dispatcher  ordering "connection": drains the gate (notifications one at a time in arrival
                order, queued answers and requests); ordering "session": no such thread, each
                lane (and the gate) is drained by a job on the executor
    executor    runs request handlers concurrently (the SDK's HandlerPool, or the user's)
    housekeeper started on first use: flushes batched notifications within 1 ms, expires the
                deadlines the scheduler tracks (Future-style calls), runs ``call_later`` timers
                and hands parked reading over

The scheduler has one owner at a time: every call to it is made under ``_lock``. The bytes it
produces join an outgoing list under that same lock, and whoever holds ``_wlock`` writes the
list, so bytes reach the transport in the order the scheduler produced them; a thread that finds
a writer at work leaves its bytes to it instead of sleeping, and a write blocked on a full pipe
never keeps the reader from routing.

What threads add to the scheduler's rules, all about waking threads less often:

* Leader/follower: the reader runs the last request it may start itself ("parked"), and hands
  reading to a pool thread only if that handler makes a request of its own or runs longer than
  1 ms (the housekeeper watches). A quick handler costs no thread wake-up at all.
* A waiting caller reads for itself: reading is a role that one thread holds at a time, and a
  thread that waits for an answer takes it when nobody holds it (or when it is the parked
  reader itself), so its answer costs no thread wake-up. The reader that completes such a
  caller's call, with no other call pending, lets go of reading for it; the housekeeper hands
  reading left free to a pool thread after 1 ms. The main thread reads only while a Ctrl-C is
  held back (:mod:`acp.interruptible`): a KeyboardInterrupt must not cut a read's routing in
  half; under an application's own SIGINT handler it never reads.
* A blocking :meth:`Connection.request` may poll for its answer for up to ``wait_spin`` seconds
  (100 µs by default), yielding the CPU, before it sleeps: an answer that comes within that
  time costs no wake-up on the way back. Whether it polls is measured, not assumed
  (:mod:`acp.polling`: where wake-ups are cheap a poll only slows the threads that produce the
  answer). One thread per process polls; none on one CPU.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any

from . import interruptible, polling, rpc
from ._options import DEFAULT_WAIT_SPIN
from .errors import ConnectionClosedError, RequestCancelledError
from .executor import HandlerPool
from .housekeeper import Housekeeper, TimerHandle
from .inbound import CancelSource, InboundCall, cancel_all
from .rpc import scheduler as _sched
from .transport.base import Transport

if TYPE_CHECKING:  # the tap module is imported only when a tap is used
    from .wiretap import WireTap

__all__ = [
    "CANCEL_REQUEST",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_WAIT_SPIN",
    "MAX_QUEUED_MESSAGES",
    "ORDERINGS",
    "CancelSource",
    "Connection",
    "InboundCall",
    "Ordering",
    "TimerHandle",
]

_log = logging.getLogger("acp.connection")

DEFAULT_REQUEST_TIMEOUT = 60.0
CANCEL_REQUEST = rpc.CANCEL_REQUEST
MAX_QUEUED_MESSAGES = _sched.MAX_QUEUED_MESSAGES
ORDERINGS = rpc.ORDERINGS
Ordering = rpc.Ordering

_FLUSH_DELAY = 0.001  # batched notifications reach the wire within this bound
# A reader that runs a request handler itself hands reading over once the handler makes a
# request, or at the latest after this long (checked by the housekeeper).
_PARK_LIMIT = 0.001
_PARK_WATCH = 0.05  # the housekeeper keeps checking this long after the last park
_STOP_GRACE = 0.1  # close() joins threads at least this long, even past its timeout
# Bytes waiting for the writer beyond which a thread waits for it rather than leaving its own.
_WRITE_BACKLOG = 1024 * 1024

_Pending = rpc.Pending
_Updates = rpc.Updates
_Decoded = rpc.Decoded
_Response = rpc.Response
_ErrorResponse = rpc.ErrorResponse
_UNDECODED = rpc.UNDECODED
_decode_result = rpc.Endpoint.decode_result
_GATE = _sched.GATE
_EOF = _sched.EOF
_DRAIN = _sched.DRAIN
_FLUSH_NOW = _sched.FLUSH_NOW


_USE_DEFAULT: Any = object()
_MAIN_THREAD = interruptible.MAIN_THREAD
_CHECK_EVERY = interruptible.CHECK_EVERY


class _ThreadFlags(threading.local):
    """Per-thread flags of a connection. The default is a class attribute: reading a flag
    never set on this thread costs no AttributeError (~45 ns, once per outbound request)."""

    serial = False  # True on the threads that drain an ordered lane (the deadlock rule)


class Connection:
    """A JSON-RPC connection over a :class:`~acp.transport.Transport`, with blocking calls.

    Register handlers with :meth:`on_request` / :meth:`on_notification`, then :meth:`start`.
    ``executor`` runs request handlers; by default the connection owns a :class:`HandlerPool`
    (shut down on close). A user-supplied executor is never shut down by the connection.

    ``ordering="connection"`` (the default) handles inbound notifications one at a time in
    arrival order, connection-wide; ``ordering="session"`` keeps arrival order within each
    session and handles sessions concurrently (see :mod:`acp.rpc.scheduler`).
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
        if not wait_spin >= 0:
            raise ValueError(f"wait_spin must be 0 or more seconds, not {wait_spin!r}")
        self._transport = transport
        self.name = name
        self.request_timeout = request_timeout
        self.wait_spin = wait_spin
        # Every rule; one owner at a time: called under _lock (see the module docstring), but
        # for decode_read, the reader's.
        self._sched = rpc.Scheduler(functools.partial(InboundCall, self), name=name, ordering=ordering,
                                    max_line_bytes=max_message_bytes)
        self.ordering: Ordering = ordering
        self._lock = threading.Lock()
        # Bytes the scheduler produced, not yet written (under _lock); whoever holds _wlock
        # writes them, in order (see _write_out).
        self._wlock = threading.Lock()
        self._out: list[bytes | bytearray] = []
        self._out_size = 0
        self._write_failed: ConnectionClosedError | None = None
        # A tap sees every line (imported only when asked for: a debugging aid).
        self._wire_tap: Callable[[str, bytes], None] | None = None
        owned_tap_close = None
        if wire_tap is not None:
            from .wiretap import open_tap, tap_lines, tap_read

            self._wire_tap, owned_tap_close = open_tap(wire_tap)
            self._tap_lines = tap_lines
            self._tap_read = tap_read

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

        # Guards the runtime's own state: cancel events and callbacks, close() and _idle.
        self._state_lock = threading.Lock()
        self._tls = _ThreadFlags()  # .serial is True while draining an ordered lane
        # The dispatcher's wake-ups (ordering "connection": GATE; None stops it).
        self._wakeups: SimpleQueue[Any] = SimpleQueue()
        self._backlog = threading.Condition(threading.Lock())
        self._reader_held = False  # the reader waits for the scheduler to unpause

        self._park_lock = threading.Lock()  # who reads: parks, hand-overs, free reading
        self._parked: int | None = None  # ident of the reader running a handler itself
        self._parked_since = 0.0
        self._last_park = 0.0  # (or the last time reading was left free)
        # A waiting caller reads for itself (module docstring) with a transport that can stop
        # reading: a timeout and interrupt_read (a cancel, or close, from another thread).
        read_within = _read_within(transport)
        self._interrupt_read: Callable[[], None] | None = getattr(transport, "interrupt_read", None)
        self._read_within = read_within if self._leader_follower and self._interrupt_read is not None else None
        self._reading_free = False  # nobody holds reading (see _free_reading)
        self._freed_at = 0.0
        self._heir: Any = None  # the waiter of the latest call whose caller may read for itself
        self._reading_for: rpc.Pending | None = None  # the call of the caller that reads now
        # The clock: timers, the flush bound, the scheduler's deadlines, the parked reader.
        self._house = Housekeeper(name, flush=self._flush, next_deadline=self._next_deadline,
                                  expire=self._expire, watch=self._watch_park)

        self._started = False
        # One item per request handler started and not finished: deque.append and pop are
        # atomic, so counting costs no lock.
        self._running: deque[None] = deque()
        self._idle = threading.Condition(self._state_lock)
        self._idle_waiters = 0  # threads in wait_closed / graceful close (guarded by the lock)
        self._drained = threading.Event()  # everything received was handled (EOF reached, or closed)
        self._drain_done = threading.Event()  # the drainer reached the EOF or DRAIN mark
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
        self._sched.on_request(method, handler, params_type, on_arrival)

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
        self._sched.on_notification(method, handler, params_type, immediate)

    def on_unknown_request(self, handler: Callable[[str, Any, InboundCall], Any]) -> None:
        """Handle requests no method handler matches: ``handler(method, params, call)``."""
        self._sched.on_unknown_request(handler)

    def on_unknown_notification(self, handler: Callable[[str, Any], None]) -> None:
        """Handle notifications no method handler matches: ``handler(method, params)``."""
        self._sched.on_unknown_notification(handler)

    def on_close(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once when the input ends or the connection closes."""
        self._close_callbacks.append(callback)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Connection:
        """Start the reader (and, ordering "connection", the dispatcher) thread."""
        if self._started:
            return self
        self._started = True
        if self.ordering == "connection":  # by session, drains run on the executor instead
            self._dispatcher = threading.Thread(target=self._dispatch_loop, name=f"{self.name}-dispatcher", daemon=True)
            self._dispatcher.start()
        if self._leader_follower:
            # Reading moves between pool threads (see _receive); the pool is joined on close.
            self._execute(self._read_loop)
        else:
            self._reader = threading.Thread(target=self._read_loop, name=f"{self.name}-reader", daemon=True)
            self._reader.start()
        return self

    @property
    def is_closed(self) -> bool:
        """True once the input ended or close() was called."""
        endpoint = self._sched.endpoint
        return endpoint.eof or endpoint.closed

    def __enter__(self) -> Connection:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close(graceful=True)

    def wait_closed(self, timeout: float | None = None) -> bool:
        """Block until the input ended and everything received was handled and answered."""
        if not interruptible.wait_event(self._drained, timeout):  # (a Ctrl-C ends it)
            return False
        return self._wait_idle(timeout)

    def close(self, graceful: bool = False, timeout: float | None = 5.0) -> None:
        """Close the connection; idempotent.

        Every call still pending fails with ConnectionClosedError and every running handler
        sees its call cancelled, at once. ``graceful=False`` then stops: queued work is
        dropped. ``graceful=True`` first stops taking new requests, drains the queue and waits
        for running handlers (which may still answer, and whose own new calls are still
        answered). Either way close waits about ``timeout`` at most, in all.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        sched = self._sched
        lock = self._lock
        if graceful and not sched.endpoint.closed and self._started:
            with lock:
                failed, calls = sched.start_closing()
                woken = sched.pop_woken()
            self._wake_all(failed)
            # Cancelled first, so handlers blocked on a user or a peer give up now instead of
            # at the end of the wait; their answers still go out.
            cancel_all(calls)
            self._wake_drainers(woken)
            if not sched.endpoint.eof:
                self._drain_done.wait(_remaining(deadline))
            self._wait_idle(_remaining(deadline))
            self._flush()
        with self._state_lock:
            if sched.endpoint.closed:
                return
            with lock:
                failed, inbound = sched.close()
        cancel_all(inbound)
        self._wake_all(failed)
        try:
            self._flush()
            left = _remaining(deadline)
            self._finish_writing(_STOP_GRACE if left is None else min(_STOP_GRACE, left))
        except ConnectionClosedError:
            pass
        self._transport.close()
        self._release_reader()
        self._wakeups.put(None)
        house = self._house.stop()
        # One deadline for every join below (a little past ``timeout`` when the graceful wait
        # used it all up, so threads that are merely finishing are still waited for).
        if deadline is not None:
            deadline = max(deadline, time.monotonic() + _STOP_GRACE)
        current = threading.current_thread()
        for thread in (self._reader, self._dispatcher, house):
            if thread is not None and thread is not current:
                thread.join(_remaining(deadline))
        if self._own_executor:
            pool = self._executor
            assert isinstance(pool, HandlerPool)
            pool.shutdown(wait=False)
            if not pool.join(_remaining(deadline)):
                _log.warning("%s: a handler is still running after close", self.name)
        self._drained.set()
        self._run_close_callbacks()

    def _wait_idle(self, timeout: float | None) -> bool:
        with self._idle:
            self._idle_waiters += 1
            try:
                return self._idle.wait_for(lambda: not self._running, timeout)
            finally:
                self._idle_waiters -= 1

    def _cancel_inbound(self) -> None:
        """Set every inbound call's ``cancelled`` (the peer is gone); the calls stay answerable."""
        with self._lock:
            calls = list(self._sched.endpoint.inbound.values())
        cancel_all(calls)

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
        fires: ``$/cancel_request`` goes out and :class:`RequestCancelledError` is raised. An
        exception raised in the waiting thread (KeyboardInterrupt) abandons it the same way.
        """
        if timeout is _USE_DEFAULT:
            timeout = self.request_timeout
        # The waiter is a pre-acquired lock (cheaper than an Event or a Future).
        waiter = threading.Lock()
        waiter.acquire()
        reads = main_reads = False
        if self._read_within is not None:
            me = threading.get_ident()
            if me != _MAIN_THREAD:
                self._heir = waiter  # the reader that completes this call lets go of reading
                reads = self._take_free_reading() or self._claim_park(me)
            elif interruptible.can_hold():
                # The main thread reads only while a Ctrl-C is held back, and so takes reading
                # once the request is out (a write that waits for the peer stays interruptible).
                self._heir = waiter
                main_reads = True
        try:
            pending = self._send_request(method, params, result_type, waiter, None)
        except BaseException:
            if reads:
                self._launch_reader()
            raise
        forget = None
        try:
            # Cancelling abandons the call: the waiter below wakes at once.
            if cancel is not None:
                forget = cancel.on_cancel(lambda: self._give_up(pending, RequestCancelledError))
            if reads:
                timeout = self._read_for(pending, waiter, timeout)
            elif main_reads:
                timeout = self._read_in_main_thread(pending, waiter, timeout)
            # Maybe poll first (acp.polling decides), within the timeout; then sleep for the rest.
            # (A caller that read its answer takes it at once: not a wait for the policy to time.)
            answered = (reads or main_reads) and waiter.acquire(False)
            if not answered and not polling.wait(waiter, self.wait_spin, timeout):
                if self._emit(self._sched.abandon, pending, self._sched.timeout_error(pending, timeout)) is not None:
                    assert pending.error is not None
                    raise pending.error
                waiter.acquire()  # the answer is being delivered right now: take it
        except BaseException:
            # Interrupted while waiting (Ctrl-C in the main thread: KeyboardInterrupt): the call
            # is abandoned the ACP way, as a cancel would ($/cancel_request, late answer dropped).
            self._give_up(pending, None)
            raise
        finally:
            if forget is not None:
                forget()
        # Endpoint.outcome, inlined: once per call.
        if pending.error is not None:
            raise pending.error
        return _decode_result(pending, pending.raw)  # type: ignore[arg-type]  # set when no error

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
        pending = self._send_request(method, params, result_type, future, timeout)
        future.add_done_callback(lambda f: self._give_up(pending, None) if f.cancelled() else None)
        if timeout is not None:
            self._house.poke()  # it times the call (the scheduler tracks the deadline)
        return future

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification. Writes may be batched briefly (flushed within 1 ms, and always
        before the next request or response), so order on the wire is unchanged."""
        lock = self._lock
        lock.acquire()  # acquire/release rather than ``with``: about half the cost, per update
        try:
            when = self._sched.notify(method, params)
        finally:
            lock.release()
        if when:
            if when == _FLUSH_NOW:
                self._flush()
            else:
                self._house.flush_within(_FLUSH_DELAY)

    def cancel_request(self, msg_id: int) -> None:
        """Abandon an outbound request: the peer gets ``$/cancel_request``, the caller
        :class:`RequestCancelledError`."""
        with self._lock:
            pending = self._sched.endpoint.pending.get(msg_id)
        if pending is not None:
            self._give_up(pending, RequestCancelledError)

    def _send_request(self, method: str, params: Any, result_type: Any, waiter: Any, timeout: float | None) -> rpc.Pending:
        if self._parked is not None:
            # A handler running on the parked reader is about to wait for an answer that only
            # a reader can deliver.
            self._unpark(threading.get_ident())
        if not self._started:
            raise ConnectionClosedError("connection not started")
        serial = self._tls.serial
        now = time.monotonic() if timeout is not None else 0.0
        lock, sched = self._lock, self._sched
        lock.acquire()
        try:
            pending, data = sched.send_request(method, params, result_type, waiter, serial, timeout, now)
            mine = self._queue_out(data)
        finally:
            lock.release()
        try:
            self._write_out(mine)
            if self._write_failed is not None:  # closed: nothing stays pending
                with lock:
                    sched.abandon(pending, sched.endpoint.closed_error())
                raise self._write_failed  # what the transport said (a remote refusal keeps its type)
            if serial and self._reader_held:
                self._release_reader()  # a drainer waits for this answer: only the reader reads it
        except BaseException:
            # Interrupted once the call exists (Ctrl-C: a KeyboardInterrupt is raised wherever the
            # main thread is when it next runs, often right after the write): abandoned the ACP
            # way, as request() does for one that comes while waiting (a no-op if done already).
            self._give_up(pending, None)
            raise
        return pending

    def _give_up(self, pending: rpc.Pending, error: type[Exception] | None) -> None:
        """Abandon a call (cancelled): if it was still pending, tell the peer and wake its
        caller with ``error`` (None: a cancelled Future, already done)."""
        exc = error(f"{pending.method}: cancelled") if error is not None else RequestCancelledError()
        if self._emit(self._sched.abandon, pending, exc) is not None and error is not None:
            self._wake(pending)

    def _wake(self, pending: rpc.Pending) -> None:
        """Hand a call its outcome (the scheduler set it): wake the blocked caller, or
        complete the Future."""
        waiter = pending.waiter
        if type(waiter) is not Future:
            waiter.release()
            if pending is self._reading_for:  # its caller is reading: stop that read
                self._interrupt_read()  # type: ignore[misc]  # set whenever a caller reads
            return
        if not waiter.set_running_or_notify_cancel():
            return
        try:
            waiter.set_result(rpc.Endpoint.outcome(pending))
        except Exception as exc:
            waiter.set_exception(exc)

    def _wake_all(self, failed: list[rpc.Pending]) -> None:
        for pending in failed:
            self._wake(pending)

    # ------------------------------------------------------------------ writing

    def _emit(self, produce: Callable[..., bytes | bytearray | None], *args: Any) -> bytes | bytearray | None:
        """Call the scheduler's ``produce(*args)`` and write the bytes it returns, in the
        order it produced them. Returns them (None: the scheduler had nothing to send)."""
        lock = self._lock
        lock.acquire()  # acquire/release rather than ``with``: ~50 ns less, per answer
        try:
            data = produce(*args)
            mine = self._queue_out(data) if data else None
        finally:
            lock.release()
        if data:
            self._write_out(mine)
        return data

    def _queue_out(self, data: bytes | bytearray) -> bytes | bytearray | None:
        """(Under ``_lock``.) ``data`` is next in line: returned when this thread may write it
        at once (nothing waits before it and the write lock was free: now held), else queued
        for whoever writes (None)."""
        if not self._out and self._wlock.acquire(False):
            return data
        self._out.append(data)
        self._out_size += len(data)
        return None

    def _write_out(self, mine: bytes | bytearray | None) -> None:
        """Write what the scheduler produced, in order: ``mine`` first when this thread holds
        the write lock already (see _queue_out). Whoever holds the write lock writes every
        thread's bytes: a thread that finds it held leaves its bytes to that writer instead of
        sleeping on the lock, unless _WRITE_BACKLOG bytes wait already (then it waits: a peer
        that reads slowly slows its writers down). A closed pipe is logged (and remembered: a
        request then fails)."""
        wlock = self._wlock
        data = mine
        while True:
            if data is None:
                if not wlock.acquire(self._out_size >= _WRITE_BACKLOG):
                    return  # the writer looks again after it releases the lock
                data = self._take_out()
            try:
                while data:
                    if self._wire_tap is not None:
                        self._tap_lines(self._wire_tap, "out", data)
                    try:
                        self._transport.write(data)
                    except ConnectionClosedError as exc:
                        self._write_failed = exc
                        _log.debug("%s: not sent: connection closed", self.name)
                    # (read without the lock: the look after the release covers it)
                    data = self._take_out() if self._out else None
            finally:
                wlock.release()
            if not self._out:
                return
            data = None

    def _finish_writing(self, timeout: float) -> None:
        """(close) Let a write under way in another thread end, and write what was left queued
        behind it (our own last bytes, a flushed batch), within ``timeout``: closing the
        transport under that writer would drop them. A writer stuck on a peer that stopped
        reading keeps its bytes (logged at DEBUG)."""
        if not self._wlock.acquire(True, timeout):
            _log.debug("%s: closing with a write still under way", self.name)
            return
        self._write_out(self._take_out())  # (holding the write lock, which it releases)

    def _take_out(self) -> bytes | bytearray:
        """(The caller holds ``_wlock``.) Every queued byte, oldest first; the queue emptied."""
        lock = self._lock
        lock.acquire()
        out = self._out
        self._out = []
        self._out_size = 0
        lock.release()
        return out[0] if len(out) == 1 else b"".join(out)

    def _answer(self, call: rpc.InboundRequest, result: Any) -> bool:
        """Answer ``call`` now (InboundCall.answer, and every handler's result); False when it
        was answered already."""
        # _emit(self._sched.answer, call, result), spelled out: once per inbound request, and
        # a call through *args costs about as much as the rest of this method.
        lock = self._lock
        lock.acquire()
        try:
            data = self._sched.answer(call, result)
            mine = self._queue_out(data) if data else None
        finally:
            lock.release()
        if not data:
            return False
        self._write_out(mine)
        return True

    def _answer_error(self, call: rpc.InboundRequest, code: int, message: str | None, data: Any) -> bool:
        """Answer ``call`` with an error now; False when it was answered already."""
        return self._emit(self._sched.answer_error, call, code, message, data) is not None

    def _flush(self) -> None:
        """Write every batched byte now."""
        self._emit(self._sched.data_to_send)

    # ------------------------------------------------------------------ the clock

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` after ``delay`` seconds on the connection's housekeeping thread
        (never once the connection is closed). Keep it short; :meth:`TimerHandle.cancel`
        stops it. Facades use this for their timers instead of a thread of their own."""
        if self._sched.endpoint.closed:
            handle = TimerHandle(callback)
            handle.cancel()
            return handle
        return self._house.call_later(delay, callback)

    def _next_deadline(self) -> float | None:
        with self._lock:
            return self._sched.next_deadline()

    def _expire(self, now: float) -> None:
        """The housekeeper's clock reached the scheduler's next deadline."""
        with self._lock:
            timed_out = self._sched.expire(now)
        self._flush()  # their $/cancel_request lines
        self._wake_all(timed_out)

    def _watch_park(self, now: float) -> float | None:
        """While handlers run on the reader (or reading was left free) lately: hand parked or
        free reading over once that lasted _PARK_LIMIT, and look again within that."""
        if self._reading_free:
            if now - self._freed_at >= _PARK_LIMIT and self._take_free_reading():
                self._launch_reader()
            return now + _PARK_LIMIT
        if now - self._last_park >= _PARK_WATCH:
            return None
        parked = self._parked
        if parked is not None and now - self._parked_since >= _PARK_LIMIT:
            self._unpark(parked)
        return now + _PARK_LIMIT

    # ------------------------------------------------------------------ reading

    def _hold_reading(self) -> None:
        """Stop reading while the scheduler says so (a slow notification consumer): the
        peer's writes then block instead of this process buffering without bound."""
        sched = self._sched
        with self._backlog:
            self._reader_held = True
            try:
                self._backlog.wait_for(lambda: not sched.paused or sched.endpoint.closed)
            finally:
                self._reader_held = False

    def _release_reader(self) -> None:
        with self._backlog:
            self._backlog.notify()

    def _read_loop(self) -> None:
        read = self._transport.read
        sched = self._sched
        try:
            while True:
                if sched.paused:
                    self._hold_reading()
                try:
                    data = read()
                except OSError as exc:
                    _log.debug("%s: read failed: %r", self.name, exc)
                    break
                if not data:
                    break
                if self._receive(data):
                    return  # reading was handed to another thread
                # Not kept while blocked in the next read: a read's bytes (a line may be up to
                # max_message_bytes) are freed as soon as they are routed.
                del data
            self._receive(b"", final=True)
        except BaseException:
            _log.exception("%s: reader failed", self.name)
        self._on_eof()

    def _receive(self, data: bytes, final: bool = False) -> bool:
        """Route the messages of one read (b"" and ``final``: the input ended) and do what the
        scheduler says. Returns True when this thread handed reading over to another one and
        ran a request handler itself."""
        sched = self._sched
        msgs = sched.decode_read(data) if self._wire_tap is None else self._tap_read(self._wire_tap, sched, data)
        if not msgs:
            return False  # a part of a line
        lock = self._lock
        resume = 0
        while True:
            lock.acquire()
            try:
                now = sched.route(msgs, resume)
                routed = sched.routed
                woken = sched.pop_woken() if sched.woken else None
            finally:
                lock.release()
            if routed is None:  # the common case: nothing rare
                if woken:
                    self._wake_drainers(woken)
                if not now:
                    return False
                if len(now) == 1:  # _act's most common cases: one blocked caller, one request
                    item = now[0]
                    if type(item) is _Pending:
                        waiter = item.waiter
                        if type(waiter) is not Future:
                            if waiter is self._heir and not final and not sched.endpoint.pending:
                                # Its caller reads for itself from now on (first: it may run
                                # as soon as it is released).
                                self._free_reading()
                                waiter.release()
                                return True
                            waiter.release()
                            return False
                    elif not final and self._leader_follower and self._reading_for is None:
                        return self._run_here(item)
                return self._act(now, final)
            if routed.flush:
                self._flush()  # refusals and -32800 answers
            if routed.cancelled:
                cancel_all(routed.cancelled)
            if woken:
                self._wake_drainers(woken)
            hook = routed.hook
            if hook is None:
                return self._act(now, final) if now else False
            if now:
                self._act(now, True)
            resume = routed.resume
            if type(hook) is _Decoded:  # an immediate notification: here, now
                self._notify_handler(hook)
                continue
            try:  # an arrival hook: here, now, before anything read after its request
                hook[1].on_arrival(hook[3], hook[0])
                refused = None
            except BaseException as exc:
                refused = exc
            go = routed.placed and refused is None
            if not go:
                lock.acquire()
                try:
                    go = sched.arrived(hook, refused)
                finally:
                    lock.release()
                if refused is not None:
                    self._flush()
            if resume >= len(msgs):  # a read of one prompt: most of them
                if not go:
                    return False
                if final or not self._leader_follower or self._reading_for is not None:
                    self._launch(hook)
                    return False
                return self._run_here(hook)
            if go:
                self._launch(hook)

    def _act(self, now: list[Any], final: bool) -> bool:
        """Complete the callers and start the requests the scheduler found nothing ahead of.
        The last request may run on this very thread (True: reading was handed over)."""
        last = now[-1]
        if type(last) is not tuple or final or not self._leader_follower or self._reading_for is not None:
            last = None  # (a caller reading for its answer runs no handler)
        for item in now:
            if type(item) is _Pending:
                waiter = item.waiter
                if type(waiter) is Future:
                    self._wake(item)
                else:
                    waiter.release()  # _wake's common case, inlined: once per answer
            elif item is not last:
                self._launch(item)
        return False if last is None else self._run_here(last)

    def _run_here(self, start: rpc.Start) -> bool:
        """Run a request on this reader thread (leader/follower); True when reading was
        handed to another thread meanwhile.

        This thread already holds the request: running it here costs no thread wake-up
        between a request and its handler. Reading is "parked" and moves to a pool thread
        only if the handler makes a request of its own or runs longer than _PARK_LIMIT. Every
        line of this read was routed already, so a new reader cannot overtake it."""
        me = threading.get_ident()
        now = time.monotonic()
        # Parking needs no lock: nobody can take reading over from this thread before
        # _parked names it, and it is written last. Only the end of the park races a
        # hand-over, so that is decided under the lock.
        self._parked_since = now
        self._last_park = now
        self._parked = me
        if not self._house.watching:
            # Poked unless it looks at parks already: asleep, or waiting for something else
            # (a flush, a deadline), it would not look at this one before that came.
            self._house.poke()
        self._running.append(None)
        self._run_request(start)
        lock = self._park_lock
        lock.acquire()
        try:
            if self._parked == me:
                self._parked = None
                return False  # nobody took reading over: carry on reading here
            if self._reading_free:  # the handler read for its calls, and left reading free
                self._reading_free = False
                return False
        finally:
            lock.release()
        return True

    def _unpark(self, only: int | None = None) -> None:
        """Hand parked reading to a pool thread (``only``: if parked by that thread)."""
        with self._park_lock:
            if self._parked is None or (only is not None and self._parked != only):
                return
            self._parked = None
        self._launch_reader()

    def _launch_reader(self) -> None:
        """Hand reading (held by this thread) to a pool thread."""
        try:
            self._execute(self._read_loop)
        except RuntimeError:  # the pool is shut down: the connection is closing
            pass

    # ------------------------------------------------------------------ callers that read

    def _take_free_reading(self) -> bool:
        """Take reading if nobody holds it."""
        if not self._reading_free:
            return False
        with self._park_lock:
            if not self._reading_free:
                return False
            self._reading_free = False
            return True

    def _claim_park(self, me: int) -> bool:
        """Take reading if this thread is the parked reader (a handler on it makes a call):
        it reads for that call itself instead of handing reading to a pool thread."""
        if self._parked != me:
            return False
        with self._park_lock:
            if self._parked != me:
                return False
            self._parked = None
            return True

    def _free_reading(self) -> None:
        """Let go of reading with nobody reading: the next waiting caller takes it
        (request), else the housekeeper hands it to a pool thread after _PARK_LIMIT."""
        now = time.monotonic()
        with self._park_lock:  # (taken under it too: no reliance on the GIL)
            self._freed_at = now
            self._last_park = now
            self._reading_free = True
        if not self._house.watching:
            self._house.poke()

    def _read_in_main_thread(self, pending: rpc.Pending, waiter: threading.Lock, timeout: float | None) -> float | None:
        """The main thread reads for its call if reading is free, holding a Ctrl-C back
        meanwhile: a KeyboardInterrupt must not cut a read's routing in two (its messages
        would be lost). It is raised once reading is let go. Returns the timeout left."""
        if not waiter.locked() or not interruptible.hold():
            return timeout  # answered already; or an application's own handler came meanwhile
        try:
            if self._take_free_reading():
                return self._read_for(pending, waiter, timeout, main=True)
            return timeout
        finally:
            interruptible.release()  # raises the KeyboardInterrupt held back, if any

    def _read_for(
        self, pending: rpc.Pending, waiter: threading.Lock, timeout: float | None, main: bool = False
    ) -> float | None:
        """(Holding reading.) Read until ``pending`` was answered; returns the timeout left.
        Reading is let go on the way out: left free by the answer (_receive), ended with the
        input, or handed to a pool thread (the answer waits behind queued messages, the
        scheduler paused reading, the timeout passed, a Ctrl-C was held back (``main``: reads
        are then waited for in slices, to see one sent to another thread), or something was
        raised)."""
        read = self._read_within
        assert read is not None
        sched = self._sched
        deadline = None if timeout is None else time.monotonic() + timeout
        self._reading_for = pending
        held = True
        try:
            while waiter.locked() and not pending.answered and not sched.paused:
                left = None
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                if main:
                    if interruptible.withheld():
                        break
                    if left is None or left > _CHECK_EVERY:
                        left = _CHECK_EVERY  # a Ctrl-C sent to another thread is seen within it
                data = read(left)
                if data is None:
                    continue  # the timeout passed, or something else completed the call
                if not data:
                    held = False  # the input ended: nobody reads any more
                    self._receive(b"", final=True)
                    self._on_eof()
                    break
                if self._receive(data):
                    held = False  # our answer came and left reading free
                    break
                del data  # (see _read_loop)
        finally:
            self._reading_for = None
            if held:
                if waiter.locked() or sched.endpoint.pending:
                    self._launch_reader()
                else:  # answered (before this thread took reading): left free, as _receive does
                    self._free_reading()
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _on_eof(self) -> None:
        with self._lock:
            failed, calls = self._sched.receive_eof()
            woken = self._sched.pop_woken()
        self._wake_all(failed)
        # The peer is gone: no handler need wait for it (or for a user) any longer.
        cancel_all(calls)
        self._wake_drainers(woken)
        if self._sched.endpoint.closed:
            self._drained.set()

    # ------------------------------------------------------------------ draining

    def _wake_drainers(self, woken: list[Any]) -> None:
        """Start a drainer for each lane the scheduler woke."""
        for key in woken:
            if key is _GATE and self._dispatcher is not None:
                self._wakeups.put(key)
                continue
            try:
                self._execute(self._drain, key)
            except RuntimeError:  # the executor was shut down
                if not self._sched.endpoint.closed:
                    self._drain(key)  # close() drops what is queued otherwise

    def _dispatch_loop(self) -> None:
        get = self._wakeups.get
        while True:
            key = get()
            if key is None:
                return
            self._drain(key)

    def _drain(self, key: Any) -> None:
        """Handle the items of one lane in order, until the scheduler says it is idle."""
        sched = self._sched
        lock = self._lock
        tls = self._tls
        tls.serial = True  # requests made here are answered at once (the deadlock rule)
        try:
            while True:
                lock.acquire()
                try:
                    items = sched.take(key)
                    woken = sched.pop_woken() if sched.woken else None
                finally:
                    lock.release()
                if woken:
                    self._wake_drainers(woken)
                if self._reader_held and not sched.paused:
                    self._release_reader()
                if items is None:
                    return
                for item in items:
                    self._handle(item)
                del items  # not kept while waiting: a line may be up to max_message_bytes
        finally:
            tls.serial = False

    def _handle(self, item: Any) -> None:
        """One item whose turn it is (on a drainer)."""
        cls = type(item)
        if cls is _Updates:  # a read of streamed updates, decoded in one go
            fn = item.handler.fn
            for params in item:
                try:
                    fn(params)
                except BaseException as exc:
                    self._sched.notification_failed(item.method, exc)
        elif cls is _Decoded:
            self._notify_handler(item)
        elif cls is tuple:
            if self._sched.startable(item):
                self._running.append(None)
                self._launch_counted(item)
        elif cls is _Response or cls is _ErrorResponse:
            with self._lock:
                pending = self._sched.deliver(item)
            if pending is not None:
                self._wake(pending)
        elif item is _EOF:
            # Everything read before the end was handled: the calls still pending fail now.
            with self._lock:
                failed = self._sched.eof_reached()
            self._wake_all(failed)
            self._drain_done.set()
            self._drained.set()
            self._run_close_callbacks()
        elif item is _DRAIN:
            self._drain_done.set()

    def _notify_handler(self, item: rpc.Decoded) -> None:
        try:
            if item.fallback:
                item.handler.fn(item.method, item.params)
            else:
                item.handler.fn(item.params)
        except BaseException as exc:
            self._sched.notification_failed(item.method, exc)

    # ------------------------------------------------------------------ running requests

    def _launch(self, start: rpc.Start) -> None:
        """Run a request's handler on the executor."""
        self._running.append(None)
        self._launch_counted(start)

    def _launch_counted(self, start: rpc.Start) -> None:
        try:
            self._execute(self._run_request, start)
        except RuntimeError:  # the executor was shut down
            self._emit(self._sched.request_failed, start[0], RuntimeError("the executor was shut down"))
            self._handler_done()

    def _submit_to_user_executor(self, fn: Callable[..., Any], *args: Any) -> None:
        self._executor.submit(fn, *args)

    def _run_request(self, start: rpc.Start) -> None:
        call, handler, raw, params = start
        try:
            try:
                if handler is None or handler.notification:
                    fn, args = self._sched.endpoint.request_params(start)  # the fallback
                    result = fn(*args)
                else:
                    if params is _UNDECODED:
                        try:
                            params = handler.decode(raw)
                        except Exception:  # the rare path raises the RequestError to answer with
                            self._sched.endpoint.request_params(start)
                            raise
                    result = handler.fn(params, call)
            except BaseException as exc:
                self._emit(self._sched.request_failed, call, exc)
                return
            self._answer(call, result)
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


def _read_within(transport: Transport) -> Callable[[float | None], bytes | None] | None:
    """The transport's ``read_within(timeout)``, if it has one that reads as its ``read()``
    does: a subclass that overrides ``read()`` (to record the bytes, say) and not
    ``read_within`` would be gone around by a caller reading for itself."""
    cls = type(transport)
    owner = next((klass for klass in cls.__mro__ if "read_within" in vars(klass)), None)
    if owner is None or cls.read is not vars(owner).get("read"):
        return None
    return transport.read_within  # type: ignore[attr-defined, no-any-return]


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())
