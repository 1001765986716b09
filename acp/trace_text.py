"""``acp trace`` in the terminal: the messages (runs of chunks collapsed), each turn in wire
order, latencies per method and the time to first update per turn.

Everything taken from a recording is passed through :func:`safe` before it is printed: a
recording is data, and an agent's output may hold terminal escape sequences (one that switches
to the alternate screen would take the terminal away from the person reading the trace).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

from ._text import safe
from .trace import Message, Trace, Turn, chunk_runs, method_latencies

__all__ = ["safe", "format_line", "write_trace"]

_ARROWS = {"client": "C→A", "agent": "A→C"}
_BAR_WIDTH = 30

def _id_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def format_line(message: Message, sessions: dict[str, int], count: int = 1) -> str:
    """One message as a terminal line (not yet made :func:`safe`; without colour). ``count``:
    the length of the run of chunks this line stands for."""
    ident = ""
    if message.kind == "request":
        ident = f"#{_id_text(message.id)}"
    elif message.kind in ("result", "error") and message.id is not None:
        ident = f"#{_id_text(message.id)}↩"
    session = f"[s{sessions[message.session]}]" if message.session in sessions else ""
    method = message.method or ("(answer)" if message.kind in ("result", "error") else "")
    latency = f"{message.latency * 1000:.1f} ms" if message.latency is not None and message.kind != "request" else ""
    summary = message.summary
    if count > 1:
        summary = f"{message.update_kind} ×{count} (collapsed; --expand shows each)"
    parts = [f"{message.t:9.3f}", _ARROWS[message.sender], f"{ident:>6}", f"{message.kind:<12}", method]
    tail = " ".join(x for x in (session, summary, latency) if x)
    if message.kind == "request" and message.pair is None:
        tail = (tail + " (no answer)").strip()
    return "  ".join(parts) + ("  " + tail if tail else "")


def _runs(messages: list[Message], expand: bool) -> Iterator[tuple[Message, int]]:
    """Each message with the length of the run of chunks it stands for (runs collapsed)."""
    runs = {} if expand else dict(chunk_runs(messages))
    i = 0
    while i < len(messages):
        last = runs.get(i, i)
        yield messages[i], last - i + 1
        i = last + 1


def write_trace(trace: Trace, out: IO[str], *, color: bool = False, expand: bool = False) -> None:
    """The whole terminal view of ``trace``."""

    def put(line: str, style: str | None = None) -> None:
        line = safe(line)
        out.write(f"\x1b[{style}m{line}\x1b[0m\n" if color and style else line + "\n")

    sessions = {s: n for n, s in enumerate(trace.sessions, 1)}
    for number, session in enumerate(trace.sessions, 1):
        put(f"session s{number}: {session}")
    for message, count in _runs(trace.messages, expand):
        line = format_line(message, sessions, count)
        if message.is_error:
            put(line, "31;1")
        elif message.kind == "request" and message.pair is None:
            put(line, "33")
        else:
            put(line)
    for number, turn in enumerate(trace.turns, 1):
        for line in _turn_lines(number, turn, sessions, trace.timed):
            put(line)
    for line in _latency_lines(trace):
        put(line)
    for problem in trace.problems:
        put(f"warning: {problem}")
    put(_summary(trace))


def _turn_lines(number: int, turn: Turn, sessions: dict[str, int], timed: bool) -> Iterator[str]:
    session = f"s{sessions[turn.session]}" if turn.session in sessions else "no session"
    timing = ""
    if timed and turn.duration is not None:
        timing = f", {turn.duration * 1000:.1f} ms"
    if timed and turn.first_update is not None:
        timing += f", first update after {turn.first_update * 1000:.1f} ms"
    yield f"turn {number} ({session}{timing}): {json.dumps(_clip(turn.prompt, 80), ensure_ascii=False)}"
    for event in turn.events:
        if event.kind in ("text", "thought", "user"):
            many = f" ×{event.count}" if event.count > 1 else ""
            yield f"  {event.kind}{many}: {json.dumps(_clip(event.text, 100), ensure_ascii=False)}"
        elif event.kind in ("tool_call", "tool_update"):
            yield f"  {event.kind.replace('_', ' ')}: {event.text}" + (f" → {event.status}" if event.status else "")
        elif event.kind in ("request", "answer"):
            arrow = "agent asks" if event.kind == "request" else "client answers"
            yield f"  {arrow} {event.method}: {event.text}".rstrip()
        else:
            yield f"  {event.kind}: {event.text}"
    ending = turn.error or (f"stop reason: {turn.stop_reason}" if turn.stop_reason else "no answer")
    yield f"  {ending}"


def _latency_lines(trace: Trace) -> Iterator[str]:
    if not trace.timed:
        yield "latency: the recording has no times (plain JSON-RPC)"
        return
    stats = method_latencies(trace)
    if stats:
        width = max(len(s.method) for s in stats)
        yield "latency, request → answer (ms):"
        yield f"  {'method':<{width}}  asked by  count      p50      p90      max"
        for s in stats:
            yield (f"  {s.method:<{width}}  {s.asker:<8}  {s.count:>5}"
                   f"  {s.p50 * 1000:7.1f}  {s.p90 * 1000:7.1f}  {s.max * 1000:7.1f}")
    firsts = [(n, t.first_update) for n, t in enumerate(trace.turns, 1) if t.first_update is not None]
    if firsts:
        longest = max(value for _, value in firsts) or 1.0
        yield "time to first update:"
        for number, value in firsts:
            bar = "█" * max(1, round(_BAR_WIDTH * value / longest))
            yield f"  turn {number:>3}  {bar:<{_BAR_WIDTH}}  {value * 1000:.1f} ms"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
