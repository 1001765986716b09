"""How the command line shows a prompt turn to a person: :class:`TurnPrinter` renders each
``session/update`` (streamed text, thoughts, tool calls with their diffs, plans, notices,
compactions, subagents) as lines of text. ``acp demo``, ``acp chat`` and ``acp exec`` use it."""

from __future__ import annotations

import difflib
import threading
from collections.abc import Sequence
from typing import IO, Any

from . import schema

__all__ = ["TurnPrinter"]

_MAX_CONTENT_LINES = 20
_PLAN_MARKS = {"completed": "x", "in_progress": ">", "pending": " "}


# ---------------------------------------------------------------------------------- rendering


class TurnPrinter:
    """Renders ``session/update`` notifications as plain text, as they stream in.

    Use it as a session update handler; :meth:`line` prints a line of your own between
    updates (it ends a streamed message first). Thread-safe.
    """

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._lock = threading.RLock()
        self._streaming: str | None = None  # "agent" | "thought" | "user" while a chunk run goes on
        self._titles: dict[str, str] = {}
        self._plan_contents: list[str] = []
        self._compactions: dict[str, list[str]] = {}  # compaction id -> summary pieces so far
        self.updates = 0
        self.tool_calls = 0
        self.broken = False  # the output went away (a closed pipe)

    def __call__(self, notification: schema.SessionNotification) -> None:
        with self._lock:
            self.updates += 1
            self._render(notification.update)
            self._flush()

    def _write(self, text: str) -> None:
        if self.broken:
            return
        try:
            self._out.write(text)
        except BrokenPipeError:  # e.g. `acp demo | head`: stop printing, keep the turn going
            self.broken = True

    def _flush(self) -> None:
        if not self.broken:
            try:
                self._out.flush()
            except BrokenPipeError:
                self.broken = True

    def line(self, text: str) -> None:
        """Print ``text`` on a line of its own."""
        with self._lock:
            self._end_stream()
            self._write(text + "\n")
            self._flush()

    def end(self) -> None:
        """End a streamed message with a newline (call when the turn is over)."""
        with self._lock:
            self._end_stream()
            self._flush()

    def _end_stream(self) -> None:
        if self._streaming is not None:
            self._write("\n")
            self._streaming = None

    def _render(self, update: schema.SessionUpdate) -> None:
        if isinstance(update, schema.AgentMessageChunk):
            self._chunk("agent", "agent> ", update.content)
        elif isinstance(update, schema.AgentThoughtChunk):
            self._chunk("thought", "(thinking) ", update.content)
        elif isinstance(update, schema.UserMessageChunk):
            self._chunk("user", "you> ", update.content)
        elif isinstance(update, schema.ToolCall):
            self.tool_calls += 1
            self._titles[update.tool_call_id] = update.title
            details = ", ".join(x for x in (update.kind, update.status) if x)
            self.line(f"[tool] {update.title}" + (f" ({details})" if details else ""))
            self._content(update.content)
        elif isinstance(update, schema.ToolCallProgress):
            if update.title:
                self._titles[update.tool_call_id] = update.title
            title = self._titles.get(update.tool_call_id, update.tool_call_id)
            if update.status or not update.content:
                self.line(f"[tool] {title}: {update.status or 'updated'}")
            self._content(update.content)
        elif isinstance(update, schema.Plan):
            self._plan(update)
        elif isinstance(update, schema.CurrentModeUpdate):
            self.line(f"[mode] now {update.current_mode_id}")
        elif isinstance(update, schema.SessionInfoUpdate):
            if update.title:
                self.line(f"[session] title: {update.title}")
        elif isinstance(update, schema.AvailableCommandsUpdate):
            names = ", ".join("/" + c.name for c in update.available_commands)
            self.line(f"[commands] {names or '(none)'}")
        elif isinstance(update, schema.ConfigOptionUpdate):
            self.line(f"[config] {', '.join(_option_text(o) for o in update.config_options)}")
        elif isinstance(update, schema.Notice):
            detail = f": {update.description}" if update.description else ""
            self.line(f"[{update.severity}] {update.title}{detail}")
        elif isinstance(update, schema.CompactionUpdate):
            self._compaction(update)
        elif isinstance(update, schema.CompactionSummaryChunk):
            if update.compaction_id not in self._compactions:  # a first-seen id starts one
                self.line("[compaction] in progress")
            self._compactions.setdefault(update.compaction_id, []).append(_block_text(update.content))
        elif type(update).__name__ == "SubagentUpdate":  # unstable: no import of its module here
            self._subagent(update)
        else:
            tag = update.get("sessionUpdate") if isinstance(update, dict) else type(update).__name__
            self.line(f"[update] {tag}")

    def _compaction(self, update: schema.CompactionUpdate) -> None:
        first = update.compaction_id not in self._compactions
        pieces = self._compactions.setdefault(update.compaction_id, [])
        if update.summary is not None:
            pieces[:] = [_block_text(block) for block in update.summary]  # replaces what streamed
        status = update.status
        if status == schema.CompactionStatuses.IN_PROGRESS:
            if first:
                self.line("[compaction] in progress")
            return
        summary = "".join(pieces).strip()
        if status == schema.CompactionStatuses.COMPLETED:
            self.line("[compaction] completed" + (f": {summary}" if summary else ""))
        elif status == schema.CompactionStatuses.FAILED:
            self.line("[compaction] failed" + (f": {update.error}" if update.error else ""))
        else:
            self.line(f"[compaction] {status}")

    def _subagent(self, update: Any) -> None:
        name = update.title or update.session_id
        state = update.state
        if isinstance(state, dict):  # a state this SDK does not know
            what = state.get("state")
        else:
            what = getattr(getattr(type(state), "__struct_config__", None), "tag", None) if state is not None else None
        detail = f" ({update.description})" if update.description else ""
        stop = getattr(state, "stop_reason", None)
        error = getattr(state, "error", None)
        ending = f", {stop}" if stop else ""
        if error is not None:
            ending += f": {error.message}"
        self.line(f"[subagent] {name}{detail}" + (f": {what}{ending}" if what else ""))

    def _plan(self, plan: schema.Plan) -> None:
        contents = [entry.content for entry in plan.entries]
        if contents and contents == self._plan_contents:
            # Same steps, new statuses: one line of progress instead of the whole plan again.
            done = sum(1 for e in plan.entries if e.status == schema.PlanEntryStatuses.COMPLETED)
            current = [e.content for e in plan.entries if e.status == schema.PlanEntryStatuses.IN_PROGRESS]
            now = f", now: {', '.join(current)}" if current else ""
            self.line(f"[plan] {done}/{len(contents)} done{now}")
            return
        self._plan_contents = contents
        self.line("[plan]")
        for entry in plan.entries:
            self.line(f"  [{_PLAN_MARKS.get(entry.status, '?')}] {entry.content}")

    def _chunk(self, who: str, prefix: str, block: schema.ContentBlock) -> None:
        text = _block_text(block)
        if not text:
            return
        pieces = text.split("\n")
        for index, piece in enumerate(pieces):
            if index > 0:
                self._end_stream()  # the newline inside the chunk
            if piece:
                if self._streaming != who:
                    self._end_stream()
                    self._write(prefix)
                    self._streaming = who
                self._write(piece)
        if text.endswith("\n"):
            self._streaming = None

    def _content(self, content: Sequence[schema.ToolCallContent] | None) -> None:
        for item in content or ():
            if isinstance(item, schema.Diff):
                for text in _diff_lines(item):
                    self.line("    " + text)
            elif isinstance(item, schema.Content):
                lines = _block_text(item.content).rstrip("\n").split("\n")
                shown = lines[:_MAX_CONTENT_LINES]
                for text in shown:
                    self.line("    | " + text)
                if len(lines) > len(shown):
                    self.line(f"    | ... ({len(lines) - len(shown)} more lines)")
            elif isinstance(item, schema.Terminal):
                self.line(f"    (terminal {item.terminal_id})")


def _block_text(block: Any) -> str:
    if isinstance(block, schema.TextContent):
        return block.text
    if isinstance(block, schema.ResourceLink):
        return f"[link {block.uri}]"
    if isinstance(block, (schema.ImageContent, schema.AudioContent)):
        return f"[{type(block).__name__.replace('Content', '').lower()} {block.mime_type}]"
    if isinstance(block, schema.EmbeddedResource):
        return "[embedded resource]"
    return "[content]"


def _diff_lines(diff: schema.Diff) -> list[str]:
    old = (diff.old_text or "").splitlines(keepends=True)
    new = diff.new_text.splitlines(keepends=True)
    lines = difflib.unified_diff(
        old, new, fromfile=diff.path if diff.old_text is not None else "/dev/null", tofile=diff.path
    )
    return [line.rstrip("\n") for line in lines] or [f"(no change to {diff.path})"]


def _option_text(option: Any) -> str:
    if isinstance(option, (schema.SessionConfigOptionSelect, schema.SessionConfigOptionBoolean)):
        return f"{option.id}={option.current_value}"
    return str(option.get("id", "?")) if isinstance(option, dict) else "?"
