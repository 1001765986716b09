"""The client's side: spawn an agent process and talk to it over its stdin/stdout."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Union

from ..errors import ConnectionClosedError
from .fd import FdTransport

if TYPE_CHECKING:  # subprocess is imported lazily: `import acp` must stay cheap
    import subprocess

__all__ = ["ProcessTransport", "describe_exit"]

_log = logging.getLogger("acp.transport.process")

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


def _decode_tail(data: bytes) -> str:
    # A cut end of stderr may start inside a UTF-8 character: skip its continuation bytes.
    start = 0
    while start < min(len(data), 3) and 0x80 <= data[start] < 0xC0:
        start += 1
    return data[start:].decode("utf-8", "replace")


def _describe(argv: Sequence[str]) -> str:
    import shlex

    cmd = shlex.join(argv)
    return cmd if len(cmd) <= 100 else cmd[:97] + "..."


class ProcessTransport(FdTransport):
    """Spawn ``argv`` and speak the protocol over its stdin/stdout.

    * Environment: with ``inherit_env=True`` (default) the child gets ``os.environ`` updated with
      ``env``; with ``inherit_env=False`` it gets exactly ``env`` (empty if ``None``), nothing
      else.
    * stderr is drained by a daemon thread named ``acp-stderr-<pid>`` into the logger
      ``acp.transport.process`` (one INFO record per line, ``"[<pid>] <line>"``, with the pid
      also in ``record.acp_pid``), so a chatty agent never blocks on a full stderr pipe. The
      last 20 lines (8 KiB at most) are also kept: :attr:`stderr_tail`, and
      :meth:`closed_error` for the error a caller sees once the agent is gone.
    * The child stays in our process group (the default): a Ctrl-C in the terminal reaches the
      agent too, and it does not outlive us by accident. ``start_new_session=True`` puts it in a
      session of its own instead, for interactive clients that turn Ctrl-C into
      ``session/cancel`` (close() still ends it). Its own children are not managed.
    * A missing executable (or ``cwd``) raises ``FileNotFoundError`` naming the command.

    :meth:`close` stops the conversation at once (a blocked :meth:`read` returns ``b""``), closes
    the child's stdin and our end of its stdout, then waits ``exit_timeout`` seconds for it to
    exit, sends SIGTERM, waits ``terminate_timeout``, sends SIGKILL, and reaps it. Finally it
    joins the stderr thread: waiting at most ``stderr_timeout`` for the rest of stderr (a
    grandchild may hold the pipe open), then closing the pipe to end the thread. For a graceful
    end in which the agent's last output is still read, call :meth:`close_write`, read until
    ``b""``, then :meth:`close`.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
        exit_timeout: float = 2.0,
        terminate_timeout: float = 5.0,
        stderr_timeout: float = 1.0,
        start_new_session: bool = False,
    ) -> None:
        import subprocess

        if isinstance(argv, (str, bytes)):
            raise TypeError("argv must be a sequence of strings, not one string (see shlex.split)")
        args = [str(a) for a in argv]
        if not args:
            raise ValueError("argv must not be empty")
        if inherit_env:
            child_env = dict(os.environ)
            child_env.update(env or {})
        else:
            child_env = dict(env or {})
        self._argv = tuple(args)
        self._exit_timeout = exit_timeout
        self._terminate_timeout = terminate_timeout
        self._stderr_timeout = stderr_timeout

        # Our own pipes (close-on-exec), so we own every fd and can make our ends non-blocking.
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        try:
            proc = subprocess.Popen(
                args,
                stdin=stdin_r,
                stdout=stdout_w,
                stderr=stderr_w,
                cwd=cwd,
                env=child_env,
                close_fds=True,
                start_new_session=start_new_session,
            )
        except BaseException as exc:
            for fd in (stdin_r, stdin_w, stdout_r, stdout_w, stderr_r, stderr_w):
                os.close(fd)
            if isinstance(exc, FileNotFoundError):
                raise FileNotFoundError(
                    exc.errno,
                    f"cannot start agent process {_describe(args)!r}: {exc.strerror}",
                    exc.filename,
                ) from exc
            raise
        for fd in (stdin_r, stdout_w, stderr_w):  # the child's ends, now duplicated into it
            os.close(fd)
        for fd in (stdin_w, stdout_r, stderr_r):
            os.set_blocking(fd, False)

        self._proc: subprocess.Popen[bytes] = proc
        self._shutdown_lock = threading.Lock()
        self._shut_down = False
        super().__init__(stdout_r, stdin_w, description=f"process {proc.pid} ({_describe(args)})")
        self._stderr = FdTransport(stderr_r, None, description=f"stderr of process {proc.pid}")
        self._tail: deque[bytes] = deque(maxlen=_TAIL_LINES)
        self._tail_lock = threading.Lock()
        self._stderr_done = threading.Event()
        self._stderr_thread = threading.Thread(
            target=self._drain_stderr, name=f"acp-stderr-{proc.pid}", daemon=True
        )
        self._stderr_thread.start()
        _log.debug("started %s", self.description)

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._proc.pid

    @property
    def argv(self) -> tuple[str, ...]:
        """The command line the child was started with."""
        return self._argv

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal), or ``None`` while running."""
        return self._proc.poll()

    @property
    def stderr_tail(self) -> str:
        """The last lines the child wrote to stderr so far (at most 20 non-blank lines and
        8 KiB; a partial last line appears once stderr ends); "" if none."""
        with self._tail_lock:
            lines = list(self._tail)
        text = b"\n".join(line.rstrip(b"\r") for line in lines)
        if len(text) > _TAIL_BYTES:  # keep the end, from a line start when one is near
            text = text[-_TAIL_BYTES:]
            newline = text.find(b"\n")
            if 0 <= newline < _TAIL_BYTES // 2:
                text = text[newline + 1 :]
        return _decode_tail(text)

    def closed_error(self, context: str = "", timeout: float = 0.5) -> ConnectionClosedError:
        """The :class:`~acp.errors.ConnectionClosedError` to raise once the agent is gone:
        ``"<context>: the agent process exited with code 3"`` (or ``was killed by SIGKILL``),
        with ``returncode`` and ``stderr_tail`` set. Waits up to ``timeout`` for the process to
        exit and for the rest of its stderr."""
        deadline = time.monotonic() + timeout
        code = self.wait(timeout)
        if code is not None:
            # The last lines may still be in the pipe (unless a grandchild holds it open).
            self._stderr_done.wait(max(0.0, deadline - time.monotonic()))
            reason = f"the agent process {describe_exit(code)}"
        else:
            reason = "the agent closed the connection (its process is still running)"
        message = f"{context}: {reason}" if context else reason
        return ConnectionClosedError(message, returncode=code, stderr_tail=self.stderr_tail)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the child to exit; its return code, or ``None`` if ``timeout`` passed."""
        import subprocess

        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        """End the conversation, stop the child (stdin EOF, SIGTERM, SIGKILL), join threads."""
        # Held throughout, so a concurrent second close() returns only once all is done.
        with self._shutdown_lock:
            if self._shut_down:
                return
            super().close()  # wakes the reader; the child sees EOF on stdin
            self._stop_child()
            self._stop_stderr()
            self._shut_down = True
            _log.debug("%s: exited with %s", self.description, self._proc.returncode)

    # -- internals ---------------------------------------------------------------------------

    def _stop_child(self) -> None:
        import subprocess

        proc = self._proc
        try:
            proc.wait(self._exit_timeout)
            return
        except subprocess.TimeoutExpired:
            pass
        _log.info(
            "%s: still running %.1fs after stdin closed; terminating",
            self.description,
            self._exit_timeout,
        )
        proc.terminate()
        try:
            proc.wait(self._terminate_timeout)
            return
        except subprocess.TimeoutExpired:
            pass
        _log.warning(
            "%s: ignored SIGTERM for %.1fs; killing", self.description, self._terminate_timeout
        )
        proc.kill()
        proc.wait()

    def _stop_stderr(self) -> None:
        self._stderr_thread.join(self._stderr_timeout)
        # Closing wakes the thread if a grandchild still holds the pipe open; then it ends.
        self._stderr.close()
        self._stderr_thread.join()

    def _drain_stderr(self) -> None:
        pid = self._proc.pid
        pending = b""
        try:
            while True:
                chunk = self._stderr.read()
                if not chunk:
                    break
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                if len(pending) >= _MAX_STDERR_LINE:
                    lines.append(pending)
                    pending = b""
                self._keep(lines)
                if _log.isEnabledFor(logging.INFO):
                    for line in lines:
                        self._log_line(pid, line)
            if pending:
                self._keep([pending])
                if _log.isEnabledFor(logging.INFO):
                    self._log_line(pid, pending)
        except Exception:  # never let the drain die silently: the child would block
            _log.exception("stderr reader of process %d failed", pid)
            self._discard_stderr()
        finally:
            self._stderr_done.set()

    def _keep(self, lines: list[bytes]) -> None:
        # For error messages: blank lines would only push out the useful ones, and only the end
        # of an over-long line is kept.
        kept = [line[-_TAIL_BYTES:] for line in lines if line.strip()][-_TAIL_LINES:]
        if kept:
            with self._tail_lock:
                self._tail.extend(kept)

    def _discard_stderr(self) -> None:
        try:
            while self._stderr.read():
                pass
        except OSError:
            pass

    @staticmethod
    def _log_line(pid: int, line: bytes) -> None:
        text = line.rstrip(b"\r").decode("utf-8", "replace")
        _log.info("[%d] %s", pid, text, extra={"acp_pid": pid})
