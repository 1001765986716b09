"""Recorded sessions as test doubles: :class:`ReplayAgent` answers a client the way a recorded
agent did, :class:`ReplayClient` drives an agent the way a recorded client did.

A recording is what ``acp tap`` (or ``acp chat --record``, a client's ``wire_tap``, or any
plain JSON-RPC NDJSON) wrote; see :mod:`acp.replay_engine` for how the messages are matched,
timed and compared, and :mod:`acp.wirediff` for how ids and folders are mapped.

**One ReplayAgent for both client runtimes.** A replay sits on the far side of a byte pipe, so
the client's runtime does not matter: :meth:`ReplayAgent.transport` gives a
:class:`~acp.client.SyncClient` its end, :meth:`ReplayAgent.async_transport` an
:class:`~acp.AsyncClient`'s (an asyncio stream over a socket pair), and
:meth:`ReplayAgent.command` is the command line of a real agent process that any client (the
TypeScript SDK's, an editor) can spawn. The replay itself always runs on threads of its own
(one :class:`~acp.connection.Connection` per client), so there is one engine, tested once,
instead of a sync and an async twin that could drift apart::

    replay = ReplayAgent.from_recording("tests/sessions/hello.jsonl", speed=None)
    with acp.SyncClient.builder().transport(replay.transport()).build() as client:
        ...
    replay.verify()          # raises ReplayDivergence (an AssertionError) if the client diverged
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .connection import Connection
from .errors import ConnectionClosedError
from .recording import AGENT, CLIENT, Recording, load_recording
from .replay_engine import DEFAULT_IGNORE, DEFAULT_TIMEOUT, Divergence, Player, ReplayDivergence
from .transport import FdTransport, ProcessTransport, StdioTransport, memory_pair
from .transport.base import Transport
from .wirediff import Substitutions

__all__ = ["ReplayAgent", "ReplayClient", "ReplayDivergence", "Divergence", "ReplayReport", "DEFAULT_IGNORE"]

_CLOSE_TIMEOUT = 5.0


class _Options:
    """What both replays are configured with."""

    def __init__(
        self, strict: bool, speed: float | None, timeout: float, ignore: Iterable[str] | None
    ) -> None:
        if speed is not None and not speed > 0:
            raise ValueError(f"speed must be positive (or None: as fast as possible), not {speed!r}")
        self.strict = strict
        self.speed = speed
        self.timeout = timeout
        self.ignore = tuple(DEFAULT_IGNORE if ignore is None else ignore)


class ReplayAgent:
    """A fake agent that answers clients the way the recorded agent did.

    Each client connection replays the whole recording once, on its own threads. ``strict``
    (default) stops at the first divergence: the client's open requests are answered with an
    error that shows it, and :meth:`verify` raises :class:`ReplayDivergence`; ``strict=False``
    logs divergences (logger ``acp.replay``) and goes on. ``speed``: 1.0 replays the recorded
    delays, 2.0 twice as fast, None as fast as possible. ``timeout``: seconds to wait for a
    recorded client message while a request is open. ``ignore``: members never compared
    (default :data:`DEFAULT_IGNORE`). ``on_divergence(divergence)`` is called at each one, as
    it happens (under the replay's lock: keep it short).
    """

    def __init__(
        self,
        recording: Recording,
        *,
        strict: bool = True,
        speed: float | None = 1.0,
        timeout: float = DEFAULT_TIMEOUT,
        ignore: Iterable[str] | None = None,
        on_divergence: Callable[[Divergence], None] | None = None,
    ) -> None:
        if not any(m.sender == AGENT for m in recording.messages):
            raise ValueError(f"{recording.source}: the recording has no message from an agent")
        self.recording = recording
        self._options = _Options(strict, speed, timeout, ignore)
        self._lock = threading.Lock()
        self._connections: list[tuple[Connection, Player]] = []
        self._report_dir: str | None = None
        self._closed = False
        self._on_divergence = on_divergence

    @classmethod
    def from_recording(cls, path: str | os.PathLike[str], **options: Any) -> ReplayAgent:
        """Read the recording at ``path`` (``acp tap`` JSONL or plain JSON-RPC NDJSON);
        ``options`` as for the constructor."""
        return cls(load_recording(path), **options)

    # ------------------------------------------------------------------ ways in

    def serve(self, transport: Transport) -> Player:
        """Replay to the client at the other end of ``transport`` (on threads of its own);
        the :class:`~acp.replay_engine.Player` of that connection."""
        return self._serve(transport)[1]

    def _serve(self, transport: Transport) -> tuple[Connection, Player]:
        options = self._options
        player = Player(
            self.recording, AGENT, strict=options.strict, speed=options.speed,
            timeout=options.timeout, ignore=options.ignore, on_divergence=self._on_divergence,
        )
        connection = Connection(transport, request_timeout=None, name="acp-replay-agent")
        with self._lock:
            if self._closed:
                transport.close()
                raise ConnectionClosedError("the replay agent is closed")
            self._connections.append((connection, player))
        player.attach(connection)
        connection.start()
        player.start()
        return connection, player

    def transport(self) -> Transport:
        """A new connection's client end, for ``SyncClient.builder().transport(...)``."""
        ours, theirs = memory_pair()
        self.serve(theirs)
        return ours

    async def async_transport(self) -> Any:
        """A new connection's client end, for ``AsyncClient.builder().transport(...)`` (an
        :class:`~acp.aio.transport.AsyncTransport`; await it on the client's loop)."""
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        try:
            self.serve(FdTransport(os.dup(theirs.fileno()), os.dup(theirs.fileno()), description="replay"))
        finally:
            theirs.close()  # the transport has its own descriptors
        reader, writer = await asyncio.open_connection(sock=ours)
        return _StreamTransport(reader, writer)

    def serve_stdio(self) -> int:
        """Replay to the client on this process's stdin/stdout until it goes away; 0 when
        nothing diverged, else 1 (each divergence is logged)."""
        connection, player = self._serve(StdioTransport())
        connection.wait_closed()
        connection.close(timeout=_CLOSE_TIMEOUT)
        player.close()
        return 1 if player.divergences else 0

    def command(self) -> list[str]:
        """The command line of an agent process replaying this recording (``acp replay``),
        for any client: ``SyncClient.builder().agent_process(*replay.command())``,
        ``AsyncClient`` likewise, another SDK's client, an editor. Divergences of such a
        process are read back by :meth:`verify` (it reports them to a file of this object)."""
        with self._lock:
            if self._report_dir is None:
                self._report_dir = tempfile.mkdtemp(prefix="acp-replay-")
            report = os.path.join(self._report_dir, f"report-{len(os.listdir(self._report_dir))}.jsonl")
            open(report, "w").close()  # noqa: SIM115 - created empty: verify() reads what exists
        argv = [sys.executable, "-m", "acp", "replay", self.recording.source, "--report", report]
        options = self._options
        argv += ["--fast"] if options.speed is None else ["--speed", repr(options.speed)]
        argv += ["--timeout", repr(options.timeout)]
        if not options.strict:
            argv.append("--lenient")
        if options.ignore != DEFAULT_IGNORE:
            argv += ["--ignore", ",".join(options.ignore)]
        return argv

    # ------------------------------------------------------------------ results

    @property
    def divergences(self) -> list[str]:
        """Every divergence so far, in words, of every connection (and process)."""
        with self._lock:
            found = [str(d) for _, player in self._connections for d in player.divergences]
        return found + self._reported()

    def verify(self) -> None:
        """Raise :class:`ReplayDivergence` if any client diverged from the recording (in this
        process or in a :meth:`command` process)."""
        with self._lock:
            found: list[Divergence | str] = [d for _, player in self._connections for d in player.divergences]
        found += self._reported()
        if found:
            raise ReplayDivergence(found, self.recording.source)

    def close(self) -> None:
        """Close every connection and wait for its threads (divergences are kept for
        :meth:`verify`); idempotent."""
        with self._lock:
            self._closed = True
            connections = list(self._connections)
        for connection, player in connections:
            connection.close(timeout=_CLOSE_TIMEOUT)
            player.close()

    def cleanup(self) -> None:
        """Remove the report folder of :meth:`command` processes (after :meth:`verify`)."""
        if self._report_dir is not None:
            shutil.rmtree(self._report_dir, ignore_errors=True)
            self._report_dir = None

    def _reported(self) -> list[str]:
        report_dir = self._report_dir
        texts: list[str] = []
        if report_dir is not None and os.path.isdir(report_dir):
            for name in sorted(os.listdir(report_dir)):
                with open(os.path.join(report_dir, name), encoding="utf-8") as file:
                    texts += [json.loads(line)["text"] for line in file if line.strip()]
        return texts

    def __enter__(self) -> ReplayAgent:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
        self.cleanup()


@dataclass
class ReplayReport:
    """What a :class:`ReplayClient` run did."""

    sent: int  # recorded client messages sent
    received: int  # recorded agent messages that came (or were given up as missing)
    divergences: list[Divergence] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing diverged."""
        return not self.divergences


class ReplayClient:
    """Drives an agent with the recorded client's messages, answers the agent's requests as
    the recorded client did, and reports where the agent diverged.

    ``cwd``: the folder the recorded session folder becomes (default: the recorded one);
    ``strict``, ``speed``, ``timeout`` and ``ignore`` as for :class:`ReplayAgent`, except that
    ``timeout`` bounds every wait for the agent.
    """

    def __init__(
        self,
        recording: Recording,
        *,
        cwd: str | os.PathLike[str] | None = None,
        strict: bool = True,
        speed: float | None = 1.0,
        timeout: float = DEFAULT_TIMEOUT,
        ignore: Iterable[str] | None = None,
    ) -> None:
        if not any(m.sender == CLIENT for m in recording.messages):
            raise ValueError(f"{recording.source}: the recording has no message from a client")
        self.recording = recording
        self.cwd = os.fspath(cwd) if cwd is not None else None
        self._options = _Options(strict, speed, timeout, ignore)
        self._lock = threading.Lock()
        self._running: list[Connection] = []

    @classmethod
    def from_recording(cls, path: str | os.PathLike[str], **options: Any) -> ReplayClient:
        """Read the recording at ``path``; ``options`` as for the constructor."""
        return cls(load_recording(path), **options)

    def recorded_cwd(self) -> str | None:
        """The folder of the recording's first ``session/new`` (or ``session/load``...)."""
        for message in self.recording.messages:
            params = message.params
            if message.sender == CLIENT and isinstance(params, dict) and isinstance(params.get("cwd"), str):
                return str(params["cwd"])
        return None

    def run(
        self,
        *argv: str,
        transport: Transport | None = None,
        env: dict[str, str] | None = None,
        agent_cwd: str | os.PathLike[str] | None = None,
    ) -> ReplayReport:
        """Spawn ``argv`` (or talk over ``transport``) and replay the client's side to the end.

        Returns the :class:`ReplayReport`; with ``strict`` (the default), raises
        :class:`ReplayDivergence` instead when anything diverged. The agent is closed (its
        stdin ended, then terminated) before this returns.
        """
        if (transport is None) == (not argv):
            raise ValueError("give the agent's command line, or a transport (not both)")
        if transport is None:
            transport = ProcessTransport(list(argv), env=env, cwd=agent_cwd)
        options = self._options
        substitutions = Substitutions()
        recorded_cwd = self.recorded_cwd()
        if self.cwd is not None and recorded_cwd is not None:
            substitutions.add_folder(recorded_cwd, self.cwd)
        player = Player(
            self.recording, CLIENT, strict=options.strict, speed=options.speed,
            timeout=options.timeout, ignore=options.ignore, substitutions=substitutions,
        )
        connection = Connection(transport, request_timeout=None, name="acp-replay-client")
        with self._lock:
            self._running.append(connection)
        try:
            player.attach(connection)
            connection.start()
            player.start()
            player.wait()
        finally:
            connection.close(timeout=_CLOSE_TIMEOUT)
            player.close()
            with self._lock:
                self._running.remove(connection)
        report = ReplayReport(player.sent, player.received, list(player.divergences))
        if options.strict:
            player.verify()
        return report

    def close(self) -> None:
        """Stop a :meth:`run` going on in another thread."""
        with self._lock:
            running = list(self._running)
        for connection in running:
            connection.close(timeout=_CLOSE_TIMEOUT)


class _StreamTransport:
    """An :class:`~acp.aio.transport.AsyncTransport` over an asyncio stream pair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._closed = False

    async def read(self) -> bytes:
        if self._closed:
            return b""
        try:
            return await self._reader.read(65536)
        except (ConnectionError, OSError):
            return b""

    def write(self, data: bytes | bytearray) -> None:
        if self._closed or self._writer.is_closing():
            raise ConnectionClosedError("the replay connection is closed")
        self._writer.write(data)

    async def drain(self) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            raise ConnectionClosedError(str(exc)) from exc

    def close_write(self) -> None:
        if not self._writer.is_closing() and self._writer.can_write_eof():
            self._writer.write_eof()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError):
            pass

    @property
    def description(self) -> str:
        return "replay agent (socket pair)"
