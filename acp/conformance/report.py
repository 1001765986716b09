"""The outcome of ``acp check``: every check's id and tier (:data:`CHECKS`), one result
(:class:`CheckResult`, with the wire lines of its exchange), and the :class:`Report` with its
verdict, text and JSON forms."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from .._text import safe

__all__ = [
    "CHECKS", "Check", "TIERS", "MANDATORY", "REQUIRED", "ADVISORY", "INFORMATIONAL", "CAPABILITY", "Status",
    "STATUSES", "CheckResult", "Report", "WireLine", "bounded", "format_result", "tier_of", "DEFAULT_TIMEOUT",
    "LARGE_PROMPT_BYTES", "DETAIL_LIMIT", "EXIT_CONFORMING", "EXIT_NOT_CONFORMING", "EXIT_ERROR", "EXIT_NOT_CHECKED",
]

Status = Literal["PASS", "FAIL", "WARN", "INFO", "SKIP", "N/A", "NOT CHECKED"]
STATUSES: tuple[Status, ...] = ("PASS", "FAIL", "WARN", "INFO", "SKIP", "N/A", "NOT CHECKED")

DEFAULT_TIMEOUT = 10.0
"""Seconds to wait for each answer (and for the agent to exit once stdin is closed)."""

LARGE_PROMPT_BYTES = 3 * 1024 * 1024
"""Size of the text of the large-prompt check."""

EXIT_CONFORMING = 0
EXIT_NOT_CONFORMING = 1
EXIT_ERROR = 2
EXIT_NOT_CHECKED = 3
"""Exit statuses of ``acp check``: conforming; not conforming (a mandatory or capability check
failed); a usage error; not checked (the agent could not be started or reached, or it refused
for lack of credentials or network before a mandatory check could run, and nothing reached
failed)."""

DETAIL_LIMIT = 300
"""A check's detail is cut (at a word boundary, with "…") beyond this many characters."""

# The tiers of the official ACP TCK (agentclientprotocol/acp-tck), from the spec's own words.
MANDATORY = "mandatory"
"""The spec says MUST (or the JSON-RPC 2.0 envelope it builds on does): a failure decides."""
ADVISORY = "advisory"
"""The spec says SHOULD, or robustness the spec does not demand: a finding is a ``WARN``."""
INFORMATIONAL = "informational"
"""The spec says MAY (or nothing): what the agent does is reported as ``INFO``, never judged."""
CAPABILITY = "capability"
"""``capability:<name>``: MUSTs that apply once the agent advertises ``<name>``."""
REQUIRED = MANDATORY  # the name of this tier before it lined up with the TCK's


@dataclass(frozen=True)
class Check:
    """One check: its ``tier``, what it looks at, the ``spec`` sentence it enforces (``file:
    sentence``, files of docs/protocol/v1 of the ACP repository; ``jsonrpc:`` for JSON-RPC 2.0)
    and the ``tck`` requirement ids it corresponds to (empty when the TCK has none)."""

    tier: str
    what: str
    spec: str
    tck: tuple[str, ...] = ()


_NEEDS_CANCEL = " (needs --cancel-prompt)"

CHECKS: dict[str, Check] = {
    "handshake.initialize": Check(
        MANDATORY, "initialize with protocol version 1 is answered with version 1",
        "initialization.mdx: If the Agent supports the requested version, it MUST respond with the same version.",
        ("ACP-INIT-001", "ACP-INIT-002")),
    "handshake.unsupported_version": Check(
        MANDATORY, "version 65535 (the largest the schema allows) is answered with one the agent supports, never echoed",
        "initialization.mdx: Otherwise, the Agent MUST respond with the latest version it supports.",
        ("ACP-INIT-003",)),
    "jsonrpc.ids_echoed": Check(
        MANDATORY, "string ids, id 0 and 2^53-1 are echoed exactly, once",
        "jsonrpc: id ... It MUST be the same as the value of the id member in the Request Object.",
        ("ACP-JSONRPC-001",)),
    "jsonrpc.unknown_method": Check(
        ADVISORY, "an unknown method (also `_`-prefixed) gets -32601",
        'extensibility.mdx: If the receiving end doesn\'t recognize the custom method name, it should respond '
        'with the standard "Method not found" error.',
        ("ACP-JSONRPC-004",)),
    "jsonrpc.notifications_unanswered": Check(
        MANDATORY, "notifications, known or not, are never answered",
        "jsonrpc: The Server MUST NOT reply to a Notification (overview.mdx: Notifications never receive "
        "responses (success or error)).",
        ("ACP-JSONRPC-003",)),
    "jsonrpc.usable_after_error": Check(
        ADVISORY, "the connection still answers after error answers",
        "(no spec sentence: the TCK's de-facto rule) the connection remains usable after an erroneous request.",
        ("ACP-JSONRPC-005",)),
    "session.new": Check(
        MANDATORY, "session/new answers a session id",
        "initialization.mdx: As a baseline, all Agents MUST support session/new, session/prompt, session/cancel, "
        "and session/update.",
        ("ACP-SESSION-001",)),
    "session.unknown_session_prompt": Check(
        INFORMATIONAL, "a prompt on an unknown session: an error, and no update for it, is what clients expect",
        "session-setup.mdx: Agents MAY return an error if the session does not exist or is not currently active.",
        ()),
    "prompt.basic": Check(
        MANDATORY, "a prompt is answered with a stop reason; no update follows the answer",
        "prompt-turn.mdx: If there are no pending tool calls, the turn ends and the Agent MUST respond to the "
        "original session/prompt request with a StopReason.",
        ("ACP-PROMPT-001",)),
    "prompt.resource_link": Check(
        MANDATORY, "a prompt with a resource_link block (baseline content) is answered",
        "initialization.mdx: As a baseline, all Agents MUST support ContentBlock::Text and "
        "ContentBlock::ResourceLink in session/prompt requests.",
        ("ACP-PROMPT-003",)),
    "prompt.cancel": Check(
        MANDATORY, "session/cancel during a turn: answered `cancelled`" + _NEEDS_CANCEL,
        "prompt-turn.mdx: After all ongoing operations have been successfully aborted and pending updates have "
        "been sent, the Agent MUST respond to the original session/prompt request with the cancelled stop reason.",
        ("ACP-CANCEL-001",)),
    "prompt.no_updates_after_cancel": Check(
        MANDATORY, "no update after the cancelled turn's answer" + _NEEDS_CANCEL,
        "prompt-turn.mdx: The Agent MAY send session/update notifications ... after receiving the session/cancel "
        "notification, but it MUST ensure that it does so before responding to the session/prompt request.",
        ("ACP-CANCEL-002",)),
    "prompt.pipelined": Check(
        MANDATORY, "two prompts on two sessions sent back to back are both answered",
        "jsonrpc: When a rpc call is made, the Server MUST reply with a Response.",
        ()),
    "session.unique_ids": Check(
        MANDATORY, "every session/new of a connection answers a different session id",
        "session-setup.mdx: The Agent MUST respond with a unique Session ID that identifies this conversation.",
        ("ACP-SESSION-002",)),
    "capabilities.honest": Check(
        MANDATORY, "no fs/terminal/elicitation call, since the checker offers none",
        "initialization.mdx: Clients and Agents MUST treat all capabilities omitted in the initialize request "
        "as UNSUPPORTED.",
        ()),
    "capabilities.updates_honest": Check(
        MANDATORY, "no notice, compaction or subagent update, since the checker shows none",
        "initialization.mdx: Clients and Agents MUST treat all capabilities omitted in the initialize request "
        "as UNSUPPORTED.",
        ()),
    "session.updates_known_sessions": Check(
        MANDATORY, "every session/update names a session of this client",
        "schema (SessionNotification.sessionId): The ID of the session this update pertains to; transports.mdx: "
        "The agent MUST NOT write anything to its stdout that is not a valid ACP message.",
        ("ACP-PROMPT-002",)),
    "jsonrpc.envelopes": Check(
        MANDATORY, "every message is JSON-RPC 2.0 (an answer has an id) and answers something the checker sent",
        "transports.mdx: The agent MUST NOT write anything to its stdout that is not a valid ACP message.",
        ("ACP-TRANSPORT-001", "ACP-JSONRPC-002")),
    "schema.valid": Check(
        MANDATORY, "every message the agent sent (answers included) matches the schema (not the version probe's "
        "conversation when the agent chose another version there: the v1 schema cannot judge it)",
        "transports.mdx: The agent MUST NOT write anything to its stdout that is not a valid ACP message.",
        ("ACP-SCHEMA-001",)),
    "auth.authenticate": Check(
        "capability:auth", "authenticate with --auth-method ID (an advertised method) succeeds",
        "authentication.mdx: After successful authentication, the Client can create new sessions without "
        "receiving an auth_required error.",
        ("ACP-AUTH-003",)),
    "session.additional_directories": Check(
        "capability:additionalDirectories", "session/new with additionalDirectories answers a session",
        "session-setup.mdx: Clients MUST only send additionalDirectories when the Agent advertises "
        "sessionCapabilities.additionalDirectories.",
        ("ACP-ADDDIRS-001",)),
    "prompt.image": Check(
        "capability:image", "a prompt with an image block is answered with a stop reason",
        "initialization.mdx: Optionally, they MAY support richer types of content by specifying the following "
        "capabilities (image: The prompt may include ContentBlock::Image).",
        ("ACP-PROMPTCAP-001",)),
    "prompt.audio": Check(
        "capability:audio", "a prompt with an audio block is answered with a stop reason",
        "initialization.mdx: Optionally, they MAY support richer types of content by specifying the following "
        "capabilities (audio: The prompt may include ContentBlock::Audio).",
        ("ACP-PROMPTCAP-002",)),
    "prompt.embedded_context": Check(
        "capability:embeddedContext", "a prompt with an embedded resource block is answered",
        "initialization.mdx: Optionally, they MAY support richer types of content by specifying the following "
        "capabilities (embeddedContext: The prompt may include ContentBlock::Resource).",
        ("ACP-PROMPTCAP-003",)),
    "modes.valid": Check(
        "capability:modes", "currentModeId is one of availableModes",
        "session-modes.mdx (SessionModeState.currentModeId): The ID of the mode that is currently active.",
        ("ACP-MODES-001",)),
    "modes.set": Check(
        INFORMATIONAL, "session/set_mode to another advertised mode: accepted or refused",
        "session-modes.mdx: During Session Setup the Agent MAY return a list of modes it can operate in and the "
        "currently active mode. (No sentence obliges it to accept a session/set_mode.)",
        ("ACP-MODES-002",)),
    "config.set": Check(
        "capability:configOptions",
        "options are valid (no boolean one unasked); setting a select answers the complete, updated set",
        "session-config-options.mdx: The Agent MUST respond with the complete list of all configuration options "
        "and their current values.",
        ("ACP-CONFIG-001", "ACP-CONFIG-002", "ACP-CONFIG-003")),
    "load.replay": Check(
        "capability:loadSession", "session/load replays the history as session/update before answering",
        "session-setup.mdx: The Agent MUST replay the entire conversation to the Client in the form of "
        "session/update notifications.",
        ("ACP-LOAD-001", "ACP-LOAD-002")),
    "resume.no_replay": Check(
        "capability:resume", "session/resume answers without replaying; the session then takes a prompt",
        "session-setup.mdx: Unlike session/load, the Agent MUST NOT replay the conversation history via "
        "session/update notifications before responding.",
        ("ACP-RESUME-001", "ACP-RESUME-002")),
    "list.sessions": Check(
        "capability:list", "session/list (cwd filter) lists the prompted sessions, only of that cwd",
        "session-list.mdx: The Agent MUST respond with a list of sessions and optional pagination metadata.",
        ("ACP-LIST-001", "ACP-LIST-002")),
    "list.paging": Check(
        "capability:list", "nextCursor pages end, and no session appears twice",
        "session-list.mdx: Clients MUST treat a missing nextCursor as the end of results (so pages must end).",
        ()),
    "delete.removes": Check(
        "capability:delete", "session/delete succeeds and the session leaves session/list",
        "session-delete.mdx: Deleted sessions no longer appear in future session/list results.",
        ("ACP-DELETE-001",)),
    "close.idle": Check(
        "capability:close", "session/close of an idle session succeeds",
        "session-setup.mdx: On success, the Agent responds with an empty result object.",
        ("ACP-CLOSE-001",)),
    "close.cancels_turn": Check(
        "capability:close", "session/close during a turn cancels it: answered `cancelled`" + _NEEDS_CANCEL,
        "session-setup.mdx: The Agent MUST cancel any ongoing work for that session as if session/cancel had "
        "been called.",
        ("ACP-CLOSE-002",)),
    "auth.logout": Check(
        "capability:logout", "logout succeeds",
        "authentication.mdx: If agentCapabilities.auth.logout is omitted or null, the Agent does not support "
        "logout (advertised: it does).",
        ("ACP-AUTH-004",)),
    "prompt.large": Check(
        ADVISORY, "a 3 MiB prompt is answered (or refused with an error)",
        "(robustness; no spec sentence) every request is answered, whatever its size.",
        ()),
    "list.invalid_cursor": Check(
        ADVISORY, "an invalid cursor is an error",
        "session-list.mdx: Agents SHOULD return an error if the cursor is invalid.",
        ()),
    "session.delete_unknown": Check(
        ADVISORY, "deleting an unknown session succeeds silently",
        "session-delete.mdx: Deleting an already-deleted session, or a session that never existed, SHOULD "
        "succeed silently.",
        ("ACP-DELETE-002",)),
    "robust.garbage_line": Check(
        ADVISORY, "a line that is not JSON gets -32700 with id null; the agent lives on",
        "jsonrpc: Parse error ... -32700; (the client MUST NOT send it, so ACP does not require the answer).",
        ()),
    "robust.invalid_request": Check(
        ADVISORY, "an invalid request gets -32600; the agent lives on",
        "jsonrpc: Invalid Request ... -32600.",
        ()),
    "robust.batch": Check(
        ADVISORY, "a JSON array (a batch) does not break the agent",
        "(robustness; ACP does not use batches) the agent lives on.",
        ()),
    "robust.stdin_closed": Check(
        ADVISORY, "the agent exits when its stdin is closed",
        "(robustness; no MUST) transports.mdx, the stdio diagram: Client->>Agent Process: Close stdin, terminate "
        "subprocess. An agent that does not exit leaves its client to kill it.",
        ()),
}
"""Every check: its id, tier, what it looks at, the spec sentence and the TCK ids (docs/testing.md
lists them)."""

TIERS = (MANDATORY, CAPABILITY, ADVISORY, INFORMATIONAL)
"""The tiers, in verdict order (``capability`` stands for every ``capability:<name>``)."""


def tier_of(name: str) -> str:
    """The tier of check ``name`` (checks outside :data:`CHECKS`, like ``spawn``, are mandatory)."""
    check = CHECKS.get(name)
    return check.tier if check is not None else MANDATORY


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
    failed, warned or could not be checked, the ``transcript`` of its exchange."""

    name: str
    status: Status
    detail: str = ""
    tier: str = MANDATORY
    transcript: tuple[WireLine, ...] = ()

    @property
    def decides(self) -> bool:
        """True when this result makes the agent NOT CONFORMING."""
        return self.status == "FAIL" and _deciding(self.tier)

    @property
    def unreached(self) -> bool:
        """True when a check that could decide was not checked (see :attr:`Report.blocked`)."""
        return self.status == "NOT CHECKED" and _deciding(self.tier)

    def to_json(self) -> dict[str, Any]:
        """The result as plain JSON (``id``, ``tier``, ``status``, ``detail``, ``spec``, ``tck``,
        ``transcript``)."""
        check = CHECKS.get(self.name)
        return {
            "id": self.name, "tier": self.tier, "status": self.status, "detail": self.detail,
            "spec": check.spec if check else None, "tck": list(check.tck) if check else [],
            "transcript": [line.to_json() for line in self.transcript],
        }


@dataclass
class Report:
    """Every check's result, in order, and the verdict. ``error``: why the agent could not be
    checked at all (not found, connection refused), else None. ``blocked``: why some checks
    could not be reached (the agent refused for lack of credentials or network), else None.
    ``stderr``: the last lines the agent wrote to stderr (a spawned agent)."""

    agent: str
    results: list[CheckResult] = field(default_factory=list)
    error: str | None = None
    blocked: str | None = None
    stderr: str = ""

    @property
    def conforming(self) -> bool:
        """True when every mandatory and capability check that applies ran and none failed
        (advisory and informational findings never decide)."""
        return self.error is None and not any(r.decides or r.unreached for r in self.results)

    @property
    def checked(self) -> bool:
        """False when the agent could not be checked, or some mandatory or capability checks
        could not be reached (and none of those reached failed): the verdict is NOT CHECKED."""
        if self.error is not None:
            return False
        return any(r.decides for r in self.results) or not any(r.unreached for r in self.results)

    @property
    def exit_code(self) -> int:
        """0 conforming, 1 not conforming, 3 not checked (see :attr:`checked`)."""
        if not self.checked:
            return EXIT_NOT_CHECKED
        return EXIT_CONFORMING if self.conforming else EXIT_NOT_CONFORMING

    def count(self, status: Status, tier: str | None = None) -> int:
        """How many checks ended with ``status`` (in ``tier``: ``"capability"`` for them all)."""
        return sum(1 for r in self.results if r.status == status and _in_tier(r.tier, tier))

    def tier_summary(self) -> str:
        """``mandatory: 14 pass, 1 fail; capability: ...; advisory: ...``, with the capabilities."""
        parts = []
        for tier in TIERS:
            counts = ", ".join(
                f"{self.count(s, tier)} {s.lower()}" for s in STATUSES if self.count(s, tier)
            )
            parts.append(f"{tier}: {counts or 'none'}")
        run = sorted({r.tier.split(":", 1)[1] for r in self.results if r.tier.startswith("capability:") and r.status not in ("N/A", "NOT CHECKED")})
        absent = sorted({r.tier.split(":", 1)[1] for r in self.results if r.tier.startswith("capability:") and r.status == "N/A"} - set(run))
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
        counts = ", ".join(f"{self.count(s)} {s.lower()}" for s in STATUSES if self.count(s) or s in ("PASS", "FAIL"))
        if not self.checked:
            unreached = sum(1 for r in self.results if r.unreached)
            return f"verdict: NOT CHECKED ({self.blocked}; {unreached} checks could not run) ({counts})"
        if self.conforming:
            return f"verdict: CONFORMING ({counts})"
        failed = ", ".join(f"{r.name} [{r.tier}]" for r in self.results if r.decides)
        return f"verdict: NOT CONFORMING ({counts}); failed: {failed}"

    def render(self) -> str:
        """The whole report as text, one line per check, the counts by tier, the agent's stderr
        tail when something failed or could not be checked, then the verdict."""
        lines = [format_result(r) for r in self.results]
        lines.append(self.tier_summary())
        if self.stderr.strip() and not self.conforming:
            lines.append("the agent's stderr (last lines):")
            lines.extend("  " + safe(line) for line in self.stderr.rstrip("\n").splitlines())
        lines.append(self.verdict())
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The machine-readable report: the verdict, counts by tier, and every check (failing and
        warning ones with their wire transcript)."""
        tiers: dict[str, dict[str, int]] = {}
        for r in self.results:
            row = tiers.setdefault(r.tier, dict.fromkeys(STATUSES, 0))
            row[r.status] += 1
        verdict = "NOT CHECKED" if not self.checked else "CONFORMING" if self.conforming else "NOT CONFORMING"
        return {
            "agent": self.agent,
            "verdict": verdict,
            "conforming": self.conforming,
            "exitCode": self.exit_code,
            "error": self.error,
            "blocked": self.blocked,
            "stderr": self.stderr,
            "counts": {s: self.count(s) for s in STATUSES},
            "tiers": tiers,
            "checks": [r.to_json() for r in self.results],
        }

    def write_json(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_json` to ``path`` (UTF-8, indented)."""
        with open(path, "w", encoding="utf-8") as f:
            self.dump_json(f)

    def dump_json(self, out: IO[str]) -> None:
        """Write :meth:`to_json` to the open text stream ``out`` (indented, a final newline)."""
        json.dump(self.to_json(), out, indent=2, ensure_ascii=False)
        out.write("\n")


def _deciding(tier: str) -> bool:
    return tier not in (ADVISORY, INFORMATIONAL)


def _in_tier(tier: str, wanted: str | None) -> bool:
    if wanted is None:
        return True
    return tier == wanted or (wanted == "capability" and tier.startswith("capability:"))


def format_result(result: CheckResult) -> str:
    """``PASS  name  [tier]  detail``, aligned, control characters escaped."""
    detail = f"  {safe(result.detail)}" if result.detail else ""
    return f"{result.status:<11}  {result.name:<32} {'[' + result.tier + ']':<34}{detail}".rstrip()
