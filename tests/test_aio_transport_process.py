"""acp.aio.transport.ProcessTransport against real child processes (tests/helpers/echo_child.py).

No pytest-asyncio: each test drives its coroutine with ``run()``, which also checks that no task
is left on the loop when it ends.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from acp.aio.transport import AsyncTransport, ProcessTransport
from acp.errors import ConnectionClosedError
from acp.transport import ProcessTransport as SyncProcessTransport

from .conftest import helper_argv

JOIN = 10.0
LOGGER = "acp.transport.process"
T = TypeVar("T")


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """asyncio.run(main()), then: no task of ours is left on the loop."""

    async def checked() -> T:
        result = await main()
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert left == [], f"tasks left running: {left}"
        return result

    return asyncio.run(checked())


async def child(*args: str, **kwargs: Any) -> ProcessTransport:
    return await ProcessTransport.spawn(helper_argv("echo_child", *args), **kwargs)


class Lines:
    """Reads whole lines from a transport."""

    def __init__(self, t: AsyncTransport) -> None:
        self.t = t
        self.buf = b""

    async def next(self) -> bytes:
        while b"\n" not in self.buf:
            chunk = await asyncio.wait_for(self.t.read(), JOIN)
            if not chunk:
                raise EOFError(f"EOF with {self.buf!r} pending")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"

    async def rest(self) -> bytes:
        while chunk := await asyncio.wait_for(self.t.read(), JOIN):
            self.buf += chunk
        rest, self.buf = self.buf, b""
        return rest


@pytest.fixture(autouse=True)
def _no_thread_left(no_thread_leak: None) -> Iterator[None]:
    # Python < 3.12 watches children with a thread per child; it must be gone after close().
    yield


def test_echo_and_clean_exit_on_stdin_eof(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def main() -> int:
        t = await child("echo", "3")
        try:
            assert t.description == f"process {t.pid} ({' '.join(t.argv)})"
            assert t.argv[-2:] == ("echo", "3")
            assert t.returncode is None
            lines = Lines(t)
            t.write(b'{"id":1}\n')
            assert await lines.next() == b'{"id":1}\n'
            t.write(b"a\nb\n")
            await t.drain()
            assert await lines.next() == b"a\n"
            assert await lines.next() == b"b\n"
            t.close_write()
            with pytest.raises(ConnectionClosedError):
                t.write(b"after half-close\n")
            assert await lines.rest() == b""  # the child exits at stdin EOF
            assert await t.wait(JOIN) == 0
            assert t.returncode == 0
        finally:
            await t.close()
        return t.pid

    pid = run(main)
    records = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.INFO]
    stderr_records = [r for r in records if "stderr" in r.getMessage()]
    assert [r.getMessage() for r in stderr_records] == [
        *(f"[{pid}] stderr line {i}" for i in range(3)),
        f"[{pid}] stderr bye",
    ]
    assert all(getattr(r, "acp_pid", None) == pid for r in stderr_records)


def test_mebibytes_each_way_with_flow_control() -> None:
    # 8 MiB of lines through the echoing child. Nobody reads its output at first, so it stops
    # reading its input: drain() must wait (and not lose anything) until we read again.
    payload = b"".join(b"%07d " % i + b"x" * 246 + b"\n" for i in range(32768))

    async def main() -> None:
        t = await child("echo")
        async with t:
            for offset in range(0, len(payload), 1 << 20):
                t.write(payload[offset : offset + (1 << 20)])
            drain = asyncio.ensure_future(t.drain())
            await asyncio.wait([drain], timeout=0.3)
            assert not drain.done(), "drain() returned with megabytes stuck in the pipes"
            digest = hashlib.sha256()
            received = 0
            while received < len(payload):
                chunk = await asyncio.wait_for(t.read(), JOIN)
                assert chunk, f"EOF after {received} bytes"
                digest.update(chunk)
                received += len(chunk)
            await asyncio.wait_for(drain, JOIN)
            assert received == len(payload)
            assert digest.digest() == hashlib.sha256(payload).digest()

    run(main)


def test_ten_megabytes_of_stderr_do_not_block_the_child(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def main() -> int:
        async with await child("stderr-flood", str(10 * 1024 * 1024)) as t:
            lines = Lines(t)
            # The child writes all of stderr before this line: it arrives only if stderr drains.
            assert await lines.next() == b"flood done\n"
            t.write(b"still alive\n")
            assert await lines.next() == b"still alive\n"
        assert t.returncode == 0
        return t.pid

    pid = run(main)
    flood = [r for r in caplog.records if r.getMessage() == f"[{pid}] " + "x" * 1023]
    assert len(flood) == 10 * 1024


def test_a_long_stderr_line_is_logged_in_pieces(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    script = "import sys; sys.stderr.write('y' * 200000 + '\\nshort\\n')"

    async def main() -> int:
        t = await ProcessTransport.spawn([sys.executable, "-c", script])
        await t.close()
        return t.pid

    pid = run(main)
    logged = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    pieces = [m for m in logged if m.startswith(f"[{pid}] y")]
    assert len(pieces) >= 2 and all(len(m) <= len(f"[{pid}] ") + 65536 * 2 for m in pieces)
    assert sum(len(m) - len(f"[{pid}] ") for m in pieces) == 200000
    assert f"[{pid}] short" in logged


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"env": {"ACP_TEST_EXTRA": "1", "ACP_TEST_OVERRIDDEN": "new"}}, "inherited"),
        ({"env": {"ACP_TEST_ONLY": "yes"}, "inherit_env": False}, {"ACP_TEST_ONLY": "yes"}),
        ({"inherit_env": False}, {}),
    ],
)
def test_environment(monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], expected: Any) -> None:
    monkeypatch.setenv("ACP_TEST_INHERITED", "from parent")
    monkeypatch.setenv("ACP_TEST_OVERRIDDEN", "old")

    async def main() -> Any:
        async with await child("env", **kwargs) as t:
            return json.loads(await Lines(t).rest())

    env = run(main)
    if expected == "inherited":
        assert env["ACP_TEST_INHERITED"] == "from parent"
        assert (env["ACP_TEST_EXTRA"], env["ACP_TEST_OVERRIDDEN"]) == ("1", "new")
        assert env["PATH"] == os.environ["PATH"]
    else:
        assert env == expected


def test_cwd(tmp_path: Path) -> None:
    async def main() -> bytes:
        async with await child("cwd", cwd=tmp_path) as t:
            return await Lines(t).next()

    assert run(main).decode().strip() == str(tmp_path.resolve())


@pytest.mark.parametrize(
    ("mode", "returncode", "logged"),
    [
        ("echo", 0, None),  # exits by itself at stdin EOF: no signal
        ("ignore-eof", -signal.SIGTERM, "terminating"),
        ("stubborn", -signal.SIGKILL, "killing"),  # ignores SIGTERM too
    ],
)
def test_the_close_ladder(
    caplog: pytest.LogCaptureFixture, mode: str, returncode: int, logged: str | None
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def main() -> tuple[ProcessTransport, float]:
        t = await child(mode, exit_timeout=0.3, terminate_timeout=0.3)
        if mode != "echo":
            assert await Lines(t).next() == b"ready\n"  # its signal handling is set up
        started = time.monotonic()
        await t.close()
        took = time.monotonic() - started
        await t.close()  # idempotent
        return t, took

    t, took = run(main)
    assert t.returncode == returncode
    with pytest.raises(ChildProcessError):  # reaped: no zombie
        os.waitpid(t.pid, os.WNOHANG)
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    ladder = [m for m in messages if m.endswith(("terminating", "killing"))]
    if logged is None:
        assert ladder == [] and took < 0.3  # no grace period spent
    else:
        assert ladder[-1].startswith(t.description) and ladder[-1].endswith(logged)
        assert took < 5.0


def test_close_wakes_a_pending_read_and_write_after_close_raises() -> None:
    async def main() -> None:
        t = await child("echo")
        reader = asyncio.ensure_future(t.read())
        await asyncio.wait([reader], timeout=0.05)
        assert not reader.done()  # waiting for output that never comes
        await t.close()
        assert await asyncio.wait_for(reader, JOIN) == b""
        assert t.returncode == 0  # it saw EOF on stdin and exited by itself
        assert await t.read() == b""
        with pytest.raises(ConnectionClosedError, match="transport is closed"):
            t.write(b"x\n")
        await t.drain()  # nothing was left unwritten

    run(main)


def test_close_drops_what_the_child_never_takes_and_drain_says_so() -> None:
    # A child that reads nothing: close() cannot write the buffered input (and does not wait
    # for it beyond the ladder); the pending drain() learns that it was lost.
    script = (
        "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        " print('ready', flush=True); signal.pause()"
    )

    async def main() -> None:
        t = await ProcessTransport.spawn(
            [sys.executable, "-c", script], exit_timeout=0.1, terminate_timeout=0.1
        )
        assert await Lines(t).next() == b"ready\n"
        t.write(b"x" * (4 << 20))
        drain = asyncio.ensure_future(t.drain())
        await asyncio.wait([drain], timeout=0.05)
        assert not drain.done()
        await asyncio.wait_for(t.close(), JOIN)
        assert t.returncode == -signal.SIGKILL
        with pytest.raises(ConnectionClosedError):
            await drain
        with pytest.raises(ConnectionClosedError):
            await t.drain()  # and stays so

    run(main)


def test_close_writes_what_was_buffered_before_the_childs_eof() -> None:
    # write() then close() at once: the child still gets every byte, then EOF, and exits 0.
    payload = b"".join(b"%06d\n" % i for i in range(300000))  # 2 MiB, more than a pipe holds
    script = (
        "import hashlib, sys; data = sys.stdin.buffer.read();"
        " sys.stderr.write(f'{len(data)} {hashlib.sha256(data).hexdigest()}\\n')"
    )

    async def main() -> ProcessTransport:
        t = await ProcessTransport.spawn([sys.executable, "-c", script])
        t.write(payload)
        await t.close()
        return t

    t = run(main)
    assert t.returncode == 0
    assert t.stderr_tail == f"{len(payload)} {hashlib.sha256(payload).hexdigest()}"


def test_concurrent_close_returns_only_when_done() -> None:
    async def main() -> None:
        t = await child("stubborn", exit_timeout=0.1, terminate_timeout=0.1)
        assert await Lines(t).next() == b"ready\n"
        await asyncio.wait_for(asyncio.gather(*(t.close() for _ in range(4))), JOIN)
        assert t.returncode == -signal.SIGKILL

    run(main)


def test_a_cancelled_close_kills_the_child_at_once() -> None:
    async def main() -> None:
        t = await child("stubborn", exit_timeout=JOIN, terminate_timeout=JOIN)
        assert await Lines(t).next() == b"ready\n"
        closing = asyncio.ensure_future(t.close())
        await asyncio.wait([closing], timeout=0.05)
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        assert await t.wait(JOIN) == -signal.SIGKILL

    run(main)


def test_a_killed_child_reads_eof_then_write_raises() -> None:
    async def main() -> None:
        async with await child("echo") as t:
            lines = Lines(t)
            t.write(b"hi\n")
            assert await lines.next() == b"hi\n"
            os.kill(t.pid, signal.SIGKILL)
            assert await lines.rest() == b""
            assert await t.wait(JOIN) == -signal.SIGKILL
            with pytest.raises(ConnectionClosedError, match="peer closed the stream"):
                t.write(b"anyone?\n")
            error = await t.closed_error("session/prompt")
            assert str(error) == "session/prompt: the agent process was killed by SIGKILL"
            assert (error.returncode, error.stderr_tail) == (-signal.SIGKILL, "")

    run(main)


def test_closed_error_while_the_child_still_runs() -> None:
    async def main() -> None:
        async with await child("echo", "1") as t:
            error = await t.closed_error("initialize", timeout=0.05)
            assert str(error).startswith(
                "initialize: the agent closed the connection (its process is still running)"
            )
            assert error.returncode is None

    run(main)


def test_a_grandchild_holding_stderr_open_does_not_hang_close() -> None:
    async def main() -> tuple[int, float, int | None]:
        t = await child("grandchild", stderr_timeout=0.2)
        grandchild = int(await Lines(t).next())
        started = time.monotonic()
        try:
            await t.close()  # the child exits at stdin EOF; the grandchild keeps stderr open
        finally:
            os.kill(grandchild, signal.SIGKILL)
        return grandchild, time.monotonic() - started, t.returncode

    _, took, returncode = run(main)
    assert took < 5.0 and returncode == 0


def test_missing_executable_and_bad_argv_are_clear_errors() -> None:
    fds = set(os.listdir("/proc/self/fd"))

    async def main() -> None:
        with pytest.raises(FileNotFoundError, match="no-such-acp-agent-xyz --flag"):
            await ProcessTransport.spawn(["no-such-acp-agent-xyz", "--flag"])
        with pytest.raises(TypeError):
            await ProcessTransport.spawn("python -V")
        with pytest.raises(ValueError):
            await ProcessTransport.spawn([])

    run(main)
    assert set(os.listdir("/proc/self/fd")) == fds


def test_no_fd_is_leaked() -> None:
    before = set(os.listdir("/proc/self/fd"))

    async def main() -> None:
        t = await child("echo", "100")
        t.write(b"x\n")
        assert await Lines(t).next() == b"x\n"
        await t.close()

    run(main)
    assert set(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("new_session", [False, True])
def test_start_new_session(new_session: bool) -> None:
    async def main() -> None:
        async with await child("echo", start_new_session=new_session) as t:
            assert (os.getsid(t.pid) == os.getsid(0)) is not new_session
            assert (os.getpgid(t.pid) == os.getpgid(0)) is not new_session

    run(main)


# ------------------------------------------- the same child, both runtimes, the same words


def _sync_closed(argv: list[str], context: str) -> tuple[ConnectionClosedError, str]:
    t = SyncProcessTransport(argv)
    try:
        assert t.wait(JOIN) is not None
        return t.closed_error(context), t.stderr_tail
    finally:
        t.close()


def _async_closed(argv: list[str], context: str) -> tuple[ConnectionClosedError, str]:
    async def main() -> tuple[ConnectionClosedError, str]:
        async with await ProcessTransport.spawn(argv) as t:
            assert await t.wait(JOIN) is not None
            return await t.closed_error(context), t.stderr_tail

    return run(main)


CLOSERS: dict[str, Callable[[list[str], str], tuple[ConnectionClosedError, str]]] = {
    "sync": _sync_closed,
    "asyncio": _async_closed,
}

# (script, returncode, the stderr tail, str(closed_error("session/prompt")))
ENDINGS = {
    "silent": ("import sys; sys.exit(7)", 7, "", "session/prompt: the agent process exited with code 7"),
    "traceback": (
        "import sys; print('starting the turn', file=sys.stderr); raise RuntimeError('backend down')",
        1,
        None,  # ends with the traceback's last line
        None,
    ),
    "killed": (
        "import os, signal, sys; sys.stderr.write('hanging in prompt\\n'); sys.stderr.flush();"
        " os.kill(os.getpid(), signal.SIGKILL)",
        -signal.SIGKILL,
        "hanging in prompt",
        "session/prompt: the agent process was killed by SIGKILL; the last lines of its stderr:\n"
        "    hanging in prompt",
    ),
    "twenty lines": (
        "import sys\nfor i in range(100): sys.stderr.write(f'l{i}\\r\\n \\n\\n')",
        0,
        "\n".join(f"l{i}" for i in range(80, 100)),
        None,
    ),
    "8 KiB": (
        "import sys\nsys.stderr.buffer.write(('start\\n' + '\\u00e9' * 10000 + '\\nends').encode())",
        0,
        "\u00e9" * 4093 + "\nends",  # cut inside the long line, at a character
        None,
    ),
}


@pytest.mark.parametrize("ending", ENDINGS)
def test_both_runtimes_word_the_end_of_a_child_alike(ending: str) -> None:
    script, returncode, tail, text = ENDINGS[ending]
    argv = [sys.executable, "-c", script]
    results = {name: closer(argv, "session/prompt") for name, closer in CLOSERS.items()}
    for error, final_tail in results.values():
        assert error.returncode == returncode
        assert error.stderr_tail == final_tail
        if tail is not None:
            assert error.stderr_tail == tail
        if text is not None:
            assert str(error) == text
    sync_error, asyncio_error = (error for error, _ in results.values())
    assert str(asyncio_error) == str(sync_error)
    if ending == "traceback":
        assert str(sync_error).startswith(
            "session/prompt: the agent process exited with code 1; the last lines of its stderr:\n"
        )
        assert sync_error.stderr_tail.splitlines()[-1] == "RuntimeError: backend down"


def test_a_failing_log_handler_does_not_stop_the_stderr_drain(caplog: pytest.LogCaptureFixture) -> None:
    # A handler that raises on the agent's lines must not stop the draining: the child, which
    # writes 1 MiB of stderr before its stdout line, still gets there and exits.
    class Broken(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "xxxx" in record.getMessage():
                raise RuntimeError("broken handler")

    logger = logging.getLogger(LOGGER)
    handler, level = Broken(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)

    async def main() -> int | None:
        async with await child("stderr-flood", str(1 << 20)) as t:
            assert await Lines(t).next() == b"flood done\n"
        return t.returncode

    try:
        assert run(main) == 0
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert any(r.getMessage().startswith("stderr reader of process") for r in caplog.records)

