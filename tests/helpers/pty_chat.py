"""``acp chat`` with a pty as its controlling terminal (Ctrl-C, prompt redraws, Tab): write
keys, wait for output with a timeout, and always reap the child."""

from __future__ import annotations

import os
import select
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


class PtyChat:
    def __init__(self, cwd: Path, args: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        import pty

        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the chat
            os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, "-m", "acp", "chat", *args], {**os.environ, **(env or {})})
        self.seen = b""

    def write(self, data: bytes) -> None:
        os.write(self.fd, data)

    def expect(self, text: bytes, timeout: float = 30.0) -> None:
        """Wait until ``text`` was printed (since the start); fail with what was seen."""
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{text!r} not seen in {self.seen!r}"
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                assert chunk, f"the chat ended before {text!r}: {self.seen!r}"
                self.seen += chunk

    def after(self, marker: bytes) -> bytes:
        """What was printed after the last ``marker``."""
        return self.seen.rsplit(marker, 1)[-1]

    def exit_code(self) -> int:
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        try:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)
