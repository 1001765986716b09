"""ProcessTransport against real child processes (tests/helpers/echo_child.py)."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acp.errors import ConnectionClosedError
from acp.transport import ProcessTransport, Transport

HELPER = str(Path(__file__).parent / "helpers" / "echo_child.py")
JOIN = 10.0
LOGGER = "acp.transport.process"


def child(*args: str, **kwargs: Any) -> ProcessTransport:
    return ProcessTransport([sys.executable, HELPER, *args], **kwargs)


class Lines:
    """Reads whole lines from a transport."""

    def __init__(self, t: Transport) -> None:
        self.t = t
        self.buf = b""

    def next(self) -> bytes:
        while b"\n" not in self.buf:
            chunk = self.t.read()
            if not chunk:
                raise EOFError(f"EOF with {self.buf!r} pending")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"

    def rest(self) -> bytes:
        while chunk := self.t.read():
            self.buf += chunk
        rest, self.buf = self.buf, b""
        return rest


@pytest.fixture(autouse=True)
def no_thread_left() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    left = [t for t in threading.enumerate() if t not in before]
    assert left == [], f"threads left running: {left}"


def test_echo_and_clean_exit_on_stdin_eof(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    t = child("echo", "3")
    try:
        assert str(t.pid) in t.description and "echo_child.py" in t.description
        assert t.argv[-2:] == ("echo", "3")
        assert t.returncode is None
        lines = Lines(t)
        t.write(b'{"id":1}\n')
        assert lines.next() == b'{"id":1}\n'
        t.write(b"a\nb\n")
        assert lines.next() == b"a\n"
        assert lines.next() == b"b\n"
        t.close_write()
        assert lines.rest() == b""  # the child exits at stdin EOF
        assert t.wait(JOIN) == 0
        assert t.returncode == 0
    finally:
        t.close()
    records = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.INFO]
    messages = [r.getMessage() for r in records]
    for i in range(3):
        assert f"[{t.pid}] stderr line {i}" in messages
    assert f"[{t.pid}] stderr bye" in messages
    stderr_records = [r for r in records if "stderr" in r.getMessage()]
    assert all(r.threadName == f"acp-stderr-{t.pid}" for r in stderr_records)
    assert all(getattr(r, "acp_pid", None) == t.pid for r in stderr_records)


def test_ten_megabytes_of_stderr_do_not_block_the_child(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    t = child("stderr-flood", str(10 * 1024 * 1024))
    with t:
        lines = Lines(t)
        # The child writes all of stderr before this line: it arrives only if stderr is drained.
        assert lines.next() == b"flood done\n"
        t.write(b"still alive\n")
        assert lines.next() == b"still alive\n"
    assert t.returncode == 0
    flood = [r for r in caplog.records if r.getMessage() == f"[{t.pid}] " + "x" * 1023]
    assert len(flood) == 10 * 1024


def test_inherit_env_true_adds_env_to_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_TEST_INHERITED", "from parent")
    monkeypatch.setenv("ACP_TEST_OVERRIDDEN", "old")
    with child("env", env={"ACP_TEST_EXTRA": "1", "ACP_TEST_OVERRIDDEN": "new"}) as t:
        env = json.loads(Lines(t).rest())
    assert env["ACP_TEST_INHERITED"] == "from parent"
    assert env["ACP_TEST_EXTRA"] == "1"
    assert env["ACP_TEST_OVERRIDDEN"] == "new"
    assert env["PATH"] == os.environ["PATH"]


def test_inherit_env_false_gives_exactly_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_TEST_INHERITED", "from parent")
    with child("env", env={"ACP_TEST_ONLY": "yes"}, inherit_env=False) as t:
        env = json.loads(Lines(t).rest())
    assert env == {"ACP_TEST_ONLY": "yes"}


def test_inherit_env_false_without_env_is_empty() -> None:
    with child("env", inherit_env=False) as t:
        env = json.loads(Lines(t).rest())
    assert env == {}


def test_cwd(tmp_path: Path) -> None:
    with child("cwd", cwd=tmp_path) as t:
        assert Lines(t).next().decode().strip() == str(tmp_path.resolve())


def test_close_terminates_a_child_that_ignores_stdin_eof() -> None:
    t = child("ignore-eof", exit_timeout=0.2, terminate_timeout=JOIN)
    assert Lines(t).next() == b"ready\n"
    t.close()
    assert t.returncode == -signal.SIGTERM


def test_close_kills_a_child_that_ignores_eof_and_sigterm(caplog: pytest.LogCaptureFixture) -> None:
    t = child("stubborn", exit_timeout=0.2, terminate_timeout=0.2)
    assert Lines(t).next() == b"ready\n"  # its SIGTERM handler is installed
    started = time.monotonic()
    t.close()
    assert time.monotonic() - started < 5.0
    assert t.returncode == -signal.SIGKILL  # reaped: no zombie
    with pytest.raises(ChildProcessError):
        os.waitpid(t.pid, os.WNOHANG)
    assert any("killing" in r.getMessage() for r in caplog.records if r.name == LOGGER)
    t.close()  # idempotent


def test_close_wakes_a_blocked_read_and_the_child_exits() -> None:
    t = child("echo")
    out: dict[str, bytes] = {}
    reader = threading.Thread(target=lambda: out.setdefault("data", t.read()), daemon=True)
    reader.start()
    t.close()
    reader.join(JOIN)
    assert not reader.is_alive()
    assert out == {"data": b""}
    assert t.returncode == 0  # it saw EOF on stdin and exited by itself
    with pytest.raises(ConnectionClosedError):
        t.write(b"x\n")


def test_concurrent_close_returns_only_when_done() -> None:
    t = child("stubborn", exit_timeout=0.1, terminate_timeout=0.1)
    assert Lines(t).next() == b"ready\n"
    closers = [threading.Thread(target=t.close, daemon=True) for _ in range(4)]
    for c in closers:
        c.start()
    for c in closers:
        c.join(JOIN)
        assert not c.is_alive()
    assert t.returncode == -signal.SIGKILL


def test_child_killed_read_eof_then_write_raises() -> None:
    with child("echo") as t:
        lines = Lines(t)
        t.write(b"hi\n")
        assert lines.next() == b"hi\n"
        os.kill(t.pid, signal.SIGKILL)
        assert lines.rest() == b""
        assert t.wait(JOIN) == -signal.SIGKILL
        with pytest.raises(ConnectionClosedError):
            t.write(b"anyone?\n")


def test_grandchild_holding_stderr_open_does_not_hang_close() -> None:
    t = child("grandchild", stderr_timeout=0.2)
    grandchild = int(Lines(t).next())
    try:
        started = time.monotonic()
        t.close()  # the child exits at stdin EOF; the grandchild keeps stderr open for 60 s
        assert time.monotonic() - started < 5.0
        assert t.returncode == 0
    finally:
        os.kill(grandchild, signal.SIGKILL)


def test_missing_executable_is_a_clear_error() -> None:
    fds = set(os.listdir("/proc/self/fd"))
    with pytest.raises(FileNotFoundError, match="no-such-acp-agent-xyz --flag"):
        ProcessTransport(["no-such-acp-agent-xyz", "--flag"])
    assert set(os.listdir("/proc/self/fd")) == fds


def test_argv_must_be_a_sequence_of_arguments() -> None:
    with pytest.raises(TypeError):
        ProcessTransport("python -V")
    with pytest.raises(ValueError):
        ProcessTransport([])


def test_no_fd_is_leaked() -> None:
    before = set(os.listdir("/proc/self/fd"))
    t = child("echo", "100")
    t.write(b"x\n")
    assert Lines(t).next() == b"x\n"
    t.close()
    assert set(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("new_session", [False, True])
def test_start_new_session_keeps_the_terminal_signals_away(new_session: bool) -> None:
    t = child(start_new_session=new_session)
    try:
        same = os.getsid(t.pid) == os.getsid(0)
        assert same is not new_session
        assert (os.getpgid(t.pid) == os.getpgid(0)) is not new_session
    finally:
        t.close()
    assert t.returncode is not None
