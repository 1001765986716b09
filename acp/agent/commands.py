"""``ctx.execute(...)``: run a command in a client terminal and always release the terminal.

ACP makes the agent responsible for releasing every terminal it creates. :func:`run_command`
releases exactly once on every path: normal exit, an error from the client, and a cancelled
turn (the wait is abandoned, the command killed, then the terminal released). It is written as
steps (see :mod:`acp.agent.client_calls`), so both runtimes run this one implementation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import schema
from ..errors import AcpError, RequestCancelledError
from .client_calls import CallsToClient, Steps

__all__ = ["CommandResult", "run_command"]

_log = logging.getLogger("acp.agent")


@dataclass(frozen=True)
class CommandResult:
    """The outcome of :meth:`PromptContext.execute`.

    ``exit_code`` is None when a signal ended the process (then ``signal`` names it);
    ``truncated`` says the client cut the output to its byte limit.
    """

    output: str
    exit_code: int | None
    signal: str | None = None
    truncated: bool = False

    @property
    def success(self) -> bool:
        """True when the command exited with code 0."""
        return self.exit_code == 0


def run_command(
    client: CallsToClient,
    session_id: str,
    argv: Sequence[str],
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    output_byte_limit: int | None = None,
) -> Steps[CommandResult]:
    """Create a terminal running ``argv``, wait for it, read its output, release it.

    Raises :class:`~acp.errors.RequestCancelledError` when the turn is cancelled while waiting
    (after killing and releasing the terminal).
    """
    if not argv:
        raise ValueError("execute() needs a command")
    created = yield from client._create_terminal(create_terminal_request(session_id, argv[0], argv[1:], cwd, env, output_byte_limit))
    terminal_id = created.terminal_id
    # Clean-up goes out even when the turn is cancelled: an uncancellable view of the proxy.
    cleanup = client.uncancellable()
    try:
        exited = yield from client._terminal_call(
            "terminal/wait_for_exit",
            schema.WaitForTerminalExitRequest(session_id=session_id, terminal_id=terminal_id),
            schema.WaitForTerminalExitResponse,
        )
        output = yield from client._terminal_call(
            "terminal/output",
            schema.TerminalOutputRequest(session_id=session_id, terminal_id=terminal_id),
            schema.TerminalOutputResponse,
        )
    except RequestCancelledError:
        kill = schema.KillTerminalRequest(session_id=session_id, terminal_id=terminal_id)
        yield from _best_effort("terminal/kill", cleanup._terminal_call("terminal/kill", kill, schema.KillTerminalResponse))
        raise
    finally:
        release = schema.ReleaseTerminalRequest(session_id=session_id, terminal_id=terminal_id)
        yield from _best_effort("terminal/release", cleanup._release_terminal(release))
    exit_code = exited.exit_code
    signal = exited.signal
    if exit_code is None and signal is None and output.exit_status is not None:
        exit_code, signal = output.exit_status.exit_code, output.exit_status.signal
    return CommandResult(output.output, exit_code, signal, output.truncated)


def create_terminal_request(
    session_id: str,
    command: str,
    args: Sequence[str],
    cwd: str | None,
    env: Mapping[str, str] | None,
    output_byte_limit: int | None,
) -> schema.CreateTerminalRequest:
    """The ``terminal/create`` params (``env`` as a mapping)."""
    return schema.CreateTerminalRequest(
        session_id=session_id,
        command=command,
        args=list(args),
        cwd=cwd,
        env=[schema.EnvVariable(name=k, value=v) for k, v in env.items()] if env else None,
        output_byte_limit=output_byte_limit,
    )


def _best_effort(what: str, steps: Steps[Any]) -> Steps[None]:
    # Clean-up must not hide the error that got us here (or turn a result into an error).
    try:
        yield from steps
    except AcpError as exc:
        _log.debug("%s during clean-up failed: %r", what, exc)
