"""Sans-I/O JSON-RPC 2.0 for ACP: line framing, envelopes and the session core
(:class:`Endpoint`). No threads, no asyncio, no sockets, no clock.

This layer imports only :mod:`acp.errors`, msgspec and (lazily, to decode typed payloads)
:mod:`acp.schema`; the runtimes (``acp.connection``, ``acp.aio``) drive it.
"""

from .endpoint import (
    ANY_DECODER,
    CANCEL_REQUEST,
    HOT_NOTIFICATION,
    MISS,
    ORDERINGS,
    UNDECODED,
    Decoded,
    Endpoint,
    Handler,
    InboundRequest,
    OnePass,
    Ordering,
    Pending,
    ResponseLike,
    Start,
    decoder_for,
)
from .framing import DEFAULT_MAX_LINE_BYTES, LineFramer, LineTooLong
from .messages import (
    NO_PARAMS,
    Encoder,
    ErrorObject,
    ErrorResponse,
    Invalid,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    decode_line,
    decode_payload,
    session_id_of,
    session_of_params,
)

__all__ = [
    "ANY_DECODER",
    "CANCEL_REQUEST",
    "HOT_NOTIFICATION",
    "MISS",
    "ORDERINGS",
    "UNDECODED",
    "Decoded",
    "Endpoint",
    "Handler",
    "InboundRequest",
    "OnePass",
    "Ordering",
    "Pending",
    "ResponseLike",
    "Start",
    "decoder_for",
    "DEFAULT_MAX_LINE_BYTES",
    "LineFramer",
    "LineTooLong",
    "NO_PARAMS",
    "Encoder",
    "ErrorObject",
    "ErrorResponse",
    "Invalid",
    "Message",
    "Notification",
    "Request",
    "RequestId",
    "Response",
    "decode_line",
    "decode_payload",
    "session_id_of",
    "session_of_params",
]
