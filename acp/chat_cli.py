"""``acp chat``: an interactive terminal client for any ACP agent.

The main thread owns the terminal (:class:`_Console`): it reads lines, and handler threads send
it what needs the user (a permission request, an elicitation form). A turn runs on a thread of
its own so that Ctrl-C can cancel it the ACP way (``session/cancel``). This module does not
import :mod:`acp.cli` (which imports it).
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any, Union

from . import __version__, schema
from .transport.process import describe_exit
from .turn_printer import TurnPrinter

if TYPE_CHECKING:
    from .client.settings import AgentSettings

__all__ = ["run_chat"]

_log = logging.getLogger("acp.cli")


def _as_settings(agent: Union[Sequence[str], AgentSettings]) -> AgentSettings:
    """``agent`` as settings: a command becomes ``AgentSettings(command=...)``."""
    from .client.settings import AgentSettings

    return agent if isinstance(agent, AgentSettings) else AgentSettings(command=tuple(agent))


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
