"""Helpers for testing your own agents and clients, in-process and without sleeps.

Test an agent with a real :class:`~acp.client.SyncClient` wired to it through an in-memory pipe
(the bytes still go through the JSON-RPC layer, exactly as over stdio)::

    from acp.testing import SessionRecorder, ScriptedPermissions, connect

    def test_my_agent():
        recorder = SessionRecorder()
        builder = (acp.SyncClient.builder()
                   .session_update_handler(recorder)
                   .request_permission_handler(ScriptedPermissions("allow")))
        with connect(build_my_agent(), builder) as client:     # initialized already
            session = client.new_session(cwd="/tmp")
            response = client.prompt(session.session_id, "hello")
        assert response.stop_reason == "end_turn"
        assert recorder.messages_text() == "hello"
        assert [call.status for call in recorder.tool_calls()] == ["completed"]

Test a client against a fake agent the same way: build a small :class:`~acp.agent.SyncAgent`
whose handlers script the answers, and :func:`connect` your client's builder to it.

:class:`MemoryFiles` serves ``fs/*`` requests from a dict, so an agent's file handling can be
tested without touching the disk.

Recorded sessions (``acp tap``) as test doubles: :class:`ReplayAgent` answers a client as the
recorded agent did, :class:`ReplayClient` drives an agent as the recorded client did (see
:mod:`acp.replay`; the pytest fixtures ``replay_agent`` / ``replay_client`` make them).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from . import schema
from .agent import AgentConnection, SyncAgent
from .client import SyncClient, SyncClientBuilder
from .errors import INVALID_PARAMS, RequestError
from .replay import ReplayAgent, ReplayClient, ReplayDivergence, ReplayReport
from .transport import FdTransport, memory_pair

__all__ = [
    "connect",
    "SessionRecorder",
    "RecordedToolCall",
    "ScriptedPermissions",
    "PermissionAnswer",
    "MemoryFiles",
    "ReplayAgent",
    "ReplayClient",
    "ReplayDivergence",
    "ReplayReport",
]

DEFAULT_CLOSE_TIMEOUT = 10.0


class _LinkedTransport:
    """The client's end of an in-memory pair; closing it also waits for the agent's side."""

    def __init__(self, inner: FdTransport, peer: AgentConnection, close_timeout: float) -> None:
        self._inner = inner
        self._peer = peer
        self._close_timeout = close_timeout

    def read(self) -> bytes:
        return self._inner.read()

    def write(self, data: bytes | bytearray) -> None:
        self._inner.write(data)

    def close_write(self) -> None:
        self._inner.close_write()

    def close(self) -> None:
        self._inner.close()
        # The agent reads end of input and closes its connection: wait, so no thread of this
        # pair outlives the client's close().
        if not self._peer.wait_closed(self._close_timeout):
            self._peer.close(graceful=False, timeout=self._close_timeout)

    @property
    def description(self) -> str:
        return f"in-process agent ({self._peer.name})"


def connect(
    agent: SyncAgent,
    client_builder: SyncClientBuilder | None = None,
    *,
    initialize: bool = True,
    close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
) -> SyncClient:
    """A :class:`~acp.client.SyncClient` talking to ``agent`` in this process.

    The two are joined by :func:`~acp.transport.memory_pair` (real bytes, real framing).
    ``client_builder`` holds your handlers and options (it must not have a transport yet; by
    default an empty builder). The client is ``initialize()``-d unless ``initialize=False``.
    Closing the client (``with connect(...) as client:``) also closes the agent's side of the
    pipe and waits up to ``close_timeout`` seconds for it, so no thread is left behind; the
    agent object itself stays usable (it may serve other connections).

    ::

        with connect(build_agent(), acp.SyncClient.builder().session_update_handler(rec)) as c:
            c.prompt(c.new_session(cwd="/tmp").session_id, "hi")
    """
    builder = client_builder if client_builder is not None else SyncClient.builder()
    ours, theirs = memory_pair()
    try:
        handle = agent.connect(theirs)
    except BaseException:
        ours.close()
        theirs.close()
        raise
    try:
        client = builder.transport(_LinkedTransport(ours, handle, close_timeout)).build()
    except BaseException:
        ours.close()  # the agent's side reads end of input and closes itself
        handle.wait_closed(close_timeout)
        raise
    if initialize:
        try:
            client.initialize()
        except BaseException:
            client.close()
            raise
    return client


# ---------------------------------------------------------------------------------- updates


@dataclass
class RecordedToolCall:
    """A tool call as the client knows it once every update of it was applied.

    ``updates`` counts the ``tool_call_update`` notifications received for it.
    """

    tool_call_id: str
    title: str | None = None
    name: str | None = None
    kind: str | None = None
    status: str | None = None
    content: list[schema.ToolCallContent] = field(default_factory=list)
    locations: list[schema.ToolCallLocation] = field(default_factory=list)
    raw_input: Any = None
    raw_output: Any = None
    updates: int = 0

    def diffs(self) -> list[schema.Diff]:
        """The ``diff`` items of its content."""
        return [c for c in self.content if isinstance(c, schema.Diff)]

    def text(self) -> str:
        """The text of its ``content`` items, joined."""
        return "".join(
            c.content.text
            for c in self.content
            if isinstance(c, schema.Content) and isinstance(c.content, schema.TextContent)
        )

    def _apply(self, update: schema.ToolCall | schema.ToolCallProgress) -> None:
        for name in ("title", "name", "kind", "status", "raw_input", "raw_output"):
            value = getattr(update, name)
            if value is not None:
                setattr(self, name, value)
        if update.content is not None:
            self.content = list(update.content)
        if update.locations is not None:
            self.locations = list(update.locations)


class SessionRecorder:
    """A ``session/update`` handler that keeps every notification, with helpers to query them.

    Register it with ``builder.session_update_handler(recorder)``. Thread-safe. Every query
    takes an optional ``session_id`` (None: all sessions)::

        recorder.messages_text()        # the agent's streamed reply, joined
        recorder.tool_calls()           # tool calls with their updates applied
        recorder.wait_for(lambda r: "ready" in r.messages_text(), timeout=5)
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._notifications: list[schema.SessionNotification] = []

    def __call__(self, notification: schema.SessionNotification) -> None:
        with self._cond:
            self._notifications.append(notification)
            self._cond.notify_all()

    @property
    def notifications(self) -> list[schema.SessionNotification]:
        """Every notification so far, in arrival order (a copy)."""
        with self._cond:
            return list(self._notifications)

    def updates(self, session_id: str | None = None) -> list[schema.SessionUpdate]:
        """The ``update`` of each notification (of ``session_id``), in arrival order."""
        return [n.update for n in self.notifications if session_id in (None, n.session_id)]

    def of_type(self, tp: type[Any], session_id: str | None = None) -> list[Any]:
        """The updates of one type, e.g. ``recorder.of_type(schema.Plan)``."""
        return [u for u in self.updates(session_id) if isinstance(u, tp)]

    def messages_text(self, session_id: str | None = None) -> str:
        """The text of every ``agent_message_chunk``, joined."""
        return _chunks_text(self.of_type(schema.AgentMessageChunk, session_id))

    def thoughts_text(self, session_id: str | None = None) -> str:
        """The text of every ``agent_thought_chunk``, joined."""
        return _chunks_text(self.of_type(schema.AgentThoughtChunk, session_id))

    def user_text(self, session_id: str | None = None) -> str:
        """The text of every ``user_message_chunk`` (a ``session/load`` replay), joined."""
        return _chunks_text(self.of_type(schema.UserMessageChunk, session_id))

    def tool_calls(self, session_id: str | None = None) -> list[RecordedToolCall]:
        """Every tool call, in order of announcement, with all its updates applied.

        An update for a tool call that was never announced still yields an entry.
        """
        calls: dict[str, RecordedToolCall] = {}
        for update in self.updates(session_id):
            if isinstance(update, (schema.ToolCall, schema.ToolCallProgress)):
                call = calls.get(update.tool_call_id)
                if call is None:
                    call = calls[update.tool_call_id] = RecordedToolCall(update.tool_call_id)
                if isinstance(update, schema.ToolCallProgress):
                    call.updates += 1
                call._apply(update)
        return list(calls.values())

    def notices(self, session_id: str | None = None) -> list[schema.Notice]:
        """The ``notice`` updates, in order."""
        return self.of_type(schema.Notice, session_id)

    def plans(self, session_id: str | None = None) -> list[schema.Plan]:
        """Every ``plan`` update, in order (each one is the complete plan at that time)."""
        return self.of_type(schema.Plan, session_id)

    def last_plan(self, session_id: str | None = None) -> schema.Plan | None:
        """The latest plan, or None."""
        plans = self.plans(session_id)
        return plans[-1] if plans else None

    def clear(self) -> None:
        """Forget everything recorded so far."""
        with self._cond:
            self._notifications.clear()

    def wait_for(self, predicate: Callable[[SessionRecorder], bool], timeout: float | None = 5.0) -> bool:
        """Block until ``predicate(self)`` is true (checked on every new notification); False
        if ``timeout`` passed first. For updates that arrive while a call is still running
        (e.g. wait for the first chunk, then cancel)."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout)

    def __len__(self) -> int:
        with self._cond:
            return len(self._notifications)


def _chunks_text(chunks: Iterable[schema.ContentChunk]) -> str:
    return "".join(c.content.text for c in chunks if isinstance(c.content, schema.TextContent))


# ---------------------------------------------------------------------------------- permission

PermissionAnswer = Union[str, None, schema.RequestPermissionResponse]
"""A scripted answer: ``"allow"`` / ``"reject"`` (an option of that decision, "once" preferred),
an option kind (``"allow_always"``...), an option id, ``None`` or ``"cancel"`` (cancelled), or a
complete response."""

_DECISIONS = {
    "allow": (schema.PermissionOptionKinds.ALLOW_ONCE, schema.PermissionOptionKinds.ALLOW_ALWAYS),
    "reject": (schema.PermissionOptionKinds.REJECT_ONCE, schema.PermissionOptionKinds.REJECT_ALWAYS),
}


class ScriptedPermissions:
    """A ``session/request_permission`` handler answering from a script, in order.

    ``ScriptedPermissions("allow", "reject")`` allows the first request and rejects the
    second; once the script is used up every request gets ``then`` (default ``"reject"``).
    ``requests`` keeps every request received, for assertions::

        permissions = ScriptedPermissions("allow")
        builder.request_permission_handler(permissions)
        ...
        assert permissions.requests[0].tool_call.kind == "edit"

    An answer that matches no offered option fails the request with -32602, so a test learns
    at once that the agent offered something unexpected.
    """

    def __init__(self, *answers: PermissionAnswer, then: PermissionAnswer = "reject") -> None:
        self._lock = threading.Lock()
        self._answers = list(answers)
        self._then = then
        self.requests: list[schema.RequestPermissionRequest] = []

    def __call__(self, request: schema.RequestPermissionRequest, ctx: Any) -> schema.RequestPermissionResponse:
        with self._lock:
            self.requests.append(request)
            answer = self._answers.pop(0) if self._answers else self._then
        if isinstance(answer, schema.RequestPermissionResponse):
            return answer
        if answer is None or answer == "cancel":
            return schema.RequestPermissionResponse(outcome=schema.CancelledPermissionOutcome())
        option = _find_option(request.options, answer)
        if option is None:
            offered = [f"{o.option_id} ({o.kind})" for o in request.options]
            raise RequestError(INVALID_PARAMS, f"scripted answer {answer!r} matches none of {offered}")
        return schema.RequestPermissionResponse(
            outcome=schema.SelectedPermissionOutcome(option_id=option.option_id)
        )

    @property
    def remaining(self) -> int:
        """How many scripted answers are left."""
        with self._lock:
            return len(self._answers)


def _find_option(options: list[schema.PermissionOption], answer: str) -> schema.PermissionOption | None:
    for kind in _DECISIONS.get(answer, (answer,)):
        for option in options:
            if option.kind == kind:
                return option
    for option in options:
        if option.option_id == answer:
            return option
    return None


# ---------------------------------------------------------------------------------- files


class MemoryFiles:
    """``fs/read_text_file`` and ``fs/write_text_file`` handlers over a dict (path -> text).

    ::

        files = MemoryFiles({"/project/main.py": "print('hi')\\n"})
        builder.read_text_file_handler(files.read_text_file)
        builder.write_text_file_handler(files.write_text_file)
        ...
        assert files["/project/main.py"] == "print('bye')\\n"

    Reads honour ``line`` (1-based) and ``limit``; a missing file is -32002 (resource not
    found), a relative path -32602. ``writes`` lists every ``(path, content)`` written.
    """

    def __init__(self, files: Mapping[str, str] | None = None) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, str] = dict(files or {})
        self.writes: list[tuple[str, str]] = []

    def read_text_file(self, request: schema.ReadTextFileRequest, ctx: Any) -> schema.ReadTextFileResponse:
        """The ``fs/read_text_file`` handler."""
        _check_absolute(request.path)
        with self._lock:
            text = self._files.get(request.path)
        if text is None:
            raise RequestError.resource_not_found(request.path)
        if request.line is not None or request.limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((request.line or 1) - 1, 0)
            end = None if request.limit is None else start + request.limit
            text = "".join(lines[start:end])
        return schema.ReadTextFileResponse(content=text)

    def write_text_file(
        self, request: schema.WriteTextFileRequest, ctx: Any
    ) -> schema.WriteTextFileResponse:
        """The ``fs/write_text_file`` handler."""
        _check_absolute(request.path)
        with self._lock:
            self._files[request.path] = request.content
            self.writes.append((request.path, request.content))
        return schema.WriteTextFileResponse()

    def register(self, builder: SyncClientBuilder) -> SyncClientBuilder:
        """Register both handlers on ``builder``; returns it."""
        return builder.read_text_file_handler(self.read_text_file).write_text_file_handler(self.write_text_file)

    def __getitem__(self, path: str) -> str:
        with self._lock:
            return self._files[path]

    def __contains__(self, path: object) -> bool:
        with self._lock:
            return path in self._files

    def snapshot(self) -> dict[str, str]:
        """A copy of every file's text."""
        with self._lock:
            return copy.copy(self._files)


def _check_absolute(path: str) -> None:
    if not path.startswith("/"):
        raise RequestError(INVALID_PARAMS, f"the path must be absolute: {path!r}")
