"""The exception hierarchy of acp, and the JSON-RPC / ACP error codes.

Everything the SDK raises on purpose derives from :class:`AcpError`::

    AcpError
    ├── RequestError            an error answer (from the peer, or raised by a handler on purpose)
    ├── CapabilityError         a call the negotiated capabilities do not allow, refused locally
    ├── ConnectionClosedError   the transport ended, or the connection was closed
    ├── RequestTimeoutError     no answer in time (also a TimeoutError)
    └── RequestCancelledError   the call was cancelled before it was answered
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "PARSE_ERROR",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "INVALID_PARAMS",
    "INTERNAL_ERROR",
    "REQUEST_CANCELLED",
    "AUTH_REQUIRED",
    "RESOURCE_NOT_FOUND",
    "AcpError",
    "RequestError",
    "CapabilityError",
    "ConnectionClosedError",
    "RequestTimeoutError",
    "RequestCancelledError",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
AUTH_REQUIRED = -32000
RESOURCE_NOT_FOUND = -32002

_DEFAULT_MESSAGES = {
    PARSE_ERROR: "Parse error",
    INVALID_REQUEST: "Invalid request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
    REQUEST_CANCELLED: "Request cancelled",
    AUTH_REQUIRED: "Authentication required",
    RESOURCE_NOT_FOUND: "Resource not found",
}


# str(RequestError) shows at most this many characters of its data.
_DATA_TEXT_LIMIT = 300
# The keys under which peers put the human-readable reason (the official SDKs use "details").
_DATA_TEXT_KEYS = ("details", "message", "detail", "reason", "error")
# str(ConnectionClosedError) shows at most this many of its stderr lines, each at most this long.
_STR_TAIL_LINES = 10
_STR_TAIL_LINE_CHARS = 200


def _shorten(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters at a word boundary, with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if text[limit - 1] != " ":  # mid-word: go back to a word boundary unless it is far back
        space = cut.rfind(" ")
        if space >= limit // 2:
            cut = cut[:space]
    return cut.rstrip() + "\u2026"


def _data_text(data: Any, as_json: bool = True) -> str:
    """The readable part of an error's ``data``: a string as it is, a dict's reason string
    (``details``, ``message``...), anything else as compact JSON (unless not ``as_json``);
    bounded; "" if nothing."""
    if data is None:
        return ""
    if isinstance(data, str):
        return _shorten(data, _DATA_TEXT_LIMIT)
    if isinstance(data, dict):
        for key in _DATA_TEXT_KEYS:
            value = data.get(key)
            if isinstance(value, str) and value.strip():
                return _shorten(value, _DATA_TEXT_LIMIT)
    if not as_json:
        return ""
    import msgspec  # lazily: str() of an error is rare, `import acp.errors` stays cheap

    try:
        text = msgspec.json.encode(data).decode("utf-8", "replace")
    except (TypeError, ValueError, OverflowError, RecursionError):
        text = repr(data)
    return _shorten(text, _DATA_TEXT_LIMIT)


class AcpError(Exception):
    """Base class of every exception acp raises on purpose."""


class RequestError(AcpError):
    """A JSON-RPC error answer: received from the peer, or raised by a handler to answer with it.

    A handler that raises ``RequestError(code, message, data)`` has its peer receive exactly that
    code, message and data; any other exception is answered with -32603 "Internal error".

    ``str()`` reads ``"<message> (code <code>): <data>"``, where ``<data>`` is the readable part
    of ``data`` (a string, else a dict's ``details``/``message``/``detail``/``reason``/``error``
    string, else compact JSON), on one line and cut to 300 characters with "…"; without data
    (or when it only repeats the message) it is ``"<message> (code <code>)"``.
    """

    def __init__(self, code: int, message: str | None = None, data: Any = None) -> None:
        self.code = int(code)
        self.message = message if message is not None else _DEFAULT_MESSAGES.get(code, "Error")
        self.data = data
        # args as the constructor takes them, so copy and pickle rebuild the same error.
        super().__init__(self.code, self.message, data)

    def __str__(self) -> str:
        text = f"{self.message} (code {self.code})"
        detail = _data_text(self.data)
        if detail and detail != self.message:
            text += f": {detail}"
        return text

    def __repr__(self) -> str:
        return f"RequestError(code={self.code!r}, message={self.message!r}, data={self.data!r})"

    # Named constructors for the spec's codes: `raise RequestError.invalid_params("...")`.
    @classmethod
    def parse_error(cls, data: Any = None) -> RequestError:
        """-32700: the line was not valid JSON."""
        return cls(PARSE_ERROR, None, data)

    @classmethod
    def invalid_request(cls, message: str | None = None, data: Any = None) -> RequestError:
        """-32600: not a valid JSON-RPC request, or not allowed now."""
        return cls(INVALID_REQUEST, message, data)

    @classmethod
    def method_not_found(cls, method: str) -> RequestError:
        """-32601: nothing handles this method."""
        return cls(METHOD_NOT_FOUND, None, {"method": method})

    @classmethod
    def invalid_params(cls, message: str | None = None, data: Any = None) -> RequestError:
        """-32602: the params do not fit the method's type."""
        return cls(INVALID_PARAMS, message, data)

    @classmethod
    def internal_error(cls, data: Any = None) -> RequestError:
        """-32603: the handler failed unexpectedly (details stay local)."""
        return cls(INTERNAL_ERROR, None, data)

    @classmethod
    def request_cancelled(cls, data: Any = None) -> RequestError:
        """-32800: the request was cancelled."""
        return cls(REQUEST_CANCELLED, None, data)

    @classmethod
    def auth_required(cls, data: Any = None) -> RequestError:
        """-32000: authentication is required first."""
        return cls(AUTH_REQUIRED, None, data)

    @classmethod
    def resource_not_found(cls, uri: str | None = None) -> RequestError:
        """-32002: a resource (such as a file) does not exist."""
        return cls(RESOURCE_NOT_FOUND, None, {"uri": uri} if uri is not None else None)


class CapabilityError(AcpError):
    """A call the negotiated capabilities do not allow; raised locally, nothing was sent."""


class ConnectionClosedError(AcpError):
    """The connection is closed: the transport ended, or close() was called.

    When a spawned agent process is gone, ``returncode`` is its exit status (negative: killed
    by that signal; None otherwise or while it still runs) and ``stderr_tail`` the last lines
    it wrote to stderr (at most 20 lines / 8 KiB; "" if none). ``str()`` is the message, then
    the last few of those lines, indented.
    """

    def __init__(
        self, message: str = "connection closed", *, returncode: int | None = None, stderr_tail: str = ""
    ) -> None:
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        super().__init__(message)

    def __str__(self) -> str:
        text = super().__str__()
        lines = self.stderr_tail.splitlines()[-_STR_TAIL_LINES:]
        if not lines:
            return text
        shown = "\n".join("    " + _shorten_line(line) for line in lines)
        return f"{text}; the last lines of its stderr:\n{shown}"


def _shorten_line(line: str) -> str:
    line = line.rstrip()
    return line if len(line) <= _STR_TAIL_LINE_CHARS else line[: _STR_TAIL_LINE_CHARS - 1] + "\u2026"


class RequestTimeoutError(AcpError, TimeoutError):
    """No answer came within the call's timeout; a $/cancel_request was sent."""


class RequestCancelledError(AcpError):
    """The call was cancelled before an answer arrived."""
