"""``acp trace FILE``: what happened in a recording, one line per message.

Reads the JSONL that :class:`~acp.wiretap.JsonlWireTap`, ``acp chat --record`` and ``acp tap``
write (``{"t": seconds, "dir": "out" | "in", "msg": {...}}``, or ``"raw"`` for a line that was not
JSON). Who sent what is worked out from the messages themselves (the side that sent
``initialize`` is the client), so a recording made on either side reads the same. Requests are
paired with their answers (and the latency between them), messages carry their session, prompt
turns are reassembled (the streamed reply text, thoughts, tool calls and the stop reason), and
``--html OUT`` renders all of it as one self-contained page (:mod:`acp.trace_html`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any

__all__ = ["Message", "Turn", "Trace", "load_trace", "run_trace"]

CLIENT = "client"
AGENT = "agent"
_ARROWS = {CLIENT: "C→A", AGENT: "A→C"}
_SNIPPET = 60


@dataclass
class Message:
    """One recorded line, decoded and placed in the conversation."""

    index: int
    t: float
    direction: str  # as recorded: "out" | "in"
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

    @property
    def is_error(self) -> bool:
        """An error answer, or a line that is not a JSON-RPC message."""
        return self.kind in ("error", "invalid")


@dataclass
class Turn:
    """A ``session/prompt`` and what the agent streamed until it answered."""

    request: int  # index of the session/prompt request
    session: str | None
    prompt: str
    reply: str = ""
    thoughts: str = ""
    tool_calls: list[str] = field(default_factory=list)
    stop_reason: str | None = None  # None: unanswered (or answered with an error)
    error: str | None = None
    answer: int | None = None
    duration: float | None = None


@dataclass
class Trace:
    """A whole recording: its messages, turns, and the lines that could not be read."""

    source: str
    messages: list[Message]
    turns: list[Turn]
    problems: list[str]

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


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read and analyse the recording at ``path`` (raises ``OSError`` if it cannot be read)."""
    with open(path, encoding="utf-8", errors="replace") as file:
        return analyse(file, source=os.fspath(path))


def analyse(lines: Iterable[str], *, source: str = "-") -> Trace:
    """Analyse recording lines (see :func:`load_trace`)."""
    entries: list[tuple[float, str, Any, str | None]] = []
    problems: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            t, direction = float(entry["t"]), str(entry["dir"])
        except (ValueError, KeyError, TypeError):
            problems.append(f"line {number}: not a recording entry: {line.strip()[:80]}")
            continue
        if direction not in ("in", "out"):
            problems.append(f"line {number}: unknown direction {direction!r}")
            continue
        entries.append((t, direction, entry.get("msg"), entry.get("raw")))
    client_dir = _client_direction(entries)
    messages = [
        _message(index, t, direction, CLIENT if direction == client_dir else AGENT, msg, raw)
        for index, (t, direction, msg, raw) in enumerate(entries)
    ]
    _pair(messages)
    return Trace(source, messages, _turns(messages), problems)


def _client_direction(entries: list[tuple[float, str, Any, str | None]]) -> str:
    """The recorded direction of the client's messages: who sent ``initialize``, else the
    opposite of who sent ``session/update``; a client's recording ("out") by default."""
    for _, direction, msg, _ in entries:
        if isinstance(msg, dict) and msg.get("method") == "initialize" and "id" in msg:
            return direction
    for _, direction, msg, _ in entries:
        if isinstance(msg, dict) and msg.get("method") == "session/update":
            return "in" if direction == "out" else "out"
    return "out"


def _message(index: int, t: float, direction: str, sender: str, msg: Any, raw: str | None) -> Message:
    message = Message(index, t, direction, sender, "invalid", msg=msg, raw=raw)
    if not isinstance(msg, dict):
        message.summary = f"not a JSON-RPC message: {_snippet(raw if raw is not None else json.dumps(msg))}"
        return message
    message.id = msg.get("id")
    method = msg.get("method")
    params = msg.get("params")
    if isinstance(method, str):
        message.method = method
        message.kind = "request" if "id" in msg else "notification"
        message.session = _session_of(params)
        message.summary = _describe_call(method, params)
    elif "error" in msg:
        message.kind = "error"
        message.summary = _describe_error(msg.get("error"))
    elif "result" in msg:
        message.kind = "result"
        result = msg.get("result")
        message.session = _session_of(result)
    else:
        message.summary = "neither a request nor an answer"
    return message


def _session_of(value: Any) -> str | None:
    if isinstance(value, dict):
        session = value.get("sessionId")
        if isinstance(session, str):
            return session
    return None


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _pair(messages: list[Message]) -> None:
    pending: dict[tuple[str, str], Message] = {}
    for message in messages:
        if message.kind == "request":
            pending[(message.sender, _key(message.id))] = message
        elif message.kind in ("result", "error") and message.id is not None:
            asker = AGENT if message.sender == CLIENT else CLIENT
            request = pending.pop((asker, _key(message.id)), None)
            if request is None:
                continue
            request.pair, message.pair = message.index, request.index
            message.method = request.method
            message.session = message.session or request.session
            latency = max(0.0, message.t - request.t)
            request.latency = message.latency = latency
            if message.kind == "result":
                message.summary = _describe_result(request.method, message.msg.get("result"))


def _turns(messages: list[Message]) -> list[Turn]:
    turns: list[Turn] = []
    open_turns: dict[str | None, Turn] = {}
    for message in messages:
        turn: Turn | None
        if message.kind == "request" and message.method == "session/prompt" and message.sender == CLIENT:
            params = message.msg.get("params") or {}
            turn = Turn(message.index, message.session, _prompt_text(params.get("prompt")))
            turns.append(turn)
            open_turns[message.session] = turn
        elif message.method == "session/update" and message.kind == "notification":
            turn = open_turns.get(message.session)
            update = (message.msg.get("params") or {}).get("update")
            if turn is not None and isinstance(update, dict):
                _add_update(turn, update)
        elif message.kind in ("result", "error") and message.method == "session/prompt":
            turn = next((t for t in turns if t.request == message.pair), None)
            if turn is None:
                continue
            turn.answer, turn.duration = message.index, message.latency
            if message.kind == "result":
                result = message.msg.get("result")
                turn.stop_reason = result.get("stopReason") if isinstance(result, dict) else None
            else:
                turn.error = message.summary
            if open_turns.get(turn.session) is turn:
                del open_turns[turn.session]
    return turns


def _add_update(turn: Turn, update: dict[str, Any]) -> None:
    kind = update.get("sessionUpdate")
    if kind == "agent_message_chunk":
        turn.reply += _block_text(update.get("content"))
    elif kind == "agent_thought_chunk":
        turn.thoughts += _block_text(update.get("content"))
    elif kind == "tool_call":
        turn.tool_calls.append(f"{update.get('title', '?')} ({update.get('kind', 'other')})")


def _block_text(block: Any) -> str:
    if isinstance(block, dict):
        if block.get("type") == "text":
            return str(block.get("text", ""))
        if block.get("type") == "resource_link":
            return f"[link {block.get('uri')}]"
        return f"[{block.get('type', 'content')}]"
    return ""


def _prompt_text(blocks: Any) -> str:
    if not isinstance(blocks, list):
        return ""
    return "\n".join(_block_text(b) for b in blocks)


def _snippet(text: str, limit: int = _SNIPPET) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe_call(method: str, params: Any) -> str:
    if not isinstance(params, dict):
        return ""
    if method == "session/update":
        update = params.get("update")
        if not isinstance(update, dict):
            return "?"
        kind = str(update.get("sessionUpdate", "?"))
        if kind.endswith("_chunk"):
            return f"{kind} {json.dumps(_snippet(_block_text(update.get('content'))), ensure_ascii=False)}"
        if kind in ("tool_call", "tool_call_update"):
            bits = [str(update[k]) for k in ("title", "status") if update.get(k)]
            return f"{kind} {update.get('toolCallId', '?')} {' '.join(bits)}".rstrip()
        if kind == "plan":
            return f"plan ({len(update.get('entries') or [])} entries)"
        return kind
    if method == "session/prompt":
        return json.dumps(_snippet(_prompt_text(params.get("prompt"))), ensure_ascii=False)
    if method == "initialize":
        info = params.get("clientInfo") or {}
        return f"protocol {params.get('protocolVersion')} {info.get('name', '')}".rstrip()
    if method in ("fs/read_text_file", "fs/write_text_file"):
        return str(params.get("path", ""))
    if method == "terminal/create":
        return _snippet(" ".join([str(params.get("command", ""))] + [str(a) for a in params.get("args") or []]))
    if method == "session/request_permission":
        return _snippet(str((params.get("toolCall") or {}).get("title", "")))
    if method == "authenticate":
        return str(params.get("methodId", ""))
    if method == "session/set_mode":
        return str(params.get("modeId", ""))
    if method == "session/new":
        return str(params.get("cwd", ""))
    return ""


def _describe_result(method: str | None, result: Any) -> str:
    if not isinstance(result, dict):
        return "" if result is None else _snippet(json.dumps(result))
    if method == "session/prompt":
        return f"stopReason {result.get('stopReason')}"
    if method == "initialize":
        info = result.get("agentInfo") or {}
        methods = [m.get("id") for m in result.get("authMethods") or [] if isinstance(m, dict)]
        auth = f", authMethods {', '.join(map(str, methods))}" if methods else ""
        return f"protocol {result.get('protocolVersion')} {info.get('name', '')}{auth}".rstrip()
    if method == "session/request_permission":
        outcome = result.get("outcome") or {}
        return str(outcome.get("optionId") or outcome.get("outcome") or "")
    if method == "session/new":
        return str(result.get("sessionId", ""))
    return ""


def _describe_error(error: Any) -> str:
    if not isinstance(error, dict):
        return f"error {_snippet(json.dumps(error))}"
    text = f"error {error.get('code')} {error.get('message', '')}".rstrip()
    if error.get("data") is not None:
        text += f" data={_snippet(json.dumps(error['data'], ensure_ascii=False), 120)}"
    return text


# ---------------------------------------------------------------------------------- terminal


def format_line(message: Message, sessions: dict[str, int]) -> str:
    """One message as a terminal line (without colour)."""
    ident = ""
    if message.kind == "request":
        ident = f"#{_id_text(message.id)}"
    elif message.kind in ("result", "error") and message.id is not None:
        ident = f"#{_id_text(message.id)}↩"
    session = f"[s{sessions[message.session]}]" if message.session in sessions else ""
    method = message.method or ("(answer)" if message.kind in ("result", "error") else "")
    latency = f"{message.latency * 1000:.1f} ms" if message.latency is not None and message.kind != "request" else ""
    parts = [f"{message.t:9.3f}", _ARROWS[message.sender], f"{ident:>6}", f"{message.kind:<12}", method]
    tail = " ".join(x for x in (session, message.summary, latency) if x)
    if message.kind == "request" and message.pair is None:
        tail = (tail + " (no answer)").strip()
    return "  ".join(parts) + ("  " + tail if tail else "")


def _id_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def run_trace(path: str, *, html: str | None, color: str, out: IO[str]) -> int:
    """``acp trace``: print the recording at ``path`` (and write the HTML page to ``html``);
    the exit status (1 if the file cannot be read)."""
    try:
        trace = load_trace(path)
    except OSError as exc:
        out.write(f"acp trace: cannot read {path}: {exc.strerror or exc}\n")
        return 1
    use_color = color == "always" or (color == "auto" and _isatty(out) and "NO_COLOR" not in os.environ)
    sessions = {s: n for n, s in enumerate(trace.sessions, 1)}
    for number, session in enumerate(trace.sessions, 1):
        out.write(f"session s{number}: {session}\n")
    for message in trace.messages:
        line = format_line(message, sessions)
        if use_color and message.is_error:
            line = f"\x1b[31;1m{line}\x1b[0m"
        elif use_color and message.kind == "request" and message.pair is None:
            line = f"\x1b[33m{line}\x1b[0m"
        out.write(line + "\n")
    for problem in trace.problems:
        out.write(f"warning: {problem}\n")
    out.write(_summary(trace) + "\n")
    if html is not None:
        from .trace_html import render_html

        try:
            with open(html, "w", encoding="utf-8") as file:
                file.write(render_html(trace))
        except OSError as exc:
            out.write(f"acp trace: cannot write {html}: {exc.strerror or exc}\n")
            return 1
        out.write(f"wrote {html}\n")
    out.flush()
    return 0


def _summary(trace: Trace) -> str:
    messages = trace.messages
    requests = sum(1 for m in messages if m.kind == "request")
    errors = sum(1 for m in messages if m.is_error)
    span = messages[-1].t - messages[0].t if messages else 0.0
    unanswered = len(trace.unanswered)
    return (
        f"{len(messages)} messages over {span:.3f} s: {requests} requests"
        f" ({unanswered} unanswered), {errors} errors, {len(trace.sessions)} sessions, {len(trace.turns)} turns"
    )


def _isatty(out: IO[str]) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False

