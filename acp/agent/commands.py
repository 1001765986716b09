"""``ctx.execute(...)``: run a command in a client terminal and always release the terminal.

ACP makes the agent responsible for releasing every terminal it creates. :func:`run_command`
releases exactly once on every path: normal exit, an error from the client, and a cancelled
turn (the wait is abandoned, the command killed, then the terminal released).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .. import schema
from ..errors import AcpError, RequestCancelledError
from .client_proxy import ClientProxy

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
    client: ClientProxy,
    session_id: str,
    argv: Sequence[str],
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    output_byte_limit: int | None = None,
) -> CommandResult:
    """Create a terminal running ``argv``, wait for it, read its output, release it.

    Raises :class:`~acp.errors.RequestCancelledError` when the turn is cancelled while waiting
    (after killing and releasing the terminal).
    """
    if not argv:
        raise ValueError("execute() needs a command")
    created = client.create_terminal(
        schema.CreateTerminalRequest(
            session_id=session_id,
            command=argv[0],
            args=list(argv[1:]),
            cwd=cwd,
            env=[schema.EnvVariable(name=k, value=v) for k, v in env.items()] if env else None,
            output_byte_limit=output_byte_limit,
        )
    )
    terminal_id = created.terminal_id
    # Clean-up goes out even when the turn is cancelled: an uncancellable view of the proxy.
    cleanup = client.uncancellable()
    try:
        exited = client.wait_for_terminal_exit(
            schema.WaitForTerminalExitRequest(session_id=session_id, terminal_id=terminal_id)
        )
        output = client.terminal_output(
            schema.TerminalOutputRequest(session_id=session_id, terminal_id=terminal_id)
        )
    except RequestCancelledError:
        _best_effort(
            "terminal/kill",
            lambda: cleanup.kill_terminal(
                schema.KillTerminalRequest(session_id=session_id, terminal_id=terminal_id)
            ),
        )
        raise
    finally:
        _best_effort(
            "terminal/release",
            lambda: cleanup.release_terminal(
                schema.ReleaseTerminalRequest(session_id=session_id, terminal_id=terminal_id)
            ),
        )
    exit_code = exited.exit_code
    signal = exited.signal
    if exit_code is None and signal is None and output.exit_status is not None:
        exit_code, signal = output.exit_status.exit_code, output.exit_status.signal
    return CommandResult(output.output, exit_code, signal, output.truncated)


def _best_effort(what: str, call: Callable[[], object]) -> None:
    # Clean-up must not hide the error that got us here (or turn a result into an error).
    try:
        call()
    except AcpError as exc:
        _log.debug("%s during clean-up failed: %r", what, exc)
