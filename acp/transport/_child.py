"""What both runtimes' process transports share: argv and environment checks, the pipes to a
child, its stderr log with the kept tail, and the wording of how it ended.

Pure helpers, no thread and no event loop: :class:`acp.transport.ProcessTransport` drives them
from a thread, :class:`acp.aio.transport.ProcessTransport` from the event loop.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, Union

from ..errors import ConnectionClosedError

# One logger for every agent's stderr, whichever runtime spawned it.
log = logging.getLogger("acp.transport.process")

# A stderr "line" longer than this is logged in pieces instead of being buffered whole.
_MAX_STDERR_LINE = 65536
# The end of stderr kept for error messages (stderr_tail): this many lines, this many bytes.
_TAIL_LINES = 20
_TAIL_BYTES = 8192

StrPath = Union[str, "os.PathLike[str]"]


def describe_exit(returncode: int) -> str:
    """How a process ended, from its return code: ``"exited with code 3"``, or, for a negative
    code (killed by that signal), ``"was killed by SIGKILL"``."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"was killed by {name}"


def describe_argv(argv: Sequence[str]) -> str:
    """A command line for messages, cut to 100 characters."""
    import shlex

    cmd = shlex.join(argv)
    return cmd if len(cmd) <= 100 else cmd[:97] + "..."


def child_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` as a list of strings; a single string or an empty list is refused."""
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv must be a sequence of strings, not one string (see shlex.split)")
    args = [str(a) for a in argv]
    if not args:
        raise ValueError("argv must not be empty")
    return args


def child_env(env: Mapping[str, str] | None, inherit_env: bool) -> dict[str, str]:
    """The child's environment: ours updated with ``env``, or exactly ``env``."""
    if inherit_env:
        child = dict(os.environ)
        child.update(env or {})
        return child
    return dict(env or {})


def closed_error(context: str, returncode: int | None, stderr_tail: str) -> ConnectionClosedError:
    """``"<context>: the agent process exited with code 3"`` (or how else it ended)."""
    if returncode is not None:
        reason = f"the agent process {describe_exit(returncode)}"
    else:
        reason = "the agent closed the connection (its process is still running)"
    message = f"{context}: {reason}" if context else reason
    return ConnectionClosedError(message, returncode=returncode, stderr_tail=stderr_tail)


def log_terminating(description: str, exit_timeout: float) -> None:
    """The close ladder's second step: the child did not exit at stdin EOF."""
    log.info("%s: still running %.1fs after stdin closed; terminating", description, exit_timeout)


def log_killing(description: str, terminate_timeout: float) -> None:
    """The close ladder's last step: the child ignored SIGTERM."""
    log.warning("%s: ignored SIGTERM for %.1fs; killing", description, terminate_timeout)


class ChildPipes:
    """The three pipes to a child, made by us (close-on-exec) so that we own every fd and can
    make our ends non-blocking: ``stdin_r``/``stdout_w``/``stderr_w`` go to the child,
    ``stdin_w``/``stdout_r``/``stderr_r`` stay with us."""

    def __init__(self) -> None:
        self.stdin_r, self.stdin_w = os.pipe()
        try:
            self.stdout_r, self.stdout_w = os.pipe()
            try:
                self.stderr_r, self.stderr_w = os.pipe()
            except BaseException:
                os.close(self.stdout_r)
                os.close(self.stdout_w)
                raise
        except BaseException:
            os.close(self.stdin_r)
            os.close(self.stdin_w)
            raise

    def spawn_options(
        self, cwd: StrPath | None, env: Mapping[str, str], start_new_session: bool
    ) -> dict[str, Any]:
        """The keyword arguments of ``subprocess.Popen`` (and ``loop.subprocess_exec``)."""
        return {
            "stdin": self.stdin_r,
            "stdout": self.stdout_w,
            "stderr": self.stderr_w,
            "cwd": cwd,
            "env": env,
            "close_fds": True,
            "start_new_session": start_new_session,
        }

    def started(self) -> None:
        """The child runs: close its ends (now duplicated into it), make ours non-blocking."""
        for fd in (self.stdin_r, self.stdout_w, self.stderr_w):
            os.close(fd)
        for fd in (self.stdin_w, self.stdout_r, self.stderr_r):
            os.set_blocking(fd, False)

    def failed(self, exc: BaseException, args: Sequence[str]) -> NoReturn:
        """The child could not start: close every fd and raise (a missing executable names
        the command)."""
        for fd in (self.stdin_r, self.stdin_w, self.stdout_r, self.stdout_w, self.stderr_r,
                   self.stderr_w):
            os.close(fd)
        if isinstance(exc, FileNotFoundError):
            raise FileNotFoundError(
                exc.errno,
                f"cannot start agent process {describe_argv(args)!r}: {exc.strerror}",
                exc.filename,
            ) from exc
        raise exc


class ChildFacts:
    """The read-only facts both process transports give about their child."""

    _pid: int
    _argv: tuple[str, ...]
    _stderr_log: StderrLog

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._pid

    @property
    def argv(self) -> tuple[str, ...]:
        """The command line the child was started with."""
        return self._argv

    @property
    def stderr_tail(self) -> str:
        """The last lines the child wrote to stderr so far (at most 20 non-blank lines and
        8 KiB; a partial last line appears once stderr ends); "" if none."""
        return self._stderr_log.tail


class StderrLog:
    """A child's stderr, fed in chunks: logged line by line to ``acp.transport.process`` (one
    INFO record per line, ``"[<pid>] <line>"``, the pid also in ``record.acp_pid``; a line
    longer than 64 KiB in pieces), with the end kept for error messages (:attr:`tail`).
    :meth:`tail` may be read from any thread."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._pending = b""
        self._tail: deque[bytes] = deque(maxlen=_TAIL_LINES)
        self._lock = threading.Lock()

    def feed(self, chunk: bytes) -> None:
        """Log and keep the whole lines of ``chunk`` (with what came before it)."""
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        if len(self._pending) >= _MAX_STDERR_LINE:
            lines.append(self._pending)
            self._pending = b""
        self._keep(lines)
        if log.isEnabledFor(logging.INFO):
            for line in lines:
                self._log_line(line)

    def finish(self) -> None:
        """stderr ended: log and keep a last line that had no newline."""
        pending, self._pending = self._pending, b""
        if pending:
            self._keep([pending])
            if log.isEnabledFor(logging.INFO):
                self._log_line(pending)

    @property
    def tail(self) -> str:
        """The last lines so far (at most 20 non-blank lines and 8 KiB; a partial last line
        appears once stderr ends); "" if none."""
        with self._lock:
            lines = list(self._tail)
        text = b"\n".join(line.rstrip(b"\r") for line in lines)
        if len(text) > _TAIL_BYTES:  # keep the end, from a line start when one is near
            text = text[-_TAIL_BYTES:]
            newline = text.find(b"\n")
            if 0 <= newline < _TAIL_BYTES // 2:
                text = text[newline + 1 :]
        return _decode_tail(text)

    def _keep(self, lines: list[bytes]) -> None:
        # For error messages: blank lines would only push out the useful ones, and only the end
        # of an over-long line is kept.
        kept = [line[-_TAIL_BYTES:] for line in lines if line.strip()][-_TAIL_LINES:]
        if kept:
            with self._lock:
                self._tail.extend(kept)

    def _log_line(self, line: bytes) -> None:
        text = line.rstrip(b"\r").decode("utf-8", "replace")
        log.info("[%d] %s", self._pid, text, extra={"acp_pid": self._pid})


def _decode_tail(data: bytes) -> str:
    # A cut end of stderr may start inside a UTF-8 character: skip its continuation bytes.
    start = 0
    while start < min(len(data), 3) and 0x80 <= data[start] < 0xC0:
        start += 1
    return data[start:].decode("utf-8", "replace")
