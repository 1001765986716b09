"""Comparing two ACP messages the way a person would: ids and folders mapped, order of members
and unknown extras ignored, and what differs said as a short JSON diff.

A recorded conversation and a live one never agree on identifiers: the agent hands out other
session ids, the client other terminal ids, and the session runs in another folder. A
:class:`Substitutions` table maps the recording's values to the live ones: an identifier is
*learned* the first time it is seen on both sides at the same place (``sessionId`` of the
``session/new`` answer, ``terminalId`` of the ``terminal/create`` answer, ``toolCallId`` of a
``tool_call`` update ...), and from then on compared through the table; a ``cwd`` is learned
as a folder, and every string under the recorded folder follows the new one.

:func:`compare` lists the :class:`Difference` s between the expected value (the recording's,
mapped) and the one seen; :func:`format_differences` writes them as ``path: old → new`` lines.
Used by :mod:`acp.replay` and by ``acp trace --diff`` (:mod:`acp.trace_diff`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["ID_KEYS", "Difference", "Substitutions", "agreement", "compare", "format_differences", "short_json"]

#: Members whose string values are identifiers handed out by one side and only referred to by
#: the other: their values are mapped, never compared literally.
ID_KEYS = frozenset({
    "sessionId", "toolCallId", "terminalId", "optionId", "compactionId", "elicitationId", "messageId",
})
_PATH_KEYS = frozenset({"cwd"})
_MISSING: Any = object()


@dataclass(frozen=True)
class Difference:
    """One place where the expected value and the one seen differ."""

    path: str  # e.g. "params.update.content.text" ("" for the whole value)
    kind: str  # "changed" | "added" (only in what was seen) | "dropped" (only in the expected)
    expected: Any = None
    got: Any = None

    def __str__(self) -> str:
        where = self.path or "(the value)"
        if self.kind == "added":
            return f"+ {where}: {short_json(self.got)}"
        if self.kind == "dropped":
            return f"- {where}: {short_json(self.expected)}"
        return f"~ {where}: {short_json(self.expected)} → {short_json(self.got)}"


class Substitutions:
    """The recording's identifiers and folders, mapped to the ones of the live conversation.

    Not thread-safe: the replay engine calls it under its own lock.
    """

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}  # recorded -> live
        self._taken: dict[str, str] = {}  # live -> recorded
        self.folders: list[tuple[str, str]] = []  # (recorded, live), longest recorded first
        self._folder_re: re.Pattern[str] | None = None

    def copy(self) -> Substitutions:
        """An independent copy (to try a match without committing to what it learns)."""
        other = Substitutions()
        other.ids, other._taken = dict(self.ids), dict(self._taken)
        other.folders, other._folder_re = list(self.folders), self._folder_re
        return other

    def add_folder(self, recorded: str, live: str) -> None:
        """Map the folder ``recorded`` (and everything under it) to ``live``."""
        recorded, live = recorded.rstrip("/") or "/", live.rstrip("/") or "/"
        if recorded == live or recorded == "/" or any(r == recorded for r, _ in self.folders):
            return
        self.folders.append((recorded, live))
        self.folders.sort(key=lambda pair: -len(pair[0]))
        # A recorded folder followed by "/" or by anything that cannot continue a name.
        alternatives = "|".join(re.escape(r) for r, _ in self.folders)
        self._folder_re = re.compile(f"(?:{alternatives})(?=/|$|[^\\w.-])")

    def claim(self, value: Any) -> None:
        """Every identifier in ``value`` (a message this side sends as recorded) stays as it
        is: the peer must give it back unchanged."""
        for _key, text in _id_values(value):
            if text not in self.ids and text not in self._taken:
                self.ids[text] = text
                self._taken[text] = text

    def learn(self, recorded: Any, live: Any) -> None:
        """Take the identifiers and folders of ``live`` for those at the same places of
        ``recorded`` (those not mapped yet)."""
        if isinstance(recorded, dict) and isinstance(live, dict):
            for key, value in recorded.items():
                other = live.get(key, _MISSING)
                if other is _MISSING:
                    continue
                if key in ID_KEYS and isinstance(value, str) and isinstance(other, str):
                    if value not in self.ids and other not in self._taken:
                        self.ids[value] = other
                        self._taken[other] = value
                elif key in _PATH_KEYS and isinstance(value, str) and isinstance(other, str):
                    if value.startswith("/") and other.startswith("/"):
                        self.add_folder(value, other)
                else:
                    self.learn(value, other)
        elif isinstance(recorded, list) and isinstance(live, list):
            for a, b in zip(recorded, live, strict=False):
                self.learn(a, b)

    def apply(self, value: Any, key: str | None = None) -> Any:
        """``value`` as the live conversation would say it."""
        if isinstance(value, str):
            if key in ID_KEYS or key is None:
                mapped = self.ids.get(value)
                if mapped is not None:
                    return mapped
            return self._folder(value)
        if isinstance(value, dict):
            return {k: self.apply(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.apply(v, key) for v in value]
        return value

    def _folder(self, text: str) -> str:
        pattern = self._folder_re
        if pattern is None or "/" not in text:
            return text
        live = dict(self.folders)
        return pattern.sub(lambda m: live[m.group(0)], text)


def _id_values(value: Any) -> Iterable[tuple[str, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ID_KEYS and isinstance(item, str):
                yield key, item
            else:
                yield from _id_values(item)
    elif isinstance(value, list):
        for item in value:
            yield from _id_values(item)


def compare(
    expected: Any,
    got: Any,
    *,
    members: str = "common",
    ignore: Iterable[str] = ("_meta",),
    limit: int = 20,
) -> list[Difference]:
    """The differences between ``expected`` and ``got`` (plain JSON values), at most ``limit``.

    A member that is null and one that is absent are the same. ``members="common"`` compares
    only the members both objects have (another SDK's optional or unknown extras are not a
    difference); ``"all"`` also reports members only one side has. Members named in
    ``ignore`` are skipped at any depth. Object members compare in any order; arrays in order.
    """
    found: list[Difference] = []
    _compare(expected, got, "", members == "all", frozenset(ignore), found, limit)
    return found


def _same_scalar(a: Any, b: Any) -> bool:
    # JSON has no bool/int confusion: True == 1 in Python, but not on the wire.
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if re.fullmatch(r"[A-Za-z_$][\w$]*", key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _compare(
    expected: Any, got: Any, path: str, all_members: bool, ignore: frozenset[str], found: list[Difference], limit: int
) -> None:
    if len(found) >= limit:
        return
    if isinstance(expected, dict) and isinstance(got, dict):
        for key in expected.keys() | got.keys():
            if key in ignore:
                continue
            a, b = expected.get(key), got.get(key)
            where = _join(path, key)
            if a is None and b is None:
                continue
            if a is None or b is None:
                if all_members:
                    found.append(Difference(where, "added" if a is None else "dropped", a, b))
                continue
            _compare(a, b, where, all_members, ignore, found, limit)
        return
    if isinstance(expected, list) and isinstance(got, list):
        for i, (a, b) in enumerate(zip(expected, got, strict=False)):
            _compare(a, b, _join(path, i), all_members, ignore, found, limit)
        for i in range(len(got), len(expected)):
            found.append(Difference(_join(path, i), "dropped", expected[i], None))
        for i in range(len(expected), len(got)):
            found.append(Difference(_join(path, i), "added", None, got[i]))
        del found[limit:]
        return
    if isinstance(expected, (dict, list)) or isinstance(got, (dict, list)) or not _same_scalar(expected, got):
        found.append(Difference(path, "changed", expected, got))


def agreement(expected: Any, got: Any, skip: Iterable[str] = ()) -> tuple[int, int]:
    """How many of the leaf members both values have are equal, and how many they share
    (members named in ``skip``, and identifiers, are not counted)."""
    skipped = frozenset(skip) | ID_KEYS
    counts = [0, 0]

    def walk(a: Any, b: Any) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in a.keys() & b.keys():
                if key not in skipped:
                    walk(a[key], b[key])
        elif isinstance(a, list) and isinstance(b, list):
            for x, y in zip(a, b, strict=False):
                walk(x, y)
        else:
            counts[1] += 1
            if not isinstance(a, (dict, list)) and not isinstance(b, (dict, list)) and _same_scalar(a, b):
                counts[0] += 1

    walk(expected, got)
    return counts[0], counts[1]


def short_json(value: Any, limit: int = 120) -> str:
    """``value`` as compact JSON, cut to about ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_differences(differences: list[Difference], indent: str = "  ") -> str:
    """One line per difference (``~ path: expected → got``, ``+`` added, ``-`` dropped)."""
    return "\n".join(indent + str(d) for d in differences)
