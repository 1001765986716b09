"""Sans-I/O JSON-RPC 2.0 for ACP: line framing, envelopes, the message state (:class:`Endpoint`)
and every rule about when things happen (:class:`Scheduler`). No threads, no asyncio, no
sockets, no clock.

This layer imports only :mod:`acp.errors`, msgspec and (lazily, to decode typed payloads)
:mod:`acp.schema`; the runtimes (``acp.connection`` with threads, ``acp.aio`` with tasks) drive
it, the way python-websockets wraps its sans-I/O ``protocol.py`` in ``sync/`` and ``asyncio/``.
"""

from .endpoint import (
    CANCEL_REQUEST,
    UNDECODED,
    Endpoint,
    InboundRequest,
    Pending,
    ResponseLike,
    Start,
)
from .framing import DEFAULT_MAX_LINE_BYTES, LineFramer, LineTooLong
from .handlers import (
    ANY_DECODER,
    HOT_NOTIFICATION,
    MISS,
    Decoded,
    Handler,
    OnePass,
    Updates,
    decoder_for,
)
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
from .scheduler import ORDERINGS, Ordering, Routed, Scheduler

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
    "Routed",
    "Scheduler",
    "Start",
    "Updates",
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
