"""Ready-made ``terminal/*`` handlers that run the agent's commands as local processes.

:class:`LocalTerminals` implements the five terminal methods; register all five (the client
advertises the ``terminal`` capability only when all are present)::

    terminals = LocalTerminals(allowed_cwd_roots=["/home/me/project"])
    builder.create_terminal_handler(terminals.create_terminal)
    builder.terminal_output_handler(terminals.terminal_output)
    builder.wait_for_terminal_exit_handler(terminals.wait_for_terminal_exit)
    builder.kill_terminal_handler(terminals.kill_terminal)
    builder.release_terminal_handler(terminals.release_terminal)
    ...
    terminals.close()      # or use it as a context manager

Behaviour, method by method:

* ``terminal/create`` starts ``command`` with ``args`` directly (no shell, unless ``shell=`` is
  given: some agents send a whole shell line as ``command``) in its own session and process group,
  stdin from ``/dev/null``, stdout and stderr merged into one pipe read by a thread named
  ``acp-terminal-<id>``; a second thread ``acp-terminal-<id>-wait`` reaps the process. It answers
  at once with the terminal id. ``cwd`` must be absolute (and inside ``allowed_cwd_roots`` when
  given; with roots and no ``cwd`` the first root is used); ``env`` is applied over the inherited
  environment (``inherit_env``) and the constructor's ``env``. A command that cannot be started
  (not found, not executable, bad ``cwd``) is refused with -32602.
* **Output limit**: the terminal keeps at most ``outputByteLimit`` bytes (default
  ``default_output_byte_limit``, never more than ``max_output_byte_limit``), dropping the *oldest*
  bytes first and cutting at a UTF-8 character boundary, so the kept output is the newest and
  decodes cleanly; ``truncated`` tells that something was dropped. Bytes that are not UTF-8 are
  shown as U+FFFD; an unfinished character at the very end (the process is still writing it) is
  held back until it completes or the process exits.
* ``terminal/output`` answers the output so far, ``truncated`` and, once the process has exited,
  its exit status. The status is published only after the output pipe has been drained (or a short
  grace period, when a background grandchild keeps the pipe open), so output read after
  ``wait_for_exit`` is complete.
* ``terminal/wait_for_exit`` blocks until the process exits and answers ``exitCode`` or
  ``signal`` (a name such as ``"SIGKILL"``). If the request is cancelled (``ctx.cancelled`` set, by
  ``$/cancel_request``) it stops waiting and raises -32800 ("Request cancelled"), the answer the
  protocol's cancellation rules call for; the terminal itself keeps running.
* ``terminal/kill`` sends SIGKILL to the whole process group (children included); the terminal
  stays valid: its output and exit status can still be read until it is released.
* ``terminal/release`` kills the process group if anything still runs, reaps the process, stops
  the threads and forgets the terminal; its id is unknown afterwards.
* An unknown terminal id, a released one, or one that belongs to another session is refused with
  -32602 ("Invalid params"): terminal ids are request parameters, not resources of the client.
* :meth:`LocalTerminals.close` releases every terminal (no zombie processes, no threads left) and
  refuses new ones.
"""

from __future__ import annotations

import logging
import os
import selectors
import shlex
import signal
import subprocess
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import INVALID_REQUEST, RequestError
from ..schema import (
    CreateTerminalRequest,
    CreateTerminalResponse,
    KillTerminalRequest,
    KillTerminalResponse,
    ReleaseTerminalRequest,
    ReleaseTerminalResponse,
    TerminalExitStatus,
    TerminalOutputRequest,
    TerminalOutputResponse,
    WaitForTerminalExitRequest,
    WaitForTerminalExitResponse,
)

__all__ = [
    "LocalTerminals",
    "DEFAULT_OUTPUT_BYTE_LIMIT",
    "DEFAULT_MAX_OUTPUT_BYTE_LIMIT",
]

logger = logging.getLogger("acp.client.terminals")

DEFAULT_OUTPUT_BYTE_LIMIT = 1024 * 1024
"""Output kept per terminal when the request gives no ``outputByteLimit``: 1 MiB."""

DEFAULT_MAX_OUTPUT_BYTE_LIMIT = 64 * 1024 * 1024
"""Largest ``outputByteLimit`` honoured (larger requests are capped): 64 MiB."""

_READ_SIZE = 64 * 1024
_EOF_GRACE = 0.5  # seconds the exit status waits for the pipe to drain after the process exits
_CANCEL_POLL = 0.05  # seconds between looks at ctx.cancelled while waiting for an exit
_JOIN_TIMEOUT = 5.0


def _is_cancelled(ctx: Any) -> bool:
    event = getattr(ctx, "cancelled", None)
    return bool(event is not None and event.is_set())


def _utf8_start(buf: bytearray | bytes, start: int) -> int:
    """The first character boundary at or after ``start`` (skips at most 3 continuation bytes)."""
    end = min(len(buf), start + 3)
    i = start
    while i < end and (buf[i] & 0xC0) == 0x80:
        i += 1
    return i


def _complete_end(buf: bytearray | bytes) -> int:
    """Length of ``buf`` without a trailing, still incomplete UTF-8 sequence."""
    n = len(buf)
    for back in range(1, min(4, n) + 1):
        byte = buf[n - back]
        if (byte & 0xC0) == 0x80:
            continue  # continuation byte: keep looking for the lead byte
        if byte >= 0xF0:
            need = 4
        elif byte >= 0xE0:
            need = 3
        elif byte >= 0xC0:
            need = 2
        else:
            need = 1
        return n - back if back < need else n
    return n


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


class _Terminal:
    """One running (or finished) command and its captured output."""

    def __init__(
        self, terminal_id: str, session_id: str, proc: subprocess.Popen[bytes], limit: int
    ) -> None:
        self.id = terminal_id
        self.session_id = session_id
        self.proc = proc
        self.pid = proc.pid
        self.limit = limit
        self.lock = threading.Lock()
        self.output = bytearray()
        self.truncated = False
        self.exit_status: TerminalExitStatus | None = None
        self.exited = threading.Event()
        self.eof = threading.Event()
        self.stop_r, self.stop_w = os.pipe()
        assert proc.stdout is not None
        self.out_fd = proc.stdout.fileno()
        self.reader = threading.Thread(
            target=self._read_loop, name=f"acp-terminal-{terminal_id}", daemon=True
        )
        self.waiter = threading.Thread(
            target=self._wait_loop, name=f"acp-terminal-{terminal_id}-wait", daemon=True
        )

    def start(self) -> None:
        self.reader.start()
        self.waiter.start()

    # -- threads --

    def _append(self, data: bytes) -> None:
        with self.lock:
            buf = self.output
            buf += data
            excess = len(buf) - self.limit
            if excess > 0:
                cut = _utf8_start(buf, excess)
                del buf[:cut]
                self.truncated = True

    def _read_loop(self) -> None:
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self.out_fd, selectors.EVENT_READ, "out")
                sel.register(self.stop_r, selectors.EVENT_READ, "stop")
                while True:
                    events = sel.select()
                    if any(key.data == "stop" for key, _ in events):
                        # Released: take what is already in the pipe, without blocking.
                        os.set_blocking(self.out_fd, False)
                        try:
                            while chunk := os.read(self.out_fd, _READ_SIZE):
                                self._append(chunk)
                        except (BlockingIOError, OSError):
                            pass
                        return
                    chunk = os.read(self.out_fd, _READ_SIZE)
                    if not chunk:
                        return
                    self._append(chunk)
        except Exception:  # pragma: no cover - a reader must never die loudly
            logger.exception("terminal %s: output reader failed", self.id)
        finally:
            self.eof.set()

    def _wait_loop(self) -> None:
        returncode = self.proc.wait()
        # Let the reader take the last bytes, unless a background child keeps the pipe open.
        self.eof.wait(_EOF_GRACE)
        if returncode < 0:
            status = TerminalExitStatus(exit_code=None, signal=_signal_name(-returncode))
        else:
            status = TerminalExitStatus(exit_code=returncode, signal=None)
        with self.lock:
            self.exit_status = status
        self.exited.set()
        logger.debug(
            "terminal %s exited (code=%s, signal=%s)", self.id, status.exit_code, status.signal
        )

    # -- operations --

    def snapshot(self) -> tuple[str, bool, TerminalExitStatus | None]:
        with self.lock:
            status = self.exit_status
            data = bytes(self.output)
            truncated = self.truncated
        if status is None:
            data = data[: _complete_end(data)]
        return data.decode("utf-8", errors="replace"), truncated, status

    def kill(self) -> None:
        """SIGKILL the whole process group (the leader's pid is the group id)."""
        if self.exited.is_set() and self.eof.is_set():
            return  # the group may be gone and its id reused: do not signal
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.proc.returncode is None:
            try:  # in case the leader left its group
                self.proc.send_signal(signal.SIGKILL)
            except (ProcessLookupError, OSError):
                pass

    def dispose(self) -> None:
        """Kill, reap, stop the threads and close the descriptors."""
        self.kill()
        self.waiter.join(_JOIN_TIMEOUT + _EOF_GRACE)
        if self.waiter.is_alive():  # pragma: no cover - only if the kernel refuses to kill
            logger.warning("terminal %s: process %d did not die", self.id, self.pid)
        self.reader.join(_EOF_GRACE)
        if self.reader.is_alive():
            # A process outside the group still holds the pipe: stop reading.
            os.write(self.stop_w, b"x")
            self.reader.join(_JOIN_TIMEOUT)
        for fd in (self.stop_r, self.stop_w):
            try:
                os.close(fd)
            except OSError:  # pragma: no cover
                pass
        if not self.reader.is_alive() and self.proc.stdout is not None:
            self.proc.stdout.close()


class LocalTerminals:
    """The five ``terminal/*`` handlers, running commands as local processes.

    Args:
        default_output_byte_limit: output kept when a request gives no ``outputByteLimit``.
        max_output_byte_limit: cap on a request's ``outputByteLimit`` (``None``: no cap).
        allowed_cwd_roots: when given, a terminal's ``cwd`` must resolve inside one of these
            folders, and a request without ``cwd`` runs in the first one.
        env: variables set for every command (before the request's own ``env``).
        inherit_env: start from this process's environment (default) or from an empty one.
        shell: run ``command`` through a shell: ``True`` for ``/bin/sh``, or a shell's path; the
            shell gets ``-c "command arg..."`` with the args quoted. ``False`` (default) executes
            ``command`` directly with ``args``.

    Thread-safe; use it as a context manager or call :meth:`close` when the client closes.
    """

    def __init__(
        self,
        *,
        default_output_byte_limit: int = DEFAULT_OUTPUT_BYTE_LIMIT,
        max_output_byte_limit: int | None = DEFAULT_MAX_OUTPUT_BYTE_LIMIT,
        allowed_cwd_roots: Sequence[str | Path] | None = None,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
        shell: bool | str = False,
    ) -> None:
        if default_output_byte_limit < 0:
            raise ValueError("default_output_byte_limit must be >= 0")
        if max_output_byte_limit is not None and max_output_byte_limit < 0:
            raise ValueError("max_output_byte_limit must be >= 0")
        if isinstance(allowed_cwd_roots, (str, Path)):
            raise TypeError("allowed_cwd_roots must be a sequence of paths, not a single path")
        self._default_limit = default_output_byte_limit
        self._max_limit = max_output_byte_limit
        self._cwd_roots: tuple[str, ...] | None = (
            None
            if allowed_cwd_roots is None
            else tuple(os.path.realpath(os.path.abspath(os.fspath(r))) for r in allowed_cwd_roots)
        )
        if self._cwd_roots is not None and not self._cwd_roots:
            raise ValueError("allowed_cwd_roots must not be empty (use None for no restriction)")
        self._env = dict(env) if env is not None else {}
        self._inherit_env = inherit_env
        self._shell: str | None = "/bin/sh" if shell is True else (shell or None)
        self._lock = threading.Lock()
        self._terminals: dict[str, _Terminal] = {}
        self._closed = False

    # ---- lifecycle ----

    def __enter__(self) -> LocalTerminals:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Kill and reap every command, stop every thread, and refuse new terminals. Idempotent."""
        with self._lock:
            self._closed = True
            terminals = list(self._terminals.values())
            self._terminals.clear()
        for term in terminals:
            term.kill()  # all at once first, then reap one by one
        for term in terminals:
            term.dispose()
        if terminals:
            logger.debug("closed %d terminal(s)", len(terminals))

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def terminal_ids(self, session_id: str | None = None) -> list[str]:
        """Ids of the live (not released) terminals, of one session or of all."""
        with self._lock:
            return [
                t.id
                for t in self._terminals.values()
                if session_id is None or t.session_id == session_id
            ]

    def pid(self, session_id: str, terminal_id: str) -> int:
        """The process id of a terminal's command (its process group id too)."""
        return self._get(session_id, terminal_id).pid

    def release_session(self, session_id: str) -> None:
        """Release every terminal of one session (for example when the session ends)."""
        with self._lock:
            mine = [t for t in self._terminals.values() if t.session_id == session_id]
            for t in mine:
                del self._terminals[t.id]
        for t in mine:
            t.dispose()

    # ---- handlers ----

    def create_terminal(self, request: CreateTerminalRequest, ctx: Any) -> CreateTerminalResponse:
        """Handle ``terminal/create``: start the command and answer its terminal id at once."""
        if _is_cancelled(ctx):
            raise RequestError.request_cancelled()
        if self._closed:
            raise RequestError(INVALID_REQUEST, "terminals are closed")
        if not request.command:
            raise RequestError.invalid_params("command must not be empty")
        args = list(request.args or [])
        if self._shell is not None:
            line = " ".join([request.command, *(shlex.quote(a) for a in args)])
            argv = [self._shell, "-c", line]
        else:
            argv = [request.command, *args]
        if any("\0" in a for a in argv):
            raise RequestError.invalid_params("command and args must not contain NUL characters")
        cwd = self._cwd(request.cwd)
        env = self._environment(request)
        limit = self._limit(request.output_byte_limit)
        terminal_id = f"term_{uuid.uuid4().hex}"
        logger.debug("terminal %s: start %r in %s", terminal_id, argv, cwd)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except FileNotFoundError:
            raise RequestError.invalid_params(f"command not found: {request.command}") from None
        except PermissionError:
            raise RequestError.invalid_params(
                f"command is not executable: {request.command}"
            ) from None
        except OSError as exc:
            raise RequestError.invalid_params(
                f"cannot start {request.command}: {exc.strerror or 'error'}"
            ) from None
        term = _Terminal(terminal_id, request.session_id, proc, limit)
        with self._lock:
            closed = self._closed
            if not closed:
                self._terminals[terminal_id] = term
        term.start()
        if closed:  # close() ran while the process was starting
            term.dispose()
            raise RequestError(INVALID_REQUEST, "terminals are closed")
        logger.info("terminal %s started (pid %d)", terminal_id, proc.pid)
        return CreateTerminalResponse(terminal_id=terminal_id)

    def terminal_output(self, request: TerminalOutputRequest, ctx: Any) -> TerminalOutputResponse:
        """Handle ``terminal/output``: output so far, whether it was truncated, exit status."""
        term = self._get(request.session_id, request.terminal_id)
        output, truncated, status = term.snapshot()
        return TerminalOutputResponse(output=output, truncated=truncated, exit_status=status)

    def wait_for_terminal_exit(
        self, request: WaitForTerminalExitRequest, ctx: Any
    ) -> WaitForTerminalExitResponse:
        """Handle ``terminal/wait_for_exit``: block until the command exits.

        Raises -32800 when ``ctx.cancelled`` is set first (the command keeps running).
        """
        term = self._get(request.session_id, request.terminal_id)
        cancelled = getattr(ctx, "cancelled", None)
        if cancelled is None:
            term.exited.wait()
        else:
            while not term.exited.wait(_CANCEL_POLL):
                if cancelled.is_set():
                    raise RequestError.request_cancelled()
        status = term.exit_status
        assert status is not None
        return WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    def kill_terminal(self, request: KillTerminalRequest, ctx: Any) -> KillTerminalResponse:
        """Handle ``terminal/kill``: SIGKILL the process group; the terminal stays readable."""
        term = self._get(request.session_id, request.terminal_id)
        logger.debug("terminal %s: kill", term.id)
        term.kill()
        return KillTerminalResponse()

    def release_terminal(
        self, request: ReleaseTerminalRequest, ctx: Any
    ) -> ReleaseTerminalResponse:
        """Handle ``terminal/release``: kill if still running, reap, and forget the terminal."""
        with self._lock:
            term = self._lookup(request.session_id, request.terminal_id)
            del self._terminals[term.id]
        logger.debug("terminal %s: release", term.id)
        term.dispose()
        return ReleaseTerminalResponse()

    # ---- helpers ----

    def _lookup(self, session_id: str, terminal_id: str) -> _Terminal:
        term = self._terminals.get(terminal_id)
        if term is None or term.session_id != session_id:
            raise RequestError.invalid_params(
                f"unknown terminal: {terminal_id}", {"terminalId": terminal_id}
            )
        return term

    def _get(self, session_id: str, terminal_id: str) -> _Terminal:
        with self._lock:
            return self._lookup(session_id, terminal_id)

    def _limit(self, requested: int | None) -> int:
        if requested is None:
            limit = self._default_limit
        elif requested < 0:
            raise RequestError.invalid_params("outputByteLimit must be >= 0")
        else:
            limit = requested
        if self._max_limit is not None:
            limit = min(limit, self._max_limit)
        return limit

    def _cwd(self, cwd: str | None) -> str | None:
        if cwd is None:
            return self._cwd_roots[0] if self._cwd_roots else None
        if "\0" in cwd or not os.path.isabs(cwd):
            raise RequestError.invalid_params(f"cwd must be an absolute path: {cwd!r}")
        real = os.path.realpath(cwd)
        if self._cwd_roots is not None and not any(
            real == root or real.startswith(root.rstrip(os.sep) + os.sep)
            for root in self._cwd_roots
        ):
            raise RequestError.invalid_params(f"cwd {cwd} is outside the allowed folders")
        if not os.path.isdir(real):
            raise RequestError.invalid_params(f"cwd is not an existing folder: {cwd}")
        return real

    def _environment(self, request: CreateTerminalRequest) -> dict[str, str]:
        env = dict(os.environ) if self._inherit_env else {}
        env.update(self._env)
        for var in request.env or []:
            if not var.name or "=" in var.name or "\0" in var.name or "\0" in var.value:
                raise RequestError.invalid_params(f"invalid environment variable: {var.name!r}")
            env[var.name] = var.value
        return env
