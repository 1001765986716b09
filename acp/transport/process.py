"""The client's side: spawn an agent process and talk to it over its stdin/stdout."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..errors import ConnectionClosedError
from ._child import (
    ChildFacts,
    ChildPipes,
    StderrLog,
    StrPath,
    child_argv,
    child_env,
    closed_error,
    describe_argv,
    describe_exit,
    log_killing,
    log_terminating,
)
from ._child import log as _log
from ._descendants import TICK, Descendants
from .fd import FdTransport

if TYPE_CHECKING:  # subprocess is imported lazily: `import acp` must stay cheap
    import subprocess

__all__ = ["ProcessTransport", "describe_exit"]


class ProcessTransport(ChildFacts, FdTransport):
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
      ``session/cancel`` (close() still ends it). On Linux, what the agent started (a
      launcher's real agent: ``npx``, npm's ``codex-acp``) is ended along with it by
      :meth:`close`, step by step as below, even once the agent itself has exited.
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

        args = child_argv(argv)
        environment = child_env(env, inherit_env)
        self._argv = tuple(args)
        self._exit_timeout = exit_timeout
        self._terminate_timeout = terminate_timeout
        self._stderr_timeout = stderr_timeout

        pipes = ChildPipes()
        try:
            proc = subprocess.Popen(args, **pipes.spawn_options(cwd, environment, start_new_session))
        except BaseException as exc:
            pipes.failed(exc, args)
        pipes.started()

        self._proc: subprocess.Popen[bytes] = proc
        self._pid = proc.pid
        self._shutdown_lock = threading.Lock()
        self._shut_down = False
        description = f"process {proc.pid} ({describe_argv(args)})"
        self._descendants = Descendants(proc.pid, description)
        super().__init__(pipes.stdout_r, pipes.stdin_w, description=description)
        self._stderr = FdTransport(pipes.stderr_r, None, description=f"stderr of process {proc.pid}")
        self._stderr_log = StderrLog(proc.pid)
        self._stderr_done = threading.Event()
        self._stderr_thread = threading.Thread(
            target=self._drain_stderr, name=f"acp-stderr-{proc.pid}", daemon=True
        )
        self._stderr_thread.start()
        _log.debug("started %s", self.description)

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal), or ``None`` while running."""
        return self._proc.poll()

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
        return closed_error(context, code, self.stderr_tail)

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
            # Before stdin closes: a launcher may exit at its end and leave what it started.
            self._descendants.look()
            super().close()  # wakes the reader; the child sees EOF on stdin
            self._stop_child()
            self._stop_stderr()
            self._shut_down = True
            _log.debug("%s: exited with %s", self.description, self._proc.returncode)

    # -- internals ---------------------------------------------------------------------------

    def _stop_child(self) -> None:
        # Each step for the child and for what it started alike.
        proc, descendants = self._proc, self._descendants
        if self._all_exited_within(self._exit_timeout):
            return
        if proc.poll() is None:
            descendants.look()  # and what it started since
            log_terminating(self.description, self._exit_timeout)
            proc.terminate()
        descendants.signal(signal.SIGTERM)
        if self._all_exited_within(self._terminate_timeout):
            return
        if proc.poll() is None:
            log_killing(self.description, self._terminate_timeout)
            proc.kill()
        descendants.signal(signal.SIGKILL)
        proc.wait()

    def _all_exited_within(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the child and what it started to exit."""
        deadline = time.monotonic() + timeout
        if self.wait(timeout) is None:
            return False
        while self._descendants.running():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(TICK, left))  # not our children: nothing to wait() on
        return True

    def _stop_stderr(self) -> None:
        self._stderr_thread.join(self._stderr_timeout)
        # Closing wakes the thread if a grandchild still holds the pipe open; then it ends.
        self._stderr.close()
        self._stderr_thread.join()

    def _drain_stderr(self) -> None:
        try:
            while chunk := self._stderr.read():
                self._stderr_log.feed(chunk)
            self._stderr_log.finish()
        except Exception:  # never let the drain die silently: the child would block
            _log.exception("stderr reader of process %d failed", self._proc.pid)
            self._discard_stderr()
        finally:
            self._stderr_done.set()

    def _discard_stderr(self) -> None:
        try:
            while self._stderr.read():
                pass
        except OSError:
            pass
