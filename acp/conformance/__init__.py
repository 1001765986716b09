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

Every check has an id, a **tier**, the spec sentence it enforces and, where the official ACP TCK
(agentclientprotocol/acp-tck) has the same requirement, its ids (:data:`CHECKS`). The tier comes
from the spec's own word, with the TCK's names:

* ``mandatory``: the spec says MUST (the handshake, JSON-RPC envelopes, sessions with unique
  ids, prompt turns, cancellation, the schema of every message);
* ``capability:<name>``: the MUSTs that apply once the agent advertises ``<name>`` in its
  ``initialize`` answer (or, for ``modes`` and ``configOptions``, in its ``session/new``
  answer): load with history replay, list with paging, resume, close (which must cancel a
  running turn), delete, modes, config options, image/audio/embedded-context prompts,
  additional directories, authenticate, logout. Not advertised: ``N/A``;
* ``advisory``: the spec says SHOULD, or robustness it does not demand (an unknown method's
  -32601, garbage input, a 3 MiB prompt, end of input, deleting an unknown session, an invalid
  list cursor). A finding there is a ``WARN``, never a ``FAIL``;
* ``informational``: the spec says MAY (a prompt on an unknown session, accepting a mode
  switch). What the agent did is reported, an unexpected answer as ``INFO``.

Statuses: ``PASS``, ``FAIL``, ``WARN``, ``INFO``, ``SKIP`` (nothing to look at, with the reason),
``N/A`` (the capability is not advertised) and ``NOT CHECKED``: the agent refused a session or
a turn for lack of credentials or network (``auth_required``, or an error whose message says a
login, a key or the network is missing), so what the check judges was never reached. Verdicts:
NOT CONFORMING (exit 1) iff a mandatory or capability check failed; else NOT CHECKED (exit 3)
if one of those could not be reached, or the agent could not be started or reached at all;
else CONFORMING (exit 0). Three agent processes are used: the main run, one for version
negotiation with an unsupported version, and one for robustness (malformed input, stdin
closed), so that a crash in one group does not hide the results of another. Each failing,
warning or unreached check keeps the wire lines of its exchange
(:attr:`CheckResult.transcript`), which :meth:`Report.to_json` writes out, and the report keeps
the tail of the agent's stderr (:attr:`Report.stderr`).

Use it from the command line (``acp check -- my-agent --stdio``) or from Python::

    report = run_checks(["my-agent", "--stdio"], cancel_prompt="write a long story")
    assert report.conforming, report.render()
"""

from __future__ import annotations

import fnmatch
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
    EXIT_NOT_CHECKED,
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
    "EXIT_NOT_CHECKED",
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
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
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
    ``only`` / ``skip``: check ids or shell patterns (``prompt.*``): report just those checks /
    all but those (the checks they build on still run; the large prompt, the version run and the
    robustness run are not even started when none of their checks is wanted).
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

    def selected(name: str) -> bool:
        return (not only or any(fnmatch.fnmatchcase(name, p) for p in only)) and not any(
            fnmatch.fnmatchcase(name, p) for p in skip
        )

    def emit(result: CheckResult) -> None:
        if result.name in CHECKS and not selected(result.name):
            return
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
            selected=selected,
        )
        try:
            checker.run()
        except FileNotFoundError as exc:
            report.error = str(exc)
            emit(CheckResult("spawn", "FAIL", bounded(str(exc))))
        except ConnectionClosedError as exc:  # RemoteConnectionError: unreachable, refused
            report.error = str(exc)
            emit(CheckResult("connect", "FAIL", bounded(str(exc))))
        report.blocked = checker.blocked
        # The main run's stderr says most about a failure, else the version run's; not the
        # robustness run's, which is about the garbage the checker sent it.
        runs = sorted((p for p in checker.peers if p.name != "robustness"), key=lambda peer: peer.name != "main")
        report.stderr = next((tail for peer in runs if (tail := _stderr_tail(peer.transport))), "")
    return report


def _stderr_tail(transport: Transport) -> str:
    return transport.stderr_tail if isinstance(transport, ProcessTransport) else ""
