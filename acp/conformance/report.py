"""The outcome of ``acp check``: every check's id and tier (:data:`CHECKS`), one result
(:class:`CheckResult`, with the wire lines of its exchange), and the :class:`Report` with its
verdict, text and JSON forms."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CHECKS", "TIERS", "REQUIRED", "ADVISORY", "Status", "STATUSES", "CheckResult", "Report", "WireLine",
    "bounded", "format_result", "tier_of", "DEFAULT_TIMEOUT", "LARGE_PROMPT_BYTES", "DETAIL_LIMIT",
    "EXIT_CONFORMING", "EXIT_NOT_CONFORMING", "EXIT_ERROR",
]

Status = Literal["PASS", "FAIL", "WARN", "SKIP", "N/A"]
STATUSES: tuple[Status, ...] = ("PASS", "FAIL", "WARN", "SKIP", "N/A")

DEFAULT_TIMEOUT = 10.0
"""Seconds to wait for each answer (and for the agent to exit once stdin is closed)."""

LARGE_PROMPT_BYTES = 3 * 1024 * 1024
"""Size of the text of the large-prompt check."""

EXIT_CONFORMING = 0
EXIT_NOT_CONFORMING = 1
EXIT_ERROR = 2
"""Exit statuses of ``acp check``: conforming; not conforming (also when the agent could not be
checked at all: not found, connection refused, as before tiers existed); a usage error."""

DETAIL_LIMIT = 300
"""A check's detail is cut (at a word boundary, with "…") beyond this many characters."""

REQUIRED = "required"
ADVISORY = "advisory"

CHECKS: dict[str, tuple[str, str]] = {
    # id: (tier, what it checks)
    "handshake.initialize": (REQUIRED, "initialize with protocol version 1 is answered with version 1"),
    "handshake.unsupported_version": (REQUIRED, "an unsupported version is answered with one the agent supports, never echoed"),
    "jsonrpc.ids_echoed": (REQUIRED, "string ids, id 0 and 2^53-1 are echoed exactly, once"),
    "jsonrpc.unknown_method": (REQUIRED, "an unknown method (also `_`-prefixed) gets -32601"),
    "jsonrpc.notifications_unanswered": (REQUIRED, "notifications, known or not, are never answered"),
    "jsonrpc.usable_after_error": (REQUIRED, "the connection still works after error answers"),
    "session.new": (REQUIRED, "session/new answers a session id"),
    "session.unknown_session_prompt": (REQUIRED, "a prompt on an unknown session is an error, with no update for it"),
    "prompt.basic": (REQUIRED, "a prompt is answered with a stop reason; no update follows the answer"),
    "prompt.resource_link": (REQUIRED, "a prompt with a resource_link block (baseline content) is answered"),
    "prompt.cancel": (REQUIRED, "session/cancel during a turn: answered `cancelled` (needs --cancel-prompt)"),
    "prompt.no_updates_after_cancel": (REQUIRED, "no update after the cancelled turn's answer"),
    "prompt.pipelined": (REQUIRED, "two prompts on two sessions sent back to back are both answered"),
    "session.unique_ids": (REQUIRED, "every session/new of a connection answers a different session id"),
    "capabilities.honest": (REQUIRED, "no fs/terminal/elicitation call, since the checker offers none"),
    "capabilities.updates_honest": (REQUIRED, "no notice, compaction or subagent update, since the checker shows none"),
    "session.updates_known_sessions": (REQUIRED, "every session/update names a session of this client"),
    "jsonrpc.envelopes": (REQUIRED, "every message is JSON-RPC 2.0 and answers something the checker sent"),
    "schema.valid": (REQUIRED, "every message the agent sent (answers included) matches the schema"),
    "auth.authenticate": ("capability:auth", "authenticate with --auth-method ID (an advertised method) succeeds"),
    "session.additional_directories": ("capability:additionalDirectories", "session/new with additionalDirectories answers a session"),
    "prompt.image": ("capability:image", "a prompt with an image block is answered with a stop reason"),
    "prompt.audio": ("capability:audio", "a prompt with an audio block is answered with a stop reason"),
    "prompt.embedded_context": ("capability:embeddedContext", "a prompt with an embedded resource block is answered"),
    "modes.set": ("capability:modes", "currentModeId is an available mode; session/set_mode to another one succeeds"),
    "config.set": ("capability:configOptions", "options are valid (no boolean one unasked); setting a select answers the complete, updated set"),
    "load.replay": ("capability:loadSession", "session/load replays the history as session/update before answering"),
    "resume.no_replay": ("capability:resume", "session/resume answers without replaying; the session then takes a prompt"),
    "list.sessions": ("capability:list", "session/list (cwd filter) lists the prompted sessions, only of that cwd"),
    "list.paging": ("capability:list", "nextCursor pages end, and no session appears twice"),
    "delete.removes": ("capability:delete", "session/delete succeeds and the session leaves session/list"),
    "close.idle": ("capability:close", "session/close of an idle session succeeds"),
    "close.cancels_turn": ("capability:close", "session/close during a turn cancels it: answered `cancelled` (needs --cancel-prompt)"),
    "auth.logout": ("capability:logout", "logout succeeds"),
    "prompt.large": (ADVISORY, "a 3 MiB prompt is answered (or refused with an error)"),
    "list.invalid_cursor": (ADVISORY, "an invalid cursor is an error (SHOULD)"),
    "session.delete_unknown": (ADVISORY, "deleting an unknown session succeeds silently (SHOULD)"),
    "robust.garbage_line": (ADVISORY, "a line that is not JSON gets -32700 with id null; the agent lives on"),
    "robust.invalid_request": (ADVISORY, "an invalid request gets -32600; the agent lives on"),
    "robust.batch": (ADVISORY, "a JSON array (a batch) does not break the agent"),
    "robust.stdin_closed": (ADVISORY, "the agent exits when its stdin is closed"),
}
"""Every check: its id, tier and a one-line description (docs/testing.md lists them)."""

TIERS = (REQUIRED, "capability", ADVISORY)
"""The tiers, in verdict order (``capability`` stands for every ``capability:<name>``)."""


def tier_of(name: str) -> str:
    """The tier of check ``name`` (checks outside :data:`CHECKS`, like ``spawn``, are required)."""
    return CHECKS.get(name, (REQUIRED, ""))[0]


def bounded(text: str, limit: int = DETAIL_LIMIT) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, ending with "…"."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + "…"


@dataclass(frozen=True)
class WireLine:
    """One line of a check's exchange: ``direction`` ``"out"`` (the checker wrote it) or ``"in"``
    (the agent wrote it), on connection ``peer``, ``t`` seconds after that connection opened."""

    peer: str
    direction: str
    t: float
    text: str

    def to_json(self) -> dict[str, Any]:
        """``{"peer", "dir", "t", "msg"}`` (``"raw"`` instead of ``"msg"`` for a line that is not
        JSON, or was cut)."""
        entry: dict[str, Any] = {"peer": self.peer, "dir": self.direction, "t": self.t}
        try:
            entry["msg"] = json.loads(self.text)
        except ValueError:
            entry["raw"] = self.text
        return entry


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check: ``name`` (its id), ``status``, ``detail``, ``tier`` and, when it
    failed or warned, the ``transcript`` of its exchange."""

    name: str
    status: Status
    detail: str = ""
    tier: str = REQUIRED
    transcript: tuple[WireLine, ...] = ()

    @property
    def decides(self) -> bool:
        """True when this result makes the agent NOT CONFORMING."""
        return self.status == "FAIL" and self.tier != ADVISORY

    def to_json(self) -> dict[str, Any]:
        """The result as plain JSON (``id``, ``tier``, ``status``, ``detail``, ``transcript``)."""
        return {
            "id": self.name, "tier": self.tier, "status": self.status, "detail": self.detail,
            "transcript": [line.to_json() for line in self.transcript],
        }


@dataclass
class Report:
    """Every check's result, in order, and the verdict. ``error``: why the agent could not be
    checked at all (not found, connection refused), else None."""

    agent: str
    results: list[CheckResult] = field(default_factory=list)
    error: str | None = None

    @property
    def conforming(self) -> bool:
        """True when no required or capability check failed (advisory findings never decide)."""
        return self.error is None and not any(r.decides for r in self.results)

    @property
    def exit_code(self) -> int:
        """0 conforming, else 1 (not conforming, or not checked at all: see :attr:`error`)."""
        return EXIT_CONFORMING if self.conforming else EXIT_NOT_CONFORMING

    def count(self, status: Status, tier: str | None = None) -> int:
        """How many checks ended with ``status`` (in ``tier``: ``"capability"`` for them all)."""
        return sum(1 for r in self.results if r.status == status and _in_tier(r.tier, tier))

    def tier_summary(self) -> str:
        """``required: 14 pass, 1 fail; capability: ...; advisory: ...``, with the capabilities."""
        parts = []
        for tier in TIERS:
            counts = ", ".join(
                f"{self.count(s, tier)} {s.lower()}" for s in STATUSES if self.count(s, tier)
            )
            parts.append(f"{tier}: {counts or 'none'}")
        run = sorted({r.tier.split(":", 1)[1] for r in self.results if r.tier.startswith("capability:") and r.status != "N/A"})
        absent = sorted({r.tier.split(":", 1)[1] for r in self.results if r.tier.startswith("capability:")} - set(run))
        text = "; ".join(parts)
        if run:
            text += f"\ncapabilities checked: {', '.join(run)}"
        if absent:
            text += f"\nnot advertised: {', '.join(absent)}"
        return text

    def verdict(self) -> str:
        """The one-line verdict."""
        if self.error is not None:
            return f"verdict: NOT CHECKED ({self.error})"
        counts = ", ".join(f"{self.count(s)} {s.lower()}" for s in STATUSES)
        if self.conforming:
            return f"verdict: CONFORMING ({counts})"
        failed = ", ".join(f"{r.name} [{r.tier}]" for r in self.results if r.decides)
        return f"verdict: NOT CONFORMING ({counts}); failed: {failed}"

    def render(self) -> str:
        """The whole report as text, one line per check, the counts by tier, then the verdict."""
        lines = [format_result(r) for r in self.results]
        lines.append(self.tier_summary())
        lines.append(self.verdict())
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The machine-readable report: the verdict, counts by tier, and every check (failing and
        warning ones with their wire transcript)."""
        tiers: dict[str, dict[str, int]] = {}
        for r in self.results:
            row = tiers.setdefault(r.tier, dict.fromkeys(STATUSES, 0))
            row[r.status] += 1
        return {
            "agent": self.agent,
            "verdict": "NOT CHECKED" if self.error else "CONFORMING" if self.conforming else "NOT CONFORMING",
            "conforming": self.conforming,
            "exitCode": self.exit_code,
            "error": self.error,
            "counts": {s: self.count(s) for s in STATUSES},
            "tiers": tiers,
            "checks": [r.to_json() for r in self.results],
        }

    def write_json(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_json` to ``path`` (UTF-8, indented)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=2, ensure_ascii=False)
            f.write("\n")


def _in_tier(tier: str, wanted: str | None) -> bool:
    if wanted is None:
        return True
    return tier == wanted or (wanted == "capability" and tier.startswith("capability:"))


def format_result(result: CheckResult) -> str:
    """``PASS  name  [tier]  detail``, aligned."""
    detail = f"  {result.detail}" if result.detail else ""
    return f"{result.status:<4}  {result.name:<32} {'[' + result.tier + ']':<34}{detail}".rstrip()
