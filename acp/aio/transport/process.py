"""The client's side on the event loop: spawn an agent process and talk to it over its
stdin/stdout (the asyncio twin of :class:`acp.transport.ProcessTransport`)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping, Sequence

from ...errors import ConnectionClosedError
from ...transport._child import (
    ChildFacts,
    ChildPipes,
    StderrLog,
    StrPath,
    child_argv,
    child_env,
    closed_error,
    describe_argv,
    log_killing,
    log_terminating,
)
from ...transport._child import log as _log
from ...transport._descendants import TICK, Descendants
from ._fd import FdTransport, _wake
from .base import READ_CHUNK

__all__ = ["ProcessTransport"]


class _ExitWatch(asyncio.SubprocessProtocol):
    """Learns from the loop's child watcher when the child has exited."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.exited: asyncio.Future[int] = loop.create_future()
        self._transport: asyncio.SubprocessTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self._transport = transport

    def process_exited(self) -> None:
        assert self._transport is not None
        code = self._transport.get_returncode()
        if code is not None and not self.exited.done():
            self.exited.set_result(code)


class ProcessTransport(ChildFacts, FdTransport):
    """A spawned agent: the protocol on its stdin/stdout, on the running loop. Make one with
    ``await ProcessTransport.spawn(argv, ...)``; the parameters are those of the sync
    :class:`acp.transport.ProcessTransport` and mean the same.

    * No thread and no task of its own: the pipes are watched by the loop, and the child's
      exit comes from the loop's child watcher (on Python 3.12+ a pidfd; before that asyncio's
      default watcher, which waits in a thread of its own until the child is reaped).
    * stderr is read as it comes, on the loop, into the logger ``acp.transport.process``
      exactly as the sync transport logs it (one INFO record per line, ``"[<pid>] <line>"``,
      ``record.acp_pid``; a line over 64 KiB in pieces), and its end is kept:
      :attr:`stderr_tail`, and :meth:`closed_error`.
    * A missing executable (or ``cwd``) raises ``FileNotFoundError`` naming the command.

    :meth:`close` stops the conversation at once (a waiting :meth:`read` returns ``b""``,
    writes are refused), closes our end of the child's stdout and, once the input already
    written has gone into the pipe, the child's stdin; then it waits ``exit_timeout`` seconds for it to exit, sends
    SIGTERM, waits ``terminate_timeout``, sends SIGKILL, and waits for it (on Linux, what the
    child started goes through the same steps, as with the sync transport); then it waits at
    most ``stderr_timeout`` for the rest of stderr (a grandchild may hold the pipe open) and
    closes the pipe. Input the child never took is dropped once it has exited. If the task
    closing is cancelled, the child gets SIGKILL at once. For a
    graceful end in which the agent's last output is still read, call :meth:`close_write`,
    read until ``b""``, then :meth:`close`.
    """

    def __init__(
        self,
        process: asyncio.SubprocessTransport,
        watch: _ExitWatch,
        pipes: ChildPipes,
        argv: Sequence[str],
        *,
        exit_timeout: float,
        terminate_timeout: float,
        stderr_timeout: float,
    ) -> None:
        """Internal: use :meth:`spawn`."""
        self._process = process
        self._exited = watch.exited
        self._pid = process.get_pid()
        self._argv = tuple(argv)
        self._exit_timeout = exit_timeout
        self._terminate_timeout = terminate_timeout
        self._stderr_timeout = stderr_timeout
        description = f"process {self._pid} ({describe_argv(argv)})"
        self._descendants = Descendants(self._pid, description)
        super().__init__(pipes.stdout_r, pipes.stdin_w, description=description)
        self._stderr_fd: int | None = pipes.stderr_r
        self._stderr_log = StderrLog(self._pid)
        self._stderr_failed = False
        self._stderr_done: asyncio.Future[None] = self._loop.create_future()
        self._loop.add_reader(pipes.stderr_r, self._on_stderr)
        _log.debug("started %s", description)

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
        exit_timeout: float = 2.0,
        terminate_timeout: float = 5.0,
        stderr_timeout: float = 1.0,
        start_new_session: bool = False,
    ) -> ProcessTransport:
        """Start ``argv`` (environment: ours updated with ``env``, or exactly ``env`` with
        ``inherit_env=False``; ``start_new_session`` as for the sync transport)."""
        loop = asyncio.get_running_loop()
        args = child_argv(argv)
        environment = child_env(env, inherit_env)
        pipes = ChildPipes()
        watch = _ExitWatch(loop)
        try:
            # Our own pipes, not asyncio's: the loop then watches no pipe for the child, and
            # our ends are driven like any fd (see _fd.py).
            process, _ = await loop.subprocess_exec(
                lambda: watch, *args, **pipes.spawn_options(cwd, environment, start_new_session)
            )
        except BaseException as exc:
            pipes.failed(exc, args)
        pipes.started()
        return cls(
            process,
            watch,
            pipes,
            args,
            exit_timeout=exit_timeout,
            terminate_timeout=terminate_timeout,
            stderr_timeout=stderr_timeout,
        )

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal), or ``None`` while running."""
        return self._exited.result() if self._exited.done() else None

    async def closed_error(self, context: str = "", timeout: float = 0.5) -> ConnectionClosedError:
        """The :class:`~acp.errors.ConnectionClosedError` to raise once the agent is gone,
        worded as the sync transport's: ``"<context>: the agent process exited with code 3"``
        (or ``was killed by SIGKILL``), with ``returncode`` and ``stderr_tail`` set. Waits up
        to ``timeout`` for the process to exit and for the rest of its stderr."""
        deadline = self._loop.time() + timeout
        code = await self.wait(timeout)
        if code is not None and not self._stderr_done.done():
            # The last lines may still be in the pipe (unless a grandchild holds it open).
            await asyncio.wait([self._stderr_done], timeout=max(0.0, deadline - self._loop.time()))
        return closed_error(context, code, self.stderr_tail)

    async def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the child to exit; its return code, or ``None`` if ``timeout`` passed."""
        if not self._exited.done():
            await asyncio.wait([self._exited], timeout=timeout)
        return self.returncode

    # -- internals ---------------------------------------------------------------------------

    async def _close_steps(self) -> None:
        # Before stdin closes: a launcher may exit at its end and leave what it started.
        self._descendants.look()
        self._stop_reading()  # a waiting read returns b""
        self._release_read()  # our end of its stdout
        self.close_write()  # the child sees EOF on stdin once what we wrote is written
        try:
            await self._stop_child()
            if not self._stderr_done.done():
                await asyncio.wait([self._stderr_done], timeout=self._stderr_timeout)
        except BaseException:
            self._signal(signal.SIGKILL)  # interrupted (cancelled): leave no child running
            self._descendants.signal(signal.SIGKILL)
            raise
        _log.debug("%s: exited with %s", self.description, self.returncode)

    def _on_close(self) -> None:
        self._end_stderr()  # closing the pipe also frees a grandchild that holds it
        if self._exited.done():
            self._process.close()
        else:
            # Cancelled before the child was reaped (it has had SIGKILL): the transport's
            # close() would poll (waitpid) and steal the exit status from the child watcher.
            self._exited.add_done_callback(lambda _: self._process.close())

    async def _stop_child(self) -> None:
        # Each step for the child and for what it started alike (as the sync transport).
        descendants = self._descendants
        if await self._all_exited_within(self._exit_timeout):
            return
        if not self._exited.done():
            descendants.look()  # and what it started since
            log_terminating(self.description, self._exit_timeout)
            self._signal(signal.SIGTERM)
        descendants.signal(signal.SIGTERM)
        if await self._all_exited_within(self._terminate_timeout):
            return
        if not self._exited.done():
            log_killing(self.description, self._terminate_timeout)
            self._signal(signal.SIGKILL)
        descendants.signal(signal.SIGKILL)
        await self.wait()

    async def _all_exited_within(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the child and what it started to exit."""
        deadline = self._loop.time() + timeout
        if await self.wait(timeout) is None:
            return False
        while self._descendants.running():
            left = deadline - self._loop.time()
            if left <= 0:
                return False
            await asyncio.sleep(min(TICK, left))  # not our children: nothing to wait on
        return True

    def _signal(self, signum: int) -> None:
        # os.kill, not the transport's send_signal: Popen.send_signal polls (waitpid) first,
        # which can reap the child behind the child watcher's back (it then reports 255).
        if self._exited.done():
            return
        try:
            os.kill(self._pid, signum)
        except ProcessLookupError:
            pass

    def _on_stderr(self) -> None:
        assert self._stderr_fd is not None
        try:
            chunk = os.read(self._stderr_fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._end_stderr()
        elif not self._stderr_failed:
            try:
                self._stderr_log.feed(chunk)
            except Exception:  # keep draining, or the child would block on a full pipe
                self._stderr_failed = True
                _log.exception("stderr reader of process %d failed", self._pid)

    def _end_stderr(self) -> None:
        fd, self._stderr_fd = self._stderr_fd, None
        if fd is None:
            return
        self._loop.remove_reader(fd)
        os.close(fd)
        if not self._stderr_failed:
            try:
                self._stderr_log.finish()
            except Exception:
                _log.exception("stderr reader of process %d failed", self._pid)
        _wake(self._stderr_done)
