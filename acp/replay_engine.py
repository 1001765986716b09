"""The engine behind :class:`~acp.replay.ReplayAgent` and :class:`~acp.replay.ReplayClient`:
one side of a recorded conversation, played against a live peer over a :class:`Connection`.

A :class:`Player` plays one side (``role``: ``"agent"`` or ``"client"``) of a recording. Every
recorded message is either *ours* (sent by the role we play) or *theirs* (the live peer's):

* ours are sent in recorded order, each once every message of theirs recorded before it has
  come (so an answer follows its request, and an update recorded after the client's
  ``session/cancel`` waits for it), and, unless ``speed`` is None, not before its recorded delay
  after the message before it (divided by ``speed``). Our requests go out with fresh JSON-RPC
  ids; our answers go to the live request that matched the recorded one;
* theirs are matched as they come, by kind and method (never by id): a request to the first
  unanswered recorded request of that method, a notification to the first recorded one of that
  method, looking a few ahead within the same exchange for an exact match (what it skips was
  *missing*), an answer to the recorded answer of the request it answers. The live message is
  then compared with the recorded one through :class:`~acp.wirediff.Substitutions` (ids and
  folders mapped, members in any order, extras ignored, :data:`DEFAULT_IGNORE` skipped).

What does not fit is a :class:`Divergence`: *changed* (the diff), *unexpected* (nothing of that
kind was due) or *missing* (a recorded message that never came, noticed when something recorded
after it came, or after ``timeout`` seconds of waiting for it while a request is open).
``strict`` (the default) stops at the first one: every open request of the peer is answered
with an error carrying it, and :meth:`Player.verify` raises :class:`ReplayDivergence`. Otherwise
it is logged (logger ``acp.replay``) and the replay goes on where it can.

``$/cancel_request`` is not replayed (the connection sends and handles it itself).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from .connection import Connection, InboundCall
from .errors import INTERNAL_ERROR, AcpError, RequestError
from .recording import AGENT, CLIENT, Message, Recording
from .wirediff import Difference, Substitutions, agreement, compare, format_differences, short_json

__all__ = ["DEFAULT_IGNORE", "DEFAULT_TIMEOUT", "Divergence", "ReplayDivergence", "Player", "describe"]

_log = logging.getLogger("acp.replay")

#: Members never compared: metadata, who the peer is, and times of day.
DEFAULT_IGNORE: tuple[str, ...] = (
    "_meta", "clientInfo", "agentInfo", "clientCapabilities", "updatedAt", "createdAt", "timestamp",
)
#: Seconds to wait for a recorded message of the peer while a request is open.
DEFAULT_TIMEOUT = 30.0
_NOT_REPLAYED = frozenset({"$/cancel_request"})
_LOOKAHEAD = 8  # recorded notifications of one method looked at for an exact match


def describe(message: Message) -> str:
    """A recorded message in words: ``session/update agent_message_chunk from the agent
    (recording line 14)``."""
    what = message.method or "?"
    if message.update_kind:
        what += f" {message.update_kind}"
    if message.kind == "request":
        what += " request"
    elif message.kind in ("result", "error"):
        what = f"the {'error ' if message.kind == 'error' else ''}answer to {what}"
    return f"{what} from the {message.sender} (recording line {message.line})"


@dataclass
class Divergence:
    """Where the live peer did not do what the recording says."""

    kind: str  # "changed" | "unexpected" | "missing"
    recorded: Message | None  # the recorded message (None: nothing of that kind was due)
    got: Any = None  # the live message, as {"method", "params"} / {"result"} / {"error"}
    differences: list[Difference] = field(default_factory=list)
    expected_next: Message | None = None  # for "unexpected": what the recording has next
    sender: str | None = None  # who sent the live message ("agent" | "client")

    def __str__(self) -> str:
        if self.kind == "missing" and self.recorded is not None:
            head = f"missing: {describe(self.recorded)} never came"
            body = [f"  expected: {short_json(_payload(self.recorded), 300)}"]
        elif self.kind == "unexpected":
            got = self.got if isinstance(self.got, dict) else {}
            what = " ".join(x for x in (got.get("method") or "message", _update_kind(got.get("params"))) if x)
            head = f"unexpected {what}{f' from the {self.sender}' if self.sender else ''}: not in the recording"
            body = [f"  got:      {short_json(self.got, 300)}"]
            if self.expected_next is not None:
                body.append(f"  the recording has next: {describe(self.expected_next)}")
                body.append(f"  expected: {short_json(_payload(self.expected_next), 300)}")
        else:
            assert self.recorded is not None
            head = f"changed: {describe(self.recorded)}"
            body = [
                f"  expected: {short_json(_payload(self.recorded), 300)}",
                f"  got:      {short_json(self.got, 300)}",
                format_differences(self.differences, "    "),
            ]
        return "\n".join([head, *body])

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON form (what ``acp replay --report`` writes)."""
        return {
            "kind": self.kind,
            "line": self.recorded.line if self.recorded is not None else None,
            "text": str(self),
        }


class ReplayDivergence(AssertionError):
    """The live peer diverged from the recording (an ``AssertionError``, so pytest shows it as
    a failed test). ``divergences`` lists them all (a :class:`Divergence`, or its text when it
    was reported by a replay process); the message shows the first three."""

    def __init__(self, divergences: Sequence[Divergence | str], source: str = "") -> None:
        self.divergences = list(divergences)
        shown = "\n".join(str(d) for d in self.divergences[:3])
        more = f"\n(and {len(self.divergences) - 3} more)" if len(self.divergences) > 3 else ""
        where = f" of {source}" if source else ""
        super().__init__(f"replay{where} diverged:\n{shown}{more}")


def _payload(message: Message) -> Any:
    msg = message.msg if isinstance(message.msg, dict) else {}
    if message.kind in ("request", "notification"):
        return {"method": message.method, "params": msg.get("params")}
    if message.kind == "result":
        return {"result": msg.get("result")}
    return {"error": msg.get("error")}


def _replayable(message: Message) -> bool:
    if message.kind == "invalid" or message.method in _NOT_REPLAYED:
        return False
    # An answer to no recorded request (an error with id null...) cannot be asked for again.
    return message.kind in ("request", "notification") or message.pair is not None


class Player:
    """Plays ``role``'s side of ``recording`` over one connection (see the module docstring).

    Call :meth:`attach` before the connection starts, then :meth:`start`.
    """

    def __init__(
        self,
        recording: Recording,
        role: str,
        *,
        strict: bool = True,
        speed: float | None = 1.0,
        timeout: float = DEFAULT_TIMEOUT,
        ignore: Iterable[str] = DEFAULT_IGNORE,
        substitutions: Substitutions | None = None,
        on_divergence: Callable[[Divergence], None] | None = None,
    ) -> None:
        if role not in (AGENT, CLIENT):
            raise ValueError(f"role must be {AGENT!r} or {CLIENT!r}, not {role!r}")
        if speed is not None and not speed > 0:
            raise ValueError(f"speed must be positive (or None: as fast as possible), not {speed!r}")
        self.recording = recording
        self.role = role
        self._peer = CLIENT if role == AGENT else AGENT
        self.strict = strict
        self.speed = speed
        self.timeout = timeout
        self.ignore = frozenset(ignore)
        self.subst = substitutions or Substitutions()
        self._on_divergence = on_divergence
        messages = recording.messages
        self._ours = [m for m in messages if m.sender == role and _replayable(m)]
        self._theirs = {m.index: m for m in messages if m.sender != role and _replayable(m)}
        self._waiting = sorted(self._theirs)  # their recorded messages not matched yet
        self._waiting_by: dict[tuple[str, str | None], list[int]] = {}  # ... by kind and method
        for index in self._waiting:
            message = self._theirs[index]
            self._waiting_by.setdefault((message.kind, message.method), []).append(index)
        # The exchange of each message: how many of our requests and answers precede it. An
        # exact match is looked for only within the exchange of the first candidate.
        exchange, self._exchange = 0, {}
        for m in messages:
            if m.sender == role and m.kind != "notification":
                exchange += 1
            self._exchange[m.index] = exchange
        self._done_at: dict[int, float] = {}  # recorded index -> when it was sent or came
        self._calls: dict[int, InboundCall] = {}  # their recorded request -> the live one
        self._settled: dict[int, threading.Event] = {}  # ... answered by us (or given up)
        self._open_ours = 0  # our requests still waiting for their answer
        self.sent = 0  # our messages sent so far
        self._cond = threading.Condition()
        self.divergences: list[Divergence] = []
        self.failure: Divergence | None = None
        self._closed = False
        self._sent_all = False
        self._connection: Connection | None = None
        self._thread: threading.Thread | None = None
        self.finished = threading.Event()

    # ------------------------------------------------------------------ wiring

    def attach(self, connection: Connection) -> None:
        """Handle every request and notification of ``connection`` (before it starts)."""
        self._connection = connection
        connection.on_unknown_request(self._on_request)
        connection.on_unknown_notification(self._on_notification)
        connection.on_close(self.close)

    def start(self) -> None:
        """Start playing (on a thread of its own)."""
        self._thread = threading.Thread(target=self._run, name=f"acp-replay-{self.role}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop playing: what is still due from the peer is reported missing (when nothing
        else diverged before), and every open request of the peer is answered with an error."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            if self.failure is None and self._waiting:
                first = self._theirs[self._waiting[0]]
                self._diverge_locked(Divergence("missing", first))
            self._cond.notify_all()
        self._give_up_calls()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
        self.finished.set()

    @property
    def done(self) -> bool:
        """Everything was sent and everything due came."""
        with self._cond:
            return not self._waiting and self._sent_all

    @property
    def received(self) -> int:
        """How many of the peer's recorded messages came (or were given up as missing)."""
        with self._cond:
            return len(self._theirs) - len(self._waiting)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the replay finished (everything played, a strict failure, or close)."""
        return self.finished.wait(timeout)

    def verify(self) -> None:
        """Raise :class:`ReplayDivergence` if anything diverged."""
        with self._cond:
            found = list(self.divergences)
        if found:
            raise ReplayDivergence(found, self.recording.source)

    # ------------------------------------------------------------------ playing our side

    def _run(self) -> None:
        try:
            for message in self._ours:
                if not self._wait_for_theirs(message.index) or not self._wait_for_time(message):
                    return
                self._send(message)
            with self._cond:
                self._sent_all = True
            self._wait_for_theirs(None)
        except AcpError as exc:  # the connection went away under us
            _log.debug("replay stopped: %s", exc)
        finally:
            self._give_up_calls()  # after a failure: the peer's open requests get it
            self.finished.set()

    def _bounded(self) -> bool:
        # A client's replay drives: the agent must keep up. An agent's replay waits for its
        # client as long as it likes between turns, but not while a request is open.
        if self.role == CLIENT:
            return True
        return self._open_ours > 0 or any(not e.is_set() for e in self._settled.values())

    def _wait_for_theirs(self, before: int | None) -> bool:
        """Wait until every message of theirs recorded before ``before`` (None: all) came."""
        with self._cond:
            deadline: float | None = None
            progress = -1
            while True:
                if self._closed or self.failure is not None:
                    return False
                due = self._waiting and (before is None or self._waiting[0] < before)
                if not due:
                    return True
                bounded = self._bounded()
                if progress != len(self._waiting) or not bounded or deadline is None:
                    progress = len(self._waiting)
                    deadline = time.monotonic() + self.timeout if bounded else None
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    missing = self._theirs[self._waiting[0]]
                    self._diverge_locked(Divergence("missing", missing))
                    self._matched_locked(missing.index)  # lenient: go on without it
                    continue
                self._cond.wait(remaining)

    def _wait_for_time(self, message: Message) -> bool:
        if self.speed is None:
            return not self._closed
        with self._cond:
            anchor = message.index - 1  # the nearest message before it that was sent or came
            while anchor >= 0 and anchor not in self._done_at:
                anchor -= 1
            if anchor < 0:
                return not self._closed
            delay = (message.t - self.recording.messages[anchor].t) / self.speed
            at = self._done_at[anchor] + max(0.0, delay)
            while not self._closed and self.failure is None:
                remaining = at - time.monotonic()
                if remaining <= 0:
                    return True
                self._cond.wait(remaining)
            return False

    def _send(self, message: Message) -> None:
        connection = self._connection
        assert connection is not None
        msg = message.msg
        with self._cond:
            self.subst.claim(msg)
            if message.kind in ("request", "notification"):
                payload = self.subst.apply(msg.get("params"))
            elif message.kind == "result":
                payload = self.subst.apply(msg.get("result"))
            else:
                payload = self.subst.apply(msg.get("error"))
            call = self._calls.get(message.pair) if message.pair is not None else None
            if message.kind == "request":
                self._open_ours += 1
            self._done_at[message.index] = time.monotonic()
            self.sent += 1
        if message.kind == "request":
            future = connection.request_future(message.method or "", payload, timeout=None)
            future.add_done_callback(lambda f: self._on_answer(message, f))
        elif message.kind == "notification":
            connection.notify(message.method or "", payload)
        elif call is not None:  # our answer to their request (skipped if it never came)
            if message.kind == "result":
                call.answer(payload)
            else:
                error = payload if isinstance(payload, dict) else {}
                call.answer_error(int(error.get("code", INTERNAL_ERROR)), error.get("message"), error.get("data"))
            with self._cond:
                self._settled[message.pair].set()  # type: ignore[index]
                self._cond.notify_all()

    # ------------------------------------------------------------------ their side

    def _on_request(self, method: str, params: Any, call: InboundCall) -> Any:
        got = {"method": method, "params": params}
        with self._cond:
            if self.failure is not None:
                raise _failure_error(self.failure)
            index = self._match_locked("request", method, params, got)
            if index is None:
                divergence = self.divergences[-1] if self.divergences else None
                raise _failure_error(divergence, f"replay: {method} is not in the recording")
            self._calls[index] = call
            settled = self._settled[index] = threading.Event()
            self._cond.notify_all()
        # Answered by the player (in recorded order), or given up on at close or failure.
        settled.wait()
        if not call.is_answered:
            raise _failure_error(self.failure, f"replay: the recording has no answer to this {method}")
        return None  # already answered: the connection drops this

    def _on_notification(self, method: str, params: Any) -> None:
        if method in _NOT_REPLAYED:
            return
        with self._cond:
            if self.failure is None and not self._closed:
                self._match_locked("notification", method, params, {"method": method, "params": params})
                self._cond.notify_all()

    def _on_answer(self, request: Message, future: Future[Any]) -> None:
        try:
            got: dict[str, Any] = {"result": future.result()}
        except RequestError as exc:
            got = {"error": {"code": exc.code, "message": exc.message, "data": exc.data}}
        except BaseException as exc:  # closed, cancelled: no answer to compare
            _log.debug("replay: %s got no answer: %r", request.method, exc)
            with self._cond:
                self._open_ours -= 1
                self._cond.notify_all()
            return
        with self._cond:
            self._open_ours -= 1
            answer = self._theirs.get(request.pair) if request.pair is not None else None
            if answer is not None and self.failure is None and not self._closed:
                self._check_locked(answer, got)
                self._missing_before_locked(request, answer)
                self._matched_locked(answer.index)
            self._cond.notify_all()

    def _match_locked(self, kind: str, method: str, params: Any, got: dict[str, Any]) -> int | None:
        """The recorded message of theirs that the live one is (matched), or None (unexpected)."""
        candidates = self._waiting_by.get((kind, method), [])[:_LOOKAHEAD]
        if not candidates:
            self._diverge_locked(Divergence("unexpected", None, got, expected_next=self._next_due(),
                                            sender=self._peer))
            return None
        first = self._theirs[candidates[0]]
        if kind == "notification":
            exchange = self._exchange[first.index]
            window = [i for i in candidates if self._exchange[i] == exchange]
            for position, index in enumerate(window):
                trial = self.subst.copy()
                trial.learn(self._theirs[index].params, params)
                if not self._differences(trial, self._theirs[index].params, params):
                    for skipped in window[:position]:
                        self._diverge_locked(Divergence("missing", self._theirs[skipped]))
                        self._matched_locked(skipped)
                    self.subst = trial
                    self._matched_locked(index)
                    return index
            # Not the next one changed but an extra one: another kind of update, or one that
            # agrees with the next due in fewer than half of its members (ids not counted).
            same, shared = agreement(self.subst.apply(first.params), params, self.ignore | {"sessionUpdate"})
            if _update_kind(params) != first.update_kind or 2 * same < shared:
                self._diverge_locked(Divergence("unexpected", None, got, expected_next=first, sender=self._peer))
                return None
        self._check_locked(first, got)
        self._matched_locked(first.index)
        return first.index

    def _check_locked(self, recorded: Message, got: dict[str, Any]) -> None:
        expected = _payload(recorded)
        self.subst.learn(expected, got)
        differences = self._differences(self.subst, expected, got)
        if differences:
            self._diverge_locked(Divergence("changed", recorded, got, differences))

    def _differences(self, subst: Substitutions, recorded: Any, got: Any) -> list[Difference]:
        return compare(subst.apply(recorded), got, ignore=self.ignore)

    def _missing_before_locked(self, request: Message, answer: Message) -> None:
        """An answer came: whatever the peer recorded between our request and that answer (in
        the request's session) should have come before it."""
        start = bisect.bisect_right(self._waiting, request.index)
        for index in list(self._waiting[start:]):
            if index >= answer.index:
                break
            message = self._theirs[index]
            if message.kind in ("result", "error") or message.session not in (None, request.session):
                continue
            self._diverge_locked(Divergence("missing", message))
            self._matched_locked(index)

    def _matched_locked(self, index: int) -> None:
        for waiting in (self._waiting, self._waiting_by[(self._theirs[index].kind, self._theirs[index].method)]):
            position = bisect.bisect_left(waiting, index)
            if position < len(waiting) and waiting[position] == index:
                del waiting[position]
        self._done_at[index] = time.monotonic()

    def _next_due(self) -> Message | None:
        return self._theirs[self._waiting[0]] if self._waiting else None

    def _diverge_locked(self, divergence: Divergence) -> None:
        self.divergences.append(divergence)
        if self.strict and self.failure is None:
            # The player wakes and answers the peer's open requests with it (outside the lock).
            self.failure = divergence
            _log.error("replay of %s diverged: %s", self.recording.source, divergence)
        else:
            _log.warning("replay of %s diverged: %s", self.recording.source, divergence)
        if self._on_divergence is not None:
            self._on_divergence(divergence)
        self._cond.notify_all()

    def _give_up_calls(self) -> None:
        with self._cond:
            calls = [(self._calls[i], event) for i, event in self._settled.items() if not event.is_set()]
            failure = self.failure
        for call, event in calls:
            error = _failure_error(failure, "replay: the replay ended before answering")
            call.answer_error(error.code, error.message, error.data)
            event.set()


def _update_kind(params: Any) -> str | None:
    update = params.get("update") if isinstance(params, dict) else None
    kind = update.get("sessionUpdate") if isinstance(update, dict) else None
    return kind if isinstance(kind, str) else None


def _failure_error(divergence: Divergence | None, fallback: str = "replay failed") -> RequestError:
    if divergence is None:
        return RequestError(INTERNAL_ERROR, fallback)
    return RequestError(INTERNAL_ERROR, f"replay diverged: {divergence}", {"divergence": divergence.to_json()})
