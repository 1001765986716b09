"""Raw, typed agent -> client calls over the threaded runtime: one method per client-side ACP
method (the checks and the interpretation of answers live in :mod:`acp.agent.client_calls`).

Every call first checks what the client advertised on *this* connection and raises
:class:`~acp.errors.CapabilityError` before anything is sent. A proxy bound to a prompt turn
(``ctx.client``) also wakes on cancellation: the pending request is abandoned (the client gets
``$/cancel_request``) and :class:`~acp.errors.RequestCancelledError` is raised, except for
``session/request_permission``, which resolves as the ``cancelled`` outcome as the spec says.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .. import schema
from ..connection import Connection
from ..effects import Send, run
from ..errors import RequestCancelledError
from .cancellation import CancelToken
from .client_calls import _UNBOUNDED, DEFAULT, CallsToClient, Gate, Notifier, Steps, T
from .state import ConnectionState

if TYPE_CHECKING:
    from ..schema import unstable as _unstable

__all__ = ["ClientProxy"]

_log = logging.getLogger("acp.agent")


class ClientProxy(CallsToClient):
    """The client's methods, typed, for one connection (and optionally one prompt turn)."""

    def __init__(
        self,
        state: ConnectionState,
        token: CancelToken | None = None,
        gate: Gate | None = None,
        connection: Notifier | None = None,
        cancellable: bool = True,
    ) -> None:
        super().__init__(state, gate, connection, cancellable and token is not None)
        self._token = token

    def uncancellable(self) -> ClientProxy:
        """The same proxy without cancellation, for clean-up calls that must go out even after
        the turn was cancelled (releasing a terminal)."""
        return ClientProxy(self._state, None, self._gate, self._connection, cancellable=False)

    # ---------------------------------------------------------------- plumbing

    def _run(self, steps: Steps[T]) -> T:
        """Drive ``steps`` to the end, blocking on each call."""
        return run(steps, self._perform)

    def _perform(self, call: Send) -> Any:
        method = call.method
        token = self._token
        if token is not None and call.refuse and token.is_cancelled:
            raise RequestCancelledError(f"{method}: the prompt turn was cancelled")
        connection: Connection = self._connection  # type: ignore[assignment]  # the threaded one
        # call.timeout_for(), inlined: once per agent -> client call.
        timeout = call.timeout
        if timeout is DEFAULT:
            timeout = None if method in _UNBOUNDED else connection.request_timeout
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("-> %s %s", method, schema.encode(call.params).decode(errors="replace"))
        try:
            # A cancelled turn abandons the call ($/cancel_request; a late answer is dropped);
            # an answer that arrived first still wins.
            return connection.request(
                method, call.params, call.result_type, timeout=timeout, cancel=token if call.abandon else None
            )
        except RequestCancelledError:
            raise RequestCancelledError(f"{method}: the prompt turn was cancelled") from None

    # ---------------------------------------------------------------- session

    def request_permission(self, request: schema.RequestPermissionRequest) -> schema.RequestPermissionResponse:
        """``session/request_permission``; resolves as the ``cancelled`` outcome if the turn is
        cancelled while waiting (the request is then abandoned with ``$/cancel_request``)."""
        return self._run(self._request_permission(request))

    # ---------------------------------------------------------------- files

    def read_text_file(self, request: schema.ReadTextFileRequest) -> schema.ReadTextFileResponse:
        """``fs/read_text_file`` (needs ``fs.readTextFile``)."""
        result: schema.ReadTextFileResponse = self._perform(self._read_text_file_call(request))  # no steps to drive
        return result

    def write_text_file(self, request: schema.WriteTextFileRequest) -> schema.WriteTextFileResponse:
        """``fs/write_text_file`` (needs ``fs.writeTextFile``)."""
        return self._run(self._write_text_file(request))

    # ---------------------------------------------------------------- terminals

    def create_terminal(self, request: schema.CreateTerminalRequest) -> schema.CreateTerminalResponse:
        """``terminal/create`` (needs ``terminal``); the id is then usable on this connection.

        Refused if the turn is already cancelled, but once sent it is not abandoned on cancel:
        the terminal may exist on the client, and only its id lets the agent release it.
        """
        return self._run(self._create_terminal(request))

    def terminal_output(self, request: schema.TerminalOutputRequest) -> schema.TerminalOutputResponse:
        """``terminal/output`` for a terminal created on this connection."""
        result: schema.TerminalOutputResponse = self._run(
            self._terminal_call("terminal/output", request, schema.TerminalOutputResponse)
        )
        return result

    def wait_for_terminal_exit(self, request: schema.WaitForTerminalExitRequest) -> schema.WaitForTerminalExitResponse:
        """``terminal/wait_for_exit`` (no timeout; wakes on the turn's cancellation)."""
        result: schema.WaitForTerminalExitResponse = self._run(
            self._terminal_call("terminal/wait_for_exit", request, schema.WaitForTerminalExitResponse)
        )
        return result

    def kill_terminal(self, request: schema.KillTerminalRequest) -> schema.KillTerminalResponse:
        """``terminal/kill`` for a terminal created on this connection."""
        result: schema.KillTerminalResponse = self._run(
            self._terminal_call("terminal/kill", request, schema.KillTerminalResponse)
        )
        return result

    def release_terminal(self, request: schema.ReleaseTerminalRequest) -> schema.ReleaseTerminalResponse:
        """``terminal/release``; the id is forgotten first, so a terminal is released once."""
        return self._run(self._release_terminal(request))

    # ---------------------------------------------------------------- elicitation

    def create_elicitation(self, request: schema.CreateElicitationRequest) -> schema.CreateElicitationResponse:
        """``elicitation/create`` (needs the client's elicitation capability for the mode)."""
        return self._run(self._create_elicitation(request))

    # ---------------------------------------------------------------- extensions, unstable

    def ext_request(self, method: str, params: Any = None, timeout: float | None = DEFAULT) -> Any:
        """An extension request (``method`` must start with ``_``); returns plain JSON values."""
        return self._run(self._ext_request(method, params, timeout))

    def message_mcp(self, request: _unstable.MessageMcpRequest) -> _unstable.MessageMcpResponse:
        """Unstable ``mcp/message`` (needs ``.unstable(True)``)."""
        return self._run(self._message_mcp(request))
