"""StdioTransport in a real child process (tests/helpers/stdio_child.py)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from acp.transport import ProcessTransport

HELPER = str(Path(__file__).parent / "helpers" / "stdio_child.py")

# What the child writes through the transport, given the input line b'{"ping":1}\n'.
PROTOCOL = b'{"hello":1}\n{"second":"refused"}\n{"stdin":"devnull"}\n{"ping":1}\n{"eof":true}\n'
STRAYS = ("stray print", "stray fd1", "stray grandchild")


@pytest.mark.parametrize("mode", ["close", "half"])
def test_stdout_is_a_regular_file(tmp_path: Path, mode: str) -> None:
    out = tmp_path / "stdout.txt"
    with out.open("wb") as f:
        proc = subprocess.run(
            [sys.executable, HELPER, mode],
            input=b'{"ping":1}\n',
            stdout=f,
            stderr=subprocess.PIPE,
            timeout=30,
        )
    stderr = proc.stderr.decode()
    assert proc.returncode == 0, stderr
    for stray in STRAYS:
        assert stray in stderr
    if mode == "close":
        # close() hands stdout back: the later print() lands after the protocol lines.
        assert out.read_bytes() == PROTOCOL + b"after close\n"
        assert "after close" not in stderr
    else:
        # After a half-close stdout stays on stderr, so the file holds only protocol lines.
        assert out.read_bytes() == PROTOCOL
        assert "after close" in stderr


def test_stdout_is_a_pipe_and_half_close_gives_eof(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="acp.transport.process")
    with ProcessTransport([sys.executable, HELPER, "half"]) as t:
        received = b""
        while received.count(b"\n") < 3:  # hello, second, stdin: proof the child is running
            chunk = t.read()
            assert chunk, received
            received += chunk
        t.write(b'{"ping":1}\n')
        t.close_write()  # the child's read() returns b"" at this EOF
        while chunk := t.read():
            received += chunk
        assert t.wait(30) == 0
    assert received == PROTOCOL
    logged = [r.getMessage() for r in caplog.records if r.name == "acp.transport.process"]
    for stray in (*STRAYS, "after close"):
        assert f"[{t.pid}] {stray}" in logged
