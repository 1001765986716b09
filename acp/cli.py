"""``python -m acp`` / ``acp``: the command line.

Subcommands:

``acp demo``
    Spawn the bundled scenario agent and drive it through one full turn with
    :class:`~acp.client.SyncClient`: streamed text, a plan, a tool call with a diff, a permission
    request answered by :class:`~acp.client.PermissionPolicy`, a file written and read in a
    temporary folder (:class:`~acp.client.LocalFiles`), a command run in a terminal
    (:class:`~acp.client.LocalTerminals`) and a form elicitation. No network, no dependencies.

``acp chat [--record FILE] [--cwd DIR] [--url URL | -- AGENT COMMAND...]``
    An interactive terminal client for any ACP agent (the bundled echo agent by default).
    Ctrl-C during a turn sends ``session/cancel`` (a second one quits); ``/quit`` or end of
    input exits; ``/help`` lists the other commands.

``acp check [--cancel-prompt TEXT] [--auth-method ID] [--json FILE] [--timeout S] [--url URL | -- AGENT COMMAND...]``
    A conformance check of any agent (see :mod:`acp.conformance`); exits 0 when the agent
    conforms, 1 when it does not or could not be checked (agent not found, connection refused),
    2 on a usage error.

Both take the agent from the environment (:mod:`acp.client.settings`: ``ACP_AGENT_COMMAND`` or
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
        else:
            tag = update.get("sessionUpdate") if isinstance(update, dict) else type(update).__name__
            self.line(f"[update] {tag}")

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


class _Console:
    """The chat's main thread: it owns the terminal; handler threads send it questions."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.eof = False
        self.interactive = sys.stdin.isatty()

    def read(self, prompt: str) -> str | None:
        """A line typed by the user, or None at end of input."""
        if self.eof:
            return None
        try:
            line = input(prompt)
        except EOFError:
            self.eof = True
            self.out.write("\n")
            return None
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
  /mode ID       switch the session's mode (if the agent offers modes)
  /help          this text
anything else is sent to the agent as a prompt; Ctrl-C during a turn cancels it."""


def run_chat(
    agent_argv: Union[Sequence[str], AgentSettings], *, record: str | None, cwd: str, out: IO[str]
) -> int:
    """``acp chat``: an interactive client for the agent ``agent_argv`` (a command, or
    :class:`~acp.client.settings.AgentSettings`); the exit status."""
    import acp

    settings = _as_settings(agent_argv)
    console = _Console(out)
    printer = TurnPrinter(out)
    policy = acp.PermissionPolicy(ask=console.ask_permission)
    files = acp.LocalFiles([cwd])
    with acp.LocalTerminals(allowed_cwd_roots=[cwd]) as terminals:
        # A spawned agent gets a session of its own: the terminal's Ctrl-C reaches only us,
        # and we turn it into session/cancel.
        try:
            builder = settings.apply_to(acp.SyncClient.builder(), start_new_session=True)
        except ValueError as exc:  # a URL this installation cannot open
            out.write(f"acp chat: {exc}\n")
            return 2
        builder = (
            builder.client_info("acp-chat", __version__)
            .session_update_handler(printer)
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
            try:
                init = client.initialize()
                session = client.new_session(cwd=cwd)
            except _reportable_errors() as exc:
                process = client.process
                code = process.wait(1.0) if process is not None else None
                exited = f" (the agent exited with status {code})" if code is not None else ""
                out.write(f"acp chat: the agent failed to start a session: {exc}{exited}\n")
                return 1
            info = init.agent_info
            name = f"{info.name} {info.version}" if info else settings.describe()
            out.write(f"connected to {name}; session {session.session_id} in {cwd}\n")
            out.write("type a prompt, /help for commands, /quit to leave\n")
            out.flush()
            return _chat_loop(client, session.session_id, console, printer, cwd)


def _chat_loop(client: Any, session_id: str, console: _Console, printer: TurnPrinter, cwd: str) -> int:
    out = console.out
    while True:
        try:
            line = console.read("> ")
        except KeyboardInterrupt:
            out.write("\n")
            return 130
        if line is None or line.strip() in ("/quit", "/exit"):
            return 0
        text = line.strip()
        if not text:
            continue
        if text == "/help":
            out.write(_CHAT_HELP + "\n")
        elif text == "/new":
            session_id = client.new_session(cwd=cwd).session_id
            out.write(f"new session {session_id}\n")
        elif text.startswith("/mode"):
            mode = text[len("/mode"):].strip()
            try:
                client.set_session_mode(session_id, mode)
                out.write(f"mode: {mode}\n")
            except _reportable_errors() as exc:
                out.write(f"error: {exc}\n")
        else:
            status = _chat_turn(client, session_id, line, console, printer)
            if status is not None:
                return status
            if console.eof:
                return 0
        out.flush()


def _reportable_errors() -> tuple[type[BaseException], ...]:
    # The exceptions a chat command reports and survives.
    from .errors import AcpError

    return (AcpError, ValueError)


def _chat_turn(client: Any, session_id: str, text: str, console: _Console, printer: TurnPrinter) -> int | None:
    """Run one prompt turn; an exit status if the chat must end, else None."""
    out = console.out

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
                printer.line(f"error: {exc}")
            continue
        printer.end()
        worker.join(5.0)
        if kind == "done":
            out.write(f"({payload.stop_reason})\n")
            return None
        from .errors import ConnectionClosedError

        out.write(f"error: {payload}\n")
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
) -> int:
    """``acp check``: print each check as it runs, the counts by tier and the verdict; the exit
    status (0 conforming, 1 not conforming or not checked, 2 when the JSON report cannot be
    written). The agent is a command, or
    :class:`~acp.client.settings.AgentSettings`. ``json_file``: also write the machine-readable
    report there (:meth:`acp.conformance.Report.to_json`)."""
    from .conformance import run_checks

    settings = _as_settings(agent_argv)
    out.write(f"acp check: {settings.describe()}\n")
    out.flush()
    report = run_checks(
        settings, cancel_prompt=cancel_prompt, prompt=prompt, timeout=timeout, auth_method=auth_method, out=out
    )
    out.write(report.tier_summary() + "\n" + report.verdict() + "\n")
    out.flush()
    if json_file is not None:
        try:
            report.write_json(json_file)
        except OSError as exc:
            out.write(f"acp check: cannot write {json_file}: {exc}\n")
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
    check = sub.add_parser(
        "check",
        usage="acp check [options] [--url URL | -- AGENT COMMAND...]",
        help="check an agent's conformance: acp check [options] [--url URL | -- AGENT COMMAND...]",
        description="A conformance check of any ACP agent: the command after -- is spawned and spoken "
        "to over stdio. " + env_note,
        epilog="Each check is in a tier: required, capability:NAME (run only when the agent advertises "
        "NAME) or advisory (reported, never decides). Exit status: 0 conforming, 1 not conforming or "
        "not checked at all (agent not found, connection refused), 2 usage error.",
    )
    check.add_argument("--url", metavar="URL", type=_url_arg, help="a remote agent (ws://, wss://, http://, https://)")
    check.add_argument(
        "--cancel-prompt", metavar="TEXT",
        help="a prompt that keeps the agent busy, for prompt.cancel and close.cancels_turn (default: none, they are skipped)",
    )
    check.add_argument("--prompt", metavar="TEXT", default="hello", help="the text of ordinary prompts (default: %(default)s)")
    check.add_argument(
        "--auth-method", metavar="ID", help="send authenticate with this method id after initialize (default: none)"
    )
    check.add_argument(
        "--json", metavar="FILE", dest="json_file",
        help="also write a machine-readable report to FILE, with each failing check's wire transcript",
    )
    check.add_argument(
        "--timeout", metavar="S", type=float, default=10.0, help="seconds to wait per answer (default: %(default)s)"
    )
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
    if args.command in ("chat", "check"):
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
        return run_chat(chosen, record=args.record, cwd=cwd, out=out)
    if args.command == "check":
        if settings is None:
            parser.error(
                "check needs the agent's command after --, e.g. acp check -- my-agent --stdio "
                "(or --url URL, or ACP_AGENT_COMMAND / ACP_AGENT_URL in the environment)"
            )
        return run_check(
            settings, cancel_prompt=args.cancel_prompt, prompt=args.prompt, timeout=args.timeout, out=out,
            auth_method=args.auth_method, json_file=args.json_file,
        )
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
