"""A deterministic ACP agent: the first word of the prompt picks what the turn does.

It exists to test clients (ours and other people's) against every part of the protocol, and to
show clean use of the SDK. Run it over stdio with ``python -m acp.examples.scenario_agent``.

Scenarios (the prompt's text, first word first):

=========================  ========================================================================
``echo <text>``            one ``agent_message_chunk`` with ``<text>``
``stream <n>``             ``n`` numbered message chunks (``chunk 1/n`` ...)
``tool_calls``             a ``tool_call`` (edit, pending), then updates to in_progress and completed,
                           the last one carrying a ``diff`` content
``permission``             asks ``session/request_permission`` (an edit); reports ``allowed`` or
                           ``rejected`` (a ``cancelled`` outcome counts as rejected) in a message
``read <abs path>``        reads the file through the client (``fs/read_text_file``) as a tool call,
                           and streams its text back
``write <abs path> <t>``   writes ``<t>`` through the client (``fs/write_text_file``) as an edit tool
                           call with a diff
``terminal <command>``     runs the command (``shlex`` split) in a client terminal (``ctx.execute``),
                           reports its output and exit code
``plan``                   sends a plan, then updates it entry by entry until all are completed
``notice``                 three ``notice`` updates (info, warning, error); to a client that did not
                           advertise ``session.notices``, an agent message saying so instead
``compact [fail]``         a context compaction: ``compaction_update`` (in_progress), two
                           ``compaction_summary_chunk``, then ``completed`` (``failed`` with an error
                           for ``compact fail``); to a client without ``session.compaction``, an agent
                           message instead
``elicit``                 asks for a name and a colour with a form elicitation; reports the answer
``wait_for_cancel``        holds the turn until ``session/cancel``, then answers ``cancelled``
``error <code>``           answers the prompt with the JSON-RPC error ``<code>``
``late <text>``            answers the turn at once; ``<text>`` follows as an agent message a moment
                           after the answer, outside the turn (as agents send late updates)
``full``                   all of the above that end normally, in one turn, skipping what the
                           client's capabilities do not allow (read/write/terminal work in a
                           temporary folder created under the session's cwd and removed after)
=========================  ========================================================================

Anything else is answered with a short help message. Sessions live in memory: the agent
advertises and implements ``session/load`` (replays the conversation), ``session/list``,
``session/resume``, ``session/close`` and ``session/delete``, two modes (``ask``: permission
requests go to the user; ``auto``: the ``permission`` scenario is approved by the mode) and
config options (``model``: a select; ``verbose``: a boolean, offered only to clients that
advertise boolean config options, which makes the agent narrate its steps as thoughts).

With ``--require-auth`` the agent advertises :data:`AUTH_METHODS` and refuses ``session/new``
with ``auth_required`` (-32000) until the client authenticates: ``scenario-login`` (handled by the
agent, always succeeds) or ``api-key`` (an ``env_var`` method: it succeeds when the agent was
started with ``SCENARIO_API_KEY`` set, which also counts as signed in from the start).
"""

from __future__ import annotations

import datetime
import itertools
import logging
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import acp
from acp import schema
from acp.agent import SessionUpdater
from acp.errors import (
    AUTH_REQUIRED,
    INVALID_PARAMS,
    RESOURCE_NOT_FOUND,
    CapabilityError,
    RequestError,
)

__all__ = ["ScenarioAgent", "build_agent", "main", "SCENARIOS", "MODES", "MODELS", "AUTH_METHODS"]

_log = logging.getLogger("acp.examples.scenario")

SCENARIOS = (
    "echo", "stream", "tool_calls", "permission", "read", "write", "terminal", "plan",
    "notice", "compact", "elicit", "wait_for_cancel", "error", "late", "full",
)
"""The scenario names, in the order ``full`` runs the ones it includes."""

MODES = (
    schema.SessionMode(id="ask", name="Ask", description="Ask before doing anything risky"),
    schema.SessionMode(id="auto", name="Auto", description="Approve the agent's own permission requests"),
)
"""The session modes offered (``ask`` is the default)."""

MODELS = (
    schema.SessionConfigSelectOption(value="small", name="Small", description="Fast and terse"),
    schema.SessionConfigSelectOption(value="large", name="Large", description="Slow and thorough"),
)
"""The values of the ``model`` config option (``small`` is the default)."""

API_KEY_VAR = "SCENARIO_API_KEY"

AUTH_METHODS: tuple[schema.AuthMethod, ...] = (
    schema.AuthMethodAgent(
        id="scenario-login", name="Scenario login", description="The agent's own sign-in (always succeeds)"
    ),
    # An env_var method (the auth-methods RFD): this SDK's schema keeps it as the raw object.
    schema.UnknownAuthMethod({
        "type": "env_var", "id": "api-key", "name": "API key",
        "description": "Start the agent with an API key in its environment",
        "vars": [{"name": API_KEY_VAR, "label": "Scenario API key", "secret": True}],
    }),
)
"""The authentication methods offered with ``--require-auth``."""

_ELICIT_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name"},
        "colour": {"type": "string", "title": "Favourite colour", "enum": ["red", "green", "blue"]},
    },
    "required": ["name"],
}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass
class _Session:
    """One conversation, kept in memory."""

    session_id: str
    cwd: str
    mode_id: str = "ask"
    model: str = "small"
    verbose: bool = False
    boolean_options: bool = False  # the client that opened it understands boolean options
    active: bool = True  # False after session/close, until session/load or session/resume
    title: str | None = None
    updated_at: str = field(default_factory=_now)
    history: list[tuple[str, str]] = field(default_factory=list)  # ("user" | "agent", text)
    updater: SessionUpdater | None = None  # updates outside a turn (the ``late`` scenario)


class _Turn:
    """A prompt turn as the scenarios see it: the context, plus a transcript for the history."""

    def __init__(self, ctx: acp.PromptContext, session: _Session) -> None:
        self.ctx = ctx
        self.session = session
        self.said: list[str] = []

    def say(self, text: str) -> None:
        """Stream a message chunk (and remember it for ``session/load``)."""
        self.said.append(text)
        self.ctx.send_message(text)

    def narrate(self, text: str) -> None:
        """A thought, sent only when the session's ``verbose`` option is on."""
        if self.session.verbose:
            self.ctx.send_thought(text)


class ScenarioAgent:
    """The agent's state (sessions in memory) and its handlers; :func:`build_agent` wires them.

    Handlers run concurrently on the SDK's thread pool: session state is guarded by a lock,
    and a turn only touches its own session.
    """

    def __init__(self, require_auth: bool = False) -> None:
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self.authenticated = not require_auth or bool(os.environ.get(API_KEY_VAR))

    def authenticate(
        self, request: schema.AuthenticateRequest, ctx: acp.AgentRequestContext
    ) -> schema.AuthenticateResponse:
        """``authenticate``: ``scenario-login`` always works; ``api-key`` needs the variable."""
        if request.method_id == "api-key" and not os.environ.get(API_KEY_VAR):
            raise RequestError(
                AUTH_REQUIRED,
                "The API key is missing",
                {"reason": f"{API_KEY_VAR} is not set in the agent's environment", "missing": [API_KEY_VAR]},
            )
        self.authenticated = True
        return schema.AuthenticateResponse()

    # ------------------------------------------------------------------ session lifecycle

    def new_session(
        self, request: schema.NewSessionRequest, ctx: acp.AgentRequestContext
    ) -> schema.NewSessionResponse:
        """``session/new``: a fresh session in ``request.cwd``."""
        if not self.authenticated:
            raise RequestError.auth_required({
                "reason": "sign in first: call authenticate with one of the advertised authMethods",
                "authMethods": [m.id if not isinstance(m, dict) else m["id"] for m in AUTH_METHODS],
            })
        boolean = ctx.client_capabilities.supports_boolean_config_options()
        with self._lock:
            session = _Session(f"scenario-{next(self._ids)}", request.cwd, boolean_options=boolean)
            session.updater = ctx.session(session.session_id)
            self._sessions[session.session_id] = session
        _log.debug("new session %s in %s", session.session_id, request.cwd)
        return schema.NewSessionResponse(
            session_id=session.session_id,
            modes=self._modes(session),
            config_options=self._config_options(session),
        )

    def load_session(
        self, request: schema.LoadSessionRequest, ctx: acp.AgentRequestContext
    ) -> schema.LoadSessionResponse:
        """``session/load``: replay the conversation as updates, then answer."""
        session = self._reopen(request.session_id, request.cwd)
        updater = ctx.session(session.session_id)
        for role, text in list(session.history):
            if role == "user":
                updater.send_user_message(text)
            else:
                updater.send_message(text)
        return schema.LoadSessionResponse(
            modes=self._modes(session), config_options=self._config_options(session)
        )

    def resume_session(
        self, request: schema.ResumeSessionRequest, ctx: acp.AgentRequestContext
    ) -> schema.ResumeSessionResponse:
        """``session/resume``: reattach without replaying anything."""
        session = self._reopen(request.session_id, request.cwd)
        return schema.ResumeSessionResponse(
            modes=self._modes(session), config_options=self._config_options(session)
        )

    def list_sessions(
        self, request: schema.ListSessionsRequest, ctx: acp.AgentRequestContext
    ) -> schema.ListSessionsResponse:
        """``session/list``: every session (of ``request.cwd`` when given), newest first."""
        with self._lock:
            sessions = [s for s in self._sessions.values() if request.cwd in (None, s.cwd)]
        sessions.sort(key=lambda s: int(s.session_id.rsplit("-", 1)[1]), reverse=True)
        return schema.ListSessionsResponse(
            sessions=[
                schema.SessionInfo(session_id=s.session_id, cwd=s.cwd, title=s.title, updated_at=s.updated_at)
                for s in sessions
            ]
        )

    def close_session(self, request: schema.CloseSessionRequest, ctx: acp.AgentRequestContext) -> None:
        """``session/close``: the session stops taking prompts but stays listed and loadable.
        (The SDK has already cancelled and answered its running turn, if any.)"""
        self._get(request.session_id).active = False

    def delete_session(self, request: schema.DeleteSessionRequest, ctx: acp.AgentRequestContext) -> None:
        """``session/delete``: forget the session entirely. Deleting a session that does not
        exist (any more) succeeds, as the spec advises: the client wanted it gone, and it is."""
        with self._lock:
            self._sessions.pop(request.session_id, None)

    def set_session_mode(self, request: schema.SetSessionModeRequest, ctx: acp.AgentRequestContext) -> None:
        """``session/set_mode``: switch between ``ask`` and ``auto``."""
        session = self._get(request.session_id)
        if request.mode_id not in {m.id for m in MODES}:
            raise RequestError(INVALID_PARAMS, f"Unknown mode {request.mode_id!r}", {"modeId": request.mode_id})
        session.mode_id = request.mode_id

    def set_session_config_option(
        self, request: schema.SetSessionConfigOptionRequest, ctx: acp.AgentRequestContext
    ) -> schema.SetSessionConfigOptionResponse:
        """``session/set_config_option``: change ``model`` or ``verbose``; answer every option."""
        session = self._get(request.session_id)
        value = request.value
        if request.config_id == "model" and isinstance(value, str) and value in {m.value for m in MODELS}:
            session.model = value
        elif request.config_id == "verbose" and session.boolean_options and isinstance(value, bool):
            session.verbose = value
        else:
            raise RequestError(
                INVALID_PARAMS,
                f"Invalid value {value!r} for config option {request.config_id!r}",
                {"configId": request.config_id},
            )
        return schema.SetSessionConfigOptionResponse(config_options=self._config_options(session))

    # ------------------------------------------------------------------ the prompt turn

    def prompt(self, request: schema.PromptRequest, ctx: acp.PromptContext) -> str:
        """``session/prompt``: run the scenario the prompt names; answers a stop reason."""
        session = self._get(request.session_id)
        if not session.active:
            raise RequestError(
                RESOURCE_NOT_FOUND,
                f"Session {session.session_id!r} is closed; load or resume it first",
                {"sessionId": session.session_id},
            )
        text = ctx.prompt_text.strip()
        turn = _Turn(ctx, session)
        first_prompt = not session.history
        session.history.append(("user", text))
        session.updated_at = _now()
        if first_prompt:
            session.title = text[:60] or "(empty prompt)"
            ctx.send_update(schema.SessionInfoUpdate(title=session.title, updated_at=session.updated_at))
        word, _, rest = text.partition(" ")
        try:
            return self._run(turn, word, rest.strip())
        finally:
            if turn.said:
                session.history.append(("agent", "".join(turn.said)))

    def _run(self, turn: _Turn, word: str, rest: str) -> str:
        scenario = _SCENARIOS.get(word)
        if scenario is None:
            turn.say(
                f"Unknown scenario {word!r}. Try one of: {', '.join(SCENARIOS)} "
                "(e.g. 'echo hello', 'stream 5', 'read /abs/path')."
            )
            return schema.StopReasons.END_TURN
        return scenario(self, turn, rest)

    def _echo(self, turn: _Turn, rest: str) -> str:
        turn.say(rest)
        return schema.StopReasons.END_TURN

    def _stream(self, turn: _Turn, rest: str) -> str:
        try:
            count = int(rest or "3")
        except ValueError:
            raise RequestError(INVALID_PARAMS, f"stream: {rest!r} is not a number") from None
        for i in range(1, count + 1):
            if turn.ctx.is_cancelled:
                return schema.StopReasons.CANCELLED
            turn.say(f"chunk {i}/{count}\n")
        return schema.StopReasons.END_TURN

    def _tool_calls(self, turn: _Turn, rest: str) -> str:
        ctx = turn.ctx
        path = os.path.join(turn.session.cwd, "hello.py")
        location = [schema.ToolCallLocation(path=path, line=1)]
        call = ctx.start_tool_call("Edit hello.py", schema.ToolKinds.EDIT, locations=location, name="edit_file")
        ctx.update_tool_call(call, status=schema.ToolCallStatuses.IN_PROGRESS)
        diff = schema.Diff(path=path, old_text='print("hello")\n', new_text='print("hello, world")\n')
        ctx.update_tool_call(call, status=schema.ToolCallStatuses.COMPLETED, content=[diff])
        turn.say("Proposed an edit to hello.py.\n")
        return schema.StopReasons.END_TURN

    def _permission(self, turn: _Turn, rest: str) -> str:
        ctx = turn.ctx
        if turn.session.mode_id == "auto":
            turn.say("permission: allowed (by mode 'auto', nobody was asked)\n")
            return schema.StopReasons.END_TURN
        path = os.path.join(turn.session.cwd, "hello.py")
        allowed = ctx.ask_permission(
            "Apply the edit to hello.py",
            schema.ToolKinds.EDIT,
            locations=[schema.ToolCallLocation(path=path)],
            name="apply_edit",
        )
        if ctx.is_cancelled:
            turn.say("permission: cancelled\n")
            return schema.StopReasons.CANCELLED
        turn.say(f"permission: {'allowed' if allowed else 'rejected'}\n")
        return schema.StopReasons.END_TURN

    def _read(self, turn: _Turn, rest: str) -> str:
        ctx = turn.ctx
        path = rest
        call = ctx.start_tool_call(
            f"Read {os.path.basename(path)}", schema.ToolKinds.READ,
            locations=[schema.ToolCallLocation(path=path)], raw_input={"path": path}, name="read_file",
        )
        try:
            text = ctx.read_file(path)
        except (RequestError, CapabilityError) as exc:
            ctx.update_tool_call(call, status=schema.ToolCallStatuses.FAILED, content=f"read failed: {exc}")
            turn.say(f"read: failed: {exc}\n")
            return schema.StopReasons.END_TURN
        ctx.update_tool_call(call, status=schema.ToolCallStatuses.COMPLETED, content=text)
        turn.say(text)
        return schema.StopReasons.END_TURN

    def _write(self, turn: _Turn, rest: str) -> str:
        ctx = turn.ctx
        path, _, text = rest.partition(" ")
        old = ctx.try_read_file(path) if ctx.client_capabilities.supports_read_text_file() else None
        call = ctx.start_tool_call(
            f"Write {os.path.basename(path)}", schema.ToolKinds.EDIT, name="write_file",
            locations=[schema.ToolCallLocation(path=path)],
            content=[schema.Diff(path=path, old_text=old, new_text=text)],
        )
        try:
            ctx.write_file(path, text)
        except (RequestError, CapabilityError) as exc:
            ctx.update_tool_call(call, status=schema.ToolCallStatuses.FAILED, content=f"write failed: {exc}")
            turn.say(f"write: failed: {exc}\n")
            return schema.StopReasons.END_TURN
        ctx.update_tool_call(call, status=schema.ToolCallStatuses.COMPLETED)
        turn.say(f"wrote {len(text)} characters to {path}\n")
        return schema.StopReasons.END_TURN

    def _terminal(self, turn: _Turn, rest: str, cwd: str | None = None) -> str:
        ctx = turn.ctx
        argv = shlex.split(rest)
        if not argv:
            raise RequestError(INVALID_PARAMS, "terminal: give a command, e.g. 'terminal echo hi'")
        call = ctx.start_tool_call(
            f"Run {rest}", schema.ToolKinds.EXECUTE, raw_input={"command": argv}, name="run_command"
        )
        ctx.update_tool_call(call, status=schema.ToolCallStatuses.IN_PROGRESS)
        try:
            result = ctx.execute(*argv, cwd=cwd or turn.session.cwd)
        except (RequestError, CapabilityError) as exc:
            ctx.update_tool_call(call, status=schema.ToolCallStatuses.FAILED, content=f"failed: {exc}")
            turn.say(f"terminal: failed: {exc}\n")
            return schema.StopReasons.END_TURN
        status = schema.ToolCallStatuses.COMPLETED if result.success else schema.ToolCallStatuses.FAILED
        ctx.update_tool_call(call, status=status, content=result.output, raw_output={"exitCode": result.exit_code})
        ending = f"exit code {result.exit_code}" if result.signal is None else f"signal {result.signal}"
        turn.say(f"terminal: {ending}\n{result.output}")
        return schema.StopReasons.END_TURN

    def _plan(self, turn: _Turn, rest: str) -> str:
        steps = ["Read the code", "Make the change", "Run the tests"]
        for done in range(len(steps) + 1):
            turn.ctx.send_plan(
                (step, "high" if i == 0 else "medium", _plan_status(i, done)) for i, step in enumerate(steps)
            )
        turn.say("plan: all steps completed\n")
        return schema.StopReasons.END_TURN

    def _notice(self, turn: _Turn, rest: str) -> str:
        ctx = turn.ctx
        if not ctx.client_capabilities.supports_notices():
            # Spec: no notice to a client that cannot show one; say it as a message instead.
            turn.say("notice: the client does not show notices (no session.notices)\n")
            return schema.StopReasons.END_TURN
        ctx.send_notice("Index ready", "The workspace index was rebuilt.", severity=schema.NoticeSeverities.INFO)
        ctx.send_notice("Rate limit near", "80% of this hour's requests used.", severity=schema.NoticeSeverities.WARNING)
        ctx.send_notice("Linter crashed", severity=schema.NoticeSeverities.ERROR)
        turn.say("notice: sent 3 notices\n")
        return schema.StopReasons.END_TURN

    def _compact(self, turn: _Turn, rest: str) -> str:
        ctx = turn.ctx
        if not ctx.client_capabilities.supports_compaction():
            turn.say("compact: the client does not show compaction (no session.compaction)\n")
            return schema.StopReasons.END_TURN
        compaction = ctx.start_compaction()
        ctx.send_compaction_summary(compaction, "The user asked for scenarios; ")
        ctx.send_compaction_summary(compaction, "the agent ran them.")
        if rest == "fail":
            ctx.update_compaction(compaction, schema.CompactionStatuses.FAILED, error="the summariser gave up")
            turn.say("compact: failed\n")
        else:
            ctx.update_compaction(compaction, schema.CompactionStatuses.COMPLETED)
            turn.say("compact: done\n")
        return schema.StopReasons.END_TURN

    def _elicit(self, turn: _Turn, rest: str) -> str:
        if not turn.ctx.client_capabilities.supports_elicitation_form():
            turn.say("elicit: the client does not offer form elicitation\n")
            return schema.StopReasons.END_TURN
        answer = turn.ctx.elicit("Tell me about yourself", _ELICIT_SCHEMA)
        if isinstance(answer, schema.CreateElicitationResponseAccept):
            turn.say(f"elicit: accepted {dict(answer.content or {})}\n")
        elif isinstance(answer, schema.CreateElicitationResponseDecline):
            turn.say("elicit: declined\n")
        else:
            turn.say("elicit: cancelled\n")
        return schema.StopReasons.CANCELLED if turn.ctx.is_cancelled else schema.StopReasons.END_TURN

    def _wait_for_cancel(self, turn: _Turn, rest: str) -> str:
        turn.say("waiting for session/cancel...\n")
        turn.ctx.cancelled.wait()
        return schema.StopReasons.CANCELLED

    def _error(self, turn: _Turn, rest: str) -> str:
        try:
            code = int(rest)
        except ValueError:
            raise RequestError(INVALID_PARAMS, f"error: {rest!r} is not an error code") from None
        raise RequestError(code, f"Scenario error {code}", {"scenario": "error"})

    def _late(self, turn: _Turn, rest: str) -> str:
        updater = turn.session.updater
        ctx = turn.ctx

        def later() -> None:
            deadline = time.monotonic() + 5.0
            while not ctx.answered and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)  # after the client is back at its prompt
            if updater is not None:
                updater.send_message(f"late: {rest}\n")

        threading.Thread(target=later, name="scenario-late", daemon=True).start()
        turn.say("the rest comes after this turn\n")
        return schema.StopReasons.END_TURN

    def _full(self, turn: _Turn, rest: str) -> str:
        ctx = turn.ctx
        caps = ctx.client_capabilities
        folder = tempfile.mkdtemp(prefix="acp-scenario-", dir=turn.session.cwd)
        notes = os.path.join(folder, "notes.txt")
        steps: list[tuple[str, Callable[[], object], str | None]] = [
            ("Say hello", lambda: self._echo(turn, "Hello! Running every scenario.\n"), None),
            ("Stream", lambda: self._stream(turn, "3"), None),
            ("Propose an edit", lambda: self._tool_calls(turn, ""), None),
            ("Ask permission", lambda: self._permission(turn, ""), None),
            ("Write a file", lambda: self._write(turn, f"{notes} Notes written over ACP.\n"),
             None if caps.supports_write_text_file() else "fs/write_text_file"),
            ("Read it back", lambda: self._read(turn, notes),
             None if caps.supports_read_text_file() else "fs/read_text_file"),
            ("Run a command", lambda: self._terminal(turn, "ls", cwd=folder),
             None if caps.supports_terminal() else "terminal/*"),
            ("Ask a question", lambda: self._elicit(turn, ""),
             None if caps.supports_elicitation_form() else "form elicitation"),
        ]
        titles = [title for title, _, _ in steps]
        try:
            for index, (title, run, missing) in enumerate(steps):
                if ctx.is_cancelled:
                    return schema.StopReasons.CANCELLED
                ctx.send_plan((t, "medium", _plan_status(i, index)) for i, t in enumerate(titles))
                if missing is not None:
                    ctx.send_thought(f"Skipping '{title}': the client does not offer {missing}.\n")
                    continue
                turn.narrate(f"Step {index + 1}/{len(steps)}: {title}\n")
                if run() == schema.StopReasons.CANCELLED or ctx.is_cancelled:
                    return schema.StopReasons.CANCELLED
            ctx.send_plan((t, "medium", "completed") for t in titles)
            turn.say("full: done\n")
            return schema.StopReasons.END_TURN
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    # ------------------------------------------------------------------ helpers

    def _get(self, session_id: str) -> _Session:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise _unknown_session(session_id)
        return session

    def _reopen(self, session_id: str, cwd: str) -> _Session:
        session = self._get(session_id)
        session.active = True
        session.cwd = cwd
        return session

    def _modes(self, session: _Session) -> schema.SessionModeState:
        return schema.SessionModeState(current_mode_id=session.mode_id, available_modes=list(MODES))

    def _config_options(self, session: _Session) -> list[schema.SessionConfigOption]:
        options: list[schema.SessionConfigOption] = [
            schema.SessionConfigOptionSelect(
                id="model", name="Model", category="model", current_value=session.model, options=list(MODELS)
            )
        ]
        if session.boolean_options:
            options.append(
                schema.SessionConfigOptionBoolean(
                    id="verbose", name="Verbose", description="Narrate each step as a thought",
                    current_value=session.verbose,
                )
            )
        return options


_SCENARIOS: dict[str, Callable[[ScenarioAgent, _Turn, str], str]] = {
    "echo": ScenarioAgent._echo,
    "stream": ScenarioAgent._stream,
    "tool_calls": ScenarioAgent._tool_calls,
    "permission": ScenarioAgent._permission,
    "read": ScenarioAgent._read,
    "write": ScenarioAgent._write,
    "terminal": ScenarioAgent._terminal,
    "plan": ScenarioAgent._plan,
    "notice": ScenarioAgent._notice,
    "compact": ScenarioAgent._compact,
    "elicit": ScenarioAgent._elicit,
    "wait_for_cancel": ScenarioAgent._wait_for_cancel,
    "error": ScenarioAgent._error,
    "late": ScenarioAgent._late,
    "full": ScenarioAgent._full,
}


def _plan_status(index: int, done: int) -> str:
    if index < done:
        return schema.PlanEntryStatuses.COMPLETED
    return schema.PlanEntryStatuses.IN_PROGRESS if index == done else schema.PlanEntryStatuses.PENDING


def _unknown_session(session_id: str) -> RequestError:
    return RequestError(RESOURCE_NOT_FOUND, f"Unknown session {session_id!r}", {"sessionId": session_id})


def build_agent(cancel_grace_period: float | None = 30.0, *, require_auth: bool = False) -> acp.SyncAgent:
    """The scenario agent, ready to serve (``.serve_stdio()``, ``.serve_in_process()``...);
    ``require_auth``: see the module's docstring."""
    agent = ScenarioAgent(require_auth)
    builder = acp.SyncAgent.builder()
    if require_auth:
        builder.authenticate_handler(agent.authenticate).auth_methods(*AUTH_METHODS)
    return (
        builder
        .agent_info(name="acp-scenario-agent", version=acp.__version__, title="Scenario agent")
        .new_session_handler(agent.new_session)
        .load_session_handler(agent.load_session)
        .list_sessions_handler(agent.list_sessions)
        .resume_session_handler(agent.resume_session)
        .close_session_handler(agent.close_session)
        .delete_session_handler(agent.delete_session)
        .set_session_mode_handler(agent.set_session_mode)
        .set_session_config_option_handler(agent.set_session_config_option)
        .prompt_handler(agent.prompt)
        .cancel_grace_period(cancel_grace_period)
        .build()
    )


def main() -> int:
    """Serve the scenario agent on stdin/stdout until the client goes away."""
    import argparse

    parser = argparse.ArgumentParser(description="The scenario agent, over stdio.")
    parser.add_argument("--require-auth", action="store_true", help="refuse sessions until authenticated")
    args = parser.parse_args()
    logging.basicConfig(level=os.environ.get("ACP_LOG_LEVEL", "WARNING").upper(), stream=sys.stderr)
    build_agent(require_auth=args.require_auth).serve_stdio()
    return 0


if __name__ == "__main__":
    sys.exit(main())
