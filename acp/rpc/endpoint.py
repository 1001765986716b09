"""The message-level state of one connection: ids, calls waiting for an answer, inbound
requests owed exactly one answer, and the lines that say so. No I/O, no ordering.

An :class:`Endpoint` allocates request ids, records outbound calls (:class:`Pending`) and the
inbound requests still owed an answer (:class:`InboundRequest`), claims each inbound request
for exactly one answer, refuses what must be refused (unknown method, duplicate id, closing),
answers ``$/cancel_request`` and bad input, and encodes every line of it. *When* anything
happens (routing, ordering, flushing, timeouts, close) is the :class:`~acp.rpc.Scheduler`'s,
which owns one Endpoint; runtimes talk to the Scheduler.

Concurrency: an Endpoint has one owner at a time (the Scheduler's; see its module docstring).
Pure functions, safe anywhere: :meth:`Endpoint.decode_result`, :meth:`Endpoint.outcome`,
:meth:`Endpoint.response_error`, :meth:`Endpoint.request_params` and the handler table once the
runtime started.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any, Union

import msgspec

from ..errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    ConnectionClosedError,
    RequestError,
)
from .handlers import (
    _RESULT_DECODERS,
    ANY_DECODER,
    HOT_NOTIFICATION,
    Handler,
    OnePass,
    result_decoder,
)
from .messages import (
    Encoder,
    ErrorObject,
    ErrorResponse,
    Invalid,
    Notification,
    Request,
    RequestId,
    Response,
)

__all__ = [
    "CANCEL_REQUEST",
    "UNDECODED",
    "Endpoint",
    "InboundRequest",
    "Pending",
    "ResponseLike",
    "Start",
]

_log = logging.getLogger("acp.rpc")

CANCEL_REQUEST = "$/cancel_request"

_INVALID_MESSAGES = {PARSE_ERROR: "Parse error", INVALID_REQUEST: "Invalid request"}

ResponseLike = Union[Response, ErrorResponse]


class Pending(msgspec.Struct, eq=False):
    """An outbound request waiting for its answer.

    ``waiter`` belongs to the runtime (a pre-acquired lock, a Future, an asyncio Future): the
    core only carries it. ``serial`` marks a call made while handling an ordered notification
    (the deadlock rule: its answer is completed at once, not queued behind that handler).
    ``session`` is the session id of its params when ordering by session (its answer is
    ordered with that session's messages). ``raw``/``error`` hold the outcome once the core
    took the call (an answer, a failure); ``timeout`` is the duration the scheduler tracks a
    deadline for (None: the runtime times the call itself, or it has none); ``answered``: its
    answer arrived and waits in the queue for its turn. A Struct compared by identity (one is
    made per call, in C).
    """

    id: int
    method: str
    result_type: Any
    waiter: Any
    serial: bool
    session: Union[str, None] = None
    raw: Union[msgspec.Raw, None] = None
    error: Union[BaseException, None] = None
    timeout: Union[float, None] = None
    answered: bool = False

    def __repr__(self) -> str:  # not the waiter's nor the answer's
        return f"<Pending {self.id} {self.method}>"


class InboundRequest:
    """One inbound request still owed exactly one answer: its id and method.

    Runtimes subclass it to add how a handler learns it was cancelled (an Event, a task).
    """

    __slots__ = ("id", "method", "attachment", "_answered", "__weakref__")

    def __init__(self, call_id: RequestId, method: str) -> None:
        self.id = call_id
        self.method = method
        self.attachment: Any = None
        """Free for the facade: e.g. what an arrival hook set up for the handler."""
        self._answered = False

    @property
    def is_answered(self) -> bool:
        """True once the request was answered, or can no longer be: the core answered a
        ``$/cancel_request`` for it, or the connection closed."""
        return self._answered


# A registered inbound request ready to run: (call, handler or None for the fallback, raw
# params, decoded params or UNDECODED).
Start = tuple[InboundRequest, Union[Handler, None], msgspec.Raw, Any]
#: The 4th member of a Start until the params are decoded (an arrival hook decodes early).
UNDECODED: Any = object()


class Endpoint:
    """The JSON-RPC message state of one connection, both roles. No I/O (see the module
    docstring)."""

    def __init__(self, make_call: Callable[[RequestId, str], InboundRequest] = InboundRequest, name: str = "acp") -> None:
        # Labels log lines.
        self.name = name
        # The one-pass decode of HOT_NOTIFICATION's lines, while it has a typed handler.
        self.one_pass: OnePass | None = None
        # Builds the runtime's InboundRequest subclass for each inbound request.
        self._make_call = make_call
        self.encoder = Encoder()
        # method -> Handler, and the fallbacks for methods nobody registered.
        self.handlers: dict[str, Handler] = {}
        self.fallback_request: Callable[[str, Any, Any], Any] | None = None
        self.fallback_notification: Callable[[str, Any], Any] | None = None
        # Outbound calls waiting for an answer, by id; whoever takes an entry completes it.
        self._ids = itertools.count(1)
        self.pending: dict[int, Pending] = {}
        # Inbound requests not yet answered, by id.
        self.inbound: dict[RequestId, InboundRequest] = {}
        # No more input (the peer is gone).
        self.eof = False
        # Graceful close started: new inbound requests are refused, answers still go out.
        self.closing = False
        # Closed: nothing is received, sent or answered any more.
        self.closed = False

    # ------------------------------------------------------------------ state

    @property
    def can_send(self) -> bool:
        """False once the input ended or the endpoint closed: new calls are refused."""
        return not (self.eof or self.closed)

    def closed_error(self) -> ConnectionClosedError:
        """The error a call fails with now that the connection is gone."""
        return ConnectionClosedError("connection closed by peer" if self.eof and not self.closed else "connection closed")

    # ------------------------------------------------------------------ registration

    def on_request(
        self,
        method: str,
        fn: Callable[..., Any],
        params_type: Any = None,
        on_arrival: Callable[[Any, Any], None] | None = None,
    ) -> Handler:
        """Register the handler record of a request method."""
        _check_method(method)
        handler = self.handlers[method] = Handler(fn, params_type, notification=False, on_arrival=on_arrival)
        if method == HOT_NOTIFICATION:
            self.one_pass = None
        return handler

    def on_notification(self, method: str, fn: Callable[..., Any], params_type: Any = None, immediate: bool = False) -> Handler:
        """Register the handler record of a notification method."""
        _check_method(method)
        handler = self.handlers[method] = Handler(fn, params_type, notification=True, immediate=immediate)
        if method == HOT_NOTIFICATION:
            self.one_pass = OnePass(method, handler) if params_type is not None and not immediate else None
        return handler

    # ------------------------------------------------------------------ outbound calls

    def register(self, method: str, params: Any, result_type: Any, waiter: Any, serial: bool = False) -> tuple[Pending, bytes]:
        """Allocate an id, record a call waiting for its answer and return it with its line.

        Raises :class:`ConnectionClosedError` once the input ended or the endpoint closed, and
        whatever encoding ``params`` raised (then nothing stays pending).
        """
        if self.eof or self.closed:
            raise self.closed_error()
        msg_id = next(self._ids)
        line = self.encoder.request(msg_id, method, params)  # first: a failure leaves no call
        pending = self.pending[msg_id] = Pending(msg_id, method, result_type, waiter, serial)
        return pending, line

    def take(self, msg_id: Any) -> Pending | None:
        """Remove and return the pending call an answer names: the caller completes it. None
        when it was abandoned, already taken or never ours (logged at DEBUG)."""
        pending = self.pending.pop(msg_id, None) if type(msg_id) is int else None
        if pending is None:
            _log.debug("%s: dropped an answer to unknown or abandoned request %r", self.name, msg_id)
        return pending

    def cancel_line(self, msg_id: int) -> bytes | None:
        """The ``$/cancel_request`` line for an abandoned call (None once closed)."""
        if self.eof or self.closed:
            return None
        return self.encoder.notification(CANCEL_REQUEST, {"requestId": msg_id})

    def fail_all(self, error: BaseException, keep_answered: bool = False, only_serial: bool = False) -> list[Pending]:
        """Remove every pending call (close, end of input), each with ``error`` as its outcome;
        ``keep_answered``: but those whose answer arrived already (queued, to be delivered);
        ``only_serial``: only the calls made while handling an ordered notification."""
        if keep_answered or only_serial:
            taken = [p for p in self.pending.values()
                     if not (keep_answered and p.answered) and (p.serial or not only_serial)]
            for pending in taken:
                del self.pending[pending.id]
        else:
            taken = list(self.pending.values())
            self.pending.clear()
        for pending in taken:
            pending.error = error
        return taken

    @staticmethod
    def outcome(pending: Pending) -> Any:
        """What a completed call returns: its decoded result, or its error raised."""
        if pending.error is not None:
            raise pending.error
        assert pending.raw is not None
        return Endpoint.decode_result(pending, pending.raw)

    @staticmethod
    def decode_result(pending: Pending, raw: msgspec.Raw) -> Any:
        """Decode a result as the call's ``result_type``; a malformed one raises -32603."""
        result_type = pending.result_type
        if result_type is None:
            return ANY_DECODER.decode(raw)
        decode = _RESULT_DECODERS.get(result_type)  # result_decoder's cache, read inline: hot
        try:
            return (decode or result_decoder(result_type))(raw)
        except msgspec.ValidationError as exc:
            raise RequestError(INTERNAL_ERROR, f"{pending.method}: malformed result: {exc}") from None

    @staticmethod
    def response_error(msg: ErrorResponse) -> RequestError:
        """The exception an error answer raises in its caller."""
        err = msg.error
        return RequestError(err.code, err.message, err.data)

    # ------------------------------------------------------------------ receiving

    def receive_request(self, msg: Request) -> Start | bytes:
        """Register an inbound request and return what the runtime needs to run it, or the
        error line that refuses it (closing, duplicate id, unknown method)."""
        if self.closing or self.closed:
            return self.error_line(msg.id, INTERNAL_ERROR, "Connection closing")
        if msg.id in self.inbound:
            return self.error_line(msg.id, INVALID_REQUEST, "Invalid request", {"reason": "duplicate request id"})
        handler = self.handlers.get(msg.method)
        if (handler is None or handler.notification) and self.fallback_request is None:
            return self.error_line(msg.id, METHOD_NOT_FOUND, "Method not found", {"method": msg.method})
        call = self._make_call(msg.id, msg.method)
        self.inbound[msg.id] = call
        return (call, handler, msg.params, UNDECODED)

    def receive_cancel(self, msg: Notification) -> tuple[InboundRequest, bytes] | None:
        """Act on a ``$/cancel_request``: the request it names is claimed and returned with
        its -32800 answer, for the runtime to cancel its handler. None when it names nothing
        still running, or is malformed (ignored, logged at DEBUG)."""
        try:
            params = ANY_DECODER.decode(msg.params) if msg.params else {}
            request_id = params["requestId"]
        except (msgspec.DecodeError, KeyError, TypeError, RecursionError):
            request_id = None
        if type(request_id) is not int and type(request_id) is not str:
            # Only an id can name a request (a list, say, is not even hashable).
            _log.debug("%s: malformed $/cancel_request ignored", self.name)
            return None
        call = self.inbound.get(request_id)
        if call is None or not self.claim(call):
            return None  # already answered, or never seen: nothing to do
        return call, self.error_line(call.id, REQUEST_CANCELLED, "Request cancelled")

    def receive_invalid(self, msg: Invalid) -> ErrorResponse | bytes | None:
        """What a line that is not a valid message gets. A malformed *answer* is never answered
        back (its id is ours: an error carrying it could complete an unrelated request of the
        peer); it gives an ErrorResponse to deliver like any answer, so the caller fails now
        instead of at a timeout that may be None (None when no call can be named). Anything
        else gets the error line that answers it."""
        if msg.response:
            if type(msg.id) is int:
                return ErrorResponse(msg.id, ErrorObject(INTERNAL_ERROR, f"malformed answer from the peer: {msg.reason}"))
            return None
        return self.error_line(msg.id, msg.code, _INVALID_MESSAGES.get(msg.code, "Invalid request"), {"reason": msg.reason})

    def decode_arrival(self, start: Start) -> Any:
        """Decode a request's params for its arrival hook; raises the RequestError that
        refuses it (-32602, or -32700 for bytes that are not JSON)."""
        handler = start[1]
        assert handler is not None
        try:
            return handler.decode(start[2])
        except msgspec.ValidationError as exc:
            raise RequestError(INVALID_PARAMS, f"Invalid params: {exc}") from None
        except (msgspec.DecodeError, RecursionError) as exc:  # e.g. invalid UTF-8 in params
            raise RequestError(PARSE_ERROR, "Parse error", {"reason": f"not valid JSON: {exc}"}) from None

    def request_params(self, start: Start) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """The function to call for a started request and its arguments: ``(fn, (params, call))``
        or the fallback's ``(fn, (method, params, call))``. Params that do not decode raise
        the RequestError to answer with (-32602, or -32700 for bytes that are not JSON)."""
        call, handler, raw, params = start
        if handler is None or handler.notification:
            fallback = self.fallback_request
            assert fallback is not None
            try:
                params = ANY_DECODER.decode(raw) if raw else None
            except (msgspec.DecodeError, RecursionError) as exc:  # invalid UTF-8...
                raise RequestError(PARSE_ERROR, "Parse error", {"reason": f"not valid JSON: {exc}"}) from None
            return fallback, (call.method, params, call)
        if params is UNDECODED:
            params = self.decode_arrival(start)
        return handler.fn, (params, call)

    # ------------------------------------------------------------------ answering

    def claim(self, call: InboundRequest) -> bool:
        """Take ``call`` as answered: True for exactly one caller, on every path (the handler's
        result, ``InboundCall.answer``, ``$/cancel_request``, close)."""
        if call._answered:
            return False
        call._answered = True
        self.inbound.pop(call.id, None)
        return True

    def answer(self, call: InboundRequest, result: Any) -> bytes | None:
        """Claim ``call`` and return its success answer; None (logged at DEBUG) when it was
        already answered. A result that cannot be encoded is answered -32603."""
        if not self.claim(call):
            _log.debug("%s: %s answered after it was cancelled or answered; dropped", self.name, call.method)
            return None
        try:
            return self.encoder.response(call.id, result)
        except Exception as exc:  # TypeError, EncodeError, RecursionError (nested too deeply)...
            _log.error("%s: %s returned a value that cannot be encoded: %r", self.name, call.method, exc)
            return self.encoder.error(call.id, INTERNAL_ERROR, "Internal error")

    def answer_error(self, call: InboundRequest, code: int, message: str | None = None, data: Any = None) -> bytes | None:
        """Claim ``call`` and return an error answer; None when it was already answered."""
        if not self.claim(call):
            return None
        error = RequestError(code, message, data)
        return self.error_line(call.id, error.code, error.message, error.data)

    def answer_exception(self, call: InboundRequest, exc: BaseException) -> bytes | None:
        """Claim ``call`` and answer the exception its handler raised: a RequestError as
        itself, anything else as -32603 "Internal error" (details stay in our log, never on
        the wire). None when it was already answered."""
        if isinstance(exc, RequestError):
            return self.answer_error(call, exc.code, exc.message, exc.data)
        return self.answer_error(call, INTERNAL_ERROR, "Internal error")

    def error_line(self, call_id: RequestId | None, code: int, message: str, data: Any = None) -> bytes:
        """An error answer (-32603 if ``data`` cannot be encoded)."""
        try:
            return self.encoder.error(call_id, code, message, data)
        except Exception as exc:  # a handler's RequestError with data that cannot be encoded
            _log.error("%s: an error answer cannot be encoded: %r; answering -32603", self.name, exc)
            return self.encoder.error(call_id, INTERNAL_ERROR, "Internal error")

    def claim_all(self) -> list[InboundRequest]:
        """Close: take every inbound request as answered (nothing more goes out for them) and
        return them, for the runtime to cancel their handlers."""
        return [call for call in list(self.inbound.values()) if self.claim(call)]


def _check_method(method: str) -> None:
    if method == CANCEL_REQUEST:
        # The core acts on it itself (answers -32800, cancels the handler), on every runtime.
        raise ValueError(f"{CANCEL_REQUEST} is handled by the connection itself; it takes no handler")
