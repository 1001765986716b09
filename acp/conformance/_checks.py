"""The checks themselves: three runs (version negotiation, the main run, robustness) over
fresh connections, then the checks over everything seen."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import msgspec

from .. import rpc
from ..capabilities import UPDATE_CAPABILITY
from ..errors import METHOD_NOT_FOUND, PARSE_ERROR
from ..transport import ProcessTransport
from ..transport.base import Transport
from ..transport.process import describe_exit
from ._wire import (
    _describe,
    _Inbound,
    _is_error,
    _messages,
    _Peer,
    _result,
    _same_id,
    _session,
    _stop_reason,
    _update_kind,
    _update_session,
    _Validator,
)
from .report import (
    ADVISORY,
    INFORMATIONAL,
    LARGE_PROMPT_BYTES,
    CheckResult,
    Status,
    WireLine,
    bounded,
    tier_of,
)

_TRANSCRIPT_LIMIT = 200  # wire lines kept per check

UNSUPPORTED_VERSION = 65535  # ProtocolVersion is a uint16: the largest version a client can send
_NO_SUCH_SESSION = "acp-check-no-such-session"
_INVALID_CURSOR = "acp-check-invalid-cursor"
_MAX_PAGES = 50
_CHECKER_INFO = {"name": "acp-check", "version": "1"}
_NO_CAPABILITIES: dict[str, Any] = {
    "fs": {"readTextFile": False, "writeTextFile": False},
    "terminal": False,
}
_FORBIDDEN_PREFIXES = ("fs/", "terminal/", "elicitation/")
# Checks that need a session or a turn: when the agent refuses those for lack of credentials or
# network, what they would have judged was never reached (NOT CHECKED, never FAIL).
_PROMPT_CAPABILITIES = {"prompt.image": "image", "prompt.audio": "audio", "prompt.embedded_context": "embeddedContext"}
_NEED_ACCESS = ("session.", "prompt.", "load.", "resume.", "list.", "delete.", "close.", "modes.", "config.",
                "capabilities.", "jsonrpc.usable_after_error")
# 1x1 transparent PNG, and a 10 ms silent 8 kHz mono WAV: the smallest valid media.
_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
_WAV = (
    "UklGRnQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YVAAAACAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgA=="
)


# ------------------------------------------------------------------------------ the checks


def _update_kinds(session_id: str, items: Sequence[_Inbound]) -> list[str]:
    """The ``sessionUpdate`` tags of the updates for ``session_id`` in ``items``."""
    kinds = []
    for item in items:
        for msg in _messages(item):
            if _update_session(msg) == session_id:
                try:
                    update = msgspec.json.decode(msg.params).get("update")
                except (msgspec.DecodeError, AttributeError):
                    update = None
                kinds.append(str(update.get("sessionUpdate")) if isinstance(update, dict) else "?")
    return kinds


def _select_values(option: dict[str, Any]) -> list[str]:
    """The values a ``select`` config option offers (flat or grouped)."""
    values: list[str] = []
    for entry in option.get("options") or ():
        if isinstance(entry, dict) and isinstance(entry.get("value"), str):
            values.append(entry["value"])
        elif isinstance(entry, dict):
            values.extend(o["value"] for o in entry.get("options") or () if isinstance(o, dict) and isinstance(o.get("value"), str))
    return values


def _session_new_exchanges(peer: _Peer, session_id: str) -> list[WireLine]:
    """The session/new requests whose answer carried ``session_id``, and those answers."""
    answered: list[tuple[Any, WireLine]] = []
    for line in list(peer.log):
        try:
            msg = json.loads(line.text)
        except ValueError:
            continue
        result = msg.get("result") if isinstance(msg, dict) else None
        if line.direction == "in" and isinstance(result, dict) and result.get("sessionId") == session_id:
            answered.append((msg.get("id"), line))
    ids = {json.dumps(msg_id) for msg_id, _ in answered}
    lines = []
    for line in list(peer.log):
        if line.direction == "out" and '"session/new"' in line.text:
            try:
                if json.dumps(json.loads(line.text).get("id")) in ids:
                    lines.append(line)
            except ValueError:
                continue
        elif any(line is answer for _, answer in answered):
            lines.append(line)
    return lines


class _Checker:
    def __init__(
        self,
        open_transport: Callable[[], Transport],
        *,
        cancel_prompt: str | None,
        prompt: str,
        timeout: float,
        cwd: str,
        auth_method: str | None,
        emit: Callable[[CheckResult], None],
        selected: Callable[[str], bool] = lambda name: True,
    ) -> None:
        self.open_transport = open_transport
        self.cancel_prompt = cancel_prompt
        self.prompt_text = prompt
        self.timeout = timeout
        self.cwd = cwd
        self.auth_method = auth_method
        self.emit = emit
        self.selected = selected
        self.validator = _Validator()
        self.peers: list[_Peer] = []
        self.known_sessions: set[str] = {_NO_SUCH_SESSION}  # the checker itself prompts on that one
        self.prompted: list[str] = []  # sessions with a successful turn, in order
        self.deleted: set[str] = set()
        self.prompts = 0
        self.caps: dict[str, Any] = {}  # agentCapabilities of the main run's initialize answer
        self.auth_methods: list[str] = []
        self.auth_specs: dict[str, dict[str, Any]] = {}
        self._current: _Peer | None = None
        self._told_blocked = False
        self._marks: dict[str, int] = {}

    # ---- results

    def result(
        self, name: str, status: Status, detail: str = "", transcript: Sequence[WireLine] | None = None,
        since: int | None = None,
    ) -> None:
        tier = tier_of(name)
        blocked = self.blocked
        if blocked is not None and status in ("FAIL", "SKIP") and name.startswith(_NEED_ACCESS):
            # The whole reason once, on the first check it stopped; the others point to it.
            first = not self._told_blocked
            self._told_blocked = True
            status, detail = "NOT CHECKED", (f"not reached: {blocked}" if first else
                                             f"not reached: {blocked.split(':', 1)[0]} was refused (see above)")
        elif status == "FAIL" and tier == ADVISORY:
            status = "WARN"  # advisory findings are reported, never decide the verdict
        elif status == "FAIL" and tier == INFORMATIONAL:
            status = "INFO"  # the spec leaves it to the agent: reported, never judged
        lines: tuple[WireLine, ...] = ()
        peer = self._current
        if transcript is not None:
            lines = tuple(transcript)
        elif peer is not None:
            # This check's exchange: every line since the previous result on this connection.
            with peer._cond:
                start = self._marks.get(peer.name, 0) if since is None else since
                lines = tuple(peer.log[start:])
        if peer is not None and transcript is None:
            self._marks[peer.name] = len(peer.log)
        if status not in ("FAIL", "WARN", "NOT CHECKED"):
            lines = ()
        self.emit(CheckResult(name, status, bounded(detail), tier, lines[-_TRANSCRIPT_LIMIT:]))

    @property
    def blocked(self) -> str | None:
        """Why the agent refused a session or a turn for lack of credentials or network (the
        first such refusal), or None."""
        for peer in self.peers:
            if peer.refusals:
                reason = peer.refusals[0]
                if self.auth_methods and self.auth_method is None:
                    reason += f"; give --auth-method, one of {', '.join(self.auth_methods)}"
                return reason
        return None

    def log_mark(self, peer: _Peer) -> int:
        """The position in ``peer``'s wire log now: ``result(since=...)`` lets several results
        share the exchange that began there."""
        with peer._cond:
            return len(peer.log)

    def ok(self, name: str, passed: bool, detail: str) -> bool:
        self.result(name, "PASS" if passed else "FAIL", detail)
        return passed

    def not_advertised(self, name: str, what: str) -> None:
        self.result(name, "N/A", f"not advertised ({what})")

    @contextmanager
    def peer(self, name: str) -> Iterator[_Peer]:
        peer = _Peer(self.open_transport(), self.validator, name)
        self.peers.append(peer)
        self._current = peer
        try:
            yield peer
        finally:
            self._current = None
            peer.close()

    # ---- requests

    def call(self, peer: _Peer, method: str, params: Any) -> Any:
        """Send a request and wait for its answer (None: no answer in time)."""
        return peer.answer(peer.request(method, params), self.timeout)

    def initialize(self, peer: _Peer, version: int = 1) -> Any:
        msg_id = peer.request(
            "initialize",
            {"protocolVersion": version, "clientCapabilities": _NO_CAPABILITIES, "clientInfo": _CHECKER_INFO},
        )
        return peer.answer(msg_id, self.timeout)

    def new_session(
        self, peer: _Peer, msg_id: rpc.RequestId | None = None, **extra: Any
    ) -> tuple[Any, str | None]:
        msg_id = peer.request("session/new", {"cwd": self.cwd, "mcpServers": [], **extra}, msg_id)
        answer = peer.answer(msg_id, self.timeout)
        result = _result(answer)
        session_id = result.get("sessionId") if isinstance(result, dict) else None
        if isinstance(session_id, str) and session_id:
            self.known_sessions.add(session_id)
            peer.session_ids.append(session_id)
            return answer, session_id
        return answer, None

    def no_session(self, peer: _Peer) -> str:
        """Why a check that needs a session was skipped, with the agent's exit when it is gone."""
        return "no session: session/new failed" + peer.exit_note()

    def send_prompt(self, peer: _Peer, session_id: str, text: str, *blocks: dict[str, Any]) -> rpc.RequestId:
        self.prompts += 1
        return peer.request(
            "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}, *blocks]}
        )

    def turn(self, peer: _Peer, session_id: str, text: str, *blocks: dict[str, Any]) -> Any:
        """One prompt turn; its answer. A session whose turn ended well counts as prompted."""
        answer = peer.answer(self.send_prompt(peer, session_id, text, *blocks), self.timeout)
        if _stop_reason(answer) is not None and session_id not in self.prompted:
            self.prompted.append(session_id)
        return answer

    def sync(self, peer: _Peer) -> None:
        """Wait until the agent has handled everything sent so far (it answers an unknown method)."""
        peer.answer(peer.request("acp_check/sync", {}), self.timeout)

    def listed(self, peer: _Peer, cursor: str | None = None) -> tuple[list[Any], str | None, list[str]]:
        """Every page of ``session/list`` for our cwd: (answers, problem or None, session ids)."""
        answers: list[Any] = []
        ids: list[str] = []
        seen_cursors: set[str] = set()
        while len(answers) < _MAX_PAGES:
            params: dict[str, Any] = {"cwd": self.cwd}
            if cursor is not None:
                params["cursor"] = cursor
            answer = self.call(peer, "session/list", params)
            answers.append(answer)
            result = _result(answer)
            if not isinstance(result, dict) or not isinstance(result.get("sessions"), list):
                return answers, f"page {len(answers)}: {_describe(answer)}", ids
            for info in result["sessions"]:
                if isinstance(info, dict) and isinstance(info.get("sessionId"), str):
                    ids.append(info["sessionId"])
                    if info.get("cwd") != self.cwd:
                        return answers, f"{info['sessionId']!r} has cwd {info.get('cwd')!r}, not the filter's", ids
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str):
                return answers, None, ids
            if cursor in seen_cursors:
                return answers, f"nextCursor {cursor!r} came back on page {len(answers)}: the pages loop", ids
            seen_cursors.add(cursor)
        return answers, f"still a nextCursor after {_MAX_PAGES} pages", ids

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
            if isinstance(result, dict):
                caps = result.get("agentCapabilities")
                self.caps = caps if isinstance(caps, dict) else {}
                methods = result.get("authMethods")
                self.auth_specs = {m["id"]: m for m in methods or () if isinstance(m, dict) and isinstance(m.get("id"), str)}
                self.auth_methods = list(self.auth_specs)
            self.authenticate_check(peer)
            self.jsonrpc_checks(peer)
            self.session_checks(peer)
            self.prompt_checks(peer)
            self.session_capability_checks(peer)
            self.unique_ids_check(peer)
            self.logout_check(peer)

    def authenticate_check(self, peer: _Peer) -> None:
        name = "auth.authenticate"
        if self.auth_method is None:
            if self.auth_methods:
                self.result(name, "SKIP", f"the agent offers {', '.join(self.auth_methods)}: give --auth-method ID to use one")
            else:
                self.not_advertised(name, "no authMethods, and no --auth-method given")
            return
        spec = self.auth_specs.get(self.auth_method, {})
        if spec.get("type") == "terminal":
            args = " ".join(str(a) for a in spec.get("args") or ())
            self.result(name, "SKIP", f"{self.auth_method!r} is a terminal method (never sent as authenticate): run the "
                        f"agent's command{' with ' + args if args else ''} in a terminal to sign in, then check again")
            return
        if spec.get("type") == "env_var":
            unset = [str(v.get("name")) for v in spec.get("vars") or () if isinstance(v, dict)
                     and not v.get("optional") and v.get("name") not in os.environ]
            if unset:
                self.result(name, "SKIP", f"{self.auth_method!r} reads {', '.join(unset)} from the agent's environment: "
                            "set them and check again")
                return
        answer = self.call(peer, "authenticate", {"methodId": self.auth_method})
        advertised = self.auth_method in self.auth_methods
        note = "" if advertised else f" ({self.auth_method!r} is not among the advertised authMethods {self.auth_methods})"
        self.ok(name, isinstance(answer, rpc.Response) and advertised, f"authenticate {self.auth_method!r} -> {_describe(answer)}{note}")

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
            answer = self.call(peer, method, {})
            passed = passed and _is_error(answer, METHOD_NOT_FOUND)
            details.append(f"{method} -> {_describe(answer, 60)}")
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
        hint = ""
        if _is_error(answer, -32000) and self.auth_methods and self.auth_method is None:
            hint = f" (authentication required: give --auth-method, one of {', '.join(self.auth_methods)})"
        self.ok("session.new", session_id is not None, f"session/new -> {_session(answer, session_id)}{hint}")
        mark = peer.mark()
        answer = peer.answer(self.send_prompt(peer, _NO_SUCH_SESSION, "hello"), self.timeout)
        updates = peer.updates_for(_NO_SUCH_SESSION, peer.since(mark))
        self.ok(
            "session.unknown_session_prompt",
            isinstance(answer, rpc.ErrorResponse) and not updates,
            f"prompt on an unknown session -> {_describe(answer)}"
            + (f", and {updates} update(s) for it" if updates else "")
            + peer.exit_note(),
        )

    def prompt_checks(self, peer: _Peer) -> None:
        _, session_id = self.new_session(peer)
        if session_id is None:
            for name in ("prompt.basic", "prompt.resource_link", "prompt.image", "prompt.audio",
                         "prompt.embedded_context", "prompt.cancel", "prompt.no_updates_after_cancel",
                         "prompt.pipelined", "prompt.large"):
                cap = _PROMPT_CAPABILITIES.get(name)
                if cap is not None and not self.prompt_capability(cap):
                    self.not_advertised(name, f"promptCapabilities.{cap}")
                else:
                    self.result(name, "SKIP", self.no_session(peer))
            return
        # basic turn: answered with a stop reason, no update after the answer
        answer = self.turn(peer, session_id, self.prompt_text)
        after = peer.mark()
        self.sync(peer)
        late = peer.updates_for(session_id, peer.since(after))
        stop = _stop_reason(answer)
        self.ok(
            "prompt.basic",
            stop is not None and not late,
            (f"stopReason {stop!r}" if stop else _describe(answer)) + (f"; {late} update(s) after the answer" if late else ""),
        )
        self.content_checks(peer, session_id)
        self.cancel_check(peer)
        self.pipelined_check(peer)
        self.large_prompt_check(peer, session_id)

    def content_checks(self, peer: _Peer, session_id: str) -> None:
        link = {"type": "resource_link", "uri": f"file://{self.cwd}/README.md", "name": "README.md"}
        answer = self.turn(peer, session_id, self.prompt_text, link)
        stop = _stop_reason(answer)
        self.ok("prompt.resource_link", stop is not None, f"text + resource_link -> {f'stopReason {stop!r}' if stop else _describe(answer)}")
        blocks: dict[str, tuple[str, dict[str, Any]]] = {
            "prompt.image": ("image", {"type": "image", "mimeType": "image/png", "data": _PNG}),
            "prompt.audio": ("audio", {"type": "audio", "mimeType": "audio/wav", "data": _WAV}),
            "prompt.embedded_context": ("embeddedContext", {
                "type": "resource",
                "resource": {"uri": f"file://{self.cwd}/notes.txt", "mimeType": "text/plain", "text": "Notes for the agent.\n"},
            }),
        }
        for name, (cap, block) in blocks.items():
            if not self.prompt_capability(cap):
                self.not_advertised(name, f"promptCapabilities.{cap}")
                continue
            answer = self.turn(peer, session_id, self.prompt_text, block)
            stop = _stop_reason(answer)
            self.ok(name, stop is not None, f"text + {block['type']} -> {f'stopReason {stop!r}' if stop else _describe(answer)}")

    def prompt_capability(self, name: str) -> bool:
        """True when the agent advertised ``promptCapabilities.<name>``."""
        caps = self.caps.get("promptCapabilities")
        return isinstance(caps, dict) and caps.get(name) is True

    def busy_turn(self, peer: _Peer, session_id: str) -> tuple[rpc.RequestId, int]:
        """Start a turn with the cancel prompt and wait until it visibly runs (its first update,
        or a short while); its request id and the transcript mark before it."""
        assert self.cancel_prompt is not None
        mark = peer.mark()
        msg_id = self.send_prompt(peer, session_id, self.cancel_prompt)
        peer.wait_for(lambda: peer.updates_for(session_id, peer.since(mark)) > 0, min(self.timeout, 2.0))
        return msg_id, mark

    def cancel_check(self, peer: _Peer) -> None:
        name = "prompt.cancel"
        if self.cancel_prompt is None:
            self.result(name, "SKIP", "give --cancel-prompt TEXT (a prompt that keeps the agent busy)")
            self.result("prompt.no_updates_after_cancel", "SKIP", "needs --cancel-prompt")
            return
        _, session_id = self.new_session(peer)
        if session_id is None:
            self.result(name, "SKIP", self.no_session(peer))
            self.result("prompt.no_updates_after_cancel", "SKIP", self.no_session(peer))
            return
        msg_id, _ = self.busy_turn(peer, session_id)
        peer.notify("session/cancel", {"sessionId": session_id})
        answer = peer.answer(msg_id, self.timeout)
        stop = _stop_reason(answer)
        self.ok(name, stop == "cancelled", f"after session/cancel: stopReason {stop!r}" if stop else _describe(answer))
        if answer is None:
            self.result("prompt.no_updates_after_cancel", "SKIP", "the cancelled turn was never answered")
            return
        after = peer.mark()
        self.sync(peer)
        late = peer.updates_for(session_id, peer.since(after))
        self.ok(
            "prompt.no_updates_after_cancel",
            not late,
            f"{late} update(s) after the cancelled turn was answered" if late else "none after the answer",
        )

    def pipelined_check(self, peer: _Peer) -> None:
        _, first = self.new_session(peer)
        _, second = self.new_session(peer)
        if first is None or second is None:
            self.result("prompt.pipelined", "SKIP", self.no_session(peer))
            return
        ids = [self.send_prompt(peer, first, self.prompt_text), self.send_prompt(peer, second, self.prompt_text)]
        answers = [peer.answer(i, self.timeout) for i in ids]
        if self.blocked is not None:
            self.result("prompt.pipelined", "SKIP", "the turns were refused")
            return
        self.ok(
            "prompt.pipelined",
            all(a is not None for a in answers),
            "two prompts on two sessions sent back to back: " + ", ".join(_describe(a, 40) for a in answers),
        )

    def large_prompt_check(self, peer: _Peer, session_id: str) -> None:
        if not self.selected("prompt.large"):
            return  # 3 MiB each way: not sent unless asked for
        text = ("All work and no play makes a large prompt. " * (LARGE_PROMPT_BYTES // 43 + 1))[:LARGE_PROMPT_BYTES]
        started = time.monotonic()
        answer = peer.answer(self.send_prompt(peer, session_id, text), self.timeout * 3)
        took = time.monotonic() - started
        size = f"{LARGE_PROMPT_BYTES // (1024 * 1024)} MiB prompt"
        if isinstance(answer, rpc.Response):
            self.result("prompt.large", "PASS", f"{size} answered in {took:.1f}s")
        elif isinstance(answer, rpc.ErrorResponse):
            self.result("prompt.large", "PASS", f"{size} refused with an error: {_describe(answer)}")
        else:
            self.result("prompt.large", "FAIL", f"{size}: no answer within {self.timeout * 3:.0f}s")

    # ---- advertised capabilities

    def session_capability_checks(self, peer: _Peer) -> None:
        session_caps = self.caps.get("sessionCapabilities")
        session_caps = session_caps if isinstance(session_caps, dict) else {}

        def has(name: str) -> bool:
            return isinstance(session_caps.get(name), dict)

        self.additional_directories_check(peer, has("additionalDirectories"))
        self.modes_and_config_checks(peer)
        self.load_check(peer, self.caps.get("loadSession") is True)
        self.resume_check(peer, has("resume"))
        self.list_checks(peer, has("list"))
        self.delete_checks(peer, has("delete"), has("list"))
        self.close_checks(peer, has("close"))

    def additional_directories_check(self, peer: _Peer, advertised: bool) -> None:
        name = "session.additional_directories"
        if not advertised:
            self.not_advertised(name, "sessionCapabilities.additionalDirectories")
            return
        with tempfile.TemporaryDirectory(prefix="acp-check-extra-") as extra:
            answer, session_id = self.new_session(peer, additionalDirectories=[os.path.realpath(extra)])
        self.ok(name, session_id is not None, f"session/new with one additional directory -> {_session(answer, session_id)}")

    def modes_and_config_checks(self, peer: _Peer) -> None:
        answer, session_id = self.new_session(peer)
        result = _result(answer)
        if session_id is None or not isinstance(result, dict):
            self.result("modes.valid", "SKIP", self.no_session(peer))
            self.result("modes.set", "SKIP", self.no_session(peer))
            self.result("config.set", "SKIP", self.no_session(peer))
            return
        self.modes_check(peer, session_id, result.get("modes"))
        self.config_check(peer, session_id, result.get("configOptions"))

    def modes_check(self, peer: _Peer, session_id: str, modes: Any) -> None:
        name = "modes.set"
        if not isinstance(modes, dict):
            self.not_advertised("modes.valid", "no modes in the session/new answer")
            self.not_advertised(name, "no modes in the session/new answer")
            return
        available = [m.get("id") for m in modes.get("availableModes") or () if isinstance(m, dict)]
        current = modes.get("currentModeId")
        if not self.ok("modes.valid", current in available, f"currentModeId {current!r}, availableModes {available}"):
            self.result(name, "SKIP", "currentModeId is not an available mode")
            return
        target = next((m for m in available if m != current), current)
        answer = self.call(peer, "session/set_mode", {"sessionId": session_id, "modeId": target})
        self.ok(name, isinstance(answer, rpc.Response), f"session/set_mode {current!r} -> {target!r}: {_describe(answer)}")

    def config_check(self, peer: _Peer, session_id: str, options: Any) -> None:
        name = "config.set"
        if not isinstance(options, list) or not options:
            self.not_advertised(name, "no configOptions in the session/new answer")
            return
        options = [o for o in options if isinstance(o, dict)]
        booleans = [o.get("id") for o in options if o.get("type") == "boolean"]
        if booleans:
            self.result(name, "FAIL", f"boolean option(s) {booleans} sent although the client did not advertise session.configOptions.boolean")
            return
        bad = [o.get("id") for o in options if o.get("type") == "select" and o.get("currentValue") not in _select_values(o)]
        if bad:
            self.result(name, "FAIL", f"select option(s) {bad} have a currentValue that is not one of their values")
            return
        option = next((o for o in options if o.get("type") == "select" and len(_select_values(o)) >= 2), None)
        if option is None:
            self.result(name, "SKIP", f"{len(options)} option(s), none a select with two values to switch between")
            return
        value = next(v for v in _select_values(option) if v != option.get("currentValue"))
        answer = self.call(peer, "session/set_config_option", {"sessionId": session_id, "configId": option["id"], "value": value})
        result = _result(answer)
        now = result.get("configOptions") if isinstance(result, dict) else None
        ids = [o.get("id") for o in now or () if isinstance(o, dict)]
        changed = next((o for o in now or () if isinstance(o, dict) and o.get("id") == option["id"]), None)
        what = f"{option['id']!r} -> {value!r}"
        if not isinstance(now, list):
            self.result(name, "FAIL", f"{what}: {_describe(answer)} (must answer configOptions)")
        elif set(ids) != {o.get("id") for o in options}:
            self.result(name, "FAIL", f"{what}: answered options {ids}, not the complete set {[o.get('id') for o in options]}")
        elif changed is None or changed.get("currentValue") != value:
            self.result(name, "FAIL", f"{what}: the answer still shows {changed.get('currentValue') if changed else None!r}")
        else:
            self.result(name, "PASS", f"{what}: the complete set ({len(ids)}) answered, with the new value")

    def history_session(self, peer: _Peer) -> str | None:
        """A fresh session with one finished turn (so it has a history), or None."""
        _, session_id = self.new_session(peer)
        if session_id is None:
            return None
        answer = self.turn(peer, session_id, self.prompt_text)
        return session_id if _stop_reason(answer) is not None else None

    def load_check(self, peer: _Peer, advertised: bool) -> None:
        name = "load.replay"
        if not advertised:
            self.not_advertised(name, "loadSession")
            return
        session_id = self.history_session(peer)
        if session_id is None:
            self.result(name, "SKIP", "could not make a session with a finished turn to load")
            return
        mark = peer.mark()
        msg_id = peer.request("session/load", {"sessionId": session_id, "cwd": self.cwd, "mcpServers": []})
        answer = peer.answer(msg_id, self.timeout)
        kinds = _update_kinds(session_id, peer.since(mark)[: self._answer_index(peer, mark, msg_id)])
        after_mark = peer.mark()
        self.sync(peer)
        late = peer.updates_for(session_id, peer.since(after_mark))
        if not isinstance(answer, rpc.Response):
            self.result(name, "FAIL", f"session/load -> {_describe(answer)}")
        elif not kinds:
            self.result(name, "FAIL", "answered without replaying the history (no session/update before the answer)")
        elif late:
            self.result(name, "FAIL", f"{late} update(s) of the replay came after the answer")
        else:
            turn = self.turn(peer, session_id, self.prompt_text)
            stop = _stop_reason(turn)
            self.ok(name, stop is not None, f"{len(kinds)} update(s) replayed ({', '.join(sorted(set(kinds)))}) before the answer; "
                    + (f"a prompt after it: stopReason {stop!r}" if stop else f"a prompt after it -> {_describe(turn)}"))

    def _answer_index(self, peer: _Peer, mark: int, msg_id: rpc.RequestId) -> int:
        """How many inbound items after ``mark`` came before the answer to ``msg_id``."""
        for index, item in enumerate(peer.since(mark)):
            if any(isinstance(m, (rpc.Response, rpc.ErrorResponse)) and _same_id(m.id, msg_id) for m in _messages(item)):
                return index
        return len(peer.since(mark))

    def resume_check(self, peer: _Peer, advertised: bool) -> None:
        name = "resume.no_replay"
        if not advertised:
            self.not_advertised(name, "sessionCapabilities.resume")
            return
        session_id = self.history_session(peer)
        if session_id is None:
            self.result(name, "SKIP", "could not make a session with a finished turn to resume")
            return
        mark = peer.mark()
        msg_id = peer.request("session/resume", {"sessionId": session_id, "cwd": self.cwd, "mcpServers": []})
        answer = peer.answer(msg_id, self.timeout)
        replayed = len(_update_kinds(session_id, peer.since(mark)[: self._answer_index(peer, mark, msg_id)]))
        if not isinstance(answer, rpc.Response):
            self.result(name, "FAIL", f"session/resume -> {_describe(answer)}")
        elif replayed:
            self.result(name, "FAIL", f"{replayed} update(s) for the session before the answer: resume must not replay")
        else:
            turn = self.turn(peer, session_id, self.prompt_text)
            stop = _stop_reason(turn)
            self.ok(name, stop is not None, "answered with no replay; "
                    + (f"a prompt after it: stopReason {stop!r}" if stop else f"a prompt after it -> {_describe(turn)}"))

    def list_checks(self, peer: _Peer, advertised: bool) -> None:
        if not advertised:
            for name in ("list.sessions", "list.paging", "list.invalid_cursor"):
                self.not_advertised(name, "sessionCapabilities.list")
            return
        start = self.log_mark(peer)
        answers, problem, ids = self.listed(peer)
        expected = [s for s in self.prompted if s not in self.deleted]
        missing = [s for s in expected if s not in ids]
        pages = len(answers)
        if problem is not None and not isinstance(_result(answers[-1]), dict):
            self.result("list.sessions", "FAIL", f"session/list: {problem}")
            self.result("list.paging", "SKIP", "session/list failed")
        else:
            cwd_problem = problem if problem is not None and "cwd" in problem else None
            if cwd_problem:
                self.result("list.sessions", "FAIL", cwd_problem)
            elif missing and problem is not None:
                self.result("list.sessions", "SKIP", f"could not read every page (see list.paging); {len(missing)} prompted session(s) not seen")
            elif missing:
                self.result("list.sessions", "FAIL", f"{len(missing)} of the {len(expected)} prompted sessions missing, e.g. {missing[0]!r}")
            elif not expected:
                self.result("list.sessions", "SKIP", "no session had a finished turn, so none has to be listed")
            else:
                self.result("list.sessions", "PASS", f"all {len(expected)} prompted sessions listed ({len(ids)} in all, cwd filter kept)")
            duplicates = sorted({s for s in ids if ids.count(s) > 1})
            if problem is not None and cwd_problem is None:
                self.result("list.paging", "FAIL", problem, since=start)
            elif duplicates:
                self.result("list.paging", "FAIL", f"{len(duplicates)} session(s) listed twice across {pages} pages, e.g. {duplicates[0]!r}", since=start)
            elif pages == 1:
                self.result("list.paging", "SKIP", f"one page of {len(ids)} session(s), no nextCursor: paging not exercised")
            else:
                self.result("list.paging", "PASS", f"{pages} pages, {len(ids)} sessions, each once, and an end")
        answer = self.call(peer, "session/list", {"cwd": self.cwd, "cursor": _INVALID_CURSOR})
        self.ok("list.invalid_cursor", isinstance(answer, rpc.ErrorResponse), f"cursor {_INVALID_CURSOR!r} -> {_describe(answer)}")

    def delete_checks(self, peer: _Peer, advertised: bool, can_list: bool) -> None:
        if not advertised:
            self.not_advertised("delete.removes", "sessionCapabilities.delete")
            self.not_advertised("session.delete_unknown", "sessionCapabilities.delete")
            return
        session_id = self.history_session(peer)
        if session_id is None:
            self.result("delete.removes", "SKIP", "could not make a session with a finished turn to delete")
        else:
            answer = self.call(peer, "session/delete", {"sessionId": session_id})
            if not isinstance(answer, rpc.Response):
                self.result("delete.removes", "FAIL", f"session/delete -> {_describe(answer)}")
            else:
                self.deleted.add(session_id)
                if not can_list:
                    self.result("delete.removes", "PASS", "session/delete answered (no session/list to look it up in)")
                else:
                    _, problem, ids = self.listed(peer)
                    if session_id in ids:
                        self.result("delete.removes", "FAIL", f"{session_id!r} is still in session/list after session/delete")
                    elif problem is not None:
                        self.result("delete.removes", "PASS", f"answered; gone from the pages of session/list that could be read ({problem})")
                    else:
                        self.result("delete.removes", "PASS", "answered, and gone from session/list")
        answer = self.call(peer, "session/delete", {"sessionId": _NO_SUCH_SESSION})
        self.ok("session.delete_unknown", isinstance(answer, rpc.Response), f"an unknown session -> {_describe(answer)}")

    def close_checks(self, peer: _Peer, advertised: bool) -> None:
        if not advertised:
            self.not_advertised("close.idle", "sessionCapabilities.close")
            self.not_advertised("close.cancels_turn", "sessionCapabilities.close")
            return
        _, session_id = self.new_session(peer)
        if session_id is None:
            self.result("close.idle", "SKIP", self.no_session(peer))
        else:
            answer = self.call(peer, "session/close", {"sessionId": session_id})
            self.ok("close.idle", isinstance(answer, rpc.Response), f"an idle session -> {_describe(answer)}")
        name = "close.cancels_turn"
        if self.cancel_prompt is None:
            self.result(name, "SKIP", "give --cancel-prompt TEXT (a prompt that keeps the agent busy)")
            return
        _, session_id = self.new_session(peer)
        if session_id is None:
            self.result(name, "SKIP", self.no_session(peer))
            return
        prompt_id, _ = self.busy_turn(peer, session_id)
        close_id = peer.request("session/close", {"sessionId": session_id})
        turn = peer.answer(prompt_id, self.timeout)
        closed = peer.answer(close_id, self.timeout)
        stop = _stop_reason(turn)
        if turn is None:
            self.result(name, "FAIL", f"the turn was still running {self.timeout:.0f}s after session/close "
                        f"(close -> {_describe(closed, 60)}): close must cancel it like session/cancel")
            peer.notify("session/cancel", {"sessionId": session_id})  # end it, for the checks after this one
            peer.answer(prompt_id, self.timeout)
        elif stop != "cancelled":
            self.result(name, "FAIL", f"the turn ended {f'with stopReason {stop!r}' if stop else _describe(turn, 60)}, not 'cancelled'")
        else:
            self.ok(name, isinstance(closed, rpc.Response), f"turn answered 'cancelled'; close -> {_describe(closed, 60)}")

    def unique_ids_check(self, peer: _Peer) -> None:
        ids = peer.session_ids
        repeated = sorted({s for s in ids if ids.count(s) > 1})
        if len(ids) < 2:
            self.result("session.unique_ids", "SKIP", f"{len(ids)} session(s) created: nothing to compare")
        elif repeated:
            self.result(
                "session.unique_ids", "FAIL",
                f"{len(repeated)} id(s) answered more than once, e.g. {repeated[0]!r} ({ids.count(repeated[0])} times)",
                _session_new_exchanges(peer, repeated[0]),
            )
        else:
            self.result("session.unique_ids", "PASS", f"{len(ids)} sessions, {len(ids)} different ids")

    def logout_check(self, peer: _Peer) -> None:
        auth = self.caps.get("auth")
        if not (isinstance(auth, dict) and isinstance(auth.get("logout"), dict)):
            self.not_advertised("auth.logout", "auth.logout")
            return
        answer = self.call(peer, "logout", {})
        self.ok("auth.logout", isinstance(answer, rpc.Response), f"logout -> {_describe(answer)}")

    # ---- the other runs

    def version_run(self) -> None:
        if not self.selected("handshake.unsupported_version"):
            return  # a process of its own: not started unless asked for
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
        if not any(self.selected(name) for name in ("robust.garbage_line", "robust.invalid_request", "robust.batch",
                                                      "robust.stdin_closed")):
            return  # a process of its own: not started unless asked for
        with self.peer("robustness") as peer:
            if self.initialize(peer, 1) is None:
                self.result("robustness run", "FAIL", "the agent did not answer initialize")
                return
            # a line that is not JSON -> -32700 with id null, then still alive
            mark = peer.mark()
            peer.write(b"this is not JSON {\n", malformed=True)
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
            bad = peer.write_raw(b'{"jsonrpc":"2.0","id":"acp-check-bad","method":5}\n', "acp-check-bad", "(invalid)",
                                 malformed=True)
            answer = peer.answer(bad, self.timeout)
            alive = peer.alive(self.timeout)
            if not alive:
                self.result("robust.invalid_request", "FAIL", "the agent stopped answering")
            elif _is_error(answer, -32600):
                self.result("robust.invalid_request", "PASS", "method 5 -> -32600; still alive")
            else:
                self.result("robust.invalid_request", "WARN", f"method 5 -> {_describe(answer)} (expected -32600); still alive")
            # a batch: ACP does not use batches, but one must not break the agent
            batch = (
                b'[{"jsonrpc":"2.0","id":"acp-check-batch-1","method":"acp_check/no_such_method"},'
                b'{"jsonrpc":"2.0","method":"acp_check/unknown_notification"}]\n'
            )
            peer.write_raw(batch, "acp-check-batch-1", "acp_check/no_such_method", malformed=True)
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
        requests = [(m, line) for p in self.peers for m, line in p.agent_requests]
        forbidden = sorted({m for m, _ in requests if m.startswith(_FORBIDDEN_PREFIXES)})
        if forbidden:
            lines = [line for m, line in requests if m.startswith(_FORBIDDEN_PREFIXES)]
            self.result("capabilities.honest", "FAIL", f"called {', '.join(forbidden)} although the client offered none", lines)
        elif self.prompts == 0:
            self.result("capabilities.honest", "SKIP", "no prompt turn ran", [])
        else:
            self.result("capabilities.honest", "PASS", f"no fs/terminal/elicitation call over {self.prompts} prompts (none were offered)", [])
        shown_only = sorted({
            tag for p in self.peers for item in p.since(0) for m in _messages(item)
            if (tag := _update_kind(m)) is not None and tag in UPDATE_CAPABILITY
        })
        if shown_only:
            self.result(
                "capabilities.updates_honest", "FAIL",
                f"sent {', '.join(shown_only)} although the client advertised none of "
                "session.notices, session.compaction, subagents",
                [line for p in self.peers for line in p.log
                 if line.direction == "in" and any(f'"{tag}"' in line.text for tag in shown_only)],
            )
        elif self.prompts == 0:
            self.result("capabilities.updates_honest", "SKIP", "no prompt turn ran", [])
        else:
            self.result("capabilities.updates_honest", "PASS",
                        "no notice, compaction or subagent update (the client advertised none)", [])
        updates = [
            (s, p.log) for p in self.peers for item in p.since(0) for m in _messages(item)
            if (s := _update_session(m)) is not None
        ]
        unknown = sorted({s for s, _ in updates if s not in self.known_sessions})
        if unknown:
            self.result("session.updates_known_sessions", "FAIL", f"session/update for unknown session(s) {unknown}",
                        [line for p in self.peers for line in p.log if line.direction == "in" and any(f'"{u}"' in line.text for u in unknown)])
        elif not updates:
            self.result("session.updates_known_sessions", "SKIP", "the agent sent no session/update", [])
        else:
            self.result("session.updates_known_sessions", "PASS", f"all {len(updates)} session/update name a session of this client", [])
        stray = [s for p in self.peers for s in p.stray]
        total = sum(len(p.since(0)) for p in self.peers)
        if stray:
            self.result(
                "jsonrpc.envelopes", "FAIL",
                "; ".join(text for text, _ in stray[:3]) + (f" (+{len(stray) - 3} more)" if len(stray) > 3 else ""),
                [line for _, line in stray if line is not None],
            )
        elif total == 0:
            self.result("jsonrpc.envelopes", "SKIP", "the agent sent no message", [])
        else:
            self.result("jsonrpc.envelopes", "PASS", f"all {total} messages were JSON-RPC 2.0 and answered something the checker sent", [])
        problems = self.validator.problems
        fails = [(text, line) for status, text, line in problems if status == "FAIL"]
        warns = [(text, line) for status, text, line in problems if status == "WARN"]
        if fails:
            self.result("schema.valid", "FAIL", f"{len(fails)} invalid: " + " | ".join(t for t, _ in fails[:3]),
                        [line for _, line in fails if line is not None])
        elif warns:
            self.result("schema.valid", "WARN", f"{len(warns)} accepted only leniently: " + " | ".join(t for t, _ in warns[:3]),
                        [line for _, line in warns if line is not None])
        elif total == 0:
            self.result("schema.valid", "SKIP", "the agent sent no message", [])
        else:
            self.result("schema.valid", "PASS", f"{total} messages, {self.validator.checked} payloads decoded strictly", [])
