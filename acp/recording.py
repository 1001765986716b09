"""Reading a recorded ACP conversation: who said what, and which answer goes with which request.

Two formats are read, even mixed in one file:

* the JSONL of :class:`~acp.wiretap.JsonlWireTap`, ``acp tap`` and ``acp chat --record``:
  ``{"t": seconds, "dir": "out" | "in", "msg": {...}}`` (``"raw"`` instead of ``"msg"`` for a
  line that was not JSON);
* plain JSON-RPC, one message per line, as other tools write it (acpx's ``--format json``...):
  no time and no direction.

Who sent a message is worked out from the messages themselves, so a recording made on either
side reads the same: in the tap format, the direction that carried ``initialize`` is the
client's; a plain message's sender follows from its method (the schema says which side handles
each method) and an answer's from the request it answers. Requests are paired with their
answers (and the time between them).

This module knows nothing about turns or presentation (:mod:`acp.trace`) nor about replaying
(:mod:`acp.replay`); both build on it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .schema import STABLE_AGENT_METHODS, STABLE_CLIENT_METHODS

__all__ = ["CLIENT", "AGENT", "Message", "Recording", "load_recording", "read_recording", "other_side"]

CLIENT = "client"
AGENT = "agent"

# Methods the agent handles are sent by the client, and the other way round. ``$/cancel_request``
# is in both tables: its sender is the side whose request it names (see _sender_of_call).
_SENT_BY_CLIENT = frozenset(STABLE_AGENT_METHODS) - {"$/cancel_request"}
_SENT_BY_AGENT = frozenset(STABLE_CLIENT_METHODS) - {"$/cancel_request"}


def other_side(sender: str) -> str:
    """``"agent"`` for ``"client"`` and the other way round."""
    return AGENT if sender == CLIENT else CLIENT


@dataclass
class Message:
    """One recorded line, decoded and placed in the conversation."""

    index: int
    t: float
    direction: str  # as recorded (or, for plain JSON-RPC, as a client's tap would say): "out" | "in"
    sender: str  # "client" | "agent"
    kind: str  # "request" | "notification" | "result" | "error" | "invalid"
    method: str | None = None  # for an answer: its request's method
    id: Any = None
    session: str | None = None
    msg: Any = None  # the decoded message (None for a line that was not JSON)
    raw: str | None = None
    pair: int | None = None  # the index of the request's answer, or of the answer's request
    latency: float | None = None  # seconds from the request to its answer (on both of them)
    summary: str = ""
    line: int = 0  # the line of the file it was read from (1-based)

    @property
    def is_error(self) -> bool:
        """An error answer, or a line that is not a JSON-RPC message."""
        return self.kind in ("error", "invalid")

    @property
    def params(self) -> Any:
        """The params of a request or notification (None otherwise)."""
        return self.msg.get("params") if isinstance(self.msg, dict) else None

    @property
    def update_kind(self) -> str | None:
        """For a ``session/update``, its ``sessionUpdate`` discriminator."""
        if self.method != "session/update" or self.kind != "notification":
            return None
        update = (self.params or {}).get("update") if isinstance(self.params, dict) else None
        kind = update.get("sessionUpdate") if isinstance(update, dict) else None
        return kind if isinstance(kind, str) else None


@dataclass
class Recording:
    """A whole recording: its messages in file order, and the lines that could not be read."""

    source: str
    messages: list[Message]
    problems: list[str] = field(default_factory=list)
    timed: bool = True  # False when no line carried a time (plain JSON-RPC)

    @property
    def sessions(self) -> list[str]:
        """Every session id seen, in order of appearance."""
        seen: dict[str, None] = {}
        for message in self.messages:
            if message.session is not None:
                seen.setdefault(message.session)
        return list(seen)

    @property
    def methods(self) -> list[str]:
        """Every method seen, sorted."""
        return sorted({m.method for m in self.messages if m.method})

    @property
    def unanswered(self) -> list[Message]:
        """Requests that got no answer in the recording."""
        return [m for m in self.messages if m.kind == "request" and m.pair is None]

    @property
    def protocol_version(self) -> int | None:
        """The protocol version the agent answered ``initialize`` with (None: no answer seen)."""
        for message in self.messages:
            if message.kind == "result" and message.method == "initialize":
                result = message.msg.get("result")
                version = result.get("protocolVersion") if isinstance(result, dict) else None
                return version if isinstance(version, int) else None
        return None


def load_recording(path: str | os.PathLike[str]) -> Recording:
    """Read the recording at ``path`` (raises ``OSError`` if it cannot be read)."""
    with open(path, encoding="utf-8", errors="replace") as file:
        return read_recording(file, source=os.fspath(path))


@dataclass
class _Entry:
    line: int
    t: float | None
    direction: str | None  # None: a plain JSON-RPC line (inferred later)
    msg: Any
    raw: str | None


def read_recording(lines: Iterable[str], *, source: str = "-") -> Recording:
    """Read recording lines (see :func:`load_recording`)."""
    entries: list[_Entry] = []
    problems: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            problems.append(f"line {number}: not a recording entry: {_clip(line.strip())}")
            continue
        entry = _entry(number, value)
        if isinstance(entry, str):
            problems.append(f"line {number}: {entry}")
        else:
            entries.append(entry)
    client_dir = _client_direction(entries)
    senders = _infer_senders(entries, client_dir)
    messages = []
    for index, (entry, sender) in enumerate(zip(entries, senders, strict=True)):
        direction = entry.direction or ("out" if sender == CLIENT else "in")
        messages.append(_message(index, entry, direction, sender))
    _pair(messages)
    timed = any(entry.t is not None for entry in entries)
    return Recording(source, messages, problems, timed)


def _entry(number: int, value: Any) -> _Entry | str:
    """A tap entry, a plain JSON-RPC message, or why the line is neither."""
    if isinstance(value, dict) and "dir" in value and ("msg" in value or "raw" in value or "t" in value):
        direction = value.get("dir")
        if direction not in ("in", "out"):
            return f"unknown direction {direction!r}"
        try:
            t = float(value.get("t", 0.0))
        except (TypeError, ValueError):
            return f"not a recording entry: {_clip(json.dumps(value))}"
        raw = value.get("raw")
        return _Entry(number, t, direction, value.get("msg"), raw if isinstance(raw, str) else None)
    if isinstance(value, dict) and ("method" in value or "result" in value or "error" in value):
        return _Entry(number, None, None, value, None)
    return f"not a recording entry: {_clip(json.dumps(value))}"


def _client_direction(entries: list[_Entry]) -> str:
    """The recorded direction of the client's messages: who sent ``initialize``, else the
    opposite of who sent ``session/update``; a client's recording ("out") by default."""
    for entry in entries:
        msg = entry.msg
        if entry.direction and isinstance(msg, dict) and msg.get("method") == "initialize" and "id" in msg:
            return entry.direction
    for entry in entries:
        msg = entry.msg
        if entry.direction and isinstance(msg, dict) and msg.get("method") == "session/update":
            return "in" if entry.direction == "out" else "out"
    return "out"


def _id_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _infer_senders(entries: list[_Entry], client_dir: str) -> list[str]:
    """Each entry's sender: from its direction when recorded, else from what it is."""
    senders: list[str] = []
    # Requests still unanswered, by sender and id (an answer goes to the other side's request).
    pending: dict[tuple[str, str], int] = {}
    for position, entry in enumerate(entries):
        msg = entry.msg
        if entry.direction is not None:
            sender = CLIENT if entry.direction == client_dir else AGENT
        elif isinstance(msg.get("method"), str):
            sender = _sender_of_call(msg, pending)
        else:
            sender = _sender_of_answer(msg, pending)
        senders.append(sender)
        if isinstance(msg, dict):
            if isinstance(msg.get("method"), str) and "id" in msg:
                pending[(sender, _id_key(msg["id"]))] = position
            elif "id" in msg:
                pending.pop((other_side(sender), _id_key(msg["id"])), None)
    return senders


def _sender_of_call(msg: dict[str, Any], pending: dict[tuple[str, str], int]) -> str:
    method = msg["method"]
    if method in _SENT_BY_CLIENT:
        return CLIENT
    if method in _SENT_BY_AGENT:
        return AGENT
    if method == "$/cancel_request":  # sent by the side whose request it names
        params = msg.get("params")
        named = params.get("requestId", params.get("id")) if isinstance(params, dict) else None
        if (AGENT, _id_key(named)) in pending and (CLIENT, _id_key(named)) not in pending:
            return AGENT
        return CLIENT
    # An extension method: requests mostly come from clients, notifications from agents.
    return CLIENT if "id" in msg else AGENT


def _sender_of_answer(msg: dict[str, Any], pending: dict[tuple[str, str], int]) -> str:
    key = _id_key(msg.get("id"))
    client_asked = pending.get((CLIENT, key))
    agent_asked = pending.get((AGENT, key))
    if client_asked is not None and (agent_asked is None or client_asked > agent_asked):
        return AGENT  # answers the client's (latest) request
    if agent_asked is not None:
        return CLIENT
    return AGENT  # an answer to nothing (an error with id null...): most often the agent's


def _message(index: int, entry: _Entry, direction: str, sender: str) -> Message:
    msg = entry.msg
    message = Message(index, entry.t or 0.0, direction, sender, "invalid", msg=msg, raw=entry.raw, line=entry.line)
    if not isinstance(msg, dict):
        return message
    message.id = msg.get("id")
    method = msg.get("method")
    params = msg.get("params")
    if isinstance(method, str):
        message.method = method
        message.kind = "request" if "id" in msg else "notification"
        message.session = _session_of(params)
    elif "error" in msg:
        message.kind = "error"
    elif "result" in msg:
        message.kind = "result"
        message.session = _session_of(msg.get("result"))
    return message


def _session_of(value: Any) -> str | None:
    if isinstance(value, dict):
        session = value.get("sessionId")
        if isinstance(session, str):
            return session
    return None


def _pair(messages: list[Message]) -> None:
    pending: dict[tuple[str, str], Message] = {}
    for message in messages:
        if message.kind == "request":
            pending[(message.sender, _id_key(message.id))] = message
        elif message.kind in ("result", "error") and message.id is not None:
            request = pending.pop((other_side(message.sender), _id_key(message.id)), None)
            if request is None:
                continue
            request.pair, message.pair = message.index, request.index
            message.method = request.method
            message.session = message.session or request.session
            latency = max(0.0, message.t - request.t)
            request.latency = message.latency = latency


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
