"""acp.aio.transport.StdioTransport in a real child process (tests/helpers/aio_stdio_child.py)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import subprocess
import termios
from pathlib import Path

import pytest

from acp.aio.transport import ProcessTransport

from .conftest import helper_argv
from .test_aio_transport_process import JOIN, LOGGER, run

ARGV = helper_argv("aio_stdio_child")
STRAYS = ("stray print", "stray fd1", "stray grandchild")


def protocol(nonblocking: str) -> bytes:
    """What the child writes through the transport, given the input line b'{"ping":1}\\n'."""
    return (
        b'{"hello":1}\n{"second":"refused"}\n{"stdin":"devnull"}\n'
        + b'{"nonblocking":[%s]}\n{"ping":1}\n{"eof":true}\n' % nonblocking.encode()
    )


@pytest.mark.parametrize("mode", ["close", "half"])
def test_stdout_is_a_regular_file(tmp_path: Path, mode: str) -> None:
    out = tmp_path / "stdout.txt"
    with out.open("wb") as f:
        proc = subprocess.run(
            [*ARGV, mode], input=b'{"ping":1}\n', stdout=f, stderr=subprocess.PIPE, timeout=30
        )
    stderr = proc.stderr.decode()
    assert proc.returncode == 0, stderr
    for stray in STRAYS:
        assert stray in stderr
    # stdin (a pipe) went non-blocking; the file was written directly, never waited on.
    expected = protocol("true,false")
    after = b"after close blocking=True,True\n"  # stdin's flag is back after close
    if mode == "close":
        # close() hands stdout back: the later print() lands after the protocol lines.
        assert out.read_bytes() == expected + after
        assert "after close" not in stderr
    else:
        # After a half-close stdout stays on stderr, so the file holds only protocol lines.
        assert out.read_bytes() == expected
        assert after.decode() in stderr


def test_stdin_is_a_regular_file(tmp_path: Path) -> None:
    # A file the loop cannot watch: read directly, to its end, which is the protocol's end.
    source = tmp_path / "stdin.txt"
    source.write_bytes(b'{"ping":1}\n')
    with source.open("rb") as f:
        proc = subprocess.run([*ARGV, "close"], stdin=f, capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == protocol("false,true") + b"after close blocking=True,True\n"


def test_pipes_and_a_half_close_give_eof_and_the_flags_back(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def main() -> tuple[bytes, int]:
        async with await ProcessTransport.spawn([*ARGV, "half"]) as t:
            received = b""
            while received.count(b"\n") < 4:  # up to "nonblocking": the child is running
                chunk = await asyncio.wait_for(t.read(), JOIN)
                assert chunk, received
                received += chunk
            t.write(b'{"ping":1}\n')
            t.close_write()  # the child's read() returns b"" at this EOF
            while chunk := await asyncio.wait_for(t.read(), JOIN):
                received += chunk
            assert await t.wait(JOIN) == 0
        return received, t.pid

    received, pid = run(main)
    assert received == protocol("true,true")
    logged = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    for stray in (*STRAYS, "after close blocking=True,True"):
        assert f"[{pid}] {stray}" in logged


def test_mebibytes_through_the_child_with_flow_control_on_both_sides() -> None:
    payload = b"".join(b'{"n":%07d,"pad":"' % i + b"p" * 230 + b'"}\n' for i in range(20000))

    async def main() -> bytes:
        async with await ProcessTransport.spawn([*ARGV, "close"]) as t:
            received = bytearray()

            async def reader() -> None:
                while chunk := await asyncio.wait_for(t.read(), JOIN):
                    received.extend(chunk)

            reading = asyncio.ensure_future(reader())
            for offset in range(0, len(payload), 100_000):
                t.write(payload[offset : offset + 100_000])
                await t.drain()
            t.close_write()
            await reading
            return bytes(received)

    received = run(main)
    head, _, rest = received.partition(b'{"nonblocking":[true,true]}\n')
    assert head.endswith(b'{"stdin":"devnull"}\n')
    echoed, _, tail = rest.partition(b'{"eof":true}\n')
    assert hashlib.sha256(echoed).digest() == hashlib.sha256(payload).digest()
    assert tail == b"after close blocking=True,True\n"


def test_close_waits_for_the_buffered_output_to_be_taken() -> None:
    # The child writes 2 MiB at once and closes; nobody reads yet, so its close() must wait
    # (not drop the data and exit): everything arrives once we read.
    lines = 20000

    async def main() -> tuple[bytes, int | None]:
        async with await ProcessTransport.spawn([*ARGV, "burst", str(lines)]) as t:
            assert await t.wait(0.3) is None  # still flushing in close()
            received = bytearray()
            while chunk := await asyncio.wait_for(t.read(), JOIN):
                received.extend(chunk)
            return bytes(received), await t.wait(JOIN)

    received, returncode = run(main)
    assert returncode == 0
    assert received == b"".join(b"%099d\n" % i for i in range(lines))


def test_close_wakes_a_pending_read_and_leaves_no_task() -> None:
    # The child's stdin stays open (nothing is ever written to it) while it closes; its stdout
    # ends when it exits.
    proc = subprocess.Popen([*ARGV, "pending"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        out = proc.stdout.read()
    finally:
        proc.stdin.close()
        proc.stdout.close()
        assert proc.wait(30) == 0
    assert json.loads(out) == {
        "waiting": True,
        "read": "",
        "write": "stdio: transport is closed",
        "tasks": [],
    }


def test_a_terminal_is_driven_without_touching_its_shared_flags() -> None:
    # stdin and stdout on one pty, shared with us: the transport must never make that shared
    # description non-blocking (the loop says when it is ready instead). Echo off, so the
    # terminal shows only what the child writes; ^D at a line start is the end of input.
    master, slave = os.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[3] &= ~termios.ECHO
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    proc = subprocess.Popen([*ARGV, "close"], stdin=slave, stdout=slave, stderr=subprocess.PIPE)
    shown = b""

    def until(marker: bytes) -> None:
        nonlocal shown
        while marker not in shown:
            shown += os.read(master, 4096).replace(b"\r\n", b"\n")

    try:
        until(b'{"nonblocking":[false,false]}\n')  # the terminal was left blocking
        assert os.get_blocking(slave)  # and its flag, which is ours too, never changed
        os.write(master, b'{"ping":1}\n\x04')
        until(b"after close blocking=True,True\n")
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        os.close(slave)
        assert proc.stderr is not None
        stderr = proc.stderr.read().decode()
        proc.stderr.close()
    assert shown == protocol("false,false") + b"after close blocking=True,True\n"
    for stray in STRAYS:
        assert stray in stderr
