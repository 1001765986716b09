"""What a handler sees: :class:`AgentRequestContext` for every request, :class:`PromptContext`
for a prompt turn, and :class:`SessionUpdater` for sending a session's updates.

Each context belongs to one connection: its client proxy, capabilities and terminals are that
connection's. Calls that block (files, terminals, permission, elicitation) wake when the
request or turn is cancelled.

The asyncio twins (:mod:`acp.agent.aio_context`) share everything but the waiting:
``_ContextBase`` and ``_PromptBase`` hold the properties, the updates and the *steps* of every
request helper (see :mod:`acp.agent.client_calls`); each runtime's class only wraps the steps
in a blocking or an ``async`` method.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import msgspec

from .. import schema
from ..capabilities import NegotiatedCapabilities
from ..errors import RequestCancelledError, RequestError
from . import permissions
from .cancellation import CancelToken
from .client_calls import CallsToClient, Gate, Notifier, Steps
from .client_proxy import ClientProxy
from .state import Call, ConnectionState
from .turns import Turn

if TYPE_CHECKING:
    from ..schema import unstable as _unstable
    from .commands import CommandResult  # imported when a command runs (a dataclass: ~0.4 ms)

__all__ = ["AgentRequestContext", "PromptContext", "SessionUpdater", "PlanEntryLike", "ERROR_STOP_REASON"]

_log = logging.getLogger("acp.agent")

PlanEntryLike = Union[schema.PlanEntry, tuple[str, str, str]]
"""A plan entry, or the shorthand ``(content, priority, status)``."""

_Content = Union[str, schema.ContentBlock]
_ToolContent = Union[str, Sequence[schema.ToolCallContent]]


def _block(content: _Content) -> schema.ContentBlock:
    return schema.TextContent(text=content) if isinstance(content, str) else content


def _tool_content(content: _ToolContent | None) -> list[schema.ToolCallContent] | None:
    if content is None:
        return None
    if isinstance(content, str):
        return [schema.Content(content=schema.TextContent(text=content))]
    return list(content)


def _blocks(content: _Content | Sequence[_Content] | None) -> list[schema.ContentBlock] | None:
    if content is None:
        return None
    if isinstance(content, str) or not isinstance(content, Sequence):
        return [_block(content)]
    return [_block(c) for c in content]


#: The stop reason of an idle subagent whose work failed (unstable; details in ``error``).
ERROR_STOP_REASON = "error"

_STATES = ("running", "idle", "requires_action", "unknown")


def _subagent_state(
    state: Any, stop_reason: str | None, error: Any, usage: Any
) -> _unstable.StateUpdate | None:
    from ..schema import unstable

    if error is not None:
        if stop_reason not in (None, ERROR_STOP_REASON):
            raise ValueError(f"send_subagent_update: error= goes with stop_reason 'error', not {stop_reason!r}")
        stop_reason = ERROR_STOP_REASON
        if isinstance(error, RequestError):
            error = schema.Error(code=error.code, message=error.message, data=error.data)
    idle_details = stop_reason is not None or usage is not None
    if state is None and idle_details:
        state = "idle"
    if state is None or not isinstance(state, str):
        if idle_details:
            raise ValueError("send_subagent_update: stop_reason/error/usage go with state='idle'")
        return state
    if state not in _STATES:
        raise ValueError(f"send_subagent_update: unknown state {state!r} (one of {', '.join(_STATES)})")
    if state != "idle" and idle_details:
        raise ValueError(f"send_subagent_update: stop_reason/error/usage go with state='idle', not {state!r}")
    if state == "idle":
        return unstable.StateUpdateIdle(stop_reason=stop_reason, error=error, usage=usage)
    if state == "running":
        return unstable.RunningStateUpdate()
    if state == "requires_action":
        return unstable.RequiresActionStateUpdate()
    return unstable.UnknownStateUpdate()


def _plan_entry(entry: PlanEntryLike) -> schema.PlanEntry:
    if isinstance(entry, schema.PlanEntry):
        return entry
    content, priority, status = entry
    return schema.PlanEntry(content=content, priority=priority, status=status)


# session id -> the bytes of an agent_message_chunk's params before and after its text
# (send_message's plain-text chunks); bounded: emptied when a connection has made this many.
_CHUNK_FRAMES: dict[str, tuple[bytes, bytes]] = {}
_MAX_CHUNK_FRAMES = 1024
# Above this many characters a chunk is encoded straight into the batch (the Struct path): the
# frame's two concatenations would copy a big text twice more (and hold three copies at once).
_MAX_FRAMED_CHUNK = 64 * 1024
_encode_json = msgspec.json.Encoder().encode


def _chunk_frame(session_id: str) -> tuple[bytes, bytes]:
    params = _encode_json(
        schema.SessionNotification(session_id=session_id, update=schema.AgentMessageChunk(content=schema.TextContent(text="")))
    )
    at = params.rindex(b'""')  # the text: the last string of the encoding
    frame = (params[:at], params[at + 2:])
    if len(_CHUNK_FRAMES) >= _MAX_CHUNK_FRAMES:
        _CHUNK_FRAMES.clear()
    _CHUNK_FRAMES[session_id] = frame
    return frame


class _SessionMethods:
    """The update helpers shared by :class:`SessionUpdater` and :class:`PromptContext`."""

    session_id: str
    _client: CallsToClient

    def send_update(self, update: schema.SessionUpdate) -> bool:
        """Send one ``session/update``. In a prompt turn, an update sent after the prompt was
        answered is dropped (logged at DEBUG) and False is returned. A kind the client did not
        advertise (``notice``, compaction, subagent updates) raises
        :class:`~acp.errors.CapabilityError` and nothing is sent."""
        return self._client.session_update(
            schema.SessionNotification(session_id=self.session_id, update=update)
        )

    def send_message(self, content: _Content, *, meta: dict[str, Any] | None = None) -> bool:
        """Stream a piece of the agent's reply (``agent_message_chunk``); ``meta`` is its
        ``_meta``."""
        # send_update, _block and session_update inlined (a chunk is a baseline update: no
        # capability to check): this runs once per streamed chunk.
        notification: Any
        if type(content) is str and meta is None and len(content) <= _MAX_FRAMED_CHUNK:
            # The common chunk, plain text: its params are the session's frame around the
            # JSON-encoded text, the very bytes the three Structs encode to (tested), sent as
            # msgspec.Raw: no Structs to make and encode per chunk (~60 ns of ~900).
            frame = _CHUNK_FRAMES.get(self.session_id) or _chunk_frame(self.session_id)
            notification = msgspec.Raw(frame[0] + _encode_json(content) + frame[1])
        else:
            block = schema.TextContent(text=content) if isinstance(content, str) else content
            notification = schema.SessionNotification(
                session_id=self.session_id, update=schema.AgentMessageChunk(content=block, field_meta=meta)
            )
        client = self._client
        gate = client._gate
        if gate is None:
            client._connection.notify("session/update", notification)
            return True
        if gate(client._connection, notification):
            return True
        _log.debug("session %s: update after the prompt was answered; dropped", self.session_id)
        return False

    def send_thought(self, content: _Content, *, meta: dict[str, Any] | None = None) -> bool:
        """Stream a piece of the agent's reasoning (``agent_thought_chunk``); ``meta`` is its
        ``_meta``."""
        return self.send_update(schema.AgentThoughtChunk(content=_block(content), field_meta=meta))

    def send_user_message(self, content: _Content, *, meta: dict[str, Any] | None = None) -> bool:
        """Replay a piece of a user message (``user_message_chunk``), e.g. in ``session/load``;
        ``meta`` is its ``_meta``."""
        return self.send_update(schema.UserMessageChunk(content=_block(content), field_meta=meta))

    def send_plan(self, entries: Iterable[PlanEntryLike]) -> bool:
        """Send the complete plan; entries are PlanEntry or ``(content, priority, status)``."""
        return self.send_update(schema.Plan(entries=[_plan_entry(e) for e in entries]))

    def start_tool_call(
        self,
        title: str,
        kind: str = schema.ToolKinds.OTHER,
        *,
        status: str = schema.ToolCallStatuses.PENDING,
        content: _ToolContent | None = None,
        locations: Sequence[schema.ToolCallLocation] | None = None,
        raw_input: Any = None,
        tool_call_id: str | None = None,
        name: str | None = None,
    ) -> str:
        """Announce a tool call (``tool_call``); returns its id (generated unless given).
        ``name`` is the tool's own name (e.g. ``"read_file"``), next to the human ``title``."""
        call_id = tool_call_id if tool_call_id is not None else permissions.new_tool_call_id()
        self.send_update(
            schema.ToolCall(
                tool_call_id=call_id,
                title=title,
                name=name,
                kind=kind,
                status=status,
                content=_tool_content(content),
                locations=list(locations) if locations is not None else None,
                raw_input=raw_input,
            )
        )
        return call_id

    def update_tool_call(
        self,
        tool_call_id: str,
        *,
        status: str | None = None,
        title: str | None = None,
        kind: str | None = None,
        content: _ToolContent | None = None,
        locations: Sequence[schema.ToolCallLocation] | None = None,
        raw_input: Any = None,
        raw_output: Any = None,
        name: str | None = None,
    ) -> bool:
        """Report progress on a tool call (``tool_call_update``); only given fields are sent."""
        return self.send_update(
            schema.ToolCallProgress(
                tool_call_id=tool_call_id,
                status=status,
                title=title,
                name=name,
                kind=kind,
                content=_tool_content(content),
                locations=list(locations) if locations is not None else None,
                raw_input=raw_input,
                raw_output=raw_output,
            )
        )

    # ---------------------------------------------------------------- notices, compaction

    def send_notice(
        self,
        title: str,
        description: str | None = None,
        *,
        severity: str = schema.NoticeSeverities.INFO,
        meta: dict[str, Any] | None = None,
    ) -> bool:
        """Show the user a live, fire-and-forget notice (``notice``): ``severity`` is
        ``"info"``, ``"warning"`` or ``"error"``. Needs the client's ``session.notices``:
        otherwise raises :class:`~acp.errors.CapabilityError` and sends nothing (check
        ``ctx.client_capabilities.supports_notices()`` and fall back to :meth:`send_message`
        when the user must see it anyway)."""
        if not title:
            raise ValueError("send_notice: the title must not be empty")
        return self.send_update(
            schema.Notice(severity=severity, title=title, description=description, field_meta=meta)
        )

    def start_compaction(
        self,
        *,
        compaction_id: str | None = None,
        summary: _Content | Sequence[_Content] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> str:
        """Announce a context compaction (``compaction_update``, ``in_progress``); returns its
        id (generated unless given). Stream its summary with :meth:`send_compaction_summary`
        and end it with :meth:`update_compaction`. Needs the client's ``session.compaction``
        (else :class:`~acp.errors.CapabilityError`, nothing sent)."""
        compaction_id = compaction_id if compaction_id is not None else f"compaction_{uuid.uuid4().hex[:16]}"
        self.send_update(
            schema.CompactionUpdate(
                compaction_id=compaction_id,
                status=schema.CompactionStatuses.IN_PROGRESS,
                summary=_blocks(summary),
                field_meta=meta,
            )
        )
        return compaction_id

    def send_compaction_summary(self, compaction_id: str, content: _Content) -> bool:
        """Append a piece to a compaction's summary (``compaction_summary_chunk``)."""
        return self.send_update(schema.CompactionSummaryChunk(compaction_id=compaction_id, content=_block(content)))

    def update_compaction(
        self,
        compaction_id: str,
        status: str = schema.CompactionStatuses.COMPLETED,
        *,
        summary: _Content | Sequence[_Content] | None = None,
        error: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> bool:
        """Move a compaction on (``compaction_update``): by default to ``completed``; also
        ``failed`` (with ``error``) or ``cancelled``. A ``summary`` replaces the streamed one;
        fields not given stay as they were."""
        return self.send_update(
            schema.CompactionUpdate(
                compaction_id=compaction_id, status=status, summary=_blocks(summary), error=error, field_meta=meta
            )
        )

    # ---------------------------------------------------------------- subagents (unstable)

    def send_subagent_update(
        self,
        subagent_session_id: str,
        *,
        title: str | None = None,
        description: str | None = None,
        state: str | _unstable.StateUpdate | None = None,
        stop_reason: str | None = None,
        error: schema.Error | RequestError | None = None,
        usage: _unstable.Usage | None = None,
        cancellable: bool | None = None,
        cwd: str | None = None,
        additional_directories: Sequence[str] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> bool:
        """Unstable ``subagent_update``: announce a child session this session owns (the first
        update for an id, sent before any update of the child itself, which then go out with
        ``ctx.session(subagent_session_id)``), or patch it: fields not given stay unchanged.

        ``state`` is ``"running"``, ``"idle"``, ``"requires_action"``, ``"unknown"`` or a
        ``StateUpdate``; ``stop_reason`` / ``usage`` describe an idle child (they imply
        ``"idle"``), and ``error`` (a ``schema.Error`` or a ``RequestError``) reports the
        ``"error"`` stop reason with its details. ``cancellable`` grants (True) or withdraws
        (False) the client's right to ``session/cancel`` the child. Needs the agent's
        ``.unstable(True)`` and the client's ``subagents`` capability (else
        :class:`~acp.errors.CapabilityError`, nothing sent)."""
        from ..schema import unstable

        capabilities = None
        if cancellable is not None:
            capabilities = unstable.SubagentSessionCapabilities(
                cancel=unstable.SessionCancelCapabilities() if cancellable else None
            )
        update = unstable.SubagentUpdate(
            session_id=subagent_session_id,
            title=title,
            description=description,
            capabilities=capabilities,
            state=_subagent_state(state, stop_reason, error, usage),
            cwd=cwd,
            additional_directories=list(additional_directories) if additional_directories is not None else None,
            field_meta=meta,
        )
        return self.send_update(update)


class SessionUpdater(_SessionMethods):
    """Sends ``session/update`` notifications for one session outside a prompt turn (history
    replay in ``session/load``, mode changes, ...)."""

    def __init__(self, session_id: str, client: CallsToClient) -> None:
        self.session_id = session_id
        self._client = client


class _ContextBase:
    """What the request contexts of both runtimes share."""

    _client: CallsToClient

    _token: CancelToken

    def __init__(self, state: ConnectionState, call: Call, token: CancelToken | None = None) -> None:
        self._state = state
        self._call = call
        if token is not None:
            self._token = token
        # Made on first use (__getattr__), as most handlers never look: self._client, and a
        # plain request's self._token (only the engine cancels it: $/cancel_request, close).

    def __getattr__(self, name: str) -> Any:
        if name == "_client":
            client = self._client = self._make_client(self._state, self._token, self._gate())
            return client
        if name == "_token":
            token = self._token = CancelToken()
            self._call.on_cancel(lambda: None if token.cancel() else None)  # at once if it was
            return token
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _make_client(
        self, state: ConnectionState, token: CancelToken, gate: Gate | None
    ) -> CallsToClient:
        raise NotImplementedError

    def _gate(self) -> Gate | None:
        return None

    @property
    def capabilities(self) -> NegotiatedCapabilities:
        """What was negotiated on this connection (the client's side included)."""
        return self._state.capabilities

    @property
    def client_capabilities(self) -> NegotiatedCapabilities:
        """Same as :attr:`capabilities` (``supports_read_text_file()`` ...)."""
        return self._state.capabilities

    @property
    def request_id(self) -> Any:
        """The JSON-RPC id of the request being handled."""
        return self._call.id

    @property
    def is_cancelled(self) -> bool:
        """True once this request (or prompt turn) is cancelled."""
        return self._token.is_cancelled

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], object]:
        """Run ``callback`` on cancellation (at once if already cancelled); it runs where the
        cancel happens (the reader thread, or the event loop), so keep it short. Returns an
        unregister function (call it with no arguments; ignore what it returns)."""
        return self._token.on_cancel(callback)

    def session(self, session_id: str) -> SessionUpdater:
        """An updater for ``session_id`` on this connection (e.g. to replay history)."""
        return SessionUpdater(session_id, self._client)


class AgentRequestContext(_ContextBase):
    """The context of one request handler (every agent method but ``session/prompt``)."""

    _client: ClientProxy

    def __init__(
        self,
        state: ConnectionState,
        call: Call,
        token: CancelToken | None = None,
        connection: Notifier | None = None,
    ) -> None:
        self._connection = connection  # the threaded bridge, for a blocking handler of an AsyncAgent
        # _ContextBase's fields, set here: one __init__ call less per request.
        self._state = state
        self._call = call
        if token is not None:
            self._token = token

    def _make_client(
        self, state: ConnectionState, token: CancelToken, gate: Gate | None
    ) -> ClientProxy:
        return ClientProxy(state, token, gate, self._connection)

    @property
    def client(self) -> ClientProxy:
        """Raw typed calls into the client (``ctx.client.read_text_file(...)`` ...)."""
        return self._client

    @property
    def cancelled(self) -> threading.Event:
        """Set once this request (or prompt turn) is cancelled."""
        return self._token.event


class _PromptBase(_SessionMethods):
    """What the prompt contexts of both runtimes share: the prompt, the updates, and the steps
    of every request helper (wrapped by :class:`PromptContext` and ``AsyncPromptContext``)."""

    _turn: Turn
    request: schema.PromptRequest

    def _gate(self) -> Gate | None:
        return self._turn.send

    @property
    def prompt(self) -> list[schema.ContentBlock]:
        """The prompt's content blocks."""
        return self.request.prompt

    @property
    def prompt_text(self) -> str:
        """The text blocks of the prompt, joined by newlines."""
        return "\n".join(b.text for b in self.request.prompt if isinstance(b, schema.TextContent))

    @property
    def answered(self) -> bool:
        """True once the prompt was answered (later updates are dropped)."""
        return self._turn.answered

    # ---------------------------------------------------------------- steps of the helpers

    def _read_file(self, path: str, line: int | None, limit: int | None) -> Steps[str]:
        response = yield from self._client._read_text_file(
            schema.ReadTextFileRequest(session_id=self.session_id, path=path, line=line, limit=limit)
        )
        return response.content

    def _try_read_file(self, path: str, line: int | None, limit: int | None) -> Steps[str | None]:
        try:
            return (yield from self._read_file(path, line, limit))
        except RequestError as exc:
            _log.debug("try_read_file(%r): %r", path, exc)
            return None

    def _write_file(self, path: str, content: str) -> Steps[None]:
        yield from self._client._write_text_file(
            schema.WriteTextFileRequest(session_id=self.session_id, path=path, content=content)
        )

    def _ask_permission(
        self,
        action: str,
        kind: str,
        content: _ToolContent | None,
        locations: Sequence[schema.ToolCallLocation] | None,
        raw_input: Any,
        name: str | None,
    ) -> Steps[bool]:
        return permissions.ask_permission(
            self,
            self._client,
            action,
            kind,
            _tool_content(content),
            list(locations) if locations is not None else None,
            raw_input,
            name=name,
        )

    def _ask_choice(self, question: str, options: Sequence[str], name: str | None) -> Steps[str | None]:
        return permissions.ask_choice(self, self._client, question, options, name=name)

    def _elicit(
        self,
        message: str,
        requested_schema: schema.ElicitationSchema | Mapping[str, Any],
        tool_call_id: str | None,
    ) -> Steps[schema.CreateElicitationResponse]:
        if not isinstance(requested_schema, schema.ElicitationSchema):
            requested_schema = schema.decoder(schema.ElicitationSchema).decode(
                schema.encode(dict(requested_schema))
            )
        request = schema.CreateElicitationRequestForm(
            message=message,
            requested_schema=requested_schema,
            session_id=self.session_id,
            tool_call_id=tool_call_id,
        )
        try:
            return (yield from self._client._create_elicitation(request))
        except RequestCancelledError:
            return schema.CreateElicitationResponseCancel()

    def _execute(
        self, argv: Sequence[str], cwd: str | None, env: Mapping[str, str] | None, output_byte_limit: int | None
    ) -> Steps[CommandResult]:
        from .commands import run_command

        return run_command(self._client, self.session_id, argv, cwd, env, output_byte_limit)

    def _create_terminal(
        self,
        command: str,
        args: Sequence[str],
        cwd: str | None,
        env: Mapping[str, str] | None,
        output_byte_limit: int | None,
    ) -> Steps[str]:
        from .commands import create_terminal_request

        request = create_terminal_request(self.session_id, command, args, cwd, env, output_byte_limit)
        response = yield from self._client._create_terminal(request)
        return response.terminal_id

    def _terminal_output(self, terminal_id: str) -> Steps[schema.TerminalOutputResponse]:
        request = schema.TerminalOutputRequest(session_id=self.session_id, terminal_id=terminal_id)
        output: schema.TerminalOutputResponse = yield from self._client._terminal_call(
            "terminal/output", request, schema.TerminalOutputResponse
        )
        return output

    def _wait_for_terminal_exit(self, terminal_id: str) -> Steps[schema.WaitForTerminalExitResponse]:
        request = schema.WaitForTerminalExitRequest(session_id=self.session_id, terminal_id=terminal_id)
        exited: schema.WaitForTerminalExitResponse = yield from self._client._terminal_call(
            "terminal/wait_for_exit", request, schema.WaitForTerminalExitResponse
        )
        return exited

    def _kill_terminal(self, terminal_id: str) -> Steps[None]:
        request = schema.KillTerminalRequest(session_id=self.session_id, terminal_id=terminal_id)
        yield from self._client._terminal_call("terminal/kill", request, schema.KillTerminalResponse)

    def _release_terminal(self, terminal_id: str) -> Steps[None]:
        # Goes out even after the turn was cancelled.
        request = schema.ReleaseTerminalRequest(session_id=self.session_id, terminal_id=terminal_id)
        yield from self._client.uncancellable()._release_terminal(request)


class PromptContext(_PromptBase, AgentRequestContext):
    """A prompt turn as its handler sees it: streaming updates, calls into the client, and
    cancellation (``cancelled``, ``is_cancelled``, ``on_cancel``)."""

    _client: ClientProxy

    def __init__(
        self,
        state: ConnectionState,
        call: Call,
        turn: Turn,
        request: schema.PromptRequest,
        connection: Notifier | None = None,
    ) -> None:
        self._turn = turn
        self.session_id = request.session_id
        self.request = request
        # AgentRequestContext's and _ContextBase's fields, set here: two __init__ calls less
        # per prompt turn (as AsyncPromptContext does).
        self._connection = connection
        self._state = state
        self._call = call
        self._token = turn

    # ---------------------------------------------------------------- files

    def read_file(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        """The text of ``path`` (``fs/read_text_file``); raises on failure."""
        request = schema.ReadTextFileRequest(session_id=self.session_id, path=path, line=line, limit=limit)
        return self._client.read_text_file(request).content

    def try_read_file(self, path: str, line: int | None = None, limit: int | None = None) -> str | None:
        """Like :meth:`read_file`, but None when the client answers with an error. A missing
        capability and cancellation still raise."""
        return self._client._run(self._try_read_file(path, line, limit))

    def write_file(self, path: str, content: str) -> None:
        """Write ``content`` to ``path`` (``fs/write_text_file``)."""
        self._client._run(self._write_file(path, content))

    # ---------------------------------------------------------------- permission

    def ask_permission(
        self,
        action: str,
        kind: str = schema.ToolKinds.OTHER,
        *,
        content: _ToolContent | None = None,
        locations: Sequence[schema.ToolCallLocation] | None = None,
        raw_input: Any = None,
        name: str | None = None,
    ) -> bool:
        """Ask the user to allow ``action``: True only if allowed; False when rejected or
        cancelled. Announces a ``tool_call`` (pending; ``name``: the tool's name) first and
        settles it afterwards."""
        return self._client._run(self._ask_permission(action, kind, content, locations, raw_input, name))

    def ask_choice(self, question: str, *options: str, name: str | None = None) -> str | None:
        """Ask the user to pick one of ``options``; the chosen text, or None when cancelled.
        ``name``: the tool name of the ``tool_call`` it announces."""
        return self._client._run(self._ask_choice(question, options, name))

    def elicit(
        self,
        message: str,
        requested_schema: schema.ElicitationSchema | Mapping[str, Any],
        *,
        tool_call_id: str | None = None,
    ) -> schema.CreateElicitationResponse:
        """Ask the user for structured input (form-mode ``elicitation/create``).

        Returns the client's answer (accept with content, decline, or cancel); a cancelled
        turn answers as ``CreateElicitationResponseCancel``.
        """
        return self._client._run(self._elicit(message, requested_schema, tool_call_id))

    # ---------------------------------------------------------------- terminals

    def execute(
        self,
        *argv: str,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        output_byte_limit: int | None = None,
    ) -> CommandResult:
        """Run a command in a client terminal and wait for it; the terminal is released
        exactly once on every path. Raises RequestCancelledError if the turn is cancelled
        while it runs (the command is killed and released first)."""
        return self._client._run(self._execute(argv, cwd, env, output_byte_limit))

    def create_terminal(
        self,
        command: str,
        *args: str,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        output_byte_limit: int | None = None,
    ) -> str:
        """``terminal/create``; returns the terminal id (release it with :meth:`release_terminal`)."""
        return self._client._run(self._create_terminal(command, args, cwd, env, output_byte_limit))

    def terminal_output(self, terminal_id: str) -> schema.TerminalOutputResponse:
        """``terminal/output``: the output so far and, once exited, the exit status."""
        return self._client._run(self._terminal_output(terminal_id))

    def wait_for_terminal_exit(self, terminal_id: str) -> schema.WaitForTerminalExitResponse:
        """``terminal/wait_for_exit``: blocks until the command exits (or the turn is cancelled)."""
        return self._client._run(self._wait_for_terminal_exit(terminal_id))

    def kill_terminal(self, terminal_id: str) -> None:
        """``terminal/kill``: stop the command, keep the terminal."""
        self._client._run(self._kill_terminal(terminal_id))

    def release_terminal(self, terminal_id: str) -> None:
        """``terminal/release``: kill the command if running and free the terminal. This
        goes out even after the turn was cancelled."""
        self._client._run(self._release_terminal(terminal_id))
