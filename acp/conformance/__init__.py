"""``acp check``: a conformance check of any ACP agent, spawned (stdio) or remote (a URL).

The checker spawns the agent (:class:`~acp.transport.ProcessTransport`), or connects to it when
given an :class:`~acp.client.settings.AgentSettings` with a URL, and talks to it as a
deliberately minimal client: it writes raw JSON-RPC lines (so that it can send string ids,
garbage, batches and huge messages) and reads every line the agent writes through the SDK's
sans-I/O layer (:mod:`acp.rpc`). Every message the agent sends is checked against the schema
with the strict decoders of :mod:`acp.schema`; a message that only the lenient path accepts (an
unknown union tag, a value the schema's leniency hints tolerate) is a warning. The checker
advertises no ``fs``, ``terminal`` or ``elicitation`` capability, so the agent must never call
those methods.

Every check has an id, a **tier** and a status:

* tier ``required``: what every agent must do (the handshake, JSON-RPC, sessions with unique
  ids, prompt turns, cancellation, the schema of every message);
* tier ``capability:<name>``: what an agent must do once it advertises ``<name>`` in its
  ``initialize`` answer (or, for ``modes`` and ``configOptions``, in its ``session/new``
  answer): load with history replay, list with paging, resume, close (which must cancel a
  running turn), delete, modes, config options, image/audio/embedded-context prompts,
  additional directories, authenticate, logout. Not advertised: ``N/A``;
* tier ``advisory``: robustness and the spec's SHOULDs (garbage input, a 3 MiB prompt, end of
  input, deleting an unknown session, an invalid list cursor). A finding there is a ``WARN``,
  never a ``FAIL``.

Statuses: ``PASS``, ``FAIL``, ``WARN``, ``SKIP`` (nothing to look at, with the reason) and
``N/A`` (the capability is not advertised). The agent is NOT CONFORMING iff a required or
capability check failed. Three agent processes are used: the main run, one for version
negotiation with an unsupported version, and one for robustness (malformed input, stdin
closed), so that a crash in one group does not hide the results of another. Each failing or
warning check keeps the wire lines of its exchange (:attr:`CheckResult.transcript`), which
:meth:`Report.to_json` writes out.

Use it from the command line (``acp check -- my-agent --stdio``) or from Python::

    report = run_checks(["my-agent", "--stdio"], cancel_prompt="write a long story")
    assert report.conforming, report.render()
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Union

from ..errors import ConnectionClosedError
from ..transport import ProcessTransport
from ..transport.base import Transport
from ._checks import _Checker
from .report import (
    CHECKS,
    DEFAULT_TIMEOUT,
    EXIT_CONFORMING,
    EXIT_ERROR,
    EXIT_NOT_CONFORMING,
    LARGE_PROMPT_BYTES,
    TIERS,
    CheckResult,
    Report,
    Status,
    WireLine,
    bounded,
    format_result,
    tier_of,
)

if TYPE_CHECKING:
    from ..client.settings import AgentSettings

__all__ = [
    "run_checks", "CheckResult", "Report", "Status", "WireLine", "CHECKS", "TIERS", "bounded", "format_result",
    "tier_of", "DEFAULT_TIMEOUT", "LARGE_PROMPT_BYTES", "EXIT_CONFORMING", "EXIT_NOT_CONFORMING", "EXIT_ERROR",
]


def run_checks(
    argv: Union[Sequence[str], AgentSettings],
    *,
    cancel_prompt: str | None = None,
    prompt: str = "hello",
    timeout: float = DEFAULT_TIMEOUT,
    cwd: str | None = None,
    auth_method: str | None = None,
    out: IO[str] | None = None,
) -> Report:
    """Check the agent started by ``argv``; returns the :class:`Report`.

    ``argv`` may also be an :class:`~acp.client.settings.AgentSettings`: its command (spawned in
    its ``cwd``) or its URL (a remote agent, opened once per run of checks; ``robust.stdin_closed``
    is then skipped).

    ``cancel_prompt``: a prompt that keeps the agent busy, for the cancellation checks
    (``prompt.cancel``, ``close.cancels_turn``; skipped without it). ``prompt``: the text of
    ordinary prompts. ``timeout``: seconds to wait for each answer. ``cwd``: the session folder
    (default: a temporary one). ``auth_method``: send ``authenticate`` with this method id right
    after ``initialize``. ``out``: where to print each result as it comes (None: print nothing).
    """
    import shlex

    from ..client.settings import AgentSettings

    if isinstance(argv, AgentSettings):
        settings = argv
        open_transport: Callable[[], Transport] = settings.open_transport
        agent = settings.describe()
    else:
        command = list(argv)
        open_transport = lambda: ProcessTransport(command)  # noqa: E731
        agent = shlex.join(command)
    report = Report(agent=agent)

    def emit(result: CheckResult) -> None:
        report.results.append(result)
        if out is not None:
            out.write(format_result(result) + "\n")
            out.flush()

    with tempfile.TemporaryDirectory(prefix="acp-check-") as tmp:
        checker = _Checker(
            open_transport,
            cancel_prompt=cancel_prompt,
            prompt=prompt,
            timeout=timeout,
            cwd=os.path.abspath(cwd) if cwd is not None else os.path.realpath(tmp),
            auth_method=auth_method,
            emit=emit,
        )
        try:
            checker.run()
        except FileNotFoundError as exc:
            report.error = str(exc)
            emit(CheckResult("spawn", "FAIL", bounded(str(exc))))
        except ConnectionClosedError as exc:  # RemoteConnectionError: unreachable, refused
            report.error = str(exc)
            emit(CheckResult("connect", "FAIL", bounded(str(exc))))
    return report
