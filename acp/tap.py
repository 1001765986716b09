"""``acp tap -- AGENT COMMAND...``: a transparent recording proxy between a client and an agent.

An editor launches ``acp tap -- my-agent --stdio`` in place of ``my-agent --stdio``. The tap
spawns the agent and copies bytes both ways exactly as read (never decoded, never re-encoded),
while a third thread writes every complete line to a JSONL recording, in the format of
:class:`~acp.wiretap.JsonlWireTap` seen from the client: ``{"t": <seconds since the tap
started>, "dir": "out" (client to agent) | "in" (agent to client), "msg": <the message>}``
(``"raw"`` instead of ``"msg"`` for a line that is not JSON). ``acp trace`` reads it.

Guarantees, in order of importance:

* the session never depends on the recording: a recording that cannot be opened or written
  (unwritable path, disk full) is reported once on stderr, and forwarding goes on;
* forwarding adds no work but a queue put per chunk (the recording is split and written on a
  thread of its own);
* the agent's stderr is the tap's stderr (inherited, not copied), and the tap exits with the
  agent's status: its exit code, or ``128 + N`` when signal ``N`` killed it (the shell's
  convention); SIGTERM, SIGINT and SIGHUP sent to the tap are forwarded to the agent;
* end of the client's input closes the agent's stdin; end of the agent's output closes ours.
"""

from __future__ import annotations

import datetime
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

__all__ = ["run_tap", "default_recording_path", "exit_status"]

_log = logging.getLogger("acp.tap")

_CHUNK = 65536
# A line longer than this is not kept whole for the recording (it is still forwarded whole).
_MAX_RECORDED_LINE = 64 * 1024 * 1024
_FORWARDED_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")

OUT = "out"  # client -> agent, as a client's wire tap names it
IN = "in"  # agent -> client


def default_recording_path(now: datetime.datetime | None = None) -> str:
    """Where a run's recording goes without ``--out``: a new file under the user's cache
    directory (``$XDG_CACHE_HOME`` or ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS,
    ``%LOCALAPPDATA%`` on Windows), in ``acp/taps/``."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
    elif sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Caches")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "acp", "taps", _run_file_name(now))


def _run_file_name(now: datetime.datetime | None = None) -> str:
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    return f"tap-{stamp}-{os.getpid()}.jsonl"


def exit_status(returncode: int) -> int:
    """The tap's exit status for the agent's ``returncode`` (``128 + N`` for a death by signal
    ``N``, as a shell reports it)."""
    return 128 - returncode if returncode < 0 else returncode


class _Recorder:
    """Splits each direction's bytes into lines and writes them as JSONL, on its own thread.

    The pumps only call :meth:`feed` (a queue put); everything else happens here. The first
    failure (open or write) is reported once on stderr; after it, chunks are dropped.
    """

    def __init__(self, path: str | None, start: float, err: IO[str]) -> None:
        self.path = path
        self._start = start
        self._err = err
        self._queue: queue.SimpleQueue[tuple[str, float, bytes] | None] = queue.SimpleQueue()
        self._pending = {OUT: bytearray(), IN: bytearray()}
        self._oversized = {OUT: False, IN: False}
        self._file: IO[bytes] | None = None
        self.failed = path is None
        self._thread = threading.Thread(target=self._run, name="acp-tap-recorder", daemon=True)
        if path is not None:
            self._thread.start()

    def feed(self, direction: str, data: bytes) -> None:
        """Called by a pump after it forwarded ``data``."""
        if not self.failed:
            self._queue.put((direction, time.monotonic(), data))

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (and any unterminated last line), then close the file."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)

    def _fail(self, what: str, exc: BaseException) -> None:
        if not self.failed:
            self.failed = True
            try:
                self._err.write(f"acp tap: {what} {self.path}: {exc}; forwarding goes on without it\n")
                self._err.flush()
            except (OSError, ValueError):
                pass

    def _run(self) -> None:
        from .wiretap import encode_entry

        assert self.path is not None
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self._file = open(self.path, "wb")  # noqa: SIM115 - closed below
        except OSError as exc:
            self._fail("cannot record to", exc)
        entries: list[bytes] = []

        def add(direction: str, at: float, line: bytes) -> None:
            entries.append(encode_entry(at - self._start, direction, line.rstrip(b"\r")))

        while True:
            item = self._queue.get()
            if item is None:
                for direction, rest in self._pending.items():  # a last line without its newline
                    if rest:
                        add(direction, time.monotonic(), bytes(rest))
                self._write(entries)
                break
            if self.failed:
                continue  # keep draining, so the pumps never block on us
            direction, at, data = item
            self._split(direction, at, data, add)
            if self._queue.empty():  # flush in batches, but never leave lines unwritten
                self._write(entries)
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                self._fail("error closing the recording", exc)

    def _split(self, direction: str, at: float, data: bytes, add: Any) -> None:
        pending = self._pending[direction]
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if self._oversized[direction]:
                self._oversized[direction] = False
                add(direction, at, b"(a line over %d bytes, not recorded)" % _MAX_RECORDED_LINE)
            elif pending:
                pending += data[start:end]
                add(direction, at, bytes(pending))
                pending.clear()
            else:
                add(direction, at, data[start:end])
            start = end + 1
        if start < len(data) and not self._oversized[direction]:
            pending += data[start:]
            if len(pending) > _MAX_RECORDED_LINE:
                pending.clear()
                self._oversized[direction] = True

    def _write(self, entries: list[bytes]) -> None:
        if entries and self._file is not None and not self.failed:
            try:
                self._file.write(b"".join(entries))
                self._file.flush()
            except OSError as exc:
                self._fail("recording failed:", exc)
        entries.clear()


def _pump(
    source: int, sink: int, direction: str, recorder: _Recorder, done: threading.Event, keep_fd: bool = False
) -> None:
    """Copy ``source`` to ``sink`` until end of input or a broken sink, then close ``sink`` (with
    ``keep_fd``, the descriptor number stays taken: it is pointed at the null device instead)."""
    try:
        while True:
            try:
                data = os.read(source, _CHUNK)
            except OSError as exc:
                _log.debug("tap %s: read failed: %s", direction, exc)
                break
            if not data:
                break
            # Recorded before it is passed on: the answer to a request cannot be recorded (by
            # the other direction's pump) before the request itself.
            recorder.feed(direction, data)
            view = memoryview(data)
            while view:
                written = os.write(sink, view)
                view = view[written:]
    except OSError as exc:  # the other side went away (EPIPE)
        _log.debug("tap %s: write failed: %s", direction, exc)
    finally:
        try:
            if keep_fd:  # e.g. our stdout: the client must see end of input, fd 1 stays valid
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sink)
                os.close(devnull)
            else:
                os.close(sink)
        except OSError:
            pass
        done.set()


def run_tap(
    argv: Sequence[str],
    *,
    out: str | None,
    stdin: int = 0,
    stdout: int = 1,
    err: IO[str] | None = None,
) -> int:
    """``acp tap``: run ``argv`` between ``stdin``/``stdout`` (file descriptors) and record the
    conversation to ``out`` (a file, an existing folder to create the run's file in, or None for
    :func:`default_recording_path`); returns the exit status (see :func:`exit_status`)."""
    err = err or sys.stderr
    start = time.monotonic()
    if out is None:
        path = default_recording_path()
    elif os.path.isdir(out):
        path = os.path.join(out, _run_file_name())
    else:
        path = out
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    except OSError as exc:
        err.write(f"acp tap: cannot start {argv[0]!r}: {exc.strerror or exc}\n")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    assert proc.stdin is not None and proc.stdout is not None
    err.write(f"acp tap: recording to {path}\n")
    err.flush()
    recorder = _Recorder(path, start, err)
    # The pumps own the agent's pipe ends from here on (they close them at the end).
    to_agent, from_agent = os.dup(proc.stdin.fileno()), os.dup(proc.stdout.fileno())
    proc.stdin.close()
    proc.stdout.close()
    agent_done = threading.Event()
    threading.Thread(
        target=_pump, args=(stdin, to_agent, OUT, recorder, threading.Event()), name="acp-tap-out", daemon=True
    ).start()
    threading.Thread(
        target=_pump, args=(from_agent, stdout, IN, recorder, agent_done, True), name="acp-tap-in", daemon=True
    ).start()
    restore = _forward_signals(proc)
    try:
        returncode = proc.wait()
        # What the agent wrote before exiting is still in the pipe: let the pump deliver it
        # (a grandchild holding the pipe open must not keep us here forever).
        agent_done.wait(5.0)
    finally:
        restore()
        recorder.close()
    return exit_status(returncode)


def _forward_signals(proc: subprocess.Popen[bytes]) -> Any:
    """Forward termination signals to the agent (only from the main thread); the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: dict[int, Any] = {}

    def forward(signum: int, frame: Any) -> None:
        try:
            proc.send_signal(signum)
        except OSError:
            pass

    for name in _FORWARDED_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:
            previous[number] = signal.signal(number, forward)

    def restore() -> None:
        for number, handler in previous.items():
            signal.signal(number, handler)

    return restore
