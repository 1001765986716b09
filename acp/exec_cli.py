"""``acp exec``: one prompt turn with an agent, non-interactive, for CI jobs and shell scripts.

``acp exec [options] [--url URL | -- AGENT COMMAND...]`` sends ``initialize``, ``session/new``
and one ``session/prompt`` (the prompt from ``-p TEXT``, ``--prompt-file FILE`` or stdin), then
closes. ``--format text`` writes the agent's message text to stdout and the rest of the turn
(thoughts, tool calls, plans, permission decisions) to stderr; ``--format json`` writes one JSON
object per line: each ``session/update`` as it is on the wire, each permission decision, and a
last ``result`` (or ``error``) line. The exit status tells how the turn ended (:data:`EXIT_CODES`).

The main thread only waits: the turn runs on a thread of its own, so that ``--timeout``, Ctrl-C
(SIGINT) and SIGTERM can cancel it the ACP way (``session/cancel``) and still report the
agent's ``cancelled`` answer. This module does not import :mod:`acp.cli` (which imports it): the
command line hands it the agent's settings and its update printer.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any, Protocol, Union

import msgspec

from . import __version__, schema
from .auth_methods import auth_field, is_auth_required
from .errors import REQUEST_CANCELLED, AcpError, ConnectionClosedError, RequestError

if TYPE_CHECKING:
    from .client import SyncClient
    from .client.settings import AgentSettings

__all__ = ["add_exec_arguments", "run_exec", "EXIT_CODES", "CANCEL_GRACE"]

EXIT_END_TURN = 0
EXIT_AGENT_FAILED = 1
EXIT_USAGE = 2
EXIT_REFUSAL = 3
EXIT_MAX_TOKENS = 4
EXIT_MAX_TURN_REQUESTS = 5
EXIT_AUTH_REQUIRED = 6
EXIT_OTHER_STOP = 7
EXIT_TIMEOUT = 124  # as timeout(1)
EXIT_CANNOT_RUN = 126  # as a shell: found, not executable
EXIT_NOT_FOUND = 127
EXIT_SIGINT = 130  # 128 + the signal, as a shell reports it
EXIT_SIGTERM = 143

EXIT_CODES: dict[str, int] = {
    schema.StopReasons.END_TURN: EXIT_END_TURN,
    schema.StopReasons.REFUSAL: EXIT_REFUSAL,
    schema.StopReasons.MAX_TOKENS: EXIT_MAX_TOKENS,
    schema.StopReasons.MAX_TURN_REQUESTS: EXIT_MAX_TURN_REQUESTS,
}
"""The exit status of each stop reason; any other (``cancelled`` that exec did not ask for, or
one this version does not know) exits with 7."""

CANCEL_GRACE = 5.0
"""Seconds to wait for the agent's answer after ``session/cancel`` (timeout, Ctrl-C, SIGTERM)."""

_STOP_TEXT = {
    schema.StopReasons.REFUSAL: "the agent refused to go on",
    schema.StopReasons.MAX_TOKENS: "the agent reached its token limit",
    schema.StopReasons.MAX_TURN_REQUESTS: "the agent reached its limit of model requests for one turn",
}
_TAIL_LINES = 10
_TOOL_KINDS = tuple(v for k, v in vars(schema.ToolKinds).items() if k.isupper())


class Progress(Protocol):
    """What exec needs of :class:`acp.cli.TurnPrinter`: it renders updates for people."""

    def __call__(self, notification: schema.SessionNotification) -> None: ...
    def line(self, text: str) -> None: ...
    def end(self) -> None: ...


# ---------------------------------------------------------------------------------- arguments


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return value


def add_exec_arguments(parser: argparse.ArgumentParser, *, url_type: Callable[[str], str] = str) -> None:
    """The options of ``acp exec`` (the command line's ``exec`` sub-parser); ``url_type``
    checks ``--url``."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("-p", "--prompt", metavar="TEXT", help="the prompt (- : read it from stdin)")
    source.add_argument(
        "--prompt-file", metavar="FILE", help="read the prompt from FILE (UTF-8; - : stdin). "
        "Without -p or --prompt-file the prompt is read from stdin",
    )
    parser.add_argument("--url", metavar="URL", type=url_type, help="a remote agent (ws://, wss://, http://, https://)")
    parser.add_argument("--cwd", metavar="DIR", help="the session folder (default: the current folder)")
    parser.add_argument(
        "--format", choices=("text", "json"), default="text",
        help="text: the agent's messages on stdout, the rest on stderr; json: one JSON object per line "
        "on stdout (default: %(default)s)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true",
        help="text format: print only the agent's messages and errors (no thoughts, tool calls, plans)",
    )
    parser.add_argument(
        "--timeout", metavar="S", type=_seconds,
        help=f"give up after S seconds: cancel the turn, wait up to {CANCEL_GRACE:g} s for the agent's "
        "answer, exit 124 (default: no limit)",
    )
    parser.add_argument(
        "--auth-method", metavar="ID", help="authenticate with the agent's method ID before session/new"
    )
    answer = parser.add_mutually_exclusive_group()
    answer.add_argument("--approve-all", action="store_true", help="approve every permission request")
    answer.add_argument(
        "--deny-all", action="store_true", help="deny every permission request (the default, without the notice)"
    )
    parser.add_argument(
        "--allow", metavar="KIND", action="append", choices=_TOOL_KINDS, default=[],
        help="approve permission requests for tool calls of this kind (repeatable; "
        f"{', '.join(_TOOL_KINDS)}); others are denied",
    )
    parser.add_argument(
        "--allow-read", action="store_true", help="serve fs/read_text_file, for files under --cwd only"
    )
    parser.add_argument(
        "--allow-fs", action="store_true",
        help="serve fs/read_text_file and fs/write_text_file, for files under --cwd only",
    )
    parser.add_argument(
        "--allow-terminal", action="store_true",
        help="serve terminal/* (the agent runs commands on this machine, starting under --cwd)",
    )


# ---------------------------------------------------------------------------------- output


def _wire(value: Any) -> Any:
    """``value`` as it is on the wire (camelCase names, defaults omitted)."""
    return msgspec.to_builtins(value)


class _Output:
    """Where the turn goes: one of :class:`_TextOutput` / :class:`_JsonOutput`. Thread-safe:
    updates and permission requests arrive on the connection's threads. After the last line
    (:meth:`result` / :meth:`error`), whatever comes late is dropped."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._lock = threading.RLock()
        self._done = False
        self._broken = False  # stdout went away (`acp exec ... | head -1`): the turn goes on

    def _write(self, text: str) -> None:
        if self._broken:
            return
        try:
            self._out.write(text)
            self._out.flush()
        except BrokenPipeError:
            self._broken = True

    def update(self, notification: schema.SessionNotification) -> None:
        raise NotImplementedError

    def permission(self, request: schema.RequestPermissionRequest, answer: schema.RequestPermissionResponse,
                   decision: str, hint: str | None) -> None:
        raise NotImplementedError

    def result(self, response: schema.PromptResponse, session_id: str, status: int, extra: dict[str, Any]) -> None:
        raise NotImplementedError

    def error(self, fields: dict[str, Any]) -> None:
        raise NotImplementedError


class _TextOutput(_Output):
    """Message text to stdout as it streams; everything else rendered on stderr by ``progress``."""

    def __init__(self, out: IO[str], progress: Progress, quiet: bool) -> None:
        super().__init__(out)
        self._progress = progress
        self._quiet = quiet
        self._ends_line = True  # nothing written, or the last text ended with a newline

    def update(self, notification: schema.SessionNotification) -> None:
        update = notification.update
        with self._lock:
            if self._done:
                return
            if isinstance(update, schema.AgentMessageChunk) and isinstance(update.content, schema.TextContent):
                if update.content.text:
                    self._write(update.content.text)
                    self._ends_line = update.content.text.endswith("\n")
            elif not self._quiet:
                self._progress(notification)

    def permission(self, request: schema.RequestPermissionRequest, answer: schema.RequestPermissionResponse,
                   decision: str, hint: str | None) -> None:
        if self._quiet and hint is None:
            return
        call = request.tool_call
        kind = f" ({call.kind})" if call.kind else ""
        self._progress.line(f"[permission] {call.title or call.tool_call_id}{kind}: {decision}"
                            + (f" ({hint})" if hint else ""))

    def _finish(self) -> None:
        self._done = True
        if not self._ends_line:
            self._write("\n")  # as echo(1) ends its line: files and terminals read better
        self._progress.end()

    def result(self, response: schema.PromptResponse, session_id: str, status: int, extra: dict[str, Any]) -> None:
        with self._lock:
            self._finish()

    def error(self, fields: dict[str, Any]) -> None:
        with self._lock:
            self._finish()


class _JsonOutput(_Output):
    """One JSON object per line on stdout: ``update``, ``permission``, then ``result`` / ``error``."""

    def _line(self, obj: dict[str, Any], last: bool = False) -> None:
        with self._lock:
            if self._done:
                return
            self._done = last
            self._write(msgspec.json.encode(obj).decode("utf-8") + "\n")

    def update(self, notification: schema.SessionNotification) -> None:
        self._line({"type": "update", **_wire(notification)})

    def permission(self, request: schema.RequestPermissionRequest, answer: schema.RequestPermissionResponse,
                   decision: str, hint: str | None) -> None:
        self._line({"type": "permission", "decision": decision, "request": _wire(request),
                    "outcome": _wire(answer.outcome)})

    def result(self, response: schema.PromptResponse, session_id: str, status: int, extra: dict[str, Any]) -> None:
        self._line({"type": "result", **_wire(response), "sessionId": session_id, "exitCode": status, **extra},
                   last=True)

    def error(self, fields: dict[str, Any]) -> None:
        self._line({"type": "error", **fields}, last=True)


# ---------------------------------------------------------------------------------- permissions


class _Permissions:
    """The ``session/request_permission`` handler: a :class:`~acp.client.PermissionPolicy` from
    the flags, each decision reported (a denial by default says how to approve)."""

    def __init__(self, args: argparse.Namespace, output: _Output) -> None:
        from .client import PermissionPolicy

        self._explicit = args.approve_all or args.deny_all
        self._policy = PermissionPolicy(allow=args.allow, default="allow" if args.approve_all else "reject")
        self._output = output

    def __call__(self, request: schema.RequestPermissionRequest, ctx: Any) -> schema.RequestPermissionResponse:
        answer = self._policy(request, ctx)
        outcome = answer.outcome
        hint = None
        if isinstance(outcome, schema.SelectedPermissionOutcome):
            chosen = next((o for o in request.options if o.option_id == outcome.option_id), None)
            approved = chosen is not None and chosen.kind in (
                schema.PermissionOptionKinds.ALLOW_ONCE, schema.PermissionOptionKinds.ALLOW_ALWAYS
            )
            decision = "approved" if approved else "denied"
            if not approved and not self._explicit:
                kind = request.tool_call.kind
                hint = "by default; --approve-all" + (f" or --allow {kind}" if kind else "") + " approves it"
        else:
            decision = "cancelled"
        self._output.permission(request, answer, decision, hint)
        if hint is not None and isinstance(self._output, _JsonOutput):
            sys.stderr.write(f"acp exec: permission for {request.tool_call.title!r} denied {hint}\n")
            sys.stderr.flush()
        return answer


# ---------------------------------------------------------------------------------- the run


class _Stop(BaseException):
    """Raised in the main thread by SIGTERM (as SIGINT raises KeyboardInterrupt)."""


class _UsageError(Exception):
    pass


def _read_prompt(args: argparse.Namespace) -> str:
    if args.prompt is not None and args.prompt != "-":
        text: str = args.prompt
    elif args.prompt == "-" or args.prompt_file in (None, "-"):
        if args.prompt is None and args.prompt_file is None and sys.stdin.isatty():
            raise _UsageError("no prompt: give -p TEXT or --prompt-file FILE, or pipe it on stdin")
        try:
            text = sys.stdin.read()
        except UnicodeDecodeError as exc:
            raise _UsageError(f"the prompt on stdin is not UTF-8 text: {exc}") from None
    else:
        try:
            with open(args.prompt_file, encoding="utf-8") as file:
                text = file.read()
        except OSError as exc:
            raise _UsageError(f"cannot read {args.prompt_file}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise _UsageError(f"{args.prompt_file} is not UTF-8 text: {exc}") from None
    if not text.strip():
        raise _UsageError("the prompt is empty")
    return text


def _session_dir(args: argparse.Namespace) -> str:
    cwd = os.path.realpath(args.cwd or os.getcwd())
    if not os.path.isdir(cwd):
        raise _UsageError(f"--cwd {args.cwd}: not a folder")
    return cwd


def run_exec(
    args: argparse.Namespace, settings: Union[AgentSettings, None], out: IO[str], *, progress: Progress
) -> int:
    """Run ``acp exec`` with parsed ``args`` against the agent ``settings`` (None: none was
    given); ``out`` is stdout, ``progress`` renders updates on stderr (text format). The exit
    status (see :data:`EXIT_CODES` and docs/cli.md)."""
    try:
        if settings is None:
            raise _UsageError(
                "exec needs the agent's command after --, e.g. acp exec -p 'hello' -- my-agent --stdio "
                "(or --url URL, or ACP_AGENT_COMMAND / ACP_AGENT_URL in the environment)"
            )
        if args.quiet and args.format == "json":
            raise _UsageError("--quiet is for the text format (json has no progress to omit)")
        cwd = _session_dir(args)
        prompt = _read_prompt(args)
    except _UsageError as exc:
        sys.stderr.write(f"acp exec: error: {exc}\n")
        return EXIT_USAGE
    output: _Output = (
        _JsonOutput(out) if args.format == "json" else _TextOutput(out, progress, args.quiet)
    )
    try:
        return _Exec(args, settings, cwd, prompt, output).run()
    except KeyboardInterrupt:  # a second Ctrl-C while closing: no traceback
        return EXIT_SIGINT


class _Exec:
    """One run: the client, the turn on its thread, and the main thread's waiting."""

    def __init__(self, args: argparse.Namespace, settings: AgentSettings, cwd: str, prompt: str,
                 output: _Output) -> None:
        self.args = args
        self.settings = settings
        self.cwd = cwd
        self.prompt = prompt
        self.output = output
        self.started = time.monotonic()
        self.events: queue.Queue[tuple[str, Any, str]] = queue.Queue()  # (kind, value, stage)
        self.lock = threading.Lock()
        self.session_id: str | None = None
        self.in_turn = False
        self.stopped = False  # decided in the main thread: the turn must not start any more
        self.client: SyncClient | None = None
        self.init: schema.InitializeResponse | None = None

    # -- the client

    def _build(self, terminals: Any) -> SyncClient | int:
        import acp

        try:
            builder = acp.SyncClient.builder().agent_from_settings(self.settings, start_new_session=True)
        except ValueError as exc:  # a URL this installation cannot open
            return self._fail("start", exc, EXIT_USAGE)
        builder = (
            builder.client_info("acp-exec", __version__)
            .session_update_handler(self.output.update)
            .notices()  # shown like any other update
            .compaction()
            .request_permission_handler(_Permissions(self.args, self.output))
        )
        if self.args.allow_read or self.args.allow_fs:
            files = acp.LocalFiles([self.cwd])
            builder.read_text_file_handler(files.read_text_file)
            if self.args.allow_fs:
                builder.write_text_file_handler(files.write_text_file)
        if terminals is not None:
            builder.terminal_handlers(terminals)
        try:
            return builder.build()
        except FileNotFoundError as exc:
            return self._fail("start", exc, EXIT_NOT_FOUND)
        except PermissionError as exc:
            return self._fail("start", exc, EXIT_CANNOT_RUN)
        except (acp.ConnectionClosedError, ImportError, OSError) as exc:  # unreachable, refused, no extra
            return self._fail("start", exc, EXIT_AGENT_FAILED)

    def run(self) -> int:
        from .client import LocalTerminals

        with _terminals(LocalTerminals, self.cwd, self.args.allow_terminal) as terminals:
            built = self._build(terminals)
            if isinstance(built, int):
                return built
            self.client = built
            try:
                with built:
                    worker = threading.Thread(target=self._turn, name="acp-exec-turn", daemon=True)
                    worker.start()
                    status = self._wait_for_the_end()
                worker.join(5.0)
                return status
            finally:
                self.client = None

    def _turn(self) -> None:
        """The worker thread: initialize, session/new, session/prompt; the outcome as an event."""
        client = self.client
        assert client is not None
        stage = "initialize"
        try:
            self.init = client.initialize()
            if self.args.auth_method:
                stage = "authenticate"
                client.authenticate(self.args.auth_method)
            stage = "session/new"
            session_id = client.new_session(cwd=self.cwd).session_id
            with self.lock:
                self.session_id = session_id
                if self.stopped:
                    return
                self.in_turn = True
            stage = "session/prompt"
            self.events.put(("done", client.prompt(session_id, self.prompt), stage))
        except BaseException as exc:  # reported by the main thread
            self.events.put(("error", exc, stage))

    # -- the main thread

    def _next(self, timeout: float | None) -> tuple[str, Any, str] | None:
        try:
            return self.events.get(timeout=None if timeout is None else max(0.0, timeout))
        except queue.Empty:
            return None

    def _wait_for_the_end(self) -> int:
        deadline = None if self.args.timeout is None else self.started + self.args.timeout
        why: str | None = None  # "timeout" | "interrupt" | "terminate": exec stopped the run
        with _sigterm_raises():
            try:
                event = self._next(None if deadline is None else deadline - time.monotonic())
                if event is None:
                    why = "timeout"
            except KeyboardInterrupt:
                event, why = None, "interrupt"
            except _Stop:
                event, why = None, "terminate"
            if why is not None:
                event = self._stop(why)
        if event is None:
            return self._gave_up(why)
        kind, value, stage = event
        if kind == "done":
            return self._finished(value, why)
        return self._failed(value, stage, why)

    def _stop(self, why: str) -> tuple[str, Any, str] | None:
        """Cancel the turn if it runs and wait a little for its answer (None: none came)."""
        client = self.client
        assert client is not None
        with self.lock:
            self.stopped = True
            session_id = self.session_id if self.in_turn else None
        if session_id is None:
            return None  # not in a turn yet: nothing to cancel
        try:
            client.cancel(session_id)
        except AcpError:
            return self._next(0)  # the agent went away meanwhile: its error is (or is not) queued
        try:
            return self._next(CANCEL_GRACE)
        except (KeyboardInterrupt, _Stop):  # again: stop waiting
            return None

    # -- outcomes

    def _elapsed(self) -> int:
        return round((time.monotonic() - self.started) * 1000)

    def _finished(self, response: schema.PromptResponse, why: str | None) -> int:
        stop = response.stop_reason
        extra: dict[str, Any] = {"durationMs": self._elapsed()}
        if why is not None and stop == schema.StopReasons.CANCELLED:
            status = _stopped_status(why)
            extra["cancelledBy"] = why
            self._say(f"{_why_text(why, self.args.timeout)}: the turn was cancelled (stop reason cancelled)")
        else:
            status = EXIT_CODES.get(stop, EXIT_OTHER_STOP)
            if status == EXIT_OTHER_STOP:
                self._say(f"the turn ended with stop reason {stop!r}, which exec did not ask for")
            elif status != EXIT_END_TURN:
                self._say(f"{_STOP_TEXT[stop]} (stop reason {stop})")
        assert self.session_id is not None
        self.output.result(response, self.session_id, status, extra)
        if status == EXIT_END_TURN and not self.args.quiet and isinstance(self.output, _TextOutput):
            self._say(f"end_turn after {self._elapsed() / 1000:.1f} s")
        return status

    def _gave_up(self, why: str | None) -> int:
        assert why is not None
        status = _stopped_status(why)
        with self.lock:
            in_turn = self.in_turn
        text = _why_text(why, self.args.timeout)
        if in_turn:
            text += f": cancelled the turn; the agent did not answer within {CANCEL_GRACE:g} s"
        else:
            text += " before the turn started"
        return self._report(text, status, {"stage": "session/prompt" if in_turn else "start", "cancelledBy": why})

    def _failed(self, exc: BaseException, stage: str, why: str | None) -> int:
        if why is not None and (isinstance(exc, ConnectionClosedError) or _is_cancelled_error(exc)):
            # What exec's own stopping caused: report the stop, not the error.
            return self._report(f"{_why_text(why, self.args.timeout)}: {exc}", _stopped_status(why),
                                {"stage": stage, "cancelledBy": why})
        if not isinstance(exc, Exception):
            raise exc
        return self._fail(stage, exc, EXIT_AUTH_REQUIRED if is_auth_required(exc) else EXIT_AGENT_FAILED)

    def _fail(self, stage: str, exc: BaseException, status: int) -> int:
        """Report a failure of ``stage`` (what exec was doing) with the agent's last stderr lines."""
        fields: dict[str, Any] = {"stage": stage}
        if isinstance(exc, RequestError):
            fields.update(code=exc.code, errorMessage=exc.message)
            if exc.data is not None:
                fields["data"] = exc.data
        text = _describe(stage, exc)
        tail = self._stderr_tail(exc)
        if tail:
            fields["stderr"] = tail
            if not isinstance(exc, ConnectionClosedError):  # its message shows the tail already
                lines = tail.splitlines()[-_TAIL_LINES:]
                text += "\nthe last lines of the agent's stderr:\n" + "\n".join("    " + line for line in lines)
        if status == EXIT_AUTH_REQUIRED:
            text += "\n" + self._auth_advice()
            if self.init is not None:
                fields["authMethods"] = _wire(self.init.auth_methods)
        return self._report(text, status, fields)

    def _report(self, text: str, status: int, fields: dict[str, Any]) -> int:
        self.output.error({"exitCode": status, "message": text.split("\n", 1)[0], **fields,
                           "durationMs": self._elapsed()})
        self._say(text)
        return status

    def _stderr_tail(self, exc: BaseException) -> str:
        if isinstance(exc, ConnectionClosedError) and exc.stderr_tail:
            return exc.stderr_tail
        process = self.client.process if self.client is not None else None
        if process is None:
            return ""
        process.wait(0.5 if isinstance(exc, ConnectionClosedError) else 0)
        return process.stderr_tail

    def _auth_advice(self) -> str:
        methods = [_method_text(m) for m in (self.init.auth_methods if self.init is not None else [])]
        if not methods:
            return "the agent wants a sign-in but offers no authentication method"
        return ("the agent offers these authentication methods: " + ", ".join(methods)
                + "; sign in with the agent's own tool, or pass --auth-method ID (acp chat lists "
                "what each one needs)")

    def _say(self, text: str) -> None:
        try:
            sys.stderr.write(f"acp exec: {text}\n")
            sys.stderr.flush()
        except (BrokenPipeError, ValueError):
            pass


def _describe(stage: str, exc: BaseException) -> str:
    """``exc`` as the failure of ``stage`` (what exec was doing)."""
    text = str(exc) or type(exc).__name__
    if stage == "start":
        return f"cannot start the agent: {text}"
    if isinstance(exc, ConnectionClosedError) and text.startswith(stage + ":"):
        return text  # "initialize: the agent process exited with code 3..."
    return f"{stage} failed: {text}"


def _method_text(method: Any) -> str:
    kind = auth_field(method, "type")
    return f"{auth_field(method, 'id')} ({auth_field(method, 'name')}{', ' + str(kind) if kind != 'agent' else ''})"


def _is_cancelled_error(exc: BaseException) -> bool:
    return isinstance(exc, RequestError) and exc.code == REQUEST_CANCELLED


def _stopped_status(why: str) -> int:
    return {"timeout": EXIT_TIMEOUT, "interrupt": EXIT_SIGINT}.get(why, EXIT_SIGTERM)


def _why_text(why: str, timeout: float | None) -> str:
    if why == "timeout":
        return f"timed out after {timeout:g} s"
    return "interrupted (SIGINT)" if why == "interrupt" else "terminated (SIGTERM)"


@contextmanager
def _terminals(factory: Any, cwd: str, enabled: bool) -> Iterator[Any]:
    """LocalTerminals confined to ``cwd`` when ``enabled`` (killed at the end), else None."""
    if not enabled:
        yield None
        return
    with factory(allowed_cwd_roots=[cwd]) as terminals:
        yield terminals


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM (a CI runner cancelling the job) raises :class:`_Stop` in the main thread while
    the run waits, so the turn is cancelled the way Ctrl-C cancels it."""
    def handler(signum: int, frame: Any) -> None:
        raise _Stop()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except (ValueError, AttributeError):  # not the main thread, or no SIGTERM
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
