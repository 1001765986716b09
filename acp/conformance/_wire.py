"""The checker's side of the wire: one agent connection written to by hand and read through
:mod:`acp.rpc`, every line logged (for the transcripts) and checked against the schema."""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from .. import rpc, schema
from ..errors import AUTH_REQUIRED, METHOD_NOT_FOUND, _data_text
from ..transport import ProcessTransport
from ..transport.base import Transport
from ..transport.process import describe_exit
from .report import Status, WireLine, bounded

_log = logging.getLogger("acp.conformance")

_LINE_LIMIT = 4000  # characters of one wire line kept in a transcript

# Requests whose refusal "for lack of credentials or network" means the agent could not be
# checked further, and what such a refusal says (auth_required, or words of a missing login,
# key or network in the message or its data: agents in the wild use -32603 with a reason).
_ACCESS_METHODS = frozenset({"session/new", "session/prompt", "session/load", "session/resume", "session/list"})
_REFUSAL = re.compile(
    r"auth|log ?in\b|sign ?in|credential|api[ _-]?key|access token|unauthori[sz]ed|forbidden|subscription|"
    r"network|offline|ENOTFOUND|ECONNREFUSED|EAI_AGAIN|getaddrinfo|fetch failed|connection refused|"
    r"could not resolve|unreachable",
    re.IGNORECASE,
)


def refusal(error: rpc.ErrorObject) -> str | None:
    """Why ``error`` is a refusal for lack of credentials or network (a short description), or
    None when it is any other error."""
    text = f"{error.message} {_data_text(error.data, as_json=False) or ''}"
    if error.code == AUTH_REQUIRED or _REFUSAL.search(text):
        return f"refused for lack of credentials or network: error {error.code} {bounded(text.strip(), 160)!r}"
    return None


# ------------------------------------------------------------------------------ schema checks


_UNKNOWN_FIELD = (
    " (not in the ACP schema this checker was built from: a newer revision's field, or the agent's"
    " own, which the spec forbids outside _meta)"
)


def _other_version(result: msgspec.Raw) -> int | None:
    """The ``protocolVersion`` an initialize result chose, when it is an integer other than the
    version this checker speaks (None otherwise: judged as a v1 answer)."""
    try:
        version = msgspec.json.decode(result).get("protocolVersion")
    except (msgspec.DecodeError, AttributeError):
        return None
    if type(version) is int and version != schema.PROTOCOL_VERSION:
        return version
    return None


class _Validator:
    """Checks payloads strictly (native msgspec decoding of the generated types), then
    leniently (:func:`acp.schema.decoder`): strict failure + lenient success is a warning."""

    def __init__(self) -> None:
        self._strict: dict[Any, msgspec.json.Decoder[Any]] = {}
        self.problems: list[tuple[Status, str, WireLine | None]] = []
        self.checked = 0
        self._lock = threading.Lock()

    def check(self, what: str, raw: msgspec.Raw | bytes, tp: Any, line: WireLine | None = None) -> Any:
        """Decode ``raw`` as ``tp``; record a problem if it does not fit. The value, or None."""
        data = bytes(raw) if raw else b"{}"
        if data == b"null":
            data = b"{}"
        with self._lock:
            self.checked += 1
            strict = self._strict.get(tp)
            if strict is None:
                strict = self._strict[tp] = msgspec.json.Decoder(tp)
        strict_error: Exception | None = None
        try:
            strict.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError, TypeError) as exc:
            strict_error = exc
        try:
            value = schema.decoder(tp).decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError, TypeError) as exc:
            self._record("FAIL", f"{what}: does not match the schema: {exc}", line)
            return None
        if strict_error is not None:
            why = str(strict_error)
            if "unknown field" in why:  # a newer revision's field, or one the spec reserves
                why += _UNKNOWN_FIELD
            self._record("WARN", f"{what}: accepted only leniently: {why}", line)
        return value

    def _record(self, status: Status, text: str, line: WireLine | None = None) -> None:
        with self._lock:
            if len(self.problems) < 50 and all((s, t) != (status, text) for s, t, _ in self.problems):
                self.problems.append((status, text, line))


# ------------------------------------------------------------------------------ the raw peer


@dataclass
class _Inbound:
    """One line the agent wrote."""

    seq: int
    line: bytes
    msg: Any  # an rpc message, a list of them (batch), or rpc.LineTooLong


class _Peer:
    """One agent process and the raw JSON-RPC conversation with it.

    A reader thread records every line the agent writes (validated against the schema) and
    answers the agent's own requests: permission requests get ``cancelled``, anything else
    -32601 (the checker offers nothing). Requests are written by hand, so ids and framing are
    entirely up to the caller.
    """

    def __init__(self, transport: Transport, validator: _Validator, name: str) -> None:
        self.name = name
        self.validator = validator
        self.transport = transport
        self._encoder = rpc.Encoder()
        self._write_lock = threading.Lock()
        self._cond = threading.Condition()
        self.inbound: list[_Inbound] = []
        self.log: list[WireLine] = []  # every line both ways, for the checks' transcripts
        self._opened = time.monotonic()
        self.sent_methods: dict[Any, str] = {}  # (type name, id) -> method, for result types
        self.agent_requests: list[tuple[str, WireLine]] = []
        # answers to nothing we asked, envelopes that are not JSON-RPC
        self.stray: list[tuple[str, WireLine | None]] = []
        self.session_ids: list[str] = []  # every id session/new answered, in order
        self.refusals: list[str] = []  # "<method>: <why>" for each refusal of an access method
        self._malformed = 0  # lines sent whose id cannot be read: each may get an answer with id null
        # The version an initialize answer chose when it is not the one this checker speaks (the
        # answer to the version probe may be a draft's): nothing of that conversation is held
        # against the v1 schema, which cannot judge it.
        self.other_version: int | None = None
        self.eof = threading.Event()
        self._ids = itertools.count(1)
        self._reader = threading.Thread(target=self._read_loop, name=f"acp-check-{name}", daemon=True)
        self._reader.start()

    # ---- writing

    def next_id(self) -> int:
        """A fresh integer id."""
        return next(self._ids)

    def write(self, data: bytes, *, malformed: bool = False) -> bool:
        """Write raw bytes (``malformed``: a line whose id the agent cannot read); False if the
        agent is gone."""
        if malformed:
            with self._cond:
                self._malformed += 1
        self._note("out", data)
        try:
            with self._write_lock:
                self.transport.write(data)
            return True
        except Exception as exc:  # ConnectionClosedError, or an OSError on a dead pipe
            _log.debug("%s: write failed: %r", self.name, exc)
            return False

    def write_raw(self, line: bytes, msg_id: rpc.RequestId, method: str, *, malformed: bool = False) -> rpc.RequestId:
        """Write a hand-made line whose answer (if any) will carry ``msg_id``."""
        with self._cond:
            self.sent_methods[_key(msg_id)] = method
        self.write(line, malformed=malformed)
        return msg_id

    def request(self, method: str, params: Any, msg_id: rpc.RequestId | None = None) -> rpc.RequestId:
        """Send a request (with ``msg_id``, or a fresh integer id); returns the id."""
        if msg_id is None:
            msg_id = self.next_id()
        with self._cond:
            self.sent_methods[_key(msg_id)] = method
        self.write(self._encoder.request(msg_id, method, params))
        return msg_id

    def notify(self, method: str, params: Any) -> None:
        """Send a notification."""
        self.write(self._encoder.notification(method, params))

    def _note(self, direction: str, data: bytes) -> WireLine:
        text = data.rstrip(b"\r\n").decode("utf-8", "replace")
        if len(text) > _LINE_LIMIT:
            text = text[:_LINE_LIMIT] + f"… ({len(data)} bytes in all)"
        line = WireLine(self.name, direction, round(time.monotonic() - self._opened, 3), text)
        with self._cond:
            self.log.append(line)
        return line

    # ---- waiting

    def mark(self) -> int:
        """The position in the transcript now (see :meth:`since`)."""
        with self._cond:
            return len(self.inbound)

    def since(self, mark: int) -> list[_Inbound]:
        """Everything received after ``mark``."""
        with self._cond:
            return self.inbound[mark:]

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate()`` (checked under the transcript lock) or EOF or timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate() or self.eof.is_set(), timeout) and predicate()

    def answer(self, msg_id: rpc.RequestId, timeout: float) -> rpc.Response | rpc.ErrorResponse | None:
        """Wait for the answer to ``msg_id`` (matched exactly: type and value)."""
        found: list[Any] = []

        def ready() -> bool:
            for item in reversed(self.inbound):
                for msg in _messages(item):
                    if isinstance(msg, (rpc.Response, rpc.ErrorResponse)) and _same_id(msg.id, msg_id):
                        found.append(msg)
                        return True
            return False

        self.wait_for(ready, timeout)
        return found[0] if found else None

    def answers_to(self, msg_id: rpc.RequestId) -> int:
        """How many answers carried ``msg_id``."""
        with self._cond:
            return sum(
                1
                for item in self.inbound
                for msg in _messages(item)
                if isinstance(msg, (rpc.Response, rpc.ErrorResponse)) and _same_id(msg.id, msg_id)
            )

    def updates_for(self, session_id: str, items: Sequence[_Inbound]) -> int:
        """How many ``session/update`` notifications for ``session_id`` are in ``items``."""
        return sum(1 for item in items for msg in _messages(item) if _update_session(msg) == session_id)

    def exit_note(self) -> str:
        """`` (the agent closed its output and exited with code N)`` once it is gone (or ``was
        killed by SIGKILL``, say), else ``""``."""
        if not self.eof.is_set():
            return ""
        if not isinstance(self.transport, ProcessTransport):
            return " (the agent closed the connection)"
        code = self.transport.wait(1.0)
        return " (the agent closed its output" + (f" and {describe_exit(code)})" if code is not None else ")")

    def alive(self, timeout: float) -> bool:
        """True if the agent still answers a request (an unknown method: any answer will do)."""
        msg_id = self.request("acp_check/ping", {})
        return self.answer(msg_id, timeout) is not None

    def close(self) -> None:
        """Stop the agent and the reader."""
        self.transport.close()
        self._reader.join(5.0)

    # ---- reading

    def _read_loop(self) -> None:
        framer = rpc.LineFramer()
        try:
            while True:
                data = self.transport.read()
                lines = framer.feed(data) if data else framer.end()
                for line in lines:
                    self._on_line(line)
                if not data:
                    break
        except Exception:
            _log.exception("%s: reader failed", self.name)
        finally:
            self.eof.set()
            with self._cond:
                self._cond.notify_all()

    def _on_line(self, line: bytes | rpc.LineTooLong) -> None:
        msg: Any = line if isinstance(line, rpc.LineTooLong) else rpc.decode_line(line)
        wire = self._note("in", line if isinstance(line, bytes) else f"<a line of {line.size} bytes>".encode())
        with self._cond:
            item = _Inbound(len(self.inbound), line if isinstance(line, bytes) else b"", msg)
            self.inbound.append(item)
            self._cond.notify_all()
        for one in _messages(item):
            self._inspect(one, wire, item.line if not isinstance(item.msg, list) else None)

    def _inspect(self, msg: Any, wire: WireLine, line: bytes | None) -> None:
        if isinstance(msg, rpc.LineTooLong):
            self.stray.append((f"a line of {msg.size} bytes (over the 64 MiB cap)", wire))
        elif isinstance(msg, rpc.Invalid):
            self.stray.append((f"an invalid JSON-RPC message: {msg.reason}", wire))
        elif isinstance(msg, rpc.Request):
            self._on_agent_request(msg, wire)
        elif isinstance(msg, rpc.Notification):
            self._check_params(msg.method, msg.params, wire, notification=True)
        elif isinstance(msg, rpc.Response):
            with self._cond:
                method = self.sent_methods.get(_key(msg.id))
            if method is None:
                self.stray.append((f"an answer to id {msg.id!r}, which the checker never sent", wire))
                return
            if method == "initialize" and (version := _other_version(msg.result)) is not None:
                self.other_version = version
                return
            spec = schema.STABLE_AGENT_METHODS.get(method)
            if spec is not None and spec.result_type is not None and self.other_version is None:
                self.validator.check(f"result of {method}", msg.result, spec.result_type, wire)
        elif isinstance(msg, rpc.ErrorResponse):
            with self._cond:
                method = self.sent_methods.get(_key(msg.id)) if msg.id is not None else None
                malformed = self._malformed
            if msg.id is None:
                # JSON-RPC 2.0: the id member is REQUIRED in every answer; null only when the
                # request's id could not be read (a parse error, an invalid request).
                if line is not None and not _has_id_member(line):
                    self.stray.append(("an error answer without an id member (JSON-RPC 2.0 requires one)", wire))
                elif malformed == 0:
                    self.stray.append(("an error answer with id null, though every request the checker sent had an id", wire))
            elif method is None:
                self.stray.append((f"an error answer to id {msg.id!r}, which the checker never sent", wire))
            elif method in _ACCESS_METHODS and (why := refusal(msg.error)) is not None:
                with self._cond:
                    self.refusals.append(f"{method}: {why}")

    def _check_params(self, method: str, params: msgspec.Raw, wire: WireLine, notification: bool) -> None:
        if method.startswith("_") or self.other_version is not None:
            return  # extension methods carry free-form params; another version, other types
        spec = schema.STABLE_CLIENT_METHODS.get(method)
        if spec is None:
            spec = schema.CLIENT_METHODS.get(method)
        if spec is None:
            self.validator._record("FAIL", f"the agent sent an unknown method {method!r}", wire)
            return
        if spec.is_notification != notification:
            kind = "notification" if notification else "request"
            self.validator._record("FAIL", f"{method} was sent as a {kind}", wire)
        self.validator.check(f"params of {method}", params, spec.params_type, wire)

    def _on_agent_request(self, msg: rpc.Request, wire: WireLine) -> None:
        with self._cond:
            self.agent_requests.append((msg.method, wire))
        self._check_params(msg.method, msg.params, wire, notification=False)
        if msg.method == "session/request_permission":
            self.write(self._encoder.response(msg.id, {"outcome": {"outcome": "cancelled"}}))
        else:
            self.write(self._encoder.error(msg.id, METHOD_NOT_FOUND, f"the checker offers no {msg.method}"))


def _has_id_member(line: bytes) -> bool:
    try:
        value = msgspec.json.decode(line)
    except msgspec.DecodeError:
        return True  # not JSON at all: reported as invalid elsewhere
    return not isinstance(value, dict) or "id" in value


def _messages(item: _Inbound) -> list[Any]:
    msg = item.msg
    return msg if isinstance(msg, list) else [msg]


def _key(msg_id: Any) -> tuple[str, Any]:
    return (type(msg_id).__name__, msg_id)


def _same_id(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _update_kind(msg: Any) -> str | None:
    """The ``sessionUpdate`` tag of a ``session/update`` notification, or None."""
    if isinstance(msg, rpc.Notification) and msg.method == "session/update" and msg.params:
        try:
            value = msgspec.json.decode(msg.params)
        except msgspec.DecodeError:
            return None
        update = value.get("update") if isinstance(value, dict) else None
        tag = update.get("sessionUpdate") if isinstance(update, dict) else None
        return tag if isinstance(tag, str) else None
    return None


def _update_session(msg: Any) -> str | None:
    if isinstance(msg, rpc.Notification) and msg.method == "session/update" and msg.params:
        try:
            value = msgspec.json.decode(msg.params)
        except msgspec.DecodeError:
            return None
        if isinstance(value, dict):
            session = value.get("sessionId")
            return session if isinstance(session, str) else None
    return None


def _result(msg: Any) -> Any:
    """The decoded ``result`` of a response (plain JSON), or None."""
    if isinstance(msg, rpc.Response):
        try:
            return msgspec.json.decode(msg.result)
        except msgspec.DecodeError:
            return None
    return None


def _session(answer: Any, session_id: str | None) -> str:
    return f"sessionId {session_id!r}" if session_id is not None else _describe(answer)


def _describe(msg: Any, limit: int = 120) -> str:
    if msg is None:
        return "no answer"
    if isinstance(msg, rpc.ErrorResponse):
        # The reason a peer put in data ({"details": ...}); not data that only repeats what the
        # check already says ({"method": ...}).
        detail = _data_text(msg.error.data, as_json=False)
        suffix = f": {detail}" if detail and detail != msg.error.message else ""
        return bounded(f"error {msg.error.code} {msg.error.message!r}{suffix}", limit)
    return bounded(f"result {bytes(msg.result).decode('utf-8', 'replace')}", limit)


def _stop_reason(answer: Any) -> str | None:
    result = _result(answer)
    stop = result.get("stopReason") if isinstance(result, dict) else None
    return stop if isinstance(stop, str) else None


def _is_error(answer: Any, code: int) -> bool:
    return isinstance(answer, rpc.ErrorResponse) and answer.error.code == code
