"""Sans-I/O JSON-RPC 2.0 for ACP: line framing and envelopes. No threads, no sockets.

This layer imports only :mod:`acp.errors` (and msgspec); the connection engine drives it.
"""

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
)

__all__ = [
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
]
