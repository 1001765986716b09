"""``acp check``: a conformance check of any ACP agent, spawned (stdio) or remote (a URL).

The checker spawns the agent (:class:`~acp.transport.ProcessTransport`), or connects to it when
given an :class:`~acp.client.settings.AgentSettings` with a URL, and talks to it as a
deliberately minimal client: it writes raw JSON-RPC lines (so that it can send string ids,
garbage, batches and huge messages) and reads every line the agent writes through the SDK's
sans-I/O layer (:mod:`acp.rpc`). Every message the agent sends is checked against the schema
with the strict decoders of :mod:`acp.schema`; a message that only the lenient path accepts (an
unknown union tag, a value the schema's leniency hints tolerate) is a warning. The checker
advertises no ``fs``, ``terminal`` or ``elicitation`` capability, so the agent must never call
those methods, and does not show notices, compactions or subagents, so the agent must never send
those session updates.

Each check prints ``PASS`` / ``FAIL`` / ``WARN`` / ``SKIP``; the agent conforms when no check
failed (warnings are reported, not fatal). Three agent processes are used: the main run, one for
version negotiation with an unsupported version, and one for robustness (malformed input, stdin
closed), so that a crash in one group does not hide the results of another.

Use it from the command line (``acp check -- my-agent --stdio``) or from Python::

    report = run_checks(["my-agent", "--stdio"], cancel_prompt="write a long story")
    assert report.conforming, report.render()
"""

from __future__ import annotations

import itertools
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal, Union

import msgspec

from . import rpc, schema
from .capabilities import UPDATE_CAPABILITY
from .errors import METHOD_NOT_FOUND, PARSE_ERROR, ConnectionClosedError, _data_text
from .transport import ProcessTransport
from .transport.base import Transport
from .transport.process import describe_exit

if TYPE_CHECKING:
    from .client.settings import AgentSettings

__all__ = ["run_checks", "CheckResult", "Report", "Status", "DEFAULT_TIMEOUT", "LARGE_PROMPT_BYTES"]

_log = logging.getLogger("acp.conformance")

Status = Literal["PASS", "FAIL", "WARN", "SKIP"]

DEFAULT_TIMEOUT = 10.0
"""Seconds to wait for each answer (and for the agent to exit once stdin is closed)."""

LARGE_PROMPT_BYTES = 3 * 1024 * 1024
"""Size of the text of the large-prompt check."""

UNSUPPORTED_VERSION = 99999
_NO_SUCH_SESSION = "acp-check-no-such-session"
_CHECKER_INFO = {"name": "acp-check", "version": "1"}
_NO_CAPABILITIES: dict[str, Any] = {
    "fs": {"readTextFile": False, "writeTextFile": False},
    "terminal": False,
}
_FORBIDDEN_PREFIXES = ("fs/", "terminal/", "elicitation/")


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check."""

    name: str
    status: Status
    detail: str = ""


@dataclass
class Report:
    """Every check's result, in order, and the verdict."""

    agent: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def conforming(self) -> bool:
        """True when no check failed (warnings and skips are allowed)."""
        return not any(r.status == "FAIL" for r in self.results)

    def count(self, status: Status) -> int:
        """How many checks ended with ``status``."""
        return sum(1 for r in self.results if r.status == status)

    def verdict(self) -> str:
        """The one-line verdict."""
        counts = ", ".join(f"{self.count(s)} {s.lower()}" for s in ("PASS", "FAIL", "WARN", "SKIP"))
        word = "CONFORMING" if self.conforming else "NOT CONFORMING"
        return f"verdict: {word} ({counts})"

    def render(self) -> str:
        """The whole report as text, one line per check, then the verdict."""
        lines = [format_result(r) for r in self.results]
        lines.append(self.verdict())
        return "\n".join(lines)


def format_result(result: CheckResult) -> str:
    """``PASS  name  detail``, aligned."""
    detail = f"  {result.detail}" if result.detail else ""
    return f"{result.status:<4}  {result.name:<32}{detail}".rstrip()


# ------------------------------------------------------------------------------ schema checks


class _Validator:
    """Checks payloads strictly (native msgspec decoding of the generated types), then
    leniently (:func:`acp.schema.decoder`): strict failure + lenient success is a warning."""

    def __init__(self) -> None:
        self._strict: dict[Any, msgspec.json.Decoder[Any]] = {}
        self.problems: list[tuple[Status, str]] = []
        self.checked = 0
        self._lock = threading.Lock()

    def check(self, what: str, raw: msgspec.Raw | bytes, tp: Any) -> Any:
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
            self._record("FAIL", f"{what}: does not match the schema: {exc}")
            return None
        if strict_error is not None:
            self._record("WARN", f"{what}: accepted only leniently: {strict_error}")
        return value

    def _record(self, status: Status, text: str) -> None:
        with self._lock:
            if len(self.problems) < 50 and (status, text) not in self.problems:
                self.problems.append((status, text))


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
        self.sent_methods: dict[Any, str] = {}  # (type name, id) -> method, for result types
        self.agent_requests: list[str] = []
        self.stray: list[str] = []  # answers to nothing we asked, envelopes that are not JSON-RPC
        self.eof = threading.Event()
        self._ids = itertools.count(1)
        self._reader = threading.Thread(target=self._read_loop, name=f"acp-check-{name}", daemon=True)
        self._reader.start()

    # ---- writing

    def next_id(self) -> int:
        """A fresh integer id."""
        return next(self._ids)

    def write(self, data: bytes) -> bool:
        """Write raw bytes; False if the agent is gone."""
        try:
            with self._write_lock:
                self.transport.write(data)
            return True
        except Exception as exc:  # ConnectionClosedError, or an OSError on a dead pipe
            _log.debug("%s: write failed: %r", self.name, exc)
            return False

    def write_raw(self, line: bytes, msg_id: rpc.RequestId, method: str) -> rpc.RequestId:
        """Write a hand-made line whose answer (if any) will carry ``msg_id``."""
        with self._cond:
            self.sent_methods[_key(msg_id)] = method
        self.write(line)
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
        with self._cond:
            item = _Inbound(len(self.inbound), line if isinstance(line, bytes) else b"", msg)
            self.inbound.append(item)
            self._cond.notify_all()
        for one in _messages(item):
            self._inspect(one)

    def _inspect(self, msg: Any) -> None:
        if isinstance(msg, rpc.LineTooLong):
            self.stray.append(f"a line of {msg.size} bytes (over the 64 MiB cap)")
        elif isinstance(msg, rpc.Invalid):
            self.stray.append(f"an invalid JSON-RPC message: {msg.reason}")
        elif isinstance(msg, rpc.Request):
            self._on_agent_request(msg)
        elif isinstance(msg, rpc.Notification):
            self._check_params(msg.method, msg.params, notification=True)
        elif isinstance(msg, rpc.Response):
            with self._cond:
                method = self.sent_methods.get(_key(msg.id))
            if method is None:
                self.stray.append(f"an answer to id {msg.id!r}, which the checker never sent")
                return
            spec = schema.STABLE_AGENT_METHODS.get(method)
            if spec is not None and spec.result_type is not None:
                self.validator.check(f"result of {method}", msg.result, spec.result_type)
        elif isinstance(msg, rpc.ErrorResponse):
            with self._cond:
                known = msg.id is None or _key(msg.id) in self.sent_methods
            if not known:
                self.stray.append(f"an error answer to id {msg.id!r}, which the checker never sent")

    def _check_params(self, method: str, params: msgspec.Raw, notification: bool) -> None:
        if method.startswith("_"):
            return  # extension methods carry free-form params
        spec = schema.STABLE_CLIENT_METHODS.get(method)
        if spec is None:
            spec = schema.CLIENT_METHODS.get(method)
        if spec is None:
            self.validator._record("FAIL", f"the agent sent an unknown method {method!r}")
            return
        if spec.is_notification != notification:
            kind = "notification" if notification else "request"
            self.validator._record("FAIL", f"{method} was sent as a {kind}")
        self.validator.check(f"params of {method}", params, spec.params_type)

    def _on_agent_request(self, msg: rpc.Request) -> None:
        with self._cond:
            self.agent_requests.append(msg.method)
        self._check_params(msg.method, msg.params, notification=False)
        if msg.method == "session/request_permission":
            self.write(self._encoder.response(msg.id, {"outcome": {"outcome": "cancelled"}}))
        else:
            self.write(self._encoder.error(msg.id, METHOD_NOT_FOUND, f"the checker offers no {msg.method}"))


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


def _describe(msg: Any) -> str:
    if msg is None:
        return "no answer"
    if isinstance(msg, rpc.ErrorResponse):
        # The reason a peer put in data ({"details": ...}), bounded; not data that only
        # repeats what the check already says ({"method": ...}).
        detail = _data_text(msg.error.data, as_json=False)
        suffix = f": {detail}" if detail and detail != msg.error.message else ""
        return f"error {msg.error.code} {msg.error.message!r}{suffix}"
    text = bytes(msg.result).decode("utf-8", "replace")
    return f"result {text[:120]}{'...' if len(text) > 120 else ''}"


# ------------------------------------------------------------------------------ the checks


class _Checker:
    def __init__(
        self,
        open_transport: Callable[[], Transport],
        *,
        cancel_prompt: str | None,
        prompt: str,
        timeout: float,
        cwd: str,
        emit: Callable[[CheckResult], None],
    ) -> None:
        self.open_transport = open_transport
        self.cancel_prompt = cancel_prompt
        self.prompt_text = prompt
        self.timeout = timeout
        self.cwd = cwd
        self.emit = emit
        self.validator = _Validator()
        self.peers: list[_Peer] = []
        self.known_sessions: set[str] = set()
        self.prompts = 0

    def result(self, name: str, status: Status, detail: str = "") -> None:
        self.emit(CheckResult(name, status, detail))

    def ok(self, name: str, passed: bool, detail: str) -> bool:
        self.result(name, "PASS" if passed else "FAIL", detail)
        return passed

    @contextmanager
    def peer(self, name: str) -> Iterator[_Peer]:
        peer = _Peer(self.open_transport(), self.validator, name)
        self.peers.append(peer)
        try:
            yield peer
        finally:
            peer.close()

    def initialize(self, peer: _Peer, version: int = 1) -> Any:
        msg_id = peer.request(
            "initialize",
            {"protocolVersion": version, "clientCapabilities": _NO_CAPABILITIES, "clientInfo": _CHECKER_INFO},
        )
        return peer.answer(msg_id, self.timeout)

    def new_session(self, peer: _Peer, msg_id: rpc.RequestId | None = None) -> tuple[Any, str | None]:
        msg_id = peer.request("session/new", {"cwd": self.cwd, "mcpServers": []}, msg_id)
        answer = peer.answer(msg_id, self.timeout)
        result = _result(answer)
        session_id = result.get("sessionId") if isinstance(result, dict) else None
        if isinstance(session_id, str) and session_id:
            self.known_sessions.add(session_id)
            return answer, session_id
        return answer, None

    def send_prompt(self, peer: _Peer, session_id: str, text: str) -> rpc.RequestId:
        self.prompts += 1
        return peer.request(
            "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        )

    # ---- groups

    def run(self) -> None:
        self.version_run()
        self.main_run()
        self.robustness_run()
        self.final_checks()

    def main_run(self) -> None:
        with self.peer("main") as peer:
            answer = self.initialize(peer, 1)
            result = _result(answer)
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            if not self.ok(
                "handshake.initialize",
                version == 1,
                f"protocolVersion 1 -> {version if result else _describe(answer)}{peer.exit_note()}",
            ):
                if answer is None:
                    self.result("main run", "FAIL", "the agent did not answer initialize: the remaining checks of this run are skipped")
                    return
            self.jsonrpc_checks(peer)
            self.session_checks(peer)
            self.prompt_checks(peer)

    def jsonrpc_checks(self, peer: _Peer) -> None:
        # ids echoed exactly, whatever their type
        problems = []
        for msg_id in ("acp-check-id-1", 0, 9007199254740991, "42"):
            answer, _ = self.new_session(peer, msg_id)
            if answer is None:
                problems.append(f"id {msg_id!r} was not echoed")
            elif peer.answers_to(msg_id) != 1:
                problems.append(f"id {msg_id!r} was answered {peer.answers_to(msg_id)} times")
        self.ok("jsonrpc.ids_echoed", not problems, "; ".join(problems) or "string ids, id 0 and 2^53-1 echoed exactly")

        # unknown method -> -32601, also for an extension method
        details = []
        passed = True
        for method in ("acp_check/no_such_method", "_acp_check/no_such_method"):
            answer = peer.answer(peer.request(method, {}), self.timeout)
            good = isinstance(answer, rpc.ErrorResponse) and answer.error.code == METHOD_NOT_FOUND
            passed = passed and good
            details.append(f"{method} -> {_describe(answer)}")
        self.ok("jsonrpc.unknown_method", passed, "; ".join(details))

        # notifications are never answered, known or not
        mark = peer.mark()
        peer.notify("acp_check/unknown_notification", {"x": 1})
        peer.notify("_acp_check/unknown_extension_notification", {"x": 1})
        peer.notify("session/cancel", {"sessionId": _NO_SUCH_SESSION})
        sync = peer.request("acp_check/sync", {})
        sync_answer = peer.answer(sync, self.timeout)
        stray = [
            m for item in peer.since(mark) for m in _messages(item)
            if not isinstance(m, (rpc.Request, rpc.Notification)) and not _same_id(getattr(m, "id", None), sync)
        ]
        self.ok(
            "jsonrpc.notifications_unanswered",
            sync_answer is not None and not stray,
            f"{len(stray)} answer(s) to notifications" if stray else (
                "three notifications, no answer" if sync_answer is not None else "no answer to the request after them"
            ),
        )

        # still usable after errors
        answer, session_id = self.new_session(peer)
        self.ok("jsonrpc.usable_after_error", session_id is not None, f"session/new after errors -> {_session(answer, session_id)}")

    def session_checks(self, peer: _Peer) -> None:
        answer, session_id = self.new_session(peer)
        self.ok("session.new", session_id is not None, f"session/new -> {_session(answer, session_id)}")
        mark = peer.mark()
        answer = peer.answer(self.send_prompt(peer, _NO_SUCH_SESSION, "hello"), self.timeout)
        updates = peer.updates_for(_NO_SUCH_SESSION, peer.since(mark))
        self.ok(
            "session.unknown_session_prompt",
            isinstance(answer, rpc.ErrorResponse) and not updates,
            f"prompt on an unknown session -> {_describe(answer)}"
            + (f", and {updates} update(s) for it" if updates else ""),
        )

    def prompt_checks(self, peer: _Peer) -> None:
        _, session_id = self.new_session(peer)
        if session_id is None:
            for name in ("prompt.basic", "prompt.cancel", "prompt.pipelined", "prompt.large"):
                self.result(name, "FAIL", "no session: session/new failed")
            return
        # basic turn: answered with a stop reason, no update after the answer
        answer = peer.answer(self.send_prompt(peer, session_id, self.prompt_text), self.timeout)
        after = peer.mark()
        peer.answer(peer.request("acp_check/sync", {}), self.timeout)
        late = peer.updates_for(session_id, peer.since(after))
        result = _result(answer)
        stop = result.get("stopReason") if isinstance(result, dict) else None
        self.ok(
            "prompt.basic",
            isinstance(stop, str) and not late,
            f"stopReason {stop!r}" if stop else _describe(answer) + (f"; {late} update(s) after the answer" if late else ""),
        )
        self.cancel_check(peer)
        self.pipelined_check(peer)
        self.large_prompt_check(peer, session_id)

    def cancel_check(self, peer: _Peer) -> None:
        name = "prompt.cancel"
        if self.cancel_prompt is None:
            self.result(name, "SKIP", "give --cancel-prompt TEXT (a prompt that keeps the agent busy)")
            self.result("prompt.no_updates_after_cancel", "SKIP", "needs --cancel-prompt")
            return
        _, session_id = self.new_session(peer)
        if session_id is None:
            self.result(name, "FAIL", "no session: session/new failed")
            return
        mark = peer.mark()
        msg_id = self.send_prompt(peer, session_id, self.cancel_prompt)
        # Cancel once the turn visibly started (its first update), or after a short while.
        peer.wait_for(lambda: peer.updates_for(session_id, peer.since(mark)) > 0, min(self.timeout, 2.0))
        peer.notify("session/cancel", {"sessionId": session_id})
        answer = peer.answer(msg_id, self.timeout)
        result = _result(answer)
        stop = result.get("stopReason") if isinstance(result, dict) else None
        self.ok(name, stop == "cancelled", f"after session/cancel: stopReason {stop!r}" if stop else _describe(answer))
        after = peer.mark()
        peer.answer(peer.request("acp_check/sync", {}), self.timeout)
        late = peer.updates_for(session_id, peer.since(after))
        self.ok(
            "prompt.no_updates_after_cancel",
            answer is not None and not late,
            f"{late} update(s) after the cancelled turn was answered" if late else "none after the answer",
        )

    def pipelined_check(self, peer: _Peer) -> None:
        _, first = self.new_session(peer)
        _, second = self.new_session(peer)
        if first is None or second is None:
            self.result("prompt.pipelined", "FAIL", "session/new failed")
            return
        ids = [self.send_prompt(peer, first, self.prompt_text), self.send_prompt(peer, second, self.prompt_text)]
        answers = [peer.answer(i, self.timeout) for i in ids]
        self.ok(
            "prompt.pipelined",
            all(isinstance(a, rpc.Response) for a in answers),
            "two prompts on two sessions sent back to back: " + ", ".join(_describe(a)[:40] for a in answers),
        )

    def large_prompt_check(self, peer: _Peer, session_id: str) -> None:
        text = ("All work and no play makes a large prompt. " * (LARGE_PROMPT_BYTES // 43 + 1))[:LARGE_PROMPT_BYTES]
        started = time.monotonic()
        answer = peer.answer(self.send_prompt(peer, session_id, text), self.timeout * 3)
        took = time.monotonic() - started
        size = f"{LARGE_PROMPT_BYTES // (1024 * 1024)} MiB prompt"
        if isinstance(answer, rpc.Response):
            self.result("prompt.large", "PASS", f"{size} answered in {took:.1f}s")
        elif isinstance(answer, rpc.ErrorResponse):
            self.result("prompt.large", "WARN", f"{size} refused: {_describe(answer)}")
        else:
            self.result("prompt.large", "FAIL", f"{size}: no answer within {self.timeout * 3:.0f}s")

    def version_run(self) -> None:
        with self.peer("version") as peer:
            answer = self.initialize(peer, UNSUPPORTED_VERSION)
            result = _result(answer)
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            passed = isinstance(version, int) and version != UNSUPPORTED_VERSION and 1 <= version
            detail = f"protocolVersion {UNSUPPORTED_VERSION} -> " + (
                str(version) if result is not None else _describe(answer)
            )
            if version == UNSUPPORTED_VERSION:
                detail += " (echoed: the agent must answer a version it supports)"
            detail += peer.exit_note()
            self.ok("handshake.unsupported_version", passed, detail)

    def robustness_run(self) -> None:
        with self.peer("robustness") as peer:
            if self.initialize(peer, 1) is None:
                self.result("robustness run", "FAIL", "the agent did not answer initialize")
                return
            # a line that is not JSON -> -32700 with id null, then still alive
            mark = peer.mark()
            peer.write(b"this is not JSON {\n")
            got = peer.wait_for(
                lambda: any(
                    isinstance(m, rpc.ErrorResponse) and m.error.code == PARSE_ERROR
                    for item in peer.since(mark) for m in _messages(item)
                ),
                self.timeout,
            )
            parse_errors = [
                m for item in peer.since(mark) for m in _messages(item) if isinstance(m, rpc.ErrorResponse)
            ]
            alive = peer.alive(self.timeout)
            null_id = all(m.id is None for m in parse_errors)
            self.ok(
                "robust.garbage_line",
                got and alive and null_id,
                ("-32700 with id null" if got and null_id else
                 "-32700 with a non-null id" if got else "no -32700 answer")
                + ("; still alive" if alive else "; the agent stopped answering"),
            )
            # an object that is not a valid request
            bad = peer.write_raw(b'{"jsonrpc":"2.0","id":"acp-check-bad","method":5}\n', "acp-check-bad", "(invalid)")
            answer = peer.answer(bad, self.timeout)
            alive = peer.alive(self.timeout)
            if not alive:
                self.result("robust.invalid_request", "FAIL", "the agent stopped answering")
            elif isinstance(answer, rpc.ErrorResponse) and answer.error.code == -32600:
                self.result("robust.invalid_request", "PASS", "method 5 -> -32600; still alive")
            else:
                self.result("robust.invalid_request", "WARN", f"method 5 -> {_describe(answer)} (expected -32600); still alive")
            # a batch: ACP does not use batches, but one must not break the agent
            batch = (
                b'[{"jsonrpc":"2.0","id":"acp-check-batch-1","method":"acp_check/no_such_method"},'
                b'{"jsonrpc":"2.0","method":"acp_check/unknown_notification"}]\n'
            )
            peer.write_raw(batch, "acp-check-batch-1", "acp_check/no_such_method")
            alive = peer.alive(self.timeout)
            self.ok("robust.batch", alive, "a JSON array: " + ("still alive" if alive else "the agent stopped answering"))
            # end of input -> the agent exits
            if not isinstance(peer.transport, ProcessTransport):
                self.result("robust.stdin_closed", "SKIP", "not a spawned agent: it has no stdin to close")
                return
            peer.transport.close_write()
            started = time.monotonic()
            code = peer.transport.wait(self.timeout)
            took = time.monotonic() - started
            self.ok(
                "robust.stdin_closed",
                code is not None,
                f"{describe_exit(code)}, {took:.1f}s after stdin closed" if code is not None
                else f"still running {self.timeout:.0f}s after stdin closed",
            )

    def final_checks(self) -> None:
        requests = [m for p in self.peers for m in p.agent_requests]
        forbidden = sorted({m for m in requests if m.startswith(_FORBIDDEN_PREFIXES)})
        self.ok(
            "capabilities.honest",
            not forbidden,
            f"called {', '.join(forbidden)} although the client offered none" if forbidden
            else f"no fs/terminal/elicitation call over {self.prompts} prompts (none were offered)",
        )
        shown_only = sorted({
            tag for p in self.peers for item in p.since(0) for m in _messages(item)
            if (tag := _update_kind(m)) is not None and tag in UPDATE_CAPABILITY
        })
        self.ok(
            "capabilities.updates_honest",
            not shown_only,
            f"sent {', '.join(shown_only)} although the client advertised none of "
            "session.notices, session.compaction, subagents" if shown_only
            else "no notice, compaction or subagent update (the client advertised none)",
        )
        unknown = sorted({
            s for p in self.peers for item in p.since(0) for m in _messages(item)
            if (s := _update_session(m)) is not None and s not in self.known_sessions
        })
        self.ok(
            "session.updates_known_sessions",
            not unknown,
            f"session/update for unknown session(s) {unknown}" if unknown else "every session/update names a session of this client",
        )
        stray = [s for p in self.peers for s in p.stray]
        self.ok(
            "jsonrpc.envelopes",
            not stray,
            "; ".join(stray[:3]) + (f" (+{len(stray) - 3} more)" if len(stray) > 3 else "") if stray
            else "every message was valid JSON-RPC 2.0 and answered something the checker sent",
        )
        problems = self.validator.problems
        fails = [text for status, text in problems if status == "FAIL"]
        warns = [text for status, text in problems if status == "WARN"]
        total = sum(len(p.since(0)) for p in self.peers)
        if fails:
            self.result("schema.valid", "FAIL", f"{len(fails)} invalid: " + " | ".join(fails[:3]))
        elif warns:
            self.result("schema.valid", "WARN", f"{len(warns)} accepted only leniently: " + " | ".join(warns[:3]))
        else:
            self.result("schema.valid", "PASS", f"{total} messages, {self.validator.checked} payloads decoded strictly")


def run_checks(
    argv: Union[Sequence[str], AgentSettings],
    *,
    cancel_prompt: str | None = None,
    prompt: str = "hello",
    timeout: float = DEFAULT_TIMEOUT,
    cwd: str | None = None,
    out: IO[str] | None = None,
) -> Report:
    """Check the agent started by ``argv``; returns the :class:`Report`.

    ``argv`` may also be an :class:`~acp.client.settings.AgentSettings`: its command (spawned in
    its ``cwd``) or its URL (a remote agent, opened once per run of checks; ``robust.stdin_closed``
    is then skipped).

    ``cancel_prompt``: a prompt that keeps the agent busy, for the cancellation checks (skipped
    without it). ``prompt``: the text of ordinary prompts. ``timeout``: seconds to wait for each
    answer. ``cwd``: the session folder (default: a temporary one). ``out``: where to print each
    result as it comes (None: print nothing).
    """
    import shlex

    from .client.settings import AgentSettings

    if isinstance(argv, AgentSettings):
        settings = argv
        open_transport: Callable[[], Transport] = settings.open_transport
        agent = settings.describe()
    else:
        command = list(argv)
        open_transport = lambda: ProcessTransport(command)  # noqa: E731
        agent = shlex.join(command)
    report = Report(agent=agent)

    def emit(result: CheckResult) -> None:
        report.results.append(result)
        if out is not None:
            out.write(format_result(result) + "\n")
            out.flush()

    with tempfile.TemporaryDirectory(prefix="acp-check-") as tmp:
        checker = _Checker(
            open_transport,
            cancel_prompt=cancel_prompt,
            prompt=prompt,
            timeout=timeout,
            cwd=os.path.abspath(cwd) if cwd is not None else os.path.realpath(tmp),
            emit=emit,
        )
        try:
            checker.run()
        except FileNotFoundError as exc:
            emit(CheckResult("spawn", "FAIL", str(exc)))
        except ConnectionClosedError as exc:  # RemoteConnectionError: unreachable, refused
            emit(CheckResult("connect", "FAIL", str(exc)))
    return report
