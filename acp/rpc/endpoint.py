"""The JSON-RPC session core: the state and rules of one connection, with no I/O.

An :class:`Endpoint` knows the request ids, the outbound calls waiting for an answer, the
inbound requests still owed one, ``$/cancel_request`` in both directions, the answers bad input
gets and how params and results decode by method. It never reads, writes, sleeps, locks or
calls a handler: a runtime (``acp.connection`` with threads, ``acp.aio`` with tasks) feeds it
the messages it read and writes the lines it is given, the way python-websockets wraps its
sans-I/O ``protocol.py`` in ``sync/`` and ``asyncio/``.

The call protocol:

* Receiving: decode a line with :func:`~acp.rpc.decode_line`, then hand each message to the
  matching ``receive_*`` method. Afterwards call :meth:`Endpoint.data_to_send` and write what it
  returns: refusals (unknown method, duplicate id, closing) and the ``-32800`` answer to a
  ``$/cancel_request`` are decided while receiving and wait there. Optionally, a line that
  starts with ``Endpoint.one_pass.prefix`` may first be tried with ``one_pass.decode`` (the
  streamed updates' envelope and typed params in one decode; :data:`MISS`: use the general path),
  and a whole read's lines with ``one_pass.decode_read``.
* Sending: :meth:`~Endpoint.register` then :meth:`~Endpoint.request_line` for a request,
  :meth:`~Endpoint.notification_line`, :meth:`~Endpoint.answer` / :meth:`~Endpoint.answer_error`
  for an inbound request; each returns the bytes to write (``answer`` None when the request was
  already answered).
* Completing: :meth:`~Endpoint.take` the pending call an answer names (whoever takes an entry
  completes it), :meth:`~Endpoint.abandon` one (timeout, cancellation: it returns the
  ``$/cancel_request`` line), :meth:`~Endpoint.outcome` to decode what it got.

Thread contract (the threaded runtime calls it from several threads, without a lock of its own;
it relies on the GIL making each single dict/list operation atomic):

* One reader at a time: the ``receive_*`` methods, :meth:`~Endpoint.peek` and
  :meth:`~Endpoint.data_to_send` (the outbox has no other writer).
* Any thread: ``register``, ``take``, ``abandon``, ``fail_all``, ``claim``, ``answer``,
  ``answer_error``, ``answer_exception``, ``claim_all``, ``close``, ``start_closing``,
  ``request_params``, ``notification_params``, ``outcome`` and the ``*_line`` methods. Each
  decision is one atomic operation: ``pop`` on the pending table (whoever pops an entry
  completes it), ``next()`` on an ``itertools.count``, the ``list.pop`` of
  :meth:`~Endpoint.claim`'s one-shot token, ``list(dict.values())`` (one C-level copy).
  msgspec's ``encode`` builds a new buffer on every call. The state flags have one writer each;
  a stale read is covered by ``register``'s re-check and by the claims.
* Before the runtime starts: ``on_request``, ``on_notification`` and the fallbacks.

The asyncio runtime calls everything from its loop.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any, Literal, Union

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
from .messages import (
    Encoder,
    ErrorObject,
    ErrorResponse,
    Invalid,
    Notification,
    Request,
    RequestId,
    Response,
    payload_decoder,
)

__all__ = [
    "ANY_DECODER",
    "CANCEL_REQUEST",
    "ORDERINGS",
    "UNDECODED",
    "Endpoint",
    "HOT_NOTIFICATION",
    "MISS",
    "Handler",
    "InboundRequest",
    "OnePass",
    "Ordering",
    "Pending",
    "ResponseLike",
    "Start",
    "decoder_for",
]

_log = logging.getLogger("acp.rpc")

CANCEL_REQUEST = "$/cancel_request"

#: Decodes plain JSON values (for handlers registered without a type).
ANY_DECODER = msgspec.json.Decoder()

_DECODERS: dict[Any, Any] = {}
_RESULT_DECODERS: dict[Any, Callable[[msgspec.Raw], Any]] = {}  # payload_decoder per result type

_INVALID_MESSAGES = {PARSE_ERROR: "Parse error", INVALID_REQUEST: "Invalid request"}

ResponseLike = Union[Response, ErrorResponse]

#: The inbound ordering modes both runtimes offer (``ordering=`` of ``acp.Connection`` and
#: ``acp.aio.AsyncConnection``): one order connection-wide, or one per session (which is what
#: :attr:`Pending.session` is for).
ORDERINGS = ("connection", "session")
Ordering = Literal["connection", "session"]


def decoder_for(tp: Any) -> Any:
    """A decoder with ``.decode(raw)`` for a params/result type (None: plain JSON values),
    built once per type."""
    if tp is None:
        return ANY_DECODER
    decoder = _DECODERS.get(tp)
    if decoder is None:
        from .. import schema  # imported late: the core itself never needs the types

        decoder = _DECODERS[tp] = schema.decoder(tp)
    return decoder


class Handler:
    """What is registered for one method. The core decodes for it but never calls ``fn`` or
    ``on_arrival``: the runtime does (on a thread, or as a task)."""

    __slots__ = ("fn", "params_type", "decode", "notification", "immediate", "on_arrival")

    def __init__(
        self,
        fn: Callable[..., Any],
        params_type: Any,
        notification: bool,
        immediate: bool = False,
        on_arrival: Callable[[Any, Any], None] | None = None,
    ) -> None:
        self.fn = fn
        self.on_arrival = on_arrival
        self.params_type = params_type
        self.notification = notification
        self.immediate = immediate
        # Replaced by the real decode function on first use (decoders cost time to build).
        self.decode: Callable[[msgspec.Raw], Any] = self._first_decode

    def _first_decode(self, raw: msgspec.Raw) -> Any:
        decoder = decoder_for(self.params_type)
        if self.params_type is None:
            any_decode = decoder.decode
            self.decode = lambda raw: any_decode(raw) if raw else None
        else:
            self.decode = payload_decoder(decoder)
        return self.decode(raw)


#: The notification most lines of an ACP connection carry (the streamed updates): while it has
#: a typed handler, its lines are decoded in one pass (:class:`OnePass`).
HOT_NOTIFICATION = "session/update"

#: What :meth:`OnePass.decode` returns for a line it leaves to the general path.
MISS: Any = object()


class OnePass:
    """Decodes a line of one notification method, envelope and typed params in one msgspec
    call, instead of :func:`~acp.rpc.decode_line` and then the handler's params decode (about
    half the CPU of the two). Only an optimization: a line it is not sure of (another method, an
    ``id``, an unknown envelope member, params the native decode refuses, ...) gives
    :data:`MISS` and takes the general path, which answers or rebuilds it as usual.

    ``prefix`` is the cheap pre-check (``line.startswith(prefix)``, ~45 ns; a substring search
    costs twice that): the envelope as our encoder and the TypeScript SDK write it. A peer that
    orders or spaces its members otherwise only misses the shortcut.

    ``decode_lines(lines)`` is the same for every line of one read at once: the list of their
    params, or :data:`MISS` if any line is not sure (then decode them one by one). A stream's
    reads hold hundreds of updates and nothing else, and one comprehension over them costs far
    less than the per-line checks of a reader loop. Readers call it through :meth:`decode_read`.
    """

    __slots__ = ("method", "prefix", "handler", "decode", "decode_lines")

    def __init__(self, method: str, handler: Handler) -> None:
        self.method = method
        self.prefix = b'{"jsonrpc":"2.0","method":"' + method.encode() + b'"'
        self.handler = handler
        # Replaced by the real decoders on first use (building them costs time).
        self.decode: Callable[[bytes], Any] = self._first_decode
        self.decode_lines: Callable[[list[Any]], Any] = self._first_decode_lines

    def decode_read(self, lines: list[Any]) -> Any:
        """:attr:`decode_lines` for the lines of one read, tried only when its first and last
        lines start with :attr:`prefix` (a read that ends with an answer goes line by line)."""
        if lines:
            first, last = lines[0], lines[-1]
            prefix = self.prefix
            if type(first) is bytes and type(last) is bytes and first.startswith(prefix) and last.startswith(prefix):
                return self.decode_lines(lines)
        return MISS

    def _first_decode(self, line: bytes) -> Any:
        self._build()
        return self.decode(line)

    def _first_decode_lines(self, lines: list[Any]) -> Any:
        self._build()
        return self.decode_lines(lines)

    def _build(self) -> None:
        native = getattr(decoder_for(self.handler.params_type), "native", None)
        if native is None:  # a type whose values need the lenient rebuild: no shortcut
            self.decode = self.decode_lines = _always_miss
            return
        envelope = msgspec.defstruct(
            "OnePassEnvelope",
            # Literal members: msgspec itself refuses another version or method.
            [("jsonrpc", Literal["2.0"]), ("method", Literal[self.method]), ("params", self.handler.params_type)],
            forbid_unknown_fields=True,  # an "id" (a request by that name) or anything odd
            gc=False,
        )
        decode: Callable[[bytes], Any] = msgspec.json.Decoder(envelope).decode
        # What a line it cannot take raises: bad JSON or a refused member (DecodeError, with
        # ValidationError), nesting too deep (RecursionError), a LineTooLong item (TypeError).
        refused = (msgspec.DecodeError, RecursionError, TypeError)

        def one_pass(line: bytes) -> Any:
            try:
                return decode(line).params
            except refused:
                return MISS

        def all_in_one_pass(lines: list[Any]) -> Any:
            try:
                return [decode(line).params for line in lines]
            except refused:
                return MISS

        self.decode = one_pass
        self.decode_lines = all_in_one_pass


def _always_miss(line: Any) -> Any:
    return MISS


class Decoded(msgspec.Struct, gc=False):
    """A notification a reader decoded in one pass (:class:`OnePass`), queued until its turn:
    then ``handler.fn(params)``. (A runtime ordering by session queues them in lanes.)"""

    handler: Handler
    params: Any
    method: str


class Pending:
    """An outbound request waiting for its answer.

    ``waiter`` belongs to the runtime (a pre-acquired lock, a Future, an asyncio Future): the
    core only carries it. ``serial`` marks a call made from a notification handler (the deadlock
    rule: its answer is completed without waiting for the queue). ``session`` is the session id
    of its params, which a runtime ordering by session sets (its answer is ordered with that
    session's messages; None: connection-wide). ``raw``/``error`` hold the outcome once the
    runtime stored it.
    """

    __slots__ = ("id", "method", "result_type", "waiter", "serial", "session", "raw", "error")

    def __init__(self, msg_id: int, method: str, result_type: Any, waiter: Any, serial: bool) -> None:
        self.id = msg_id
        self.method = method
        self.result_type = result_type
        self.waiter = waiter
        self.serial = serial
        self.session: str | None = None
        self.raw: msgspec.Raw | None = None
        self.error: BaseException | None = None


class InboundRequest:
    """One inbound request still owed exactly one answer: its id and method.

    Runtimes subclass it to add how a handler learns it was cancelled (an Event, a task).
    """

    __slots__ = ("id", "method", "attachment", "_token", "__weakref__")

    def __init__(self, call_id: RequestId, method: str) -> None:
        self.id = call_id
        self.method = method
        self.attachment: Any = None
        """Free for the facade: e.g. what an arrival hook set up for the handler."""
        # One-shot: Endpoint.claim pops it (list.pop is atomic), so exactly one path answers.
        self._token: list[None] = [None]

    @property
    def is_answered(self) -> bool:
        """True once the request was answered, or can no longer be: the core answered a
        ``$/cancel_request`` for it, or the connection closed."""
        return not self._token


# A registered inbound request ready to run: (call, handler or None for the fallback, raw
# params, decoded params or UNDECODED).
Start = tuple[InboundRequest, Union[Handler, None], msgspec.Raw, Any]
#: The 4th member of a Start until the params are decoded (an arrival hook decodes early).
UNDECODED: Any = object()


class Endpoint:
    """The JSON-RPC state of one connection, both roles. No I/O (see the module docstring)."""

    def __init__(self, make_call: Callable[[RequestId, str], InboundRequest] = InboundRequest, name: str = "acp") -> None:
        # Labels log lines.
        self.name = name
        # The one-pass decode of HOT_NOTIFICATION's lines, while it has a typed handler.
        self.one_pass: OnePass | None = None
        # Builds the runtime's InboundRequest subclass for each inbound request.
        self._make_call = make_call
        self._encoder = Encoder()
        # method -> Handler, and the fallbacks for methods nobody registered.
        self.handlers: dict[str, Handler] = {}
        self.fallback_request: Callable[[str, Any, Any], Any] | None = None
        self.fallback_notification: Callable[[str, Any], None] | None = None
        # Outbound calls waiting for an answer, by id; whoever pops an entry completes it.
        self._ids = itertools.count(1)
        self.pending: dict[int, Pending] = {}
        # Inbound requests not yet answered, by id.
        self.inbound: dict[RequestId, InboundRequest] = {}
        # Answers decided while receiving, for the runtime to write (data_to_send).
        self._outbox: list[bytes] = []
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
    ) -> None:
        """Register the handler record of a request method."""
        self.handlers[method] = Handler(fn, params_type, notification=False, on_arrival=on_arrival)
        if method == HOT_NOTIFICATION:
            self.one_pass = None

    def on_notification(self, method: str, fn: Callable[..., Any], params_type: Any = None, immediate: bool = False) -> None:
        """Register the handler record of a notification method."""
        handler = self.handlers[method] = Handler(fn, params_type, notification=True, immediate=immediate)
        if method == HOT_NOTIFICATION:
            self.one_pass = OnePass(method, handler) if params_type is not None and not immediate else None

    # ------------------------------------------------------------------ outbound calls

    def register(self, method: str, result_type: Any, waiter: Any, serial: bool = False) -> Pending:
        """Allocate an id and record a call waiting for its answer.

        Raises :class:`ConnectionClosedError` once the input ended or the endpoint closed. Then
        write :meth:`request_line`.
        """
        if self.eof or self.closed:
            raise self.closed_error()
        pending = Pending(next(self._ids), method, result_type, waiter, serial)
        self.pending[pending.id] = pending
        # A runtime may close from another thread between the check and the insert: check again
        # so the entry is not left behind after fail_all() ran.
        if (self.eof or self.closed) and self.pending.pop(pending.id, None) is not None:
            raise self.closed_error()
        return pending

    def request_line(self, pending: Pending, params: Any) -> bytes:
        """The line of a registered call. Params that cannot be encoded forget the call and raise."""
        try:
            return self._encoder.request(pending.id, pending.method, params)
        except BaseException:
            self.pending.pop(pending.id, None)
            raise

    def notification_line(self, method: str, params: Any) -> bytes:
        """The line of a notification; :class:`ConnectionClosedError` once closed."""
        if self.eof or self.closed:
            raise self.closed_error()
        return self._encoder.notification(method, params)

    def peek(self, msg_id: Any) -> Pending | None:
        """The pending call an answer names, left in place (e.g. to read ``serial``)."""
        return self.pending.get(msg_id) if type(msg_id) is int else None

    def take(self, msg_id: Any) -> Pending | None:
        """Remove and return the pending call an answer names: the caller completes it. None
        when it was abandoned, already taken or never ours (logged at DEBUG)."""
        pending = self.pending.pop(msg_id, None) if type(msg_id) is int else None
        if pending is None:
            _log.debug("%s: dropped an answer to unknown or abandoned request %r", self.name, msg_id)
        return pending

    def abandon(self, msg_id: int) -> Pending | None:
        """Give up on a call (timeout, cancellation). Returns it when this call removed it: the
        caller then completes it and writes :meth:`cancel_line`; None if it was already done."""
        return self.pending.pop(msg_id, None)

    def cancel_line(self, msg_id: int) -> bytes | None:
        """The ``$/cancel_request`` line for an abandoned call (None once closed)."""
        if self.eof or self.closed:
            return None
        return self._encoder.notification(CANCEL_REQUEST, {"requestId": msg_id})

    def fail_all(self) -> list[Pending]:
        """Remove every pending call (close, end of input): the caller fails each."""
        taken: list[Pending] = []
        while self.pending:
            try:
                taken.append(self.pending.popitem()[1])
            except KeyError:  # emptied by another thread meanwhile
                break
        return taken

    def outcome(self, pending: Pending) -> Any:
        """What a completed call returns: its decoded result, or its error raised."""
        if pending.error is not None:
            raise pending.error
        assert pending.raw is not None
        return self.decode_result(pending, pending.raw)

    def decode_result(self, pending: Pending, raw: msgspec.Raw) -> Any:
        """Decode a result as the call's ``result_type``; a malformed one raises -32603."""
        if pending.result_type is None:
            return ANY_DECODER.decode(raw)
        decode = _RESULT_DECODERS.get(pending.result_type)  # hot: read inline
        if decode is None:
            decode = _RESULT_DECODERS[pending.result_type] = payload_decoder(decoder_for(pending.result_type))
        try:
            return decode(raw)
        except msgspec.ValidationError as exc:
            raise RequestError(INTERNAL_ERROR, f"{pending.method}: malformed result: {exc}") from None

    @staticmethod
    def response_error(msg: ErrorResponse) -> RequestError:
        """The exception an error answer raises in its caller."""
        err = msg.error
        return RequestError(err.code, err.message, err.data)

    # ------------------------------------------------------------------ receiving

    def receive_request(self, msg: Request) -> Start | None:
        """Register an inbound request and return what the runtime needs to run it; None when
        it was refused (the error answer is in :meth:`data_to_send`). Runs its arrival hook."""
        if self.closing or self.closed:
            self._refuse(msg.id, INTERNAL_ERROR, "Connection closing")
            return None
        if msg.id in self.inbound:
            self._refuse(msg.id, INVALID_REQUEST, "Invalid request", {"reason": "duplicate request id"})
            return None
        handler = self.handlers.get(msg.method)
        if (handler is None or handler.notification) and self.fallback_request is None:
            self._refuse(msg.id, METHOD_NOT_FOUND, "Method not found", {"method": msg.method})
            return None
        call = self._make_call(msg.id, msg.method)
        params = UNDECODED
        if handler is not None and handler.on_arrival is not None:
            try:
                params = handler.decode(msg.params)
                handler.on_arrival(params, call)
            except msgspec.ValidationError as exc:
                self._refuse(msg.id, INVALID_PARAMS, f"Invalid params: {exc}")
                return None
            except (msgspec.DecodeError, RecursionError) as exc:  # e.g. invalid UTF-8 in params
                self._refuse(msg.id, PARSE_ERROR, "Parse error", {"reason": f"not valid JSON: {exc}"})
                return None
            except RequestError as exc:
                self._refuse(msg.id, exc.code, exc.message, exc.data)
                return None
            except Exception:
                _log.exception("%s: %s arrival hook failed", self.name, msg.method)
                self._refuse(msg.id, INTERNAL_ERROR, "Internal error")
                return None
        self.inbound[msg.id] = call
        return (call, handler, msg.params, params)

    def receive_cancel(self, msg: Notification) -> InboundRequest | None:
        """Act on a ``$/cancel_request``: the request it names is answered -32800 (in
        :meth:`data_to_send`) and returned, for the runtime to cancel its handler. None when
        it names nothing still running, or is malformed (ignored, logged at DEBUG)."""
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
        self._outbox.append(self.error_line(call.id, REQUEST_CANCELLED, "Request cancelled"))
        return call

    def receive_invalid(self, msg: Invalid) -> ErrorResponse | None:
        """Act on a line that is not a valid message. A malformed *answer* is never answered
        back (its id is ours: an error carrying it could complete an unrelated request of the
        peer); it returns an ErrorResponse for the runtime to deliver like any answer, so the
        caller fails now instead of at a timeout that may be None. Anything else is answered
        (in :meth:`data_to_send`) and None returned."""
        _log.warning("%s: invalid message: %s", self.name, msg.reason)
        if msg.response:
            if type(msg.id) is int:
                return ErrorResponse(msg.id, ErrorObject(INTERNAL_ERROR, f"malformed answer from the peer: {msg.reason}"))
            return None
        self._refuse(msg.id, msg.code, _INVALID_MESSAGES.get(msg.code, "Invalid request"), {"reason": msg.reason})
        return None

    def start_closing(self) -> list[InboundRequest]:
        """A graceful close begins: new inbound requests are refused from now on. Returns the
        requests still running, for the runtime to cancel (they stay answerable)."""
        self.closing = True
        return list(self.inbound.values())

    def close(self) -> tuple[list[InboundRequest], list[Pending]]:
        """Close: nothing more is sent or answered. Returns the inbound requests taken as
        answered (cancel their handlers) and the pending calls (fail them with
        :meth:`closed_error`)."""
        self.closed = True
        return self.claim_all(), self.fail_all()

    def receive_eof(self) -> list[Pending]:
        """The input ended: new calls are refused from now on. Returns every pending call, for
        the runtime to fail with :meth:`closed_error` (inbound requests stay answerable)."""
        self.eof = True
        return self.fail_all()

    def data_to_send(self) -> list[bytes]:
        """The answers decided while receiving, oldest first; empties the list. Call it after
        every ``receive_*`` and write what it returns."""
        out = self._outbox
        if out:
            self._outbox = []
        return out

    def notification_params(self, msg: Notification) -> tuple[Callable[..., Any], tuple[Any, ...]] | None:
        """The function to call for a notification and its arguments: the handler with the
        decoded params, or the fallback with the method too. None (logged) when nobody handles
        it or its params do not decode."""
        handler = self.handlers.get(msg.method)
        try:
            if handler is None or not handler.notification:
                fallback = self.fallback_notification
                if fallback is None:
                    _log.debug("%s: ignored unknown notification %s", self.name, msg.method)
                    return None
                return fallback, (msg.method, ANY_DECODER.decode(msg.params) if msg.params else None)
            return handler.fn, (handler.decode(msg.params),)
        except (msgspec.DecodeError, RecursionError) as exc:  # a ValidationError, invalid UTF-8...
            _log.warning("%s: %s notification with invalid params: %s", self.name, msg.method, exc)
            return None

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
            try:
                params = handler.decode(raw)
            except msgspec.ValidationError as exc:
                raise RequestError(INVALID_PARAMS, f"Invalid params: {exc}") from None
            except (msgspec.DecodeError, RecursionError) as exc:  # invalid UTF-8...
                raise RequestError(PARSE_ERROR, "Parse error", {"reason": f"not valid JSON: {exc}"}) from None
        return handler.fn, (params, call)

    # ------------------------------------------------------------------ answering

    def claim(self, call: InboundRequest) -> bool:
        """Take ``call`` as answered: True for exactly one caller, on every path (the handler's
        result, ``InboundCall.answer``, ``$/cancel_request``, close). Lock-free: the one-shot
        token's ``list.pop`` is atomic, and only the path that popped it removes the table entry
        (no request with the same id can be registered while the entry is there, so the entry
        removed is this call's)."""
        try:
            call._token.pop()
        except IndexError:
            return False
        self.inbound.pop(call.id, None)
        return True

    def answer(self, call: InboundRequest, result: Any) -> bytes | None:
        """Claim ``call`` and return its success answer; None (logged at DEBUG) when it was
        already answered. A result that cannot be encoded is answered -32603."""
        if not self.claim(call):
            _log.debug("%s: %s answered after it was cancelled or answered; dropped", self.name, call.method)
            return None
        return self.result_line(call, result)

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

    def result_line(self, call: InboundRequest, result: Any) -> bytes:
        """A success answer for a claimed call (-32603 if the result cannot be encoded)."""
        try:
            return self._encoder.response(call.id, result)
        except Exception as exc:  # TypeError, EncodeError, RecursionError (nested too deeply)...
            _log.error("%s: %s returned a value that cannot be encoded: %r", self.name, call.method, exc)
            return self._encoder.error(call.id, INTERNAL_ERROR, "Internal error")

    def error_line(self, call_id: RequestId | None, code: int, message: str, data: Any = None) -> bytes:
        """An error answer (-32603 if ``data`` cannot be encoded)."""
        try:
            return self._encoder.error(call_id, code, message, data)
        except Exception as exc:  # a handler's RequestError with data that cannot be encoded
            _log.error("%s: an error answer cannot be encoded: %r; answering -32603", self.name, exc)
            return self._encoder.error(call_id, INTERNAL_ERROR, "Internal error")

    def claim_all(self) -> list[InboundRequest]:
        """Close: take every inbound request as answered (nothing more goes out for them) and
        return them, for the runtime to cancel their handlers."""
        taken = [call for call in list(self.inbound.values()) if self.claim(call)]
        return taken

    def _refuse(self, call_id: RequestId | None, code: int, message: str, data: Any = None) -> None:
        self._outbox.append(self.error_line(call_id, code, message, data))
