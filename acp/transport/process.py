"""The client's side: spawn an agent process and talk to it over its stdin/stdout."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Union

from .fd import FdTransport

if TYPE_CHECKING:  # subprocess is imported lazily: `import acp` must stay cheap
    import subprocess

__all__ = ["ProcessTransport"]

_log = logging.getLogger("acp.transport.process")

# A stderr "line" longer than this is logged in pieces instead of being buffered whole.
_MAX_STDERR_LINE = 65536

StrPath = Union[str, "os.PathLike[str]"]


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
      also in ``record.acp_pid``), so a chatty agent never blocks on a full stderr pipe.
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
                if _log.isEnabledFor(logging.INFO):
                    for line in lines:
                        self._log_line(pid, line)
            if pending and _log.isEnabledFor(logging.INFO):
                self._log_line(pid, pending)
        except Exception:  # never let the drain die silently: the child would block
            _log.exception("stderr reader of process %d failed", pid)
            self._discard_stderr()

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
