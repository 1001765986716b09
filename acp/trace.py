"""What happened in a recording: messages described, prompt turns reassembled, latencies measured.

Built on :mod:`acp.recording` (which reads the file and pairs requests with answers), this adds
what a person wants to see: a one-line summary of each message, each ``session/prompt`` turn as
the events it consisted of **in wire order** (the streamed text and thoughts, tool calls and
their status changes, plans, the agent's requests such as permission and their answers,
``session/cancel``), with consecutive chunks merged into one event (a 20,000-chunk reply is one
event with a count), the time to the first update of each turn, and per method the count and
p50 / p90 / max of request → answer.

The terminal view is :mod:`acp.trace_text`, the HTML page :mod:`acp.trace_html`, the command
``acp trace`` :mod:`acp.trace_cli`; configuration flows from the command to these, never back.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .recording import AGENT, CLIENT, Message, Recording, load_recording, read_recording

__all__ = [
    "CLIENT", "AGENT", "Message", "Turn", "TurnEvent", "Trace", "MethodLatency",
    "load_trace", "analyse", "method_latencies", "chunk_runs", "CHUNK_KINDS", "COLLAPSE_RUN",
]

_SNIPPET = 60
#: The ``session/update`` kinds that stream text, merged into one event when consecutive.
CHUNK_KINDS = {"agent_message_chunk": "text", "agent_thought_chunk": "thought", "user_message_chunk": "user"}
#: Runs of at least this many consecutive chunks (one kind, one session) show as one row.
COLLAPSE_RUN = 5


@dataclass
class TurnEvent:
    """One thing that happened during a turn, in wire order.

    ``kind``: ``text`` / ``thought`` / ``user`` (chunks, ``count`` of them merged), ``tool_call``,
    ``tool_update``, ``plan``, ``request`` (the agent asked the client: permission, files,
    terminals...), ``answer`` (the client's answer to it), ``cancel`` (the client's
    ``session/cancel``) or ``update`` (any other update: notices, modes, usage...).
    """

    kind: str
    text: str  # what to show: the merged text, or a one-line description
    first: int  # index of its (first) message
    last: int  # index of its last message (== first unless merged)
    t: float  # when its first message was recorded
    count: int = 1
    method: str | None = None  # for request / answer
    status: str | None = None  # tool call status, or "error" for an error answer


@dataclass
class Turn:
    """A ``session/prompt`` and what happened until it was answered."""

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
    first_update: float | None = None  # seconds from the prompt to its first session/update
    events: list[TurnEvent] = field(default_factory=list)
    _titles: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass
class MethodLatency:
    """Request → answer times of one method (seconds)."""

    method: str
    asker: str  # "client" | "agent"
    count: int
    p50: float
    p90: float
    max: float


@dataclass
class Trace(Recording):
    """A whole recording (its messages, the lines that could not be read), with its turns."""

    turns: list[Turn] = field(default_factory=list)


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read and analyse the recording at ``path`` (raises ``OSError`` if it cannot be read)."""
    return _trace(load_recording(path))


def analyse(lines: Iterable[str], *, source: str = "-") -> Trace:
    """Analyse recording lines (see :func:`load_trace`)."""
    return _trace(read_recording(lines, source=source))


def _trace(recording: Recording) -> Trace:
    messages = recording.messages
    for message in messages:
        message.summary = _summary(message, messages)
    return Trace(recording.source, messages, recording.problems, recording.timed, _turns(messages))


def _summary(message: Message, messages: list[Message]) -> str:
    msg = message.msg
    if message.kind == "invalid":
        text = message.raw if message.raw is not None else json.dumps(msg)
        return f"not a JSON-RPC message: {_snippet(text)}" if msg is None or not isinstance(msg, dict) \
            else "neither a request nor an answer"
    if message.kind in ("request", "notification"):
        return _describe_call(message.method or "", msg.get("params"))
    if message.kind == "error":
        return _describe_error(msg.get("error"))
    return _describe_result(message.method, msg.get("result")) if message.pair is not None else ""


# ---------------------------------------------------------------------------------- turns


def _turns(messages: list[Message]) -> list[Turn]:
    turns: list[Turn] = []
    open_turns: dict[str | None, Turn] = {}
    by_request: dict[int, Turn] = {}
    for message in messages:
        if message.kind == "request" and message.method == "session/prompt" and message.sender == CLIENT:
            params = message.msg.get("params") or {}
            turn = Turn(message.index, message.session, _prompt_text(params.get("prompt")))
            turns.append(turn)
            open_turns[message.session] = by_request[message.index] = turn
            continue
        if message.kind in ("result", "error") and message.method == "session/prompt" and message.pair in by_request:
            turn = by_request[message.pair]
            turn.answer, turn.duration = message.index, message.latency
            if message.kind == "result":
                result = message.msg.get("result")
                turn.stop_reason = result.get("stopReason") if isinstance(result, dict) else None
            else:
                turn.error = message.summary
            if open_turns.get(turn.session) is turn:
                del open_turns[turn.session]
            continue
        found = open_turns.get(message.session)
        if found is None and message.kind in ("result", "error") and message.pair is not None:
            found = open_turns.get(messages[message.pair].session)
        if found is not None:
            _add_event(found, message, messages)
    return turns


def _add_event(turn: Turn, message: Message, messages: list[Message]) -> None:
    prompt_t = messages[turn.request].t
    if message.kind == "notification" and message.method == "session/update":
        if turn.first_update is None:
            turn.first_update = max(0.0, message.t - prompt_t)
        update = (message.msg.get("params") or {}).get("update")
        if isinstance(update, dict):
            _add_update(turn, message, update)
    elif message.kind == "notification" and message.method == "session/cancel" and message.sender == CLIENT:
        _append(turn, TurnEvent("cancel", "session/cancel", message.index, message.index, message.t))
    elif message.kind == "request" and message.sender == AGENT:
        _append(turn, TurnEvent("request", message.summary, message.index, message.index, message.t,
                                method=message.method))
    elif message.kind in ("result", "error") and message.sender == CLIENT and message.pair is not None:
        text = message.summary or ("error" if message.kind == "error" else "ok")
        _append(turn, TurnEvent("answer", text, message.index, message.index, message.t, method=message.method,
                                status="error" if message.kind == "error" else None))


def _add_update(turn: Turn, message: Message, update: dict[str, Any]) -> None:
    kind = str(update.get("sessionUpdate", "?"))
    index, t = message.index, message.t
    if kind in CHUNK_KINDS:
        text = _block_text(update.get("content"))
        if kind == "agent_message_chunk":
            turn.reply += text
        elif kind == "agent_thought_chunk":
            turn.thoughts += text
        event_kind = CHUNK_KINDS[kind]
        last = turn.events[-1] if turn.events else None
        if last is not None and last.kind == event_kind:  # one event for a run of chunks
            last.text += text
            last.last = index
            last.count += 1
        else:
            _append(turn, TurnEvent(event_kind, text, index, index, t))
    elif kind == "tool_call":
        call_id, title = str(update.get("toolCallId", "?")), str(update.get("title", "?"))
        turn._titles[call_id] = title
        turn.tool_calls.append(f"{title} ({update.get('kind', 'other')})")
        status = update.get("status")
        _append(turn, TurnEvent("tool_call", f"{title} ({update.get('kind', 'other')})", index, index, t,
                                status=str(status) if status else "pending"))
    elif kind == "tool_call_update":
        call_id = str(update.get("toolCallId", "?"))
        title = update.get("title") or turn._titles.get(call_id, call_id)
        status = update.get("status")
        _append(turn, TurnEvent("tool_update", str(title), index, index, t, status=str(status) if status else None))
    elif kind == "plan":
        entries = [e for e in update.get("entries") or [] if isinstance(e, dict)]
        text = "; ".join(f"[{e.get('status', '?')}] {e.get('content', '')}" for e in entries)
        _append(turn, TurnEvent("plan", text or "(empty plan)", index, index, t))
    else:
        _append(turn, TurnEvent("update", message.summary or kind, index, index, t))


def _append(turn: Turn, event: TurnEvent) -> None:
    turn.events.append(event)


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


def chunk_runs(messages: list[Message]) -> list[tuple[int, int]]:
    """``(first, last)`` index of each run of :data:`COLLAPSE_RUN` or more consecutive chunks
    of one kind and one session."""
    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(messages):
        kind = messages[i].update_kind
        j = i + 1
        if kind in CHUNK_KINDS:
            while j < len(messages) and messages[j].update_kind == kind and messages[j].session == messages[i].session:
                j += 1
        if j - i >= COLLAPSE_RUN:
            runs.append((i, j - 1))
        i = j
    return runs


# ---------------------------------------------------------------------------------- latency


def _percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted ``values``."""
    rank = max(1, math.ceil(fraction * len(values)))
    return values[rank - 1]


def method_latencies(trace: Trace) -> list[MethodLatency]:
    """Request → answer times per method and asking side, most frequent first."""
    samples: dict[tuple[str, str], list[float]] = {}
    for message in trace.messages:
        if message.kind == "request" and message.latency is not None and message.method:
            samples.setdefault((message.method, message.sender), []).append(message.latency)
    stats = []
    for (method, asker), values in samples.items():
        values.sort()
        stats.append(MethodLatency(method, asker, len(values), _percentile(values, 0.5),
                                   _percentile(values, 0.9), values[-1]))
    stats.sort(key=lambda s: (-s.count, s.method))
    return stats


# ---------------------------------------------------------------------------------- summaries


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
    if method == "terminal/create":
        return str(result.get("terminalId", ""))
    if method == "terminal/wait_for_exit":
        return f"exitCode {result.get('exitCode')}" + (f" signal {result['signal']}" if result.get("signal") else "")
    return ""


def _describe_error(error: Any) -> str:
    if not isinstance(error, dict):
        return f"error {_snippet(json.dumps(error))}"
    text = f"error {error.get('code')} {error.get('message', '')}".rstrip()
    if error.get("data") is not None:
        text += f" data={_snippet(json.dumps(error['data'], ensure_ascii=False), 120)}"
    return text
