"""What is registered for a method, and how its payloads decode. No state beyond decoders.

A :class:`Handler` is the record of one method: the function the runtime calls, the type its
params decode into, whether it is a notification, whether it runs the moment it is read
(``immediate``) and its arrival hook. The core decodes for it but never calls it: a runtime
does (on a thread, or as a task), where the :class:`~acp.rpc.Scheduler` says.

:class:`OnePass` decodes the lines of the notification most lines carry (the streamed
``session/update``) envelope and typed params in one msgspec call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import msgspec

from .messages import payload_decoder

__all__ = [
    "ANY_DECODER",
    "HOT_NOTIFICATION",
    "MISS",
    "Decoded",
    "Handler",
    "OnePass",
    "Updates",
    "decoder_for",
    "result_decoder",
]

#: Decodes plain JSON values (for handlers registered without a type).
ANY_DECODER = msgspec.json.Decoder()

_DECODERS: dict[Any, Any] = {}
_RESULT_DECODERS: dict[Any, Callable[[msgspec.Raw], Any]] = {}  # payload_decoder per result type


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


def warm_decoders(types: Any) -> None:
    """Build the decoders of ``types`` now (:func:`decoder_for` builds each on first use),
    from a moment when the process waits anyway."""
    for tp in types:
        decoder_for(tp)


def result_decoder(tp: Any) -> Callable[[msgspec.Raw], Any]:
    """The decode function of a result type (built once per type)."""
    decode = _RESULT_DECODERS.get(tp)
    if decode is None:
        decode = _RESULT_DECODERS[tp] = payload_decoder(decoder_for(tp))
    return decode


class Handler:
    """What is registered for one method. The core decodes for it but never calls ``fn`` or
    ``on_arrival``: the runtime does (on a thread, or as a task)."""

    __slots__ = ("fn", "params_type", "decode", "notification", "immediate", "on_arrival", "is_async")

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
        # Set by a runtime that cares (asyncio: an ``async def`` runs as a task of its own).
        self.is_async = False
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


class Decoded(msgspec.Struct, gc=False):
    """A notification decoded on arrival, queued until its turn: then ``handler.fn(params)``.
    For the fallback of an unregistered method, ``handler.fn`` is called with
    ``(method, params)`` (``fallback`` is True)."""

    handler: Handler
    params: Any
    method: str
    fallback: bool = False


class Updates(list[Any]):
    """The params of a read's worth of one notification (``OnePass.decode_lines``): one
    queued item, handed to ``handler.fn`` one by one."""

    __slots__ = ("handler", "method")

    def __init__(self, handler: Handler, method: str, params: list[Any]) -> None:
        super().__init__(params)
        self.handler = handler
        self.method = method


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
    less than per-line checks. Readers call it through ``Scheduler.decode_lines``.
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
