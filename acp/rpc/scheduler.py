"""The scheduler: what each inbound message means, when it is handled, what goes out when.

One :class:`Scheduler` per connection decides everything about the order of things, for
every runtime alike: the threaded one (``acp.connection``), the asyncio one (``acp.aio``) and
any other. A runtime reads, writes, waits, keeps time and runs handlers where the scheduler
says; it never decides what a message means or in which order things happen.

Inbound, one read at a time::

    msgs = scheduler.decode_read(data)  # the reader's: safe outside the owner's lock; b"": EOF
    now = scheduler.route(msgs)         # then, outside the owner's lock:
    # scheduler.routed (None: nothing rare): write data_to_send() if .flush; cancel the handlers
    #     of .cancelled;
    # if scheduler.woken: start a drainer for each key of pop_woken();
    # for each item of now: a Pending -> wake its caller (its outcome is set),
    #                       a Start   -> run that request's handler (concurrently);
    # if routed.hook: run it (an arrival hook, then report with arrived(); or an immediate
    #     notification's handler), then route(msgs, routed.resume) again.

A **drainer** of a lane (the :data:`GATE`, or one session's lane) loops
``items = scheduler.take(key)`` until it returns None, handling each item in order (asking for
more means the items taken before were handled):
a :class:`~acp.rpc.Decoded` or :class:`~acp.rpc.Updates` notification is called (and awaited)
one at a time; a queued answer goes through :meth:`Scheduler.deliver`; a queued Start is run
if :meth:`Scheduler.startable`; the marks :data:`EOF` and :data:`DRAIN` say that everything
read before the end of input (or before a graceful close began) was handled (at :data:`EOF`,
:meth:`Scheduler.eof_reached` gives the calls that fail now).

Ordering: ``"connection"`` puts every message in one order (the gate); ``"session"`` gives each
session its own lane, drained concurrently, while a session-less message (no ``sessionId``)
waits in the gate until every lane is idle, with everything read after it behind it. An answer
is ordered with the session of the request it answers. The reader acts on an answer or a
request itself when nothing of its order is queued ahead (``route``'s result): a caller is then
completed, or a handler started, without a hand-off. The deadlock rule: the answer to a call
made while handling an ordered notification (``serial=True``) is completed at once.

Backpressure: :attr:`Scheduler.paused` is set while :data:`MAX_QUEUED_MESSAGES` items wait,
and cleared once half of them were handled, or at once while a ``serial`` call waits (the
deadlock rule wins). A runtime stops reading while it is set.

Outbound: :meth:`~Scheduler.notify` batches a notification and says when it must reach the
wire (:data:`FLUSH_NOW`, or :data:`FLUSH_SOON`: within the runtime's small bound); a request,
an answer or a ``$/cancel_request`` is returned together with every batched notification
before it, to write at once, so the order on the wire is the order of the calls.

Time: the scheduler has no clock. A runtime that lets it track a call's deadline passes its
own ``now`` (:meth:`~Scheduler.send_request`), asks :meth:`~Scheduler.next_deadline` and calls
:meth:`~Scheduler.expire` when its clock gets there; a runtime that times a call itself (a
blocking caller's timed wait) calls :meth:`~Scheduler.abandon` when it ran out.

Concurrency contract: a Scheduler (and its Endpoint) has **one owner at a time**. Every method
that is not marked pure must be called by the owner: the asyncio runtime owns it from its loop;
the threaded runtime guards every call with one lock, and queues the bytes a call returns under
that lock, so that they reach the wire in the order they were produced. Nothing here relies
on the GIL. The reader's (one reader at a time, outside the owner's lock):
:meth:`~Scheduler.decode_read` and :meth:`~Scheduler.frame` (the framer's state is the
reader's). Pure (any thread, any time once started): :meth:`~Scheduler.decode_lines`,
:meth:`~Scheduler.startable`, ``Endpoint.outcome``, ``Endpoint.request_params``. Handlers
registered before the runtime starts are never changed.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any, Literal

import msgspec

from ..errors import (
    REQUEST_CANCELLED,
    ConnectionClosedError,
    RequestCancelledError,
    RequestError,
    RequestTimeoutError,
)
from .badinput import BadInputLog
from .endpoint import CANCEL_REQUEST, Endpoint, InboundRequest, Pending, Start
from .framing import DEFAULT_MAX_LINE_BYTES, LineFramer, LineTooLong
from .handlers import MISS, Decoded, Handler, Updates
from .messages import (
    ErrorResponse,
    Invalid,
    Notification,
    Request,
    Response,
    decode_line,
    session_id_of,
    session_of_params,
)

__all__ = [
    "DRAIN",
    "EOF",
    "FLUSH_BYTES",
    "FLUSH_NOW",
    "FLUSH_SOON",
    "GATE",
    "MAX_QUEUED_MESSAGES",
    "ORDERINGS",
    "Ordering",
    "Routed",
    "Scheduler",
]

_log = logging.getLogger("acp.rpc")

#: The inbound ordering modes: one order connection-wide, or one per session.
ORDERINGS = ("connection", "session")
Ordering = Literal["connection", "session"]

#: Items that may wait for a drainer before :attr:`Scheduler.paused` is set (backpressure).
MAX_QUEUED_MESSAGES = 10_000
#: Batched notifications are written at once when this many bytes wait.
FLUSH_BYTES = 64 * 1024
#: A batch at least this big is handed to the runtime as the bytearray it was encoded into,
#: not copied to bytes: a copy would hold a big message (a 10 MiB update) twice at the peak.
HAND_OVER_BYTES = 1024 * 1024
#: What :meth:`Scheduler.notify` returns: nothing to do (the batch already waits for a flush),
#: flush within the runtime's small bound (the first bytes of a batch), flush now.
FLUSH_LATER, FLUSH_SOON, FLUSH_NOW = 0, 1, 2


class _Mark:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: The lane key of the gate (connection-wide order; in "session" ordering, session-less items).
GATE: Any = _Mark("GATE")
#: Queued behind everything read before the end of input: the drainer reaching it means
#: everything received was handled (then the runtime runs its close callbacks).
EOF: Any = _Mark("EOF")
#: Queued when a graceful close begins: everything read before it was handled.
DRAIN: Any = _Mark("DRAIN")
# The key of an answer that is completed at once (the deadlock rule).
_NOW: Any = _Mark("NOW")


class _Lane(deque[Any]):
    """One session's queued items, oldest first; ``out``: how many its drainer took last."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        super().__init__()
        self.out = 0


class Routed(msgspec.Struct):
    """The rare outcomes of one :meth:`Scheduler.route` call (``Scheduler.routed``; None when
    there were none), for the runtime to act on outside any lock, before the ``now`` items.

    ``flush``: answers were decided (refusals, -32800s): write :meth:`Scheduler.data_to_send`.
    ``cancelled``: inbound calls ``$/cancel_request`` named (answered already): cancel their
    handlers. ``hook``: run it, then route the rest of the read from ``resume``: a Start whose
    arrival hook runs now, with the decoded params as the Start's last member (``placed``:
    nothing is ahead of it, start it once its hook ran, unless the hook raised: then, and
    when not ``placed``, report with :meth:`Scheduler.arrived`), or a
    :class:`~acp.rpc.Decoded` notification registered ``immediate`` (call its handler).
    """

    flush: bool = False
    cancelled: list[InboundRequest] = []  # (msgspec gives each instance its own list)
    hook: Any = None
    resume: int = 0
    placed: bool = False


class Scheduler:
    """The ordering, flushing, timing and closing rules of one connection (module docstring).

    ``make_call(id, method)`` builds the runtime's :class:`~acp.rpc.InboundRequest` subclass
    for each inbound request; ``max_line_bytes`` caps one inbound line (longer ones are
    discarded and reported, see :class:`~acp.rpc.LineFramer`).
    """

    def __init__(
        self,
        make_call: Any = InboundRequest,
        *,
        name: str = "acp",
        ordering: Ordering = "connection",
        max_queued: int | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        if ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {ORDERINGS}, not {ordering!r}")
        self.name = name
        # Bytes in, whole lines out: the reader's (decode_read, frame).
        self.framer = LineFramer(max_line_bytes)
        # The message-level state: ids, pending calls, inbound requests, answer-once.
        self.endpoint = Endpoint(make_call, name)
        self.ordering: Ordering = ordering
        self.by_session = ordering == "session"
        # Items waiting their turn: the gate, and one lane per session with work (by session).
        self.gate: deque[tuple[Any, Any]] = deque()
        self.gate_busy = False  # a drainer owns the gate
        self.lanes: dict[str, _Lane] = {}  # a lane exists while a drainer owns it
        # Weight of the gate's items handed to its drainer and not yet confirmed handled.
        self._gate_out = 0
        # Lanes whose drainer the runtime must start (pop_woken).
        self.woken: list[Any] = []
        # The rare outcomes of the last route() (None: there were none).
        self.routed: Routed | None = None
        # Backpressure: items queued and not yet handled; reading stops while paused.
        self.queued = 0
        self.max_queued = MAX_QUEUED_MESSAGES if max_queued is None else max_queued
        self.paused = False
        # Calls made while handling an ordered notification, still waiting (the deadlock rule).
        self.serial_waiting = 0
        # Batched outbound bytes (notifications, decided answers), oldest first.
        self._wbuf = bytearray()
        # Deadlines the scheduler tracks, by duration: one duration's calls expire in the order
        # they were made, so the next deadline is the first entry of one of these dicts.
        self._deadlines: dict[float, dict[int, tuple[float, Pending]]] = {}
        self.bad_input = BadInputLog(name)
        self._fallback_handler: Handler | None = None

    # ------------------------------------------------------------------ registration

    def on_request(self, method: str, fn: Any, params_type: Any = None, on_arrival: Any = None) -> Handler:
        """Register a request method (before the runtime starts)."""
        return self.endpoint.on_request(method, fn, params_type, on_arrival)

    def on_notification(self, method: str, fn: Any, params_type: Any = None, immediate: bool = False) -> Handler:
        """Register a notification method (before the runtime starts)."""
        return self.endpoint.on_notification(method, fn, params_type, immediate)

    def on_unknown_request(self, fn: Any) -> None:
        """``fn(method, params, call)`` answers requests nobody registered."""
        self.endpoint.fallback_request = fn

    def on_unknown_notification(self, fn: Any) -> Handler:
        """``fn(method, params)`` handles notifications nobody registered."""
        self.endpoint.fallback_notification = fn
        handler = self._fallback_handler = Handler(fn, None, notification=True)
        return handler

    # ------------------------------------------------------------------ state

    @property
    def is_closed(self) -> bool:
        """True once the input ended or the connection closed."""
        ep = self.endpoint
        return ep.eof or ep.closed

    def pop_woken(self) -> list[Any]:
        """The lanes whose drainer the runtime must start now (GATE or a session key); look at
        :attr:`woken` first (usually empty: no call)."""
        woken = self.woken
        self.woken = []
        return woken

    # ------------------------------------------------------------------ inbound

    def decode_read(self, data: bytes) -> list[Any]:
        """The bytes of one read (b"": the input ended), framed and decoded into what
        :meth:`route` takes. The reader's, one read at a time (the framer's state is its
        own); no other state but the handler table (fixed once the runtime started), so it
        runs outside the owner's lock. A read of streamed updates and nothing else becomes one
        :class:`Updates`."""
        end = len(data) - 1
        if end < self.framer.whole_max and data.find(b"\n") == end and data.startswith(b"{"):
            # Exactly one whole line and nothing held: a lone request or answer, most reads of
            # a round trip. JSON allows the trailing newline (and a \r before it): the line is
            # decoded as it is, with no framing.
            one_pass = self.endpoint.one_pass
            if one_pass is None or not data.startswith(one_pass.prefix):
                msg = decode_line(data)  # (never a batch: it starts with "{")
                if type(msg) is Notification:
                    return [self._decode_notification(msg, self.endpoint.handlers)]
                return [msg]
        return self.decode_lines(self.frame(data))

    def frame(self, data: bytes) -> list[Any]:
        """The lines one read completes (b"": the input ended), for a runtime that shows them
        (a wire tap) before :meth:`decode_lines`. The reader's, like :meth:`decode_read`."""
        return self.framer.feed(data) if data else self.framer.end()

    def decode_lines(self, lines: list[Any]) -> list[Any]:
        """Decode the lines of one read (:meth:`frame`) into what :meth:`route` takes. Pure."""
        ep = self.endpoint
        one_pass = ep.one_pass
        prefix = None
        if one_pass is not None:
            updates = one_pass.decode_read(lines)
            if updates is not MISS:
                return [Updates(one_pass.handler, one_pass.method, updates)]
            prefix = one_pass.prefix
        handlers = ep.handlers
        out: list[Any] = []
        for line in lines:
            if type(line) is not bytes:
                out.append(line)  # LineTooLong: logged in its place by route
                continue
            if prefix is not None and line.startswith(prefix):
                assert one_pass is not None
                params = one_pass.decode(line)
                if params is not MISS:
                    out.append(Decoded(one_pass.handler, params, one_pass.method))
                    continue
            msg = decode_line(line)
            if type(msg) is Notification:
                out.append(self._decode_notification(msg, handlers))
            elif type(msg) is list:
                out += [self._decode_notification(m, handlers) if type(m) is Notification else m for m in msg]
            else:
                out.append(msg)
        return out

    def _decode_notification(self, msg: Notification, handlers: dict[str, Handler]) -> Any:
        """A Decoded, or the raw Notification for route to act on (``$/cancel_request``,
        params that did not decode, nobody to handle it)."""
        handler = handlers.get(msg.method)
        try:
            if handler is not None and handler.notification:
                return Decoded(handler, handler.decode(msg.params), msg.method)
            fallback = self._fallback_handler
            if fallback is not None and msg.method != CANCEL_REQUEST:
                return Decoded(fallback, fallback.decode(msg.params), msg.method, True)
        except Exception:  # a ValidationError, invalid UTF-8 ...: route says why
            pass
        return msg

    def route(self, msgs: list[Any], i: int = 0) -> list[Any] | None:
        """Place the messages of one read from index ``i`` on. Returns what to act on now,
        nothing being queued ahead of it (None: nothing): calls to complete (a
        :class:`~acp.rpc.Pending`, outcome set) and requests to start (a Start). The rare
        outcomes are in :attr:`routed` (None when there were none), the lanes to start a
        drainer for in :attr:`woken`; both stay valid until the next ``route``."""
        self.routed = None
        now: list[Any] | None = None
        ep = self.endpoint
        by_session = self.by_session
        n = len(msgs)
        while i < n:
            msg = msgs[i]
            i += 1
            cls = type(msg)
            if cls is Response or cls is ErrorResponse:
                msg_id = msg.id
                pending = ep.pending.get(msg_id) if type(msg_id) is int else None
                if pending is None:
                    _log.debug("%s: dropped an answer to unknown or abandoned request %r", self.name, msg_id)
                elif (
                    # _admit's answer for one order with nothing queued, inlined: most answers
                    (not by_session and not self.gate and not self.gate_busy)
                    or self._admit(_NOW if pending.serial else pending.session if by_session else None, msg, True)
                ):
                    if cls is Response and not pending.serial and pending.timeout is None:
                        del ep.pending[msg_id]  # _complete's common case, inlined
                        pending.raw = msg.result
                    else:
                        self._complete(pending, msg)
                    if now is None:
                        now = [pending]
                    else:
                        now.append(pending)
                else:
                    pending.answered = True  # a graceful close still delivers it
            elif cls is Updates:
                if by_session:
                    handler, method, admit = msg.handler, msg.method, self._admit
                    for params in msg:  # (one bound method for the whole read of updates)
                        admit(session_of_params(params), Decoded(handler, params, method), False)
                else:
                    self._admit(None, msg, False, len(msg))
            elif cls is Decoded:
                if msg.handler.immediate:
                    routed = self._routed()
                    routed.hook = msg
                    routed.resume = i
                    return now
                self._admit(session_of_params(msg.params) if by_session and not msg.fallback else None, msg, False)
            elif cls is Request:
                start = ep.receive_request(msg)
                if isinstance(start, bytes):  # refused
                    self._decided(start)
                    continue
                handler = start[1]
                if handler is not None and handler.on_arrival is not None and not handler.notification:
                    try:
                        params = handler.decode(start[2])
                    except Exception:  # the rare path says which error it is
                        try:
                            ep.decode_arrival(start)
                        except RequestError as exc:
                            self._decided(self._hook_failed(start, exc))
                        continue
                    # Nothing ahead: it is placed now, to start once its hook ran (nothing is
                    # routed meanwhile, so nothing can get ahead of it). Else arrived() places it.
                    routed = self._routed()
                    routed.hook = (start[0], handler, start[2], params)
                    routed.resume = i
                    routed.placed = self._free(session_id_of(start[2]) if by_session else None)
                    return now
                if (not by_session and not self.gate and not self.gate_busy) or self._admit(
                    session_id_of(start[2]) if by_session else None, start, True
                ):  # (_admit's answer for one order with nothing queued, inlined)
                    if now is None:
                        now = [start]
                    else:
                        now.append(start)
            elif cls is Notification:
                self._raw_notification(msg)
            elif cls is Invalid:
                self.bad_input.report("invalid message: %s", msg.reason)
                failed = ep.receive_invalid(msg)
                if isinstance(failed, bytes):
                    self._decided(failed)
                elif failed is not None:  # a malformed answer: its caller fails, in order
                    msgs = [*msgs[:i], failed, *msgs[i:]]
                    n += 1
            else:
                assert cls is LineTooLong
                self.bad_input.report("discarded a line of %d bytes (over the limit)", msg.size)
        return now

    def arrived(self, start: Start, refused: BaseException | None) -> bool:
        """The runtime ran the arrival hook of ``start`` (the :attr:`Routed.hook` of the last
        ``route``) and ``Routed.placed`` was False, or the hook raised ``refused`` (then its
        answer waits in :meth:`data_to_send`). True: start it now, nothing being queued ahead;
        False: it is queued (or refused). Then ``route`` the rest of the read from
        ``Routed.resume``."""
        if refused is not None:
            self._buffer(self._hook_failed(start, refused))
            return False
        return self._admit(session_id_of(start[2]) if self.by_session else None, start, True)

    def _free(self, key: Any) -> bool:
        """Nothing of ``key``'s order is queued ahead (what _admit says of a quick item)."""
        if self.gate or self.gate_busy:
            return False
        return not self.lanes if key is None else key not in self.lanes

    def _routed(self) -> Routed:
        routed = self.routed
        if routed is None:
            routed = self.routed = Routed()
        return routed

    def _decided(self, line: bytes) -> None:
        """An answer decided while routing (a refusal, a -32800): batched, flushed at once."""
        self._wbuf += line
        self._routed().flush = True

    def _raw_notification(self, msg: Notification) -> None:
        """A notification decode_lines left raw: ``$/cancel_request``, bad params, or nobody's."""
        if msg.method == CANCEL_REQUEST:
            found = self.endpoint.receive_cancel(msg)
            if found is not None:
                self._routed().cancelled.append(found[0])
                self._decided(found[1])
            return
        handler = self.endpoint.handlers.get(msg.method)
        if handler is None or not handler.notification:
            if self._fallback_handler is None:
                _log.debug("%s: ignored unknown notification %s", self.name, msg.method)
                return
            handler = self._fallback_handler
        try:
            handler.decode(msg.params)
        except Exception as exc:  # what decoding met: say it
            self.bad_input.report("%s notification with invalid params: %s", msg.method, exc)

    def _admit(self, key: Any, item: Any, quick: bool, weight: int = 1) -> bool:
        """Queue ``item`` of ``key``'s order, or say (True) that nothing is ahead of it and a
        ``quick`` item (an answer, a request to start) may be acted on now. A lane (or the
        gate) that gets work with nobody draining it is added to the woken lanes."""
        if key is _NOW:
            return True
        gate = self.gate
        if gate or self.gate_busy:
            # A session-less item waits or runs: everything read after it waits too.
            gate.append((key, item))
        elif key is None:
            if quick and not self.lanes:
                return True
            gate.append((None, item))
            if not self.lanes:  # else the last lane to finish wakes the gate
                self.gate_busy = True
                self.woken.append(GATE)
        else:
            lane = self.lanes.get(key)
            if lane is None:
                if quick:
                    return True
                lane = self.lanes[key] = _Lane()
                self.woken.append(key)
            lane.append(item)
        queued = self.queued = self.queued + weight
        if queued >= self.max_queued and not self.serial_waiting:
            self.paused = True
        return False

    # ------------------------------------------------------------------ draining

    def take(self, key: Any) -> list[Any] | None:
        """The drainer of lane ``key`` (GATE or a session) handled what it took before: the
        next items of that lane, in order, or None when the lane is idle (the drainer stops;
        the scheduler wakes a new one when work comes)."""
        if key is GATE:
            done = self._gate_out
            self._gate_out = 0
            lane = None
        else:
            lane = self.lanes.get(key)
            done = 0 if lane is None else lane.out
        if done:
            queued = self.queued = self.queued - done
            if self.paused and queued < self.max_queued // 2:
                self.paused = False
        if self.endpoint.closed:
            return None
        if lane is None:
            return self._take_gate() if key is GATE else None
        if lane:
            items = list(lane)
            lane.clear()
            lane.out = len(items)
            return items
        del self.lanes[key]
        if not self.lanes and self.gate and not self.gate_busy:
            self.gate_busy = True  # the last lane to finish hands the gate on
            self.woken.append(GATE)
        return None

    def _take_gate(self) -> list[Any] | None:
        gate = self.gate
        lanes = self.lanes
        batch: list[Any] = []
        weight = 0
        while gate:
            key, item = gate[0]
            if key is None:
                if lanes:
                    break  # waits until every lane is idle
                gate.popleft()
                batch.append(item)
                weight += len(item) if type(item) is Updates else 1
            else:
                if batch:
                    break  # behind a session-less item not handled yet
                gate.popleft()  # still counted as queued, now in its lane
                lane = lanes.get(key)
                if lane is None:
                    lane = lanes[key] = _Lane()
                    self.woken.append(key)
                lane.append(item)
        if batch:
            self._gate_out = weight
            return batch
        self.gate_busy = False  # the last lane to finish wakes the gate again
        return None

    def deliver(self, msg: Response | ErrorResponse) -> Pending | None:
        """A drainer reached a queued answer: the call to complete (outcome set), or None
        when it was abandoned meanwhile (timeout, cancel, close)."""
        pending = self.endpoint.pending.get(msg.id) if type(msg.id) is int else None
        if pending is None:
            _log.debug("%s: dropped an answer to abandoned request %r", self.name, msg.id)
            return None
        self._complete(pending, msg)
        return pending

    @staticmethod
    def startable(start: Start) -> bool:
        """False for a queued request answered meanwhile (``$/cancel_request``, close). Pure."""
        return not start[0]._answered

    def _complete(self, pending: Pending, msg: Response | ErrorResponse) -> None:
        del self.endpoint.pending[pending.id]
        if type(msg) is Response:
            pending.raw = msg.result
        else:
            pending.error = Endpoint.response_error(msg)  # type: ignore[arg-type]
        if pending.serial or pending.timeout is not None:
            self._settled(pending)

    def _settled(self, pending: Pending) -> None:
        """``pending`` left the table: it no longer counts as waiting or timed."""
        if pending.serial:
            self.serial_waiting -= 1
        if pending.timeout is not None:
            timed = self._deadlines.get(pending.timeout)
            if timed is not None:
                timed.pop(pending.id, None)

    # ------------------------------------------------------------------ outbound

    def send_request(self, method: str, params: Any, result_type: Any, waiter: Any, serial: bool = False,
                     timeout: float | None = None, now: float = 0.0) -> tuple[Pending, bytes | bytearray]:
        """Register a call and return it with the bytes to write now (every batched
        notification, then its line). ``serial``: made while handling an ordered notification
        (the deadlock rule; reading resumes if it was paused). ``timeout``: the scheduler
        tracks the deadline ``now + timeout`` (see :meth:`expire`). Raises
        ConnectionClosedError once closed, and whatever encoding the params raised."""
        pending, line = self.endpoint.register(method, params, result_type, waiter, serial)
        if self.by_session:
            # Before the line goes out: the answer is ordered with this session's messages.
            pending.session = session_of_params(params)
        if serial:
            self.serial_waiting += 1
            self.paused = False  # only the reader can deliver its answer
        if timeout is not None:
            timed = self._deadlines.get(timeout)
            if timed is None:
                timed = self._deadlines[timeout] = {}
            timed[pending.id] = (now + timeout, pending)
            pending.timeout = timeout
        if self._wbuf:
            self._wbuf += line
            return pending, self._take_batch()
        return pending, line

    def notify(self, method: str, params: Any) -> int:
        """Batch a notification; returns when it must be written: FLUSH_LATER, FLUSH_SOON or
        FLUSH_NOW (then :meth:`data_to_send`). ConnectionClosedError once closed."""
        ep = self.endpoint
        if ep.eof or ep.closed:
            raise ep.closed_error()
        buf = self._wbuf
        first = not buf
        ep.encoder.notification_into(buf, method, params)  # straight into the batch
        if len(buf) >= FLUSH_BYTES:
            return FLUSH_NOW
        return FLUSH_SOON if first else FLUSH_LATER

    def data_to_send(self) -> bytes | bytearray:
        """Every batched byte, oldest first (b"" when none); empties the batch."""
        return self._take_batch() if self._wbuf else b""

    def _take_batch(self) -> bytes | bytearray:
        """The batch, emptied: as bytes, or from HAND_OVER_BYTES on as the bytearray itself
        (the runtime owns it then; a new one takes its place)."""
        buf = self._wbuf
        if len(buf) >= HAND_OVER_BYTES:
            self._wbuf = bytearray()
            return buf
        data = bytes(buf)
        buf.clear()
        return data

    def _buffer(self, line: bytes) -> None:
        self._wbuf += line

    def _with_batch(self, line: bytes | None) -> bytes | bytearray | None:
        """``line`` after every batched notification, as the bytes to write now."""
        if line is None or not self._wbuf:
            return line
        self._wbuf += line
        return self._take_batch()

    def answer(self, call: InboundRequest, result: Any) -> bytes | bytearray | None:
        """Answer ``call`` with ``result``: the bytes to write now, or None when it was
        answered already (the result is dropped, logged at DEBUG)."""
        line = self.endpoint.answer(call, result)
        if self._wbuf and line is not None:  # _with_batch, inlined: once per request
            self._wbuf += line
            return self._take_batch()
        return line

    def answer_error(self, call: InboundRequest, code: int, message: str | None = None, data: Any = None) -> bytes | bytearray | None:
        """Answer ``call`` with an error: the bytes to write now, or None (answered already)."""
        return self._with_batch(self.endpoint.answer_error(call, code, message, data))

    def request_failed(self, call: InboundRequest, exc: BaseException) -> bytes | bytearray | None:
        """A request handler raised ``exc``: the answer (bytes to write now) the policy gives
        it, or None (answered already). A RequestError answers with its own code; anything
        else, ``SystemExit`` and ``KeyboardInterrupt`` included, is logged here with its
        traceback and answered -32603 "Internal error" (nothing of it goes on the wire)."""
        if not isinstance(exc, RequestError):
            if isinstance(exc, Exception):
                _log.error("%s: %s handler failed", self.name, call.method, exc_info=exc)
            else:
                # sys.exit() (or a KeyboardInterrupt raised by hand) in a handler would end only
                # the thread or task running it and leave the request unanswered.
                _log.error("%s: %s handler raised %s; answered as an internal error%s", self.name, call.method,
                           type(exc).__name__,
                           " (sys.exit() in a handler does not end the process)" if isinstance(exc, SystemExit) else "")
        return self._with_batch(self.endpoint.answer_exception(call, exc))

    def request_cancelled(self, call: InboundRequest, answered_elsewhere: bool) -> bytes | bytearray | None:
        """A runtime cancelled a request handler (task cancellation). ``$/cancel_request`` and
        close answered it already; ``answered_elsewhere``: whoever cancelled it through the
        call answers it. Anyone else cancelled it: the peer still gets -32800 (bytes to write
        now; None when nothing is owed)."""
        if answered_elsewhere or self.endpoint.closed:
            return None
        return self._with_batch(self.endpoint.answer_error(call, REQUEST_CANCELLED, "Request cancelled"))

    def notification_failed(self, method: str, exc: BaseException) -> None:
        """A notification handler raised ``exc``: logged (there is nobody to answer), and the
        order goes on. ``SystemExit`` and ``KeyboardInterrupt`` too."""
        if isinstance(exc, Exception):
            _log.error("%s: %s notification handler failed", self.name, method, exc_info=exc)
        else:
            _log.error("%s: %s notification handler raised %s; ignored%s", self.name, method, type(exc).__name__,
                       " (sys.exit() in a handler does not end the process)" if isinstance(exc, SystemExit) else "")

    def _hook_failed(self, start: Start, exc: BaseException) -> bytes:
        """An arrival hook refused its request (or failed): the error line."""
        call = start[0]
        if not isinstance(exc, RequestError):
            _log.error("%s: %s arrival hook failed", self.name, call.method, exc_info=exc)
        line = self.endpoint.answer_exception(call, exc)
        return line or b""

    # ------------------------------------------------------------------ giving up on calls

    def abandon(self, pending: Pending, error: BaseException) -> bytes | bytearray | None:
        """Give up on a call (its timeout ran out, it was cancelled): ``error`` becomes its
        outcome and the ``$/cancel_request`` goes out (the bytes to write now, b"" once
        closed). None when it was completed already (whoever took it completes it)."""
        ep = self.endpoint
        if ep.pending.pop(pending.id, None) is None:
            return None
        pending.error = error
        self._settled(pending)
        line = ep.cancel_line(pending.id)
        return self._with_batch(line) if line is not None else b""

    def cancelled_error(self, pending: Pending) -> RequestCancelledError:
        """The error of a call its caller cancelled."""
        return RequestCancelledError(f"{pending.method}: cancelled")

    def timeout_error(self, pending: Pending, timeout: float | None) -> RequestTimeoutError:
        """The error of a call whose time ran out."""
        return RequestTimeoutError(f"{pending.method}: no answer within {timeout} s")

    def next_deadline(self) -> float | None:
        """The earliest deadline the scheduler tracks (the runtime's clock), or None."""
        earliest = None
        for timed in self._deadlines.values():
            for deadline, _ in timed.values():
                if earliest is None or deadline < earliest:
                    earliest = deadline
                break  # a duration's calls are in deadline order
        return earliest

    def expire(self, now: float) -> list[Pending]:
        """The runtime's clock reached ``now``: every tracked call due by then is abandoned
        (its outcome a RequestTimeoutError, its ``$/cancel_request`` batched: write
        :meth:`data_to_send`). Returns them, for the runtime to wake their callers."""
        expired: list[Pending] = []
        for timeout, timed in list(self._deadlines.items()):
            due = []
            for deadline, pending in timed.values():
                if deadline > now:
                    break
                due.append(pending)
            for pending in due:
                line = self.abandon(pending, self.timeout_error(pending, timeout))
                if line is not None:
                    self._wbuf += line
                    expired.append(pending)
            if not timed:
                del self._deadlines[timeout]
        return expired

    # ------------------------------------------------------------------ the end

    def receive_eof(self) -> tuple[list[Pending], list[InboundRequest]]:
        """The input ended. Returns the calls that fail now (outcome set: the peer is gone)
        and the inbound requests whose handlers are told so (they stay answerable: the peer
        may have half-closed). :data:`EOF` is queued behind everything read before it.

        The end of input fails a call as an error answer would, in order: a call fails now
        only if nothing read before the end still waits to be handled; else it fails when a
        drainer reaches :data:`EOF` (:meth:`eof_reached`), so the updates an agent sent just
        before it crashed reach their handler before its caller sees ConnectionClosedError.
        A call made while handling an ordered notification fails now (the deadlock rule)."""
        ep = self.endpoint
        ep.eof = True
        self.bad_input.summary()
        if ep.closed:
            return self._fail_pending(), list(ep.inbound.values())
        failed = self._fail_pending(only_serial=not self._free(None))
        self._admit(None, EOF, False)
        return failed, list(ep.inbound.values())

    def eof_reached(self) -> list[Pending]:
        """A drainer reached :data:`EOF`: everything read before the end of input was handled.
        Returns the calls that fail now (outcome set)."""
        return self._fail_pending()

    def start_closing(self) -> tuple[list[Pending], list[InboundRequest]]:
        """A graceful close begins: new inbound requests are refused from now on; every call
        pending now fails (outcome set) unless its answer arrived already (it is delivered in
        its turn); :data:`DRAIN` is queued behind everything read so far. Returns those calls
        and the inbound requests whose handlers are told to finish (they stay answerable).
        Calls handlers make from now on still get their answers."""
        ep = self.endpoint
        ep.closing = True
        failed = self._fail_pending(ConnectionClosedError("connection closed"), keep_answered=True)
        if not ep.eof and not ep.closed:
            self._admit(None, DRAIN, False)
        return failed, list(ep.inbound.values())

    def close(self) -> tuple[list[Pending], list[InboundRequest]]:
        """Close: nothing more is received or answered. Returns the calls that fail (outcome
        set) and the inbound requests taken as answered (cancel their handlers). What was
        queued is dropped; batched bytes may still be written (:meth:`data_to_send`)."""
        ep = self.endpoint
        ep.closed = True
        failed = self._fail_pending()
        inbound = ep.claim_all()
        self.gate.clear()
        self.lanes.clear()
        self.gate_busy = False
        self._gate_out = 0
        self.woken = []
        self.queued = 0
        self.paused = False
        self.bad_input.summary()
        return failed, inbound

    def _fail_pending(
        self, error: BaseException | None = None, keep_answered: bool = False, only_serial: bool = False
    ) -> list[Pending]:
        ep = self.endpoint
        if not ep.pending:
            return []
        failed = ep.fail_all(error or ep.closed_error(), keep_answered, only_serial)
        for pending in failed:
            self._settled(pending)
        return failed

