"""What an ``async def`` handler of an :class:`~acp.agent.AsyncAgent` sees: the asyncio twins
of :class:`~acp.agent.ClientProxy`, :class:`~acp.agent.AgentRequestContext` and
:class:`~acp.agent.PromptContext`.

Same names, same checks, same steps (:mod:`acp.agent.client_calls`, the ``_PromptBase`` of
:mod:`acp.agent.context`): notifications stay plain methods (sending never blocks), requests
are ``async``. Cancellation is task cancellation: when the turn is cancelled, the handler's
task is, so the ``await`` in progress raises :class:`asyncio.CancelledError` (after the
helper's clean-up: a permission's tool call settled, a command's terminal killed and released).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from .. import schema
from ..effects import CancelledAfter, Send, run_awaiting
from ..errors import RequestCancelledError
from .cancellation import CancelToken
from .client_calls import DEFAULT, CallsToClient, Gate, Steps, T, timeout_for
from .commands import CommandResult
from .context import _ContextBase, _PromptBase, _ToolContent
from .state import Call, ConnectionState
from .turns import Turn

if TYPE_CHECKING:
    from ..aio.connection import AsyncConnection
    from ..schema import unstable as _unstable

__all__ = ["AsyncClientProxy", "AsyncAgentRequestContext", "AsyncPromptContext"]

_log = logging.getLogger("acp.agent")


class AsyncClientProxy(CallsToClient):
    """The client's methods, typed and awaitable, for one connection of an AsyncAgent (and
    optionally one prompt turn). Notifications (``session_update``, ...) are plain methods."""

    def __init__(
        self,
        state: ConnectionState,
        token: CancelToken | None = None,
        gate: Gate | None = None,
        cancellable: bool = True,
    ) -> None:
        super().__init__(state, gate, None, cancellable)
        self._token = token

    def uncancellable(self) -> AsyncClientProxy:
        """The same proxy for clean-up calls: they are neither refused once the turn is
        cancelled nor abandoned when the task is (they finish, then the cancellation goes on)."""
        return AsyncClientProxy(self._state, None, self._gate, cancellable=False)

    # ---------------------------------------------------------------- plumbing

    async def _run(self, steps: Steps[T]) -> T:
        """Drive ``steps`` to the end, awaiting each call. A cancelled task reaches the steps as
        :class:`RequestCancelledError` (as in the threaded runtime, so their clean-up is the
        same); its CancelledError is re-raised once they are done."""
        return await run_awaiting(steps, self._perform, _cancelled_as)

    def _perform(self, call: Send) -> Awaitable[Any]:
        # A plain function returning the awaitable (a refusal raises here, inside _run's try):
        # an abandonable call awaits the connection's request coroutine directly, one
        # coroutine frame less per call.
        method = call.method
        token = self._token
        if token is not None and call.refuse and token.is_cancelled:
            raise RequestCancelledError(f"{method}: the prompt turn was cancelled")
        connection = cast("AsyncConnection", self._connection)
        timeout = timeout_for(call, connection.request_timeout)
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("-> %s %s", method, schema.encode(call.params).decode(errors="replace"))
        request = connection.request(method, call.params, call.result_type, timeout=timeout)
        if call.abandon:
            # Cancelling this task sends $/cancel_request (the late answer is dropped).
            return request
        return self._unabandoned(request)

    @staticmethod
    async def _unabandoned(request: Coroutine[Any, Any, Any]) -> Any:
        task = asyncio.ensure_future(request)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            # The answer must not be lost (a created terminal's id): wait for it, once.
            try:
                value = await task
            except asyncio.CancelledError:
                raise exc from None
            raise CancelledAfter(exc, value) from None

    # ---------------------------------------------------------------- requests

    async def request_permission(self, request: schema.RequestPermissionRequest) -> schema.RequestPermissionResponse:
        """``session/request_permission`` (see :meth:`ClientProxy.request_permission`)."""
        return await self._run(self._request_permission(request))

    async def read_text_file(self, request: schema.ReadTextFileRequest) -> schema.ReadTextFileResponse:
        """``fs/read_text_file`` (needs ``fs.readTextFile``)."""
        return await self._run(self._read_text_file(request))

    async def write_text_file(self, request: schema.WriteTextFileRequest) -> schema.WriteTextFileResponse:
        """``fs/write_text_file`` (needs ``fs.writeTextFile``)."""
        return await self._run(self._write_text_file(request))

    async def create_terminal(self, request: schema.CreateTerminalRequest) -> schema.CreateTerminalResponse:
        """``terminal/create`` (needs ``terminal``); not abandoned once sent (see
        :meth:`ClientProxy.create_terminal`)."""
        return await self._run(self._create_terminal(request))

    async def terminal_output(self, request: schema.TerminalOutputRequest) -> schema.TerminalOutputResponse:
        """``terminal/output`` for a terminal created on this connection."""
        result: schema.TerminalOutputResponse = await self._run(
            self._terminal_call("terminal/output", request, schema.TerminalOutputResponse)
        )
        return result

    async def wait_for_terminal_exit(
        self, request: schema.WaitForTerminalExitRequest
    ) -> schema.WaitForTerminalExitResponse:
        """``terminal/wait_for_exit`` (no timeout; cancelled with the task)."""
        result: schema.WaitForTerminalExitResponse = await self._run(
            self._terminal_call("terminal/wait_for_exit", request, schema.WaitForTerminalExitResponse)
        )
        return result

    async def kill_terminal(self, request: schema.KillTerminalRequest) -> schema.KillTerminalResponse:
        """``terminal/kill`` for a terminal created on this connection."""
        result: schema.KillTerminalResponse = await self._run(
            self._terminal_call("terminal/kill", request, schema.KillTerminalResponse)
        )
        return result

    async def release_terminal(self, request: schema.ReleaseTerminalRequest) -> schema.ReleaseTerminalResponse:
        """``terminal/release``; the id is forgotten first, so a terminal is released once."""
        return await self._run(self._release_terminal(request))

    async def create_elicitation(self, request: schema.CreateElicitationRequest) -> schema.CreateElicitationResponse:
        """``elicitation/create`` (needs the client's elicitation capability for the mode)."""
        return await self._run(self._create_elicitation(request))

    async def ext_request(self, method: str, params: Any = None, timeout: float | None = DEFAULT) -> Any:
        """An extension request (``method`` must start with ``_``); returns plain JSON values."""
        return await self._run(self._ext_request(method, params, timeout))

    async def message_mcp(self, request: _unstable.MessageMcpRequest) -> _unstable.MessageMcpResponse:
        """Unstable ``mcp/message`` (needs ``.unstable(True)``)."""
        return await self._run(self._message_mcp(request))


class AsyncAgentRequestContext(_ContextBase):
    """The context of one ``async def`` request handler (every agent method but
    ``session/prompt``) of an AsyncAgent."""

    _client: AsyncClientProxy

    def __init__(self, state: ConnectionState, call: Call, token: CancelToken | None = None) -> None:
        self._event: asyncio.Event | None = None
        super().__init__(state, call, token)

    def _make_client(
        self, state: ConnectionState, token: CancelToken, gate: Gate | None
    ) -> AsyncClientProxy:
        return AsyncClientProxy(state, token, gate)

    @property
    def client(self) -> AsyncClientProxy:
        """Raw typed calls into the client (``await ctx.client.read_text_file(...)`` ...)."""
        return self._client

    @property
    def cancelled(self) -> asyncio.Event:
        """An :class:`asyncio.Event` set once this request (or prompt turn) is cancelled
        (``await ctx.cancelled.wait()``); the handler's task is cancelled at the same time."""
        event = self._event
        if event is None:
            event = self._event = asyncio.Event()
            self._token.on_cancel(event.set)  # cancels happen on the loop
        return event


class AsyncPromptContext(_PromptBase, AsyncAgentRequestContext):
    """A prompt turn as an ``async def`` handler sees it: the :class:`PromptContext` helpers,
    with the updates plain (``ctx.send_message(...)``) and the requests awaitable
    (``await ctx.read_file(...)``, ``await ctx.ask_permission(...)``, ``await ctx.execute(...)``)."""

    _client: AsyncClientProxy

    def __init__(self, state: ConnectionState, call: Call, turn: Turn, request: schema.PromptRequest) -> None:
        # The bases' __init__ inlined (one context per prompt): keep in step with
        # AsyncAgentRequestContext and _ContextBase.
        self._turn = turn
        self.session_id = request.session_id
        self.request = request
        self._event = None
        self._state = state
        self._call = call
        self._token = turn

    async def read_file(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        """The text of ``path`` (``fs/read_text_file``); raises on failure."""
        return await self._client._run(self._read_file(path, line, limit))

    async def try_read_file(self, path: str, line: int | None = None, limit: int | None = None) -> str | None:
        """Like :meth:`read_file`, but None when the client answers with an error."""
        return await self._client._run(self._try_read_file(path, line, limit))

    async def write_file(self, path: str, content: str) -> None:
        """Write ``content`` to ``path`` (``fs/write_text_file``)."""
        await self._client._run(self._write_file(path, content))

    async def ask_permission(
        self,
        action: str,
        kind: str = schema.ToolKinds.OTHER,
        *,
        content: _ToolContent | None = None,
        locations: Sequence[schema.ToolCallLocation] | None = None,
        raw_input: Any = None,
        name: str | None = None,
    ) -> bool:
        """Ask the user to allow ``action``: True only if allowed (see
        :meth:`PromptContext.ask_permission`); a cancelled task settles the tool call first."""
        return await self._client._run(self._ask_permission(action, kind, content, locations, raw_input, name))

    async def ask_choice(self, question: str, *options: str, name: str | None = None) -> str | None:
        """Ask the user to pick one of ``options``; the chosen text, or None when refused."""
        return await self._client._run(self._ask_choice(question, options, name))

    async def elicit(
        self,
        message: str,
        requested_schema: schema.ElicitationSchema | Mapping[str, Any],
        *,
        tool_call_id: str | None = None,
    ) -> schema.CreateElicitationResponse:
        """Ask the user for structured input (form-mode ``elicitation/create``)."""
        return await self._client._run(self._elicit(message, requested_schema, tool_call_id))

    async def execute(
        self,
        *argv: str,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        output_byte_limit: int | None = None,
    ) -> CommandResult:
        """Run a command in a client terminal and wait for it; the terminal is released
        exactly once on every path (a cancelled task kills and releases it first)."""
        return await self._client._run(self._execute(argv, cwd, env, output_byte_limit))

    async def create_terminal(
        self,
        command: str,
        *args: str,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        output_byte_limit: int | None = None,
    ) -> str:
        """``terminal/create``; returns the terminal id (release it with :meth:`release_terminal`)."""
        return await self._client._run(self._create_terminal(command, args, cwd, env, output_byte_limit))

    async def terminal_output(self, terminal_id: str) -> schema.TerminalOutputResponse:
        """``terminal/output``: the output so far and, once exited, the exit status."""
        return await self._client._run(self._terminal_output(terminal_id))

    async def wait_for_terminal_exit(self, terminal_id: str) -> schema.WaitForTerminalExitResponse:
        """``terminal/wait_for_exit``: until the command exits (or the task is cancelled)."""
        return await self._client._run(self._wait_for_terminal_exit(terminal_id))

    async def kill_terminal(self, terminal_id: str) -> None:
        """``terminal/kill``: stop the command, keep the terminal."""
        await self._client._run(self._kill_terminal(terminal_id))

    async def release_terminal(self, terminal_id: str) -> None:
        """``terminal/release``: kill the command if running and free the terminal; goes out
        even after the turn was cancelled."""
        await self._client._run(self._release_terminal(terminal_id))


def _cancelled_as(call: Send) -> RequestCancelledError:
    return RequestCancelledError(f"{call.method}: the prompt turn was cancelled")
