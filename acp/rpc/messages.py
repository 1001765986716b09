"""JSON-RPC 2.0 envelopes: decode one line into a message, encode messages into lines.

Params, results and error data stay raw (:class:`msgspec.Raw`) after decoding: the envelope is
routed first and the payload is decoded later, once the caller knows its type. Ids may be
integers or strings and are echoed exactly as received.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Union

import msgspec
from msgspec import Raw

from ..errors import INVALID_REQUEST, PARSE_ERROR

__all__ = [
    "RequestId",
    "Request",
    "Notification",
    "Response",
    "ErrorResponse",
    "Invalid",
    "Message",
    "ErrorObject",
    "decode_line",
    "strip_terminal_escapes",
    "decode_payload",
    "payload_decoder",
    "Encoder",
    "NO_PARAMS",
    "session_id_of",
    "session_of_params",
]

RequestId = Union[int, str]

# An empty Raw marks a member that was absent from the envelope (present JSON is never empty).
_ABSENT = Raw()
NO_PARAMS = _ABSENT


class ErrorObject(msgspec.Struct, omit_defaults=True):
    """The ``error`` member of an error response."""

    code: int
    message: str
    data: Any = None


class Request(msgspec.Struct):
    """An inbound request: it must be answered exactly once."""

    id: RequestId
    method: str
    params: Raw


class Notification(msgspec.Struct):
    """An inbound notification: never answered."""

    method: str
    params: Raw


class Response(msgspec.Struct):
    """A successful answer to one of our requests; ``result`` is raw JSON."""

    id: RequestId
    result: Raw


class ErrorResponse(msgspec.Struct):
    """An error answer; ``id`` is None when the peer could not tell which request failed."""

    id: RequestId | None
    error: ErrorObject


class Invalid(msgspec.Struct):
    """A line that is not a valid message. ``id`` is set when a request id could be recovered,
    ``code`` is -32700 (not JSON) or -32600 (not a valid envelope). ``response`` is True when
    the object has no ``method`` but a ``result`` or an ``error``: a malformed answer, which
    must never be answered back (the id is one of *our* request ids, so an error carrying it
    could be taken by the peer as the answer to an unrelated request of its own). An object
    with an id and nothing else is a request without a method, answered -32600 with its id."""

    id: RequestId | None
    code: int
    reason: str
    response: bool = False


Message = Union[Request, Notification, Response, ErrorResponse, Invalid]


class _Envelope(msgspec.Struct):
    # Every member optional: the checks below give precise reasons instead of a decode error.
    jsonrpc: Any = None
    id: Any = _ABSENT
    method: Any = None
    params: Raw = _ABSENT
    result: Raw = _ABSENT
    error: Raw = _ABSENT


_envelope_decoder = msgspec.json.Decoder(_Envelope)
_batch_decoder = msgspec.json.Decoder(list[Raw])
_error_decoder = msgspec.json.Decoder(ErrorObject)


_OPEN_BRACE = ord("{")
_OBJECT_OR_ARRAY = (_OPEN_BRACE, ord("["))


def _valid_id(value: Any) -> bool:
    # bool is an int subclass in Python, but not a JSON-RPC id.
    return (type(value) is int) or isinstance(value, str)


def _classify(env: _Envelope) -> Message:
    raw_id = env.id
    has_id = raw_id is not _ABSENT
    method = env.method
    # No method, but a result or an error: a (malformed) answer to one of our requests.
    answer = method is None and (bool(env.result) or bool(env.error))
    if has_id and raw_id is not None and not _valid_id(raw_id):
        return Invalid(None, INVALID_REQUEST, "id must be an integer or a string", answer)
    msg_id = raw_id if has_id else None
    if env.jsonrpc != "2.0":
        # JSON-RPC 2.0 requires the member; a message without it is not accepted either.
        reason = 'jsonrpc must be "2.0"' if env.jsonrpc is not None else 'missing "jsonrpc": "2.0"'
        return Invalid(msg_id, INVALID_REQUEST, reason, answer)
    if method is not None:
        if not isinstance(method, str):
            return Invalid(msg_id, INVALID_REQUEST, "method must be a string")
        params = env.params
        if params and memoryview(params)[0] not in _OBJECT_OR_ARRAY:
            if bytes(params) != b"null":
                return Invalid(msg_id, INVALID_REQUEST, "params must be an object or an array")
            params = _ABSENT
        if not has_id:
            return Notification(method, params)
        if msg_id is None:
            return Invalid(None, INVALID_REQUEST, "a request id must not be null")
        return Request(msg_id, method, params)
    has_result = bool(env.result)
    has_error = bool(env.error)
    if has_result and has_error:
        return Invalid(msg_id, INVALID_REQUEST, "a response has both result and error", True)
    if has_error:
        try:
            error = _error_decoder.decode(env.error)
        except msgspec.ValidationError as exc:
            return Invalid(msg_id, INVALID_REQUEST, f"malformed error object: {exc}", True)
        return ErrorResponse(msg_id, error)
    if has_result:
        if msg_id is None:
            return Invalid(None, INVALID_REQUEST, "a response needs an id", True)
        return Response(msg_id, env.result)
    if has_id:
        return Invalid(msg_id, INVALID_REQUEST, 'a request needs a "method"')
    return Invalid(None, INVALID_REQUEST, "neither a request, a notification nor a response")


# msgspec raises RecursionError (not DecodeError) for JSON nested deeper than the interpreter's
# recursion limit allows; such a line is answered like any other unparsable one.
_TOO_DEEP = "not valid JSON: nested too deeply"


def strip_terminal_escapes(line: bytes) -> bytes:
    """``line`` without the terminal escape sequences it starts with (``ESC [`` parameters and
    a final byte, or ``ESC`` and one more byte): what an agent that also draws on a terminal leaves
    before a message (gemini-cli writes ``\x1b[?1049l`` and its ``authenticate`` answer on one
    line)."""
    i, n = 0, len(line)
    while i + 1 < n and line[i] == 0x1B:
        if line[i + 1] == 0x5B:  # CSI: parameter and intermediate bytes, then a final byte
            j = i + 2
            while j < n and 0x20 <= line[j] <= 0x3F:
                j += 1
            if j >= n or not 0x40 <= line[j] <= 0x7E:
                break
            i = j + 1
        elif 0x30 <= line[i + 1] <= 0x7E:  # ESC 7, ESC M, ESC c ...
            i += 2
        else:
            break
    return line[i:]


def decode_line(line: bytes) -> Message | list[Message]:
    """Decode one line. A JSON array (a batch) gives a list with one message per item. A line
    that is a message behind terminal escape sequences (:func:`strip_terminal_escapes`) is
    that message: nothing after the escapes is dropped or guessed."""
    try:
        env = _envelope_decoder.decode(line)
    except msgspec.ValidationError:
        pass  # not an object: an array, a scalar, or wrong member types
    except msgspec.DecodeError as exc:
        if line[:1] == b"\x1b":  # only then: a parse error costs nothing more
            rest = strip_terminal_escapes(line)
            if rest[:1] == b"{":
                return decode_line(rest)
        return Invalid(None, PARSE_ERROR, f"not valid JSON: {exc}")
    except RecursionError:
        return Invalid(None, PARSE_ERROR, _TOO_DEEP)
    else:
        # Fast path for well-formed messages; everything else gets the full checks.
        method = env.method
        if env.jsonrpc == "2.0":
            raw_id = env.id
            if type(method) is str:
                params = env.params
                if not params or memoryview(params)[0] == _OPEN_BRACE:
                    if raw_id is _ABSENT:
                        return Notification(method, params)
                    if type(raw_id) is int or type(raw_id) is str:
                        return Request(raw_id, method, params)
            elif method is None and env.result and not env.error:
                if type(raw_id) is int or type(raw_id) is str:
                    return Response(raw_id, env.result)
        return _classify(env)
    try:
        items = _batch_decoder.decode(line)
    except msgspec.ValidationError:
        return Invalid(None, INVALID_REQUEST, "a message must be a JSON object")
    except msgspec.DecodeError as exc:
        return Invalid(None, PARSE_ERROR, f"not valid JSON: {exc}")
    except RecursionError:
        return Invalid(None, PARSE_ERROR, _TOO_DEEP)
    if not items:
        return Invalid(None, INVALID_REQUEST, "an empty batch")
    out: list[Message] = []
    for item in items:
        try:
            out.append(_classify(_envelope_decoder.decode(item)))
        except msgspec.ValidationError:
            out.append(Invalid(None, INVALID_REQUEST, "a message must be a JSON object"))
        except RecursionError:
            out.append(Invalid(None, PARSE_ERROR, _TOO_DEEP))
    return out


def decode_payload(raw: Raw, decoder: Any) -> Any:
    """Decode params or a result. An absent or ``null`` payload decodes as ``{}``, so a type
    whose fields are all optional still gets a value."""
    if not raw or (len(raw) == 4 and bytes(raw) == b"null"):
        return decoder.decode(b"{}")
    return decoder.decode(raw)


def payload_decoder(decoder: Any) -> Callable[[Raw], Any]:
    """``decode_payload(raw, decoder)`` as one function call (the decode of every params and
    result goes through it). With a schema decoder's ``native`` msgspec decode, a well-formed
    payload costs that one C call; a malformed one falls back to ``decoder.decode``."""
    decode = decoder.decode
    native = getattr(decoder, "native", None)
    if native is None:

        def payload(raw: Raw) -> Any:
            if len(raw) > 4:  # "", "{}", "null" and the like take the general path
                return decode(raw)
            return decode_payload(raw, decoder)

    else:

        def payload(raw: Raw) -> Any:
            if len(raw) > 4:
                try:
                    return native(raw)
                except msgspec.ValidationError:
                    return decode(raw)  # the lenient rebuild, or the same error
            return decode_payload(raw, decoder)

    return payload


class _OutRequest(msgspec.Struct, omit_defaults=True):
    jsonrpc: str
    id: RequestId
    method: str
    params: Any = None


class _OutNotification(msgspec.Struct, omit_defaults=True):
    jsonrpc: str
    method: str
    params: Any = None


class _OutResponse(msgspec.Struct):
    jsonrpc: str
    id: RequestId
    result: Any


class _OutError(msgspec.Struct):
    jsonrpc: str
    id: Union[RequestId, None]
    error: ErrorObject


_EMPTY_OBJECT = Raw(b"{}")


class Encoder:
    """Encodes outbound messages as compact, newline-terminated lines.

    JSON never contains a raw newline (msgspec escapes control characters in strings), so each
    encoded message is exactly one line. Thread-safe: its only state is a cache of notification
    heads that every thread fills with the same bytes, and msgspec's ``Encoder.encode`` builds a
    new buffer on every call (safe to share across threads since msgspec 0.15,
    msgspec/msgspec#402; acp requires 0.18), so one Encoder may serve every thread of a
    connection (``encode_into`` writes only the buffer it is given).
    """

    __slots__ = ("_encoder", "_heads")

    def __init__(self) -> None:
        self._encoder = msgspec.json.Encoder()
        # A notification's fixed head by method (``{"jsonrpc":"2.0","method":...,"params":``),
        # for notification_into. Filled on first use; dict reads and writes are atomic, and
        # every thread would store the same bytes.
        self._heads: dict[str, bytes] = {}

    def _line(self, obj: Any) -> bytes:
        return self._encoder.encode(obj) + b"\n"

    def request(self, msg_id: RequestId, method: str, params: Any) -> bytes:
        """A request line; ``params`` is a Struct, a dict, Raw or None (omitted)."""
        return self._encoder.encode(_OutRequest("2.0", msg_id, method, params)) + b"\n"  # _line, inlined: hot

    def notification(self, method: str, params: Any) -> bytes:
        """A notification line."""
        return self._encoder.encode(_OutNotification("2.0", method, params)) + b"\n"  # _line, inlined: hot

    def notification_into(self, buf: bytearray, method: str, params: Any) -> None:
        """Append a notification line to ``buf`` (no bytes object of its own: the streamed
        updates are batched in one buffer). On failure ``buf`` is left as it was."""
        end = len(buf)
        head = self._heads.get(method)
        if head is None:
            if params is None or len(self._heads) >= _MAX_HEADS:  # rare: the whole envelope
                try:
                    self._encoder.encode_into(_OutNotification("2.0", method, params), buf, end)
                except BaseException:
                    del buf[end:]
                    raise
                buf += b"\n"
                return
            head = self._heads[method] = b'{"jsonrpc":"2.0","method":' + self._encoder.encode(method) + b',"params":'
        # The head written out and only the params encoded: the same bytes as encoding the
        # envelope (test_rpc_messages), ~45 ns less per streamed update.
        buf += head
        try:
            self._encoder.encode_into(params, buf, end + len(head))
        except BaseException:
            del buf[end:]
            raise
        buf += b"}\n"

    def response(self, msg_id: RequestId, result: Any) -> bytes:
        """A success answer; a None result is written as ``{}`` (ACP results are objects)."""
        return self._encoder.encode(_OutResponse("2.0", msg_id, _EMPTY_OBJECT if result is None else result)) + b"\n"

    def error(self, msg_id: RequestId | None, code: int, message: str, data: Any = None) -> bytes:
        """An error answer; ``msg_id`` is None when the request id is unknown."""
        return self._line(_OutError("2.0", msg_id, ErrorObject(code, message, data)))


# Notification heads kept per Encoder (methods are few; beyond this, say ext methods named on
# the fly, the envelope is encoded whole).
_MAX_HEADS = 64


class _SessionRef(msgspec.Struct):
    sessionId: Any = None  # the wire name


_session_ref = msgspec.json.Decoder(_SessionRef)


def session_id_of(params: bytes | msgspec.Raw) -> str | None:
    """The ``sessionId`` member of raw JSON params (or a result), if it is a string."""
    if not params:
        return None
    try:  # decoding straight away is cheaper than looking for the key first
        value = _session_ref.decode(params).sessionId
    except (msgspec.DecodeError, RecursionError):  # not an object (ValidationError included)
        return None
    return value if isinstance(value, str) else None


def session_of_params(params: Any) -> str | None:
    """The session id of outbound params: a schema type's ``session_id``, a dict's
    ``"sessionId"``, or raw JSON's (what a runtime ordering by session records on a
    :class:`~acp.rpc.Pending`, so that the answer is ordered with that session)."""
    if params is None:
        return None
    if isinstance(params, dict):
        value = params.get("sessionId")
    elif isinstance(params, (bytes, msgspec.Raw)):
        return session_id_of(params)
    else:
        value = getattr(params, "session_id", None)
    return value if isinstance(value, str) else None
