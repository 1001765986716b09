"""``acp replay``: a recording played back as an agent on stdio, or as a client driving an agent.

``acp replay RECORDING`` serves the recorded agent's side on stdin/stdout, so any client (an
editor's ``agent_servers`` entry, acpx, a test) can be pointed at it; divergences go to stderr
(and to ``--report FILE`` as JSONL) and the exit status is 1 when there was any.
``acp replay --client RECORDING -- AGENT...`` spawns the agent and plays the recorded client's
side against it; it prints each divergence and a summary, and exits 1 when anything diverged.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import IO

from .replay_engine import DEFAULT_IGNORE, DEFAULT_TIMEOUT, Divergence

__all__ = ["add_arguments", "run"]

_log = logging.getLogger("acp.replay")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``acp replay`` (the command line's ``replay`` sub-parser)."""
    parser.add_argument("recording", metavar="RECORDING", help="the recording (acp tap JSONL, or JSON-RPC NDJSON)")
    parser.add_argument(
        "--client", action="store_true",
        help="play the recorded client against the agent command given after -- (default: serve the "
        "recorded agent on stdio)",
    )
    timing = parser.add_mutually_exclusive_group()
    timing.add_argument("--fast", action="store_true", help="send as fast as possible (default: recorded timing)")
    timing.add_argument(
        "--speed", type=float, default=1.0, metavar="X", help="replay the recorded delays X times faster (default: 1)"
    )
    parser.add_argument(
        "--lenient", action="store_true", help="log divergences and go on (default: stop at the first one)"
    )
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
        help="seconds to wait for a recorded message of the peer while a request is open (default: %(default)s)",
    )
    parser.add_argument(
        "--ignore", metavar="NAMES",
        help="comma-separated members never compared (default: " + ",".join(DEFAULT_IGNORE) + ")",
    )
    parser.add_argument("--cwd", metavar="DIR", help="with --client: the folder the recorded session folder becomes")
    parser.add_argument("--report", metavar="FILE", help="also append each divergence to FILE as a JSON line")


def run(args: argparse.Namespace, agent: Sequence[str], out: IO[str]) -> int:
    """Run ``acp replay`` with parsed ``args`` (``agent``: the command after ``--``)."""
    from .recording import load_recording
    from .replay import ReplayAgent, ReplayClient

    if args.speed is not None and not args.speed > 0:
        out.write("acp replay: --speed must be positive\n")
        return 2
    try:
        recording = load_recording(args.recording)
    except OSError as exc:
        sys.stderr.write(f"acp replay: cannot read {args.recording}: {exc.strerror or exc}\n")
        return 1
    options = {
        "strict": not args.lenient,
        "speed": None if args.fast else args.speed,
        "timeout": args.timeout,
        "ignore": tuple(n for n in args.ignore.split(",") if n) if args.ignore is not None else None,
    }
    report = _Reporter(args.report)
    try:
        if args.client:
            if not agent:
                out.write("acp replay --client needs the agent's command after --, e.g. "
                          "acp replay --client session.jsonl -- my-agent --stdio\n")
                return 2
            return _drive(ReplayClient(recording, cwd=args.cwd, **options), agent, report, out)
        if agent:
            out.write("acp replay serves the recorded agent on stdio and takes no command "
                      "(to drive an agent: acp replay --client RECORDING -- AGENT...)\n")
            return 2
        def on_divergence(divergence: Divergence) -> None:
            report.write(divergence)
            sys.stderr.write(f"acp replay: {divergence}\n")
            sys.stderr.flush()

        try:
            replay = ReplayAgent(recording, on_divergence=on_divergence, **options)
        except ValueError as exc:
            sys.stderr.write(f"acp replay: {exc}\n")
            return 1
        return replay.serve_stdio()
    finally:
        report.close()


def _drive(replay: object, agent: Sequence[str], report: _Reporter, out: IO[str]) -> int:
    from .replay import ReplayClient, ReplayDivergence

    assert isinstance(replay, ReplayClient)
    try:
        result = replay.run(*agent)
        divergences: list[Divergence | str] = list(result.divergences)
        summary = f"{result.sent} messages sent, {result.received} received"
    except ReplayDivergence as exc:
        divergences = exc.divergences
        summary = "stopped at the first divergence"
    except OSError as exc:
        out.write(f"acp replay: cannot start {agent[0]!r}: {exc.strerror or exc}\n")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    for divergence in divergences:
        if isinstance(divergence, Divergence):
            report.write(divergence)
        out.write(f"{divergence}\n")
    out.write(f"acp replay --client {replay.recording.source}: {summary}, {len(divergences)} divergences\n")
    out.flush()
    return 1 if divergences else 0


class _Reporter:
    """Appends divergences to the ``--report`` file, each as soon as it happens."""

    def __init__(self, path: str | None) -> None:
        self._file: IO[str] | None = None
        if path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, divergence: Divergence) -> None:
        if self._file is not None:
            self._file.write(json.dumps(divergence.to_json()) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

