"""``python -m acp`` / ``acp``: the command line.

Subcommands:

``acp demo``
    Spawn the bundled scenario agent and drive it through one full turn with
    :class:`~acp.client.SyncClient`: streamed text, a plan, a tool call with a diff, a permission
    request answered by :class:`~acp.client.PermissionPolicy`, a file written and read in a
    temporary folder (:class:`~acp.client.LocalFiles`), a command run in a terminal
    (:class:`~acp.client.LocalTerminals`) and a form elicitation. No network, no dependencies.

``acp chat [--record FILE] [--cwd DIR] [--auth-method ID] [--url URL | -- AGENT COMMAND...]``
    An interactive terminal client for any ACP agent (the bundled echo agent by default).
    Ctrl-C during a turn sends ``session/cancel`` (a second one quits); ``/quit`` or end of
    input exits; ``/help`` lists the other commands (``/auth``, ``/mode``, ``/new``).

``acp check [--cancel-prompt TEXT] [--auth-method ID] [--json FILE] [--timeout S] [--url URL | -- AGENT COMMAND...]``
    A conformance check of any agent (see :mod:`acp.conformance`); exits 0 when the agent
    conforms, 1 when it does not or could not be checked (agent not found, connection refused),
    2 on a usage error.

``acp tap [--out PATH] -- AGENT COMMAND...``
    A transparent recording proxy to launch in place of an agent (see :mod:`acp.tap`).

``acp trace FILE [--html OUT] [--validate] | acp trace --diff A B``
    What happened in a recording: messages, turns, latencies (see :mod:`acp.trace_cli`).

``acp replay RECORDING | acp replay --client RECORDING -- AGENT COMMAND...``
    A recording played back as an agent on stdio, or as a client (see :mod:`acp.replay_cli`).

``chat`` and ``check`` take the agent from the environment (:mod:`acp.client.settings`: ``ACP_AGENT_COMMAND`` or
``ACP_AGENT_URL``...) when neither ``--url`` nor a command is given. ``--url`` still takes
``ACP_AGENT_HEADERS`` / ``ACP_AGENT_TOKEN`` from the environment (a token is better kept off
the command line); an explicit command ignores the environment.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import queue
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, Union

from . import __version__, schema
from .transport.process import describe_exit

if TYPE_CHECKING:
    from .client.settings import AgentSettings

__all__ = ["main", "TurnPrinter", "run_demo", "run_chat", "run_check"]

_log = logging.getLogger("acp.cli")

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


def _describe_client_caps(caps: schema.ClientCapabilities) -> str:
    offered = [name for name, on in (
        ("fs.readTextFile", caps.fs.read_text_file),
        ("fs.writeTextFile", caps.fs.write_text_file),
        ("terminal", caps.terminal),
        ("elicitation", caps.elicitation is not None),
        ("session.notices", caps.session is not None and caps.session.notices is not None),
        ("session.compaction", caps.session is not None and caps.session.compaction is not None),
    ) if on]
    return ", ".join(offered) or "nothing optional"


def _describe_agent(client: Any) -> str:
    caps = client.capabilities
    offered = [name for name, on in (
        ("session/load", caps.supports_load_session()),
        ("session/list", caps.supports_list_sessions()),
        ("session/resume", caps.supports_resume_session()),
        ("session/close", caps.supports_close_session()),
        ("session/delete", caps.supports_delete_session()),
    ) if on]
    return ", ".join(offered) or "the basics"


# ---------------------------------------------------------------------------------- demo


def run_demo(out: IO[str]) -> int:
    """``acp demo``: one full turn of the scenario agent, printed to ``out``; the exit status."""
    import acp

    printer = TurnPrinter(out)
    policy = acp.PermissionPolicy(allow={"read", "edit"}, reject={"delete"})

    def permission(request: schema.RequestPermissionRequest, ctx: Any) -> schema.RequestPermissionResponse:
        answer = policy(request, ctx)
        outcome = answer.outcome
        chosen = outcome.option_id if isinstance(outcome, schema.SelectedPermissionOutcome) else "cancelled"
        printer.line(
            f"[permission] {request.tool_call.title!r} ({request.tool_call.kind}): "
            f"the policy chose {chosen!r}"
        )
        return answer

    def elicitation(request: schema.CreateElicitationRequest, ctx: Any) -> schema.CreateElicitationResponse:
        message = getattr(request, "message", "?")
        printer.line(f"[elicitation] {message!r}: answering name='Ada', colour='blue'")
        return schema.CreateElicitationResponseAccept(content={"name": "Ada", "colour": "blue"})

    with tempfile.TemporaryDirectory(prefix="acp-demo-") as tmp:
        folder = os.path.realpath(tmp)
        files = acp.LocalFiles([folder])

        def read(request: schema.ReadTextFileRequest, ctx: Any) -> schema.ReadTextFileResponse:
            response = files.read_text_file(request, ctx)
            printer.line(f"[client] fs/read_text_file {_short(request.path, folder)}: {len(response.content)} chars")
            return response

        def write(request: schema.WriteTextFileRequest, ctx: Any) -> schema.WriteTextFileResponse:
            response = files.write_text_file(request, ctx)
            printer.line(f"[client] fs/write_text_file {_short(request.path, folder)}: {len(request.content)} chars")
            return response

        with acp.LocalTerminals(allowed_cwd_roots=[folder]) as terminals:
            builder = (
                acp.SyncClient.builder()
                .agent_process(sys.executable, "-m", "acp.examples.scenario_agent")
                .client_info("acp-demo", __version__)
                .session_update_handler(printer)
                .request_permission_handler(permission)
                .read_text_file_handler(read)
                .write_text_file_handler(write)
                .terminal_handlers(terminals)
                .create_elicitation_handler(elicitation)
            )
            with builder.build() as client:
                init = client.initialize()
                info = init.agent_info
                process = client.process
                out.write("acp demo: one full turn between SyncClient and the scenario agent\n")
                out.write(
                    f"  agent:   {info.name if info else '?'} {info.version if info else ''}"
                    f" (pid {process.pid if process else '?'}), protocol version {init.protocol_version}\n"
                )
                out.write(f"  agent offers:  {_describe_agent(client)}\n")
                out.write(f"  client offers: {_describe_client_caps(client.client_capabilities)}\n")
                session = client.new_session(cwd=folder)
                out.write(f"  session: {session.session_id} in {folder}\n\n")
                out.write("you> full\n")
                out.flush()
                response = client.prompt(session.session_id, "full")
                printer.end()
                out.write(
                    f"\nturn ended: {response.stop_reason} "
                    f"({printer.updates} updates, {printer.tool_calls} tool calls)\n"
                )
                out.flush()
    return 0 if response.stop_reason == schema.StopReasons.END_TURN else 1


def _short(path: str, folder: str) -> str:
    return os.path.relpath(path, folder) if path.startswith(folder + os.sep) else path


# ---------------------------------------------------------------------------------- chat


class _ChatPrinter(TurnPrinter):
    """The chat's printer: an update that arrives while the input prompt is shown (a late
    update, after its turn) moves the prompt out of the way and draws it again below."""

    def __init__(self, out: IO[str], interactive: bool) -> None:
        super().__init__(out)
        self._interactive = interactive
        self._prompt: str | None = None  # shown, waiting for the user
        self._moved = False  # something was printed over it since

    def prompting(self, prompt: str | None) -> None:
        """The console shows ``prompt`` and waits for a line (None: it stopped waiting)."""
        with self._lock:
            self._prompt, self._moved = prompt, False

    def _write(self, text: str) -> None:
        if self._prompt is not None and not self._moved:
            self._moved = True
            # A terminal: erase the prompt's line; a pipe: just start a new line.
            super()._write("\r\x1b[K" if self._interactive else "\n")
        super()._write(text)

    def __call__(self, notification: schema.SessionNotification) -> None:
        with self._lock:
            super().__call__(notification)
            self._redraw()

    def line(self, text: str) -> None:
        with self._lock:
            super().line(text)
            self._redraw()

    def _redraw(self) -> None:
        if self._prompt is None or not self._moved:
            return
        self._end_stream()
        typed = ""
        readline = sys.modules.get("readline")
        if readline is not None and self._interactive:
            typed = readline.get_line_buffer()
        prompt, self._prompt = self._prompt, None
        self._write(prompt + typed)
        self._prompt, self._moved = prompt, False
        self._flush()


class _Console:
    """The chat's main thread: it owns the terminal; handler threads send it questions."""

    def __init__(self, out: IO[str], printer: _ChatPrinter | None = None) -> None:
        self.out = out
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.eof = False
        self.interactive = sys.stdin.isatty()
        self.printer = printer

    def read(self, prompt: str) -> str | None:
        """A line typed by the user, or None at end of input."""
        if self.eof:
            return None
        if self.printer is not None:
            self.printer.prompting(prompt)
        try:
            line = input(prompt)
        except EOFError:
            self.eof = True
            self.out.write("\n")
            return None
        finally:
            if self.printer is not None:
                self.printer.prompting(None)
        if not self.interactive:
            self.out.write(line + "\n")  # piped input: show it, so the transcript reads well
        return line

    def ask_permission(self, request: schema.RequestPermissionRequest, ctx: Any) -> str | None:
        """The ``ask`` callback of the chat's PermissionPolicy (runs on a handler thread)."""
        reply: queue.Queue[str | None] = queue.Queue()
        ctx.on_cancel(lambda: reply.put(None))
        self.events.put(("ask", (request, reply)))
        return reply.get()

    def answer(self, request: schema.RequestPermissionRequest, reply: queue.Queue[str | None]) -> None:
        """Ask the user about ``request`` (on the main thread) and send the choice back."""
        title = request.tool_call.title or request.tool_call.tool_call_id
        self.out.write(f"[permission] the agent asks: {title}\n")
        for number, option in enumerate(request.options, 1):
            self.out.write(f"  {number}. {option.name} ({option.kind})\n")
        self.out.flush()
        choice: str | None = None
        while True:
            typed = self.read(f"choose 1-{len(request.options)} (empty: cancel)> ")
            if typed is None or not typed.strip():
                break
            if typed.strip().isdigit() and 1 <= int(typed) <= len(request.options):
                choice = request.options[int(typed) - 1].option_id
                break
            self.out.write("  please type one of the numbers\n")
        reply.put(choice)


_CHAT_HELP = """commands:
  /quit          leave (end of input does the same)
  /new           start a new session
  /mode [ID]     list the session's modes, or switch to mode ID
  /auth [ID]     list the agent's authentication methods, or authenticate with method ID
  /help          this text
anything else is sent to the agent as a prompt; Ctrl-C during a turn cancels it."""

_STDERR_LINES = 10


def _error_text(exc: BaseException) -> str:
    """An error for a chat line; ``str(RequestError)`` carries the agent's own reason (its
    ``data``), a dead agent's ``ConnectionClosedError`` how it ended and its last stderr lines."""
    return str(exc) or type(exc).__name__


class _Chat:
    """One chat: the client, the current session and what the agent offered."""

    def __init__(self, client: Any, console: _Console, printer: _ChatPrinter, cwd: str) -> None:
        self.client = client
        self.console = console
        self.out = console.out
        self.printer = printer
        self.cwd = cwd
        self.init: schema.InitializeResponse | None = None
        self.session_id: str | None = None
        self.modes: schema.SessionModeState | None = None

    # -- reporting

    def agent_gone(self, exc: BaseException) -> str:
        """What to add when the connection ended without saying how (the error of a spawned
        agent that exited already does: its code or signal and its last stderr lines)."""
        process = self.client.process
        if process is None or getattr(exc, "returncode", None) is not None:
            return ""
        code = process.wait(2.0)
        text = "the agent is still running" if code is None else f"the agent {describe_exit(code)}"
        lines = process.stderr_tail.splitlines()[-_STDERR_LINES:]
        if lines:
            text += "; the last lines of its stderr:\n" + "\n".join(f"    {line}" for line in lines)
        return text

    def error_line(self, exc: BaseException, prefix: str = "error") -> None:
        from .errors import AUTH_REQUIRED, ConnectionClosedError, RequestError

        text = f"{prefix}: {_error_text(exc)}"
        gone = self.agent_gone(exc) if isinstance(exc, ConnectionClosedError) else ""
        if gone:
            text += f"\n{gone}"
        self.printer.line(text)
        if isinstance(exc, RequestError) and exc.code == AUTH_REQUIRED:
            self.show_auth_methods()

    def auth_methods(self) -> list[Any]:
        return list(self.init.auth_methods) if self.init is not None else []

    def show_auth_methods(self) -> None:
        methods = self.auth_methods()
        if not methods:
            self.printer.line("the agent requires authentication but offers no authentication method")
            return
        self.printer.line("the agent offers these authentication methods:")
        for method in methods:
            for text in _auth_method_lines(method):
                self.printer.line("  " + text)
        self.printer.line(
            "authenticate with /auth ID here, or start the chat with acp chat --auth-method ID ..."
        )

    # -- commands

    def authenticate(self, method_id: str) -> bool:
        """``authenticate`` with ``method_id``; an env_var method's variables are checked first."""
        method = next((m for m in self.auth_methods() if _auth_field(m, "id") == method_id), None)
        if method is None:
            offered = ", ".join(str(_auth_field(m, "id")) for m in self.auth_methods()) or "none"
            self.printer.line(f"error: the agent offers no authentication method {method_id!r} (offered: {offered})")
            return False
        if _auth_field(method, "type") == "env_var":
            missing = [v for v in _env_vars(method) if not v.get("optional") and not os.environ.get(str(v.get("name")))]
            if missing and self.client.process is not None:
                names = ", ".join(str(v.get("name")) for v in missing)
                self.printer.line(
                    f"error: {method_id!r} reads {names} from the agent's environment; set it and "
                    "start the chat again (the agent is spawned with this environment)"
                )
                return False
        try:
            self.client.authenticate(method_id)
        except _reportable_errors() as exc:
            self.error_line(exc, f"authentication with {method_id!r} failed")
            return False
        self.printer.line(f"authenticated with {method_id!r}")
        return True

    def new_session(self, prefix: str = "error: session/new failed") -> BaseException | None:
        """Start a session (it becomes the current one); the error, reported, if it failed."""
        try:
            response = self.client.new_session(cwd=self.cwd)
        except _reportable_errors() as exc:
            self.error_line(exc, prefix)
            return exc
        self.session_id, self.modes = response.session_id, response.modes
        return None

    def mode(self, mode: str) -> None:
        if not mode:
            if self.modes is None or not self.modes.available_modes:
                self.printer.line("the agent offers no modes for this session")
                return
            self.printer.line("modes (* current; /mode ID switches):")
            for item in self.modes.available_modes:
                mark = "*" if item.id == self.modes.current_mode_id else " "
                about = f": {item.description}" if item.description else ""
                self.printer.line(f"  {mark} {item.id}  {item.name}{about}")
            return
        if self.session_id is None:
            self.printer.line("error: no session yet (/new starts one)")
            return
        try:
            self.client.set_session_mode(self.session_id, mode)
        except _reportable_errors() as exc:
            self.error_line(exc)
            return
        if self.modes is not None:
            self.modes.current_mode_id = mode
        self.printer.line(f"mode: {mode}")


def _auth_field(method: Any, name: str) -> Any:
    if isinstance(method, dict):
        return method.get(name) if name != "type" else method.get("type", "agent")
    if name == "type":
        return "terminal" if isinstance(method, schema.AuthMethodTerminal) else "agent"
    return getattr(method, name, None)


def _env_vars(method: Any) -> list[dict[str, Any]]:
    found = method.get("vars") if isinstance(method, dict) else None
    return [v for v in found if isinstance(v, dict)] if isinstance(found, list) else []


def _auth_method_lines(method: Any) -> list[str]:
    """How the chat shows one of the agent's ``authMethods``."""
    kind = _auth_field(method, "type")
    description = _auth_field(method, "description")
    head = f"{_auth_field(method, 'id')}  {_auth_field(method, 'name')}"
    if kind != "agent":
        head += f" ({kind})"
    lines = [head + (f": {description}" if description else "")]
    if kind == "env_var":
        for var in _env_vars(method):
            notes = [str(var["label"])] if var.get("label") else []
            notes += [n for n, on in (("secret", var.get("secret")), ("optional", var.get("optional"))) if on]
            extra = f" ({', '.join(notes)})" if notes else ""
            lines.append(f"    set {var.get('name')}{extra} in the agent's environment")
        if isinstance(method, dict) and method.get("link"):
            lines.append(f"    get one at {method['link']}")
    elif kind == "terminal":
        args = " ".join(str(a) for a in _auth_field(method, "args") or [])
        lines.append(f"    run the agent's command{' with ' + args if args else ''} in a terminal to sign in")
    return lines


def run_chat(
    agent_argv: Union[Sequence[str], AgentSettings],
    *,
    record: str | None,
    cwd: str,
    out: IO[str],
    auth_method: str | None = None,
) -> int:
    """``acp chat``: an interactive client for the agent ``agent_argv`` (a command, or
    :class:`~acp.client.settings.AgentSettings`), authenticating first with ``auth_method`` if
    given; the exit status."""
    import acp

    settings = _as_settings(agent_argv)
    interactive = sys.stdin.isatty()
    if interactive:
        try:
            import readline  # noqa: F401 - line editing and history for input()
        except ImportError:
            pass
    printer = _ChatPrinter(out, interactive)
    console = _Console(out, printer)
    policy = acp.PermissionPolicy(ask=console.ask_permission)
    files = acp.LocalFiles([cwd])
    with acp.LocalTerminals(allowed_cwd_roots=[cwd]) as terminals:
        # A spawned agent gets a session of its own: the terminal's Ctrl-C reaches only us,
        # and we turn it into session/cancel.
        try:
            builder = acp.SyncClient.builder().agent_from_settings(settings, start_new_session=True)
        except ValueError as exc:  # a URL this installation cannot open
            out.write(f"acp chat: {exc}\n")
            return 2
        builder = (
            builder.client_info("acp-chat", __version__)
            .session_update_handler(printer)
            .notices()  # the printer shows notices and compactions itself
            .compaction()
            .request_permission_handler(policy)
            .read_text_file_handler(files.read_text_file)
            .write_text_file_handler(files.write_text_file)
            .terminal_handlers(terminals)
        )
        if record is not None:
            builder.wire_tap(record)
        try:
            client = builder.build()
        except FileNotFoundError as exc:
            out.write(f"acp chat: {exc}\n")
            return 127
        except (acp.ConnectionClosedError, ImportError) as exc:  # unreachable, refused, no extra
            out.write(f"acp chat: {exc}\n")
            return 1
        with client:
            chat = _Chat(client, console, printer, cwd)
            failed = "acp chat: the agent failed to start a session"
            try:
                chat.init = client.initialize()
            except _reportable_errors() as exc:
                chat.error_line(exc, failed)
                return 1
            if auth_method is not None and not chat.authenticate(auth_method):
                chat.show_auth_methods()
                return 1
            failure = chat.new_session(failed)
            if failure is not None and not (_is_auth_required(failure) and chat.auth_methods()):
                return 1
            info = chat.init.agent_info
            name = f"{info.name} {info.version}" if info else settings.describe()
            if chat.session_id is not None:
                out.write(f"connected to {name}; session {chat.session_id} in {cwd}\n")
            else:
                out.write(f"connected to {name}, without a session until you authenticate (/auth ID)\n")
            out.write("type a prompt, /help for commands, /quit to leave\n")
            out.flush()
            return _chat_loop(chat)


def _is_auth_required(exc: BaseException) -> bool:
    from .errors import AUTH_REQUIRED, RequestError

    return isinstance(exc, RequestError) and exc.code == AUTH_REQUIRED


def _chat_loop(chat: _Chat) -> int:
    console, out = chat.console, chat.out
    while True:
        try:
            line = console.read("> ")
        except KeyboardInterrupt:
            out.write("\n")
            return 130
        if line is None or line.strip() in ("/quit", "/exit"):
            return 0 if chat.session_id is not None else 1
        text = line.strip()
        if not text:
            continue
        command, _, argument = text.partition(" ")
        argument = argument.strip()
        if command == "/help":
            out.write(_CHAT_HELP + "\n")
        elif command == "/new":
            if chat.new_session() is None:
                out.write(f"new session {chat.session_id}\n")
        elif command == "/mode":
            chat.mode(argument)
        elif command == "/auth":
            if not argument:
                chat.show_auth_methods()
            elif chat.authenticate(argument) and chat.session_id is None and chat.new_session() is None:
                out.write(f"new session {chat.session_id}\n")
        elif chat.session_id is None:
            chat.printer.line("no session: authenticate first (/auth lists the methods), then /new")
        else:
            status = _chat_turn(chat, line)
            if status is not None:
                return status
            if console.eof:
                return 0
        if chat.client.is_closed:  # the agent went away (already reported)
            return 1
        out.flush()


def _reportable_errors() -> tuple[type[BaseException], ...]:
    # The exceptions a chat command reports and survives.
    from .errors import AcpError

    return (AcpError, ValueError)


def _chat_turn(chat: _Chat, text: str) -> int | None:
    """Run one prompt turn; an exit status if the chat must end, else None."""
    client, console, printer, out = chat.client, chat.console, chat.printer, chat.out
    session_id = chat.session_id

    def run() -> None:
        try:
            console.events.put(("done", client.prompt(session_id, text)))
        except BaseException as exc:  # reported on the main thread
            console.events.put(("error", exc))

    worker = threading.Thread(target=run, name="acp-chat-turn", daemon=True)
    worker.start()
    cancelled = False
    while True:
        try:
            kind, payload = console.events.get()
            if kind == "ask":
                request, reply = payload
                printer.end()
                console.answer(request, reply)
                continue
        except KeyboardInterrupt:
            if cancelled:
                printer.line("^C again: quitting")
                return 130
            cancelled = True
            printer.line("^C: cancelling the turn (Ctrl-C again to quit)")
            try:
                client.cancel(session_id)
            except _reportable_errors() as exc:
                chat.error_line(exc)
            continue
        printer.end()
        worker.join(5.0)
        if kind == "done":
            out.write(f"({payload.stop_reason})\n")
            return None
        from .errors import ConnectionClosedError

        chat.error_line(payload)
        return 1 if isinstance(payload, ConnectionClosedError) else None


# ---------------------------------------------------------------------------------- check


def run_check(
    agent_argv: Union[Sequence[str], AgentSettings],
    *,
    cancel_prompt: str | None,
    prompt: str,
    timeout: float,
    out: IO[str],
    auth_method: str | None = None,
    json_file: str | None = None,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
) -> int:
    """``acp check``: print each check as it runs, the counts by tier, the agent's stderr tail
    when something failed or could not be checked, and the verdict; the exit status (0
    conforming, 1 not conforming, 3 not checked, 2 when the JSON report cannot be written). The
    agent is a command, or :class:`~acp.client.settings.AgentSettings`. ``json_file``: also
    write the machine-readable report there (:meth:`acp.conformance.Report.to_json`); ``"-"``:
    to ``out``, the text then going to stderr. ``only`` / ``skip``: check ids or patterns."""
    from ._text import safe
    from .conformance import run_checks

    settings = _as_settings(agent_argv)
    text = sys.stderr if json_file == "-" else out
    text.write(f"acp check: {safe(settings.describe())}\n")
    text.flush()
    report = run_checks(
        settings, cancel_prompt=cancel_prompt, prompt=prompt, timeout=timeout, auth_method=auth_method, out=text,
        only=only, skip=skip,
    )
    text.write(report.tier_summary() + "\n")
    if report.stderr.strip() and not report.conforming:
        text.write("the agent's stderr (last lines):\n")
        text.writelines(f"  {safe(line)}\n" for line in report.stderr.rstrip("\n").splitlines())
    text.write(report.verdict() + "\n")
    text.flush()
    if json_file == "-":
        report.dump_json(out)
        out.flush()
    elif json_file is not None:
        try:
            report.write_json(json_file)
        except OSError as exc:
            text.write(f"acp check: cannot write {json_file}: {exc}\n")
            return 2
    return report.exit_code


# ---------------------------------------------------------------------------------- agent


def _as_settings(agent: Union[Sequence[str], AgentSettings]) -> AgentSettings:
    from .client.settings import AgentSettings

    return agent if isinstance(agent, AgentSettings) else AgentSettings(command=tuple(agent))


def _url_arg(text: str) -> str:
    """argparse ``type`` of ``--url``: the same check as ``ACP_AGENT_URL``."""
    from .client.settings import _check_url

    try:
        return _check_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _agent_settings(
    command: list[str], url: str | None, env: Mapping[str, str]
) -> AgentSettings | None:
    """The agent of ``acp chat`` / ``acp check``: the command after ``--``, else ``--url`` (with
    the environment's headers and token), else the environment's settings; None when the
    environment sets no ``ACP_AGENT_*`` key at all. Raises ``AgentSettingsError``."""
    from .client import settings as keys

    if command:
        return keys.AgentSettings(command=tuple(command))
    if url is not None:
        chosen = {k: v for k, v in env.items() if k in (keys.ACP_AGENT_HEADERS, keys.ACP_AGENT_TOKEN)}
        chosen[keys.ACP_AGENT_URL] = url
        return keys.AgentSettings.from_mapping(chosen)
    if not any(env.get(k, "").strip() for k in keys.SETTINGS_KEYS):
        return None
    return keys.AgentSettings.from_mapping(env)


# ---------------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acp", description="The acp SDK's command line: a demo, a chat client, a conformance checker."
    )
    parser.add_argument("--version", action="version", version=f"acp {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv: debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("demo", help="drive the bundled scenario agent through one full turn")
    env_note = (
        "Without --url or a command, the agent comes from the environment: ACP_AGENT_COMMAND "
        "(and ACP_AGENT_CWD) or ACP_AGENT_URL (and ACP_AGENT_HEADERS, ACP_AGENT_TOKEN)."
    )
    chat = sub.add_parser(
        "chat",
        usage="acp chat [options] [--url URL | -- AGENT COMMAND...]",
        help="chat with an agent: acp chat [options] [--url URL | -- AGENT COMMAND...] (default: the echo agent)",
        description="An interactive client for any ACP agent. " + env_note
        + " Without any of them: the bundled echo agent.",
    )
    chat.add_argument("--record", metavar="FILE", help="append the wire transcript to FILE (JSONL)")
    chat.add_argument("--cwd", metavar="DIR", help="the session folder (default: the current folder)")
    chat.add_argument("--url", metavar="URL", type=_url_arg, help="a remote agent (ws://, wss://, http://, https://)")
    chat.add_argument(
        "--auth-method", metavar="ID", help="authenticate with the agent's method ID before the first session"
    )
    check = sub.add_parser(
        "check",
        usage="acp check [options] [--url URL | -- AGENT COMMAND...]",
        help="check an agent's conformance: acp check [options] [--url URL | -- AGENT COMMAND...]",
        description="A conformance check of any ACP agent: the command after -- is spawned and spoken "
        "to over stdio. " + env_note,
        epilog="Each check cites the spec sentence it enforces and takes its tier from the spec's word "
        "(the tiers of the official ACP TCK): mandatory (MUST), capability:NAME (MUSTs that apply when the "
        "agent advertises NAME), advisory (SHOULD: reported as WARN, never decides), informational (MAY: "
        "reported as INFO). A check the agent's refusal for lack of credentials or network kept from "
        "running is NOT CHECKED. Exit status: 0 conforming, 1 not conforming, 2 usage error, 3 not "
        "checked (the agent could not be started or reached, or refused before a mandatory check could run).",
    )
    check.add_argument("--url", metavar="URL", type=_url_arg, help="a remote agent (ws://, wss://, http://, https://)")
    check.add_argument(
        "--cancel-prompt", metavar="TEXT",
        help="a prompt that keeps the agent busy, for prompt.cancel and close.cancels_turn (default: none, they are skipped)",
    )
    check.add_argument("--prompt", metavar="TEXT", default="hello", help="the text of ordinary prompts (default: %(default)s)")
    check.add_argument(
        "--auth-method", metavar="ID",
        help="sign in with the agent's method ID after initialize (authenticate; an env_var method's variables "
        "must be set in the environment; a terminal method is run by you first), to check behind the login",
    )
    check.add_argument(
        "--json", metavar="FILE", dest="json_file",
        help="also write a machine-readable report to FILE ('-': to stdout, the text going to stderr), "
        "with each failing check's spec sentence and wire transcript",
    )
    check.add_argument(
        "--only", metavar="ID", action="append", default=[],
        help="report only this check (an id or a pattern such as 'prompt.*'); repeatable",
    )
    check.add_argument(
        "--skip", metavar="ID", action="append", default=[],
        help="do not report this check (an id or a pattern); repeatable",
    )
    check.add_argument(
        "--timeout", metavar="S", type=float, default=10.0, help="seconds to wait per answer (default: %(default)s)"
    )
    tap = sub.add_parser(
        "tap",
        help="record an editor's session with an agent: acp tap [--out FILE] -- AGENT COMMAND...",
        description="A transparent recording proxy: launch it in place of the agent. It forwards stdin "
        "and stdout byte for byte, passes stderr and the exit status through, and records every line "
        "to a JSONL file for acp trace.",
    )
    tap.add_argument(
        "--out", metavar="PATH",
        help="the recording (a file, or a folder for one new file per run; "
        "default: a new file under ~/.cache/acp/taps/)",
    )
    from .trace_cli import add_arguments as add_trace_arguments

    add_trace_arguments(sub.add_parser(
        "trace",
        help="show what happened in a recording: acp trace FILE [--html OUT] [--validate] [--diff A B]",
        description="Read a recording (acp tap, acp chat --record, a wire tap's JSONL, plain JSON-RPC NDJSON) "
        "and show each message, each turn in wire order and the latencies; or check it against the schema "
        "(--validate), or compare two (--diff A B).",
    ))
    from .exec_cli import add_exec_arguments

    add_exec_arguments(sub.add_parser(
        "exec",
        usage="acp exec [options] [--url URL | -- AGENT COMMAND...]",
        help="one prompt turn, non-interactive: acp exec -p TEXT [options] [--url URL | -- AGENT COMMAND...]",
        description="Send one prompt (-p TEXT, --prompt-file FILE, or stdin) to an agent, print the turn "
        "and exit with a status that tells how it ended. For CI jobs and shell scripts. " + env_note,
        epilog="Exit status: 0 end_turn, 1 the agent failed (an error answer, it exited, unreachable), "
        "2 usage error, 3 refusal, 4 max_tokens, 5 max_turn_requests, 6 authentication required, "
        "7 another stop reason, 124 --timeout expired, 126/127 the agent command cannot be run / "
        "was not found, 130 Ctrl-C, 143 SIGTERM.",
    ), url_type=_url_arg)
    from .replay_cli import add_arguments as add_replay_arguments

    add_replay_arguments(sub.add_parser(
        "replay", help="play a recording back: as an agent on stdio, or with --client against an agent",
        description="Serve a recorded agent on stdio (acp replay RECORDING), or drive an agent with a "
        "recorded client (acp replay --client RECORDING -- AGENT...); exit status 1 when the peer diverged.",
    ))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    if "--" in args_in:
        split = args_in.index("--")
        args_in, agent = args_in[:split], args_in[split + 1 :]
    else:
        agent = []
    parser = _parser()
    args = parser.parse_args(args_in)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _run(parser, args, agent, sys.stdout)
    except KeyboardInterrupt:
        # Ctrl-C outside a turn (starting, signing in, checking): stop, without a traceback.
        sys.stderr.write(f"\nacp {args.command or ''}: interrupted\n".replace("  ", " "))
        return 130
    except BrokenPipeError:
        # The reader of our output went away (`acp demo | head`): exit quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace, agent: list[str], out: IO[str]) -> int:
    if args.command == "demo":
        if agent:
            parser.error("demo takes no agent command")
        return run_demo(out)
    settings: AgentSettings | None = None
    if args.command in ("chat", "check", "exec"):
        from .client.settings import AgentSettingsError

        if agent and args.url is not None:
            parser.error(f"{args.command}: give --url or an agent command after --, not both")
        try:
            settings = _agent_settings(agent, args.url, os.environ)
        except AgentSettingsError as exc:
            parser.error(f"{args.command}: {exc}")
    if args.command == "chat":
        cwd = os.path.realpath(args.cwd or os.getcwd())
        chosen = settings or [sys.executable, "-m", "acp.examples.echo_agent"]
        return run_chat(chosen, record=args.record, cwd=cwd, out=out, auth_method=args.auth_method)
    if args.command == "check":
        if settings is None:
            parser.error(
                "check needs the agent's command after --, e.g. acp check -- my-agent --stdio "
                "(or --url URL, or ACP_AGENT_COMMAND / ACP_AGENT_URL in the environment)"
            )
        return run_check(
            settings, cancel_prompt=args.cancel_prompt, prompt=args.prompt, timeout=args.timeout, out=out,
            auth_method=args.auth_method, json_file=args.json_file, only=args.only, skip=args.skip,
        )
    if args.command == "exec":
        from .exec_cli import run_exec

        return run_exec(args, settings, out, progress=TurnPrinter(sys.stderr))
    if args.command == "tap":
        if not agent:
            parser.error("tap needs the agent's command after --, e.g. acp tap -- my-agent --stdio")
        from .tap import run_tap

        return run_tap(agent, out=args.out)
    if args.command == "trace":
        if agent:
            parser.error("trace takes no agent command")
        from .trace_cli import run as run_trace

        return run_trace(args, out)
    if args.command == "replay":
        from .replay_cli import run as run_replay

        return run_replay(args, agent, out)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
