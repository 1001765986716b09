"""``acp trace --diff A B``: what changed between two recordings of the same scenario, by turn and
by message, ignoring ids and times.

Both recordings are cut into the part before the first ``session/prompt`` and one part per
turn (the prompt and everything until the next prompt); parts are paired in order. Within a
part, messages are aligned by what they are (sender, kind, method, update kind) with
:class:`difflib.SequenceMatcher`, then each aligned pair is compared through
:class:`~acp.wirediff.Substitutions` (A's session, tool call and terminal ids and folders are
mapped to B's as they are met). What comes out: *changed* (a member differs), *added* (only in
B), *dropped* (only in A) and *moved* (the same message, elsewhere in the turn). Request ids,
the recorded times and the members :data:`TIME_KEYS` are never compared.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import IO, Any

from .recording import Message, Recording, load_recording
from .wirediff import Difference, Substitutions, compare, short_json

__all__ = ["Change", "TIME_KEYS", "diff_recordings", "run_diff"]

#: Members holding a time of day: never compared.
TIME_KEYS = ("updatedAt", "createdAt", "timestamp")


@dataclass
class Change:
    """One difference between the recordings."""

    kind: str  # "changed" | "added" | "dropped" | "moved"
    part: int  # 0: before the first prompt; n: turn n
    a: Message | None
    b: Message | None
    differences: list[Difference] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The change as text lines (the first one names the message)."""
        message = self.b if self.a is None else self.a
        assert message is not None
        what = message.method or "?"
        if message.update_kind:
            what += f" {message.update_kind}"
        if message.kind in ("result", "error"):
            what = f"answer to {what}"
        what += f" from the {message.sender}"
        if self.kind == "added":
            assert self.b is not None
            return [f"  + B line {self.b.line}: {what}: {short_json(_payload(self.b), 300)}"]
        if self.kind == "dropped":
            assert self.a is not None
            return [f"  - A line {self.a.line}: {what}: {short_json(_payload(self.a), 300)}"]
        assert self.a is not None and self.b is not None
        if self.kind == "moved":
            return [f"  ↕ A line {self.a.line} → B line {self.b.line}: {what} moved within the turn"]
        return [f"  ~ A line {self.a.line} / B line {self.b.line}: {what}"] + [
            f"      {d}" for d in self.differences
        ]


def _payload(message: Message) -> Any:
    msg = message.msg
    if not isinstance(msg, dict):
        return {"raw": message.raw}
    if message.kind in ("request", "notification"):
        return {"method": message.method, "params": msg.get("params")}
    if message.kind == "result":
        return {"result": msg.get("result")}
    if message.kind == "error":
        return {"error": msg.get("error")}
    return msg


def _signature(message: Message) -> tuple[Any, ...]:
    return (message.sender, message.kind, message.method, message.update_kind)


def _parts(recording: Recording) -> list[list[Message]]:
    parts: list[list[Message]] = [[]]
    for message in recording.messages:
        if message.kind == "request" and message.method == "session/prompt" and message.sender == "client":
            parts.append([])
        parts[-1].append(message)
    return parts


def diff_recordings(a: Recording, b: Recording) -> list[Change]:
    """Every change from ``a`` to ``b``, in order of the parts and of ``b``."""
    subst = Substitutions()
    changes: list[Change] = []
    parts_a, parts_b = _parts(a), _parts(b)
    for number in range(max(len(parts_a), len(parts_b))):
        part_a = parts_a[number] if number < len(parts_a) else []
        part_b = parts_b[number] if number < len(parts_b) else []
        changes += _diff_part(number, part_a, part_b, subst)
    return changes


def _same(subst: Substitutions, a: Message, b: Message) -> list[Difference]:
    expected, got = _payload(a), _payload(b)
    trial = subst.copy()
    trial.learn(expected, got)
    return compare(trial.apply(expected), got, members="all", ignore=TIME_KEYS)


def _diff_part(number: int, part_a: list[Message], part_b: list[Message], subst: Substitutions) -> list[Change]:
    matcher = difflib.SequenceMatcher(None, [_signature(m) for m in part_a], [_signature(m) for m in part_b],
                                      autojunk=False)
    changes: list[Change] = []
    dropped: list[Message] = []
    added: list[Message] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        pairs: list[tuple[Message, Message]] = []
        if tag in ("equal", "replace"):
            for offset in range(max(i2 - i1, j2 - j1)):
                left = part_a[i1 + offset] if i1 + offset < i2 else None
                right = part_b[j1 + offset] if j1 + offset < j2 else None
                if left is not None and right is not None and _signature(left) == _signature(right):
                    pairs.append((left, right))
                else:
                    dropped += [left] if left is not None else []
                    added += [right] if right is not None else []
        elif tag == "delete":
            dropped += part_a[i1:i2]
        else:
            added += part_b[j1:j2]
        for left, right in pairs:
            differences = _same(subst, left, right)
            subst.learn(_payload(left), _payload(right))
            if differences:
                changes.append(Change("changed", number, left, right, differences))
    # A dropped message that reappears as an added one moved within the turn.
    for left in list(dropped):
        twin = next((right for right in added if _signature(right) == _signature(left)
                     and not _same(subst, left, right)), None)
        if twin is not None:
            dropped.remove(left)
            added.remove(twin)
            changes.append(Change("moved", number, left, twin))
    changes += [Change("dropped", number, left, None) for left in dropped]
    changes += [Change("added", number, None, right) for right in added]
    changes.sort(key=lambda c: (c.b.index if c.b is not None else -1, c.a.index if c.a is not None else -1))
    return changes


def _part_title(number: int, a: Recording, b: Recording) -> str:
    if number == 0:
        return "before the first prompt:"
    parts = _parts(a) if number < len(_parts(a)) else _parts(b)
    params = parts[number][0].params
    blocks = params.get("prompt") if isinstance(params, dict) else None
    text = " ".join(str(x.get("text", "")) for x in blocks or [] if isinstance(x, dict))
    return f"turn {number} {json.dumps(text[:60], ensure_ascii=False)}:"


def run_diff(path_a: str, path_b: str, out: IO[str]) -> int:
    """``acp trace --diff A B``: print the changes; 0 when there are none, 1 when there are
    (as ``diff`` does), 2 when a file cannot be read."""
    from ._text import safe

    try:
        a, b = load_recording(path_a), load_recording(path_b)
    except OSError as exc:
        out.write(f"acp trace: cannot read {exc.filename}: {exc.strerror or exc}\n")
        return 2
    changes = diff_recordings(a, b)
    out.write(safe(f"--- A {path_a} ({len(a.messages)} messages)") + "\n")
    out.write(safe(f"+++ B {path_b} ({len(b.messages)} messages)") + "\n")
    part = None
    for change in changes:
        if change.part != part:
            part = change.part
            out.write(safe(_part_title(part, a, b)) + "\n")
        for line in change.lines():
            out.write(safe(line) + "\n")
    count = len(changes)
    out.write(f"{count} change{'s' if count != 1 else ''}\n" if count else "no differences\n")
    out.flush()
    return 1 if changes else 0
