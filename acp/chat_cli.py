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
from ._text import safe
from .auth_methods import auth_field, auth_method_lines, env_vars, is_auth_required
from .rpc.messages import strip_terminal_escapes
from .terminal_forms import answer_elicitation
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

    def ask_elicitation(self, request: schema.CreateElicitationRequest, ctx: Any) -> schema.CreateElicitationResponse:
        """The ``elicitation/create`` handler (runs on a handler thread): the main thread asks."""
        reply: queue.Queue[schema.CreateElicitationResponse | None] = queue.Queue()
        ctx.on_cancel(lambda: reply.put(None))
        self.events.put(("elicit", (request, reply)))
        answer = reply.get()
        return answer if answer is not None else schema.CreateElicitationResponseCancel()

    def elicit(
        self, request: schema.CreateElicitationRequest, reply: queue.Queue[schema.CreateElicitationResponse | None]
    ) -> None:
        """Ask the user to fill in ``request`` (on the main thread) and send the answer back."""
        def write(text: str) -> None:
            self.out.write(text)
            self.out.flush()

        reply.put(answer_elicitation(request, self.read, write))


_CHAT_HELP = """commands (Tab completes them and their arguments):
  /quit              leave (end of input does the same)
  /new               start a new session
  /mode [ID]         list the session's modes, or switch to mode ID
  /config [ID VALUE] list the session's configuration options, or set one
  /model [VALUE]     list the models (the option of category "model"), or choose one
  /sessions          list the agent's sessions in this folder (session/list)
  /load ID           load session ID, replaying its conversation (session/load)
  /resume ID         resume session ID without a replay (session/resume)
  /close             close the current session (session/close)
  /auth [ID]         list the agent's authentication methods, or sign in with method ID
  /help              this text
anything else is sent to the agent as a prompt; Ctrl-C during a turn cancels it, and while
waiting for a sign-in gives up waiting."""

_COMMANDS = ("/quit", "/new", "/mode", "/config", "/model", "/sessions", "/load", "/resume", "/close", "/auth", "/help")

_STDERR_LINES = 10


def _error_text(exc: BaseException) -> str:
    """An error for a chat line; ``str(RequestError)`` carries the agent's own reason (its
    ``data``), a dead agent's ``ConnectionClosedError`` how it ended and its last stderr lines."""
    return str(exc) or type(exc).__name__


class _Chat:
    """One chat: the client, the current session and what the agent offered."""

    def __init__(
        self, client: Any, console: _Console, printer: _ChatPrinter, cwd: str, sign_in_timeout: float = 300.0
    ) -> None:
        self.client = client
        self.console = console
        self.out = console.out
        self.printer = printer
        self.cwd = cwd
        self.sign_in_timeout = sign_in_timeout
        self.init: schema.InitializeResponse | None = None
        self.session_id: str | None = None
        self.modes: schema.SessionModeState | None = None
        self.config_options: list[Any] = []
        self.known_sessions: list[str] = []  # from /sessions and the sessions of this chat: Tab completes them

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
            for text in auth_method_lines(method):
                self.printer.line("  " + text)
        self.printer.line(
            "authenticate with /auth ID here, or start the chat with acp chat --auth-method ID ..."
        )

    # -- commands

    def authenticate(self, method_id: str) -> bool:
        """Sign in with ``method_id``: an env_var method's variables are checked first, a
        terminal method runs the agent's sign-in command in this terminal, any other is the
        agent's own (``authenticate``, which may wait for a browser): a visible wait, within
        the sign-in timeout, that Ctrl-C gives up (``$/cancel_request``)."""
        from .errors import RequestError

        method = next((m for m in self.auth_methods() if auth_field(m, "id") == method_id), None)
        if method is None:
            offered = ", ".join(str(auth_field(m, "id")) for m in self.auth_methods()) or "none"
            self.printer.line(f"error: the agent offers no authentication method {method_id!r} (offered: {offered})")
            return False
        kind = auth_field(method, "type")
        if kind == "terminal":
            return self._terminal_sign_in(method)
        if kind == "env_var":
            missing = [v for v in env_vars(method) if not v.get("optional") and not os.environ.get(str(v.get("name")))]
            if missing and self.client.process is not None:
                names = ", ".join(str(v.get("name")) for v in missing)
                self.printer.line(
                    f"error: {method_id!r} reads {names} from the agent's environment; set it and "
                    "start the chat again (the agent is spawned with this environment)"
                )
                return False
        self.printer.line(
            f"waiting for sign-in with {method_id!r} (up to {self.sign_in_timeout:g} s; Ctrl-C gives up)..."
        )
        try:
            self.client.authenticate(method_id, timeout=self.sign_in_timeout)
        except KeyboardInterrupt:
            self.printer.line(f"gave up waiting for sign-in with {method_id!r} (the request was cancelled)")
            return False
        except _reportable_errors() as exc:
            if isinstance(exc, RequestError) or self.client.is_closed:
                self.error_line(exc, f"authentication with {method_id!r} failed")
            else:  # the timeout: say what to do
                self.printer.line(
                    f"gave up waiting for sign-in with {method_id!r} after {self.sign_in_timeout:g} s "
                    "(--sign-in-timeout S waits longer)"
                )
            return False
        self.printer.line(f"authenticated with {method_id!r}")
        return True

    def _terminal_sign_in(self, method: Any) -> bool:
        """A ``terminal`` auth method: run the agent's command with the method's arguments and
        environment in this terminal (the user signs in there), then go on."""
        import subprocess

        process = self.client.process
        if process is None:
            self.printer.line("error: a terminal sign-in runs the agent's own command: only for a local agent")
            return False
        argv = [*process.argv, *(str(a) for a in auth_field(method, "args") or ())]
        env = {**os.environ, **{str(k): str(v) for k, v in (auth_field(method, "env") or {}).items()}}
        self.printer.line(f"running {safe(' '.join(argv))} in this terminal to sign in...")
        self.out.flush()
        try:
            code = subprocess.run(argv, env=env, cwd=self.cwd, check=False).returncode
        except KeyboardInterrupt:
            self.printer.line("sign-in interrupted")
            return False
        except OSError as exc:
            self.printer.line(f"error: cannot run the sign-in command: {exc}")
            return False
        if code != 0:
            self.printer.line(f"the sign-in command {describe_exit(code)}")
            return False
        self.printer.line("sign-in finished")
        return True

    def _use(self, session_id: str, response: Any) -> None:
        """``session_id`` becomes the current session, with the modes and options ``response`` gave."""
        self.session_id = session_id
        self.modes = getattr(response, "modes", None)
        self.config_options = list(getattr(response, "config_options", None) or [])
        if session_id not in self.known_sessions:
            self.known_sessions.append(session_id)

    def new_session(self, prefix: str = "error: session/new failed") -> BaseException | None:
        """Start a session (it becomes the current one); the error, reported, if it failed."""
        try:
            response = self.client.new_session(cwd=self.cwd)
        except _reportable_errors() as exc:
            self.error_line(exc, prefix)
            return exc
        self._use(response.session_id, response)
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

    # -- configuration options (/config, /model)

    def config(self, argument: str) -> None:
        """List the options, or set one: ``ID VALUE`` (a choice's value or number; on/off)."""
        config_id, _, value = argument.partition(" ")
        if not config_id:
            if not self.config_options:
                self.printer.line("the agent offers no configuration options for this session")
                return
            self.printer.line("configuration options (/config ID VALUE sets one):")
            for option in self.config_options:
                self._show_option(option)
            return
        option = next((o for o in self.config_options if _option_id(o) == config_id), None)
        if option is None:
            offered = ", ".join(_option_id(o) for o in self.config_options) or "none"
            self.printer.line(f"error: no configuration option {config_id!r} (offered: {offered})")
            return
        self._set_option(option, value.strip())

    def model(self, argument: str) -> None:
        """The option of category ``model``: list its choices, or choose one."""
        option = next((o for o in self.config_options if getattr(o, "category", None) == "model"), None)
        if option is None:
            self.printer.line("the agent offers no model choice for this session (no option of category 'model')")
            return
        if not argument:
            self._show_option(option)
            return
        self._set_option(option, argument)

    def _show_option(self, option: Any) -> None:
        if isinstance(option, schema.SessionConfigOptionBoolean):
            self.printer.line(f"  {option.id}  {safe(option.name)}: {'on' if option.current_value else 'off'} (on/off)")
            return
        if not isinstance(option, schema.SessionConfigOptionSelect):
            self.printer.line(f"  {safe(_option_id(option))}: a kind of option this client cannot set")
            return
        self.printer.line(f"  {option.id}  {safe(option.name)}" + (f": {safe(option.description)}" if option.description else ""))
        for number, (value, name) in enumerate(_select_values(option), 1):
            mark = "*" if value == option.current_value else " "
            self.printer.line(f"    {mark} {number}. {safe(value)}" + (f"  {safe(name)}" if name != value else ""))

    def _set_option(self, option: Any, typed: str) -> None:
        value: str | bool
        if isinstance(option, schema.SessionConfigOptionBoolean):
            if typed.lower() not in ("on", "off", "true", "false", "yes", "no"):
                self.printer.line(f"error: {option.id} is on or off")
                return
            value = typed.lower() in ("on", "true", "yes")
        elif isinstance(option, schema.SessionConfigOptionSelect):
            values = _select_values(option)
            if typed.isdigit() and 1 <= int(typed) <= len(values):
                value = values[int(typed) - 1][0]
            elif typed in {v for v, _ in values}:
                value = typed
            else:
                self.printer.line(f"error: {option.id} takes one of: {', '.join(v for v, _ in values)}")
                return
        else:
            self.printer.line(f"error: {_option_id(option)} is a kind of option this client cannot set")
            return
        if self.session_id is None:
            self.printer.line("error: no session yet (/new starts one)")
            return
        try:
            response = self.client.set_session_config_option(self.session_id, option.id, value)
        except _reportable_errors() as exc:
            self.error_line(exc)
            return
        self.config_options = list(response.config_options or self.config_options)
        self.printer.line(f"{option.id}: {'on' if value is True else 'off' if value is False else value}")

    # -- sessions (/sessions, /load, /resume, /close)

    def sessions(self) -> None:
        try:
            listed = list(self.client.iter_sessions(cwd=self.cwd))
        except _reportable_errors() as exc:
            self.error_line(exc)
            return
        if not listed:
            self.printer.line("no sessions in this folder")
            return
        self.printer.line("sessions (* current; /load ID or /resume ID opens one):")
        for info in listed:
            if info.session_id not in self.known_sessions:
                self.known_sessions.append(info.session_id)
            mark = "*" if info.session_id == self.session_id else " "
            about = "  ".join(safe(str(x)) for x in (info.title, info.updated_at) if x)
            self.printer.line(f"  {mark} {safe(info.session_id)}" + (f"  {about}" if about else ""))

    def open_session(self, how: str, session_id: str) -> None:
        """``/load`` (the agent replays the conversation, shown as it comes) or ``/resume``."""
        if not session_id:
            self.printer.line(f"error: /{how} needs a session id (/sessions lists them)")
            return
        try:
            if how == "load":
                response = self.client.load_session(session_id, self.cwd)
            else:
                response = self.client.resume_session(session_id, self.cwd)
        except _reportable_errors() as exc:
            self.error_line(exc)
            return
        self.printer.end()
        self._use(session_id, response)
        self.printer.line(f"{'loaded' if how == 'load' else 'resumed'} session {safe(session_id)}")

    def close_session(self) -> None:
        if self.session_id is None:
            self.printer.line("error: no session to close")
            return
        try:
            self.client.close_session(self.session_id)
        except _reportable_errors() as exc:
            self.error_line(exc)
            return
        self.printer.line(f"closed session {safe(self.session_id)} (/new starts another)")
        self.session_id, self.modes, self.config_options = None, None, []

    # -- completion

    def complete(self, line: str) -> list[str]:
        """What Tab may complete ``line`` to (the command, then its argument)."""
        command, space, rest = line.partition(" ")
        if not space:
            return [c + " " for c in _COMMANDS if c.startswith(command)]
        words: list[str] = []
        if command == "/auth":
            words = [str(auth_field(m, "id")) for m in self.auth_methods()]
        elif command == "/mode" and self.modes is not None:
            words = [m.id for m in self.modes.available_modes]
        elif command in ("/load", "/resume"):
            words = list(self.known_sessions)
        elif command == "/model":
            option = next((o for o in self.config_options if getattr(o, "category", None) == "model"), None)
            words = [v for v, _ in _select_values(option)] if isinstance(option, schema.SessionConfigOptionSelect) else []
        elif command == "/config":
            config_id, space, _ = rest.partition(" ")
            if not space:  # the option's id, and a space for its value
                return [f"{command} {_option_id(o)} " for o in self.config_options if _option_id(o).startswith(rest)]
            else:
                option = next((o for o in self.config_options if _option_id(o) == config_id), None)
                prefix = config_id + " "
                if isinstance(option, schema.SessionConfigOptionSelect):
                    return [command + " " + prefix + v for v, _ in _select_values(option) if (prefix + v).startswith(rest)]
                if isinstance(option, schema.SessionConfigOptionBoolean):
                    return [command + " " + prefix + v for v in ("on", "off") if (prefix + v).startswith(rest)]
                return []
        return [f"{command} {w}" for w in words if w.startswith(rest)]


def _option_id(option: Any) -> str:
    return str(option.get("id") if isinstance(option, dict) else getattr(option, "id", "?"))


def _select_values(option: Any) -> list[tuple[str, str]]:
    """(value, name) of each choice of a select option, groups flattened."""
    found: list[tuple[str, str]] = []
    for item in getattr(option, "options", None) or []:
        if isinstance(item, schema.SessionConfigSelectGroup):
            found += [(o.value, o.name) for o in item.options]
        elif hasattr(item, "value"):
            found.append((item.value, item.name))
    return found


def run_chat(
    agent_argv: Union[Sequence[str], AgentSettings],
    *,
    record: str | None,
    cwd: str,
    out: IO[str],
    auth_method: str | None = None,
    sign_in_timeout: float = 300.0,
    show_stderr: bool = True,
) -> int:
    """``acp chat``: an interactive client for the agent ``agent_argv`` (a command, or
    :class:`~acp.client.settings.AgentSettings`), authenticating first with ``auth_method`` if
    given; the exit status. What the agent writes outside the protocol (a sign-in URL printed
    on stdout; stderr unless ``show_stderr`` is False) is shown, escaped."""
    import acp

    settings = _as_settings(agent_argv)
    interactive = sys.stdin.isatty()
    printer = _ChatPrinter(out, interactive)
    console = _Console(out, printer)
    with _AgentOutput(printer, record, show_stderr) as output:
        return _run_chat(acp, settings, console, printer, output, cwd, auth_method, sign_in_timeout)


class _AgentOutput:
    """What the agent writes outside the protocol, shown in the chat, escaped: lines of its
    stdout that are not JSON (a sign-in URL, a banner) through the wire tap, and its stderr
    through the ``acp.transport.process`` logger (each line once, instead of the log record).
    The engine's own "invalid message" warning for such a line is dropped: the line is shown."""

    def __init__(self, printer: _ChatPrinter, record: str | None, show_stderr: bool) -> None:
        from .wiretap import JsonlWireTap

        self._printer = printer
        self._record = JsonlWireTap(record) if record is not None else None
        self._show_stderr = show_stderr and logging.getLogger().getEffectiveLevel() > logging.INFO  # -v logs it
        self._stderr_handler = _StderrLines(printer)
        self._stderr_logger = logging.getLogger("acp.transport.process")
        self._saved = (self._stderr_logger.level, self._stderr_logger.propagate)

    def __enter__(self) -> _AgentOutput:
        logging.getLogger("acp.rpc").addFilter(_drop_non_json_warnings)
        if self._show_stderr:
            self._stderr_logger.addHandler(self._stderr_handler)
            self._stderr_logger.setLevel(logging.INFO)
            self._stderr_logger.propagate = False
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("acp.rpc").removeFilter(_drop_non_json_warnings)
        if self._show_stderr:
            self._stderr_logger.removeHandler(self._stderr_handler)
            self._stderr_logger.setLevel(self._saved[0])
            self._stderr_logger.propagate = self._saved[1]
        if self._record is not None:
            self._record.close()

    def tap(self, direction: str, line: bytes) -> None:
        """The client's wire tap: every line in and out (recorded with ``--record``)."""
        if direction == "in" and not strip_terminal_escapes(line.lstrip()).startswith(b"{"):  # a message
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if text.strip():
                self._printer.line("[agent stdout] " + safe(text))
        if self._record is not None:
            self._record(direction, line)


class _StderrLines(logging.Handler):
    """Each line the agent writes to stderr, as an ``[agent stderr]`` line of the chat."""

    def __init__(self, printer: _ChatPrinter) -> None:
        super().__init__(logging.INFO)
        self._printer = printer

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "acp_pid", None) is None:
            # Our own record about the process (it did not exit, say): where it would have gone.
            if record.levelno >= logging.WARNING:
                for handler in logging.getLogger().handlers:
                    if record.levelno >= handler.level:
                        handler.handle(record)
            return
        text = record.getMessage().partition("] ")[2]  # "[<pid>] <line>"
        if text.strip():
            self._printer.line("[agent stderr] " + safe(text))


def _drop_non_json_warnings(record: logging.LogRecord) -> bool:
    # "<name>: invalid message: ... (byte 0)": the line was not JSON from its first byte, and
    # the chat showed it as [agent stdout].
    return not (record.levelno == logging.WARNING and "invalid message" in str(record.msg)
                and record.getMessage().endswith("(byte 0)"))


def _run_chat(
    acp: Any, settings: AgentSettings, console: _Console, printer: _ChatPrinter, output: _AgentOutput,
    cwd: str, auth_method: str | None, sign_in_timeout: float,
) -> int:
    out = console.out
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
            .create_elicitation_handler(console.ask_elicitation, form=True, url=True)
            .wire_tap(output.tap)
        )
        try:
            client = builder.build()
        except FileNotFoundError as exc:
            out.write(f"acp chat: {exc}\n")
            return 127
        except (acp.ConnectionClosedError, ImportError) as exc:  # unreachable, refused, no extra
            out.write(f"acp chat: {exc}\n")
            return 1
        with client:
            chat = _Chat(client, console, printer, cwd, sign_in_timeout)
            if console.interactive:
                _enable_completion(chat)
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
            if failure is not None and not (is_auth_required(failure) and chat.auth_methods()):
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


def _enable_completion(chat: _Chat) -> None:
    """Line editing and history for input(), and Tab completing commands and their arguments."""
    try:
        import readline
    except ImportError:
        return
    matches: list[str] = []

    def complete(text: str, state: int) -> str | None:
        if state == 0:
            line = readline.get_line_buffer()[: readline.get_endidx()]
            # readline replaces the word being typed: hand back only what follows the last space
            cut = line.rfind(" ") + 1
            matches[:] = [m[cut:] for m in chat.complete(line)]
        return matches[state] if state < len(matches) else None

    readline.set_completer_delims(" ")
    readline.set_completer(complete)
    readline.parse_and_bind("tab: complete")


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
        elif command == "/config":
            chat.config(argument)
        elif command == "/model":
            chat.model(argument)
        elif command == "/sessions":
            chat.sessions()
        elif command in ("/load", "/resume"):
            chat.open_session(command[1:], argument)
        elif command == "/close":
            chat.close_session()
        elif command == "/auth":
            if not argument:
                chat.show_auth_methods()
            elif chat.authenticate(argument) and chat.session_id is None and chat.new_session() is None:
                out.write(f"new session {chat.session_id}\n")
        elif chat.session_id is None:
            if not chat.known_sessions and chat.auth_methods():  # never had one: the sign-in is missing
                chat.printer.line("no session: authenticate first (/auth lists the methods), then /new")
            else:
                chat.printer.line("no session: /new starts one (or /load ID, /resume ID)")
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
            if kind == "elicit":
                request, reply = payload
                printer.end()
                console.elicit(request, reply)
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
