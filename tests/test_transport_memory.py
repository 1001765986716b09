"""FdTransport through memory_pair: real bytes over OS pipes, EOF, close semantics, no leaks."""

from __future__ import annotations

import hashlib
import os
import select
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import acp.transport.fd as fd_module
from acp.errors import ConnectionClosedError
from acp.transport import READ_CHUNK, FdTransport, Transport, memory_pair

JOIN = 10.0  # generous bound on every join: a hang fails the test instead of the run


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


def read_exactly(t: Transport, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = t.read()
        assert chunk, f"EOF after {len(buf)} of {n} bytes"
        buf += chunk
    assert len(buf) == n
    return bytes(buf)


def read_to_eof(t: Transport) -> bytes:
    buf = bytearray()
    while chunk := t.read():
        buf += chunk
    return bytes(buf)


def run_thread(target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run target on a thread; its result or exception lands in the returned dict."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["result"] = target()
        except BaseException as exc:  # reported to the test through out["error"]
            out["error"] = exc

    thread = threading.Thread(target=body, name="test-transport-worker", daemon=True)
    thread.start()
    return thread, out


def joined(thread: threading.Thread) -> None:
    thread.join(JOIN)
    assert not thread.is_alive(), f"{thread.name} is still blocked"


@pytest.fixture
def poll_entered(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """An event set whenever a transport is about to block in poll() (so no sleeps are needed)."""
    entered = threading.Event()
    _patch_poll(monkeypatch, entered.set)
    yield entered


def _patch_poll(monkeypatch: pytest.MonkeyPatch, before_poll: Callable[[], None]) -> None:
    """Make the transports call ``before_poll()`` each time they are about to block in poll()."""
    real_poll = select.poll

    class TracingPoll:
        def __init__(self) -> None:
            self._poll = real_poll()

        def register(self, fd: int, events: int) -> None:
            self._poll.register(fd, events)

        def poll(self) -> list[tuple[int, int]]:
            before_poll()
            return self._poll.poll()

    shim = types.SimpleNamespace(
        poll=TracingPoll, POLLIN=select.POLLIN, POLLOUT=select.POLLOUT, PIPE_BUF=select.PIPE_BUF
    )
    monkeypatch.setattr(fd_module, "select", shim)


def test_is_a_transport() -> None:
    a, b = memory_pair()
    with a, b:
        t: Transport = a  # checked by mypy: FdTransport satisfies the protocol
        assert t.description == "memory (a)"
        assert b.description == "memory (b)"


def test_bytes_flow_both_ways() -> None:
    a, b = memory_pair()
    with a, b:
        a.write(b'{"jsonrpc":"2.0"}\n')
        assert read_exactly(b, 18) == b'{"jsonrpc":"2.0"}\n'
        b.write(b"pong\n")
        b.write(bytearray(b"two\n"))
        assert read_exactly(a, 9) == b"pong\ntwo\n"


def test_read_returns_at_most_one_chunk() -> None:
    a, b = memory_pair(pipe_size=1 << 20)
    with a, b:
        payload = os.urandom(3 * READ_CHUNK)
        writer, out = run_thread(lambda: a.write(payload))
        chunks = []
        total = 0
        while total < len(payload):
            chunk = b.read()
            assert 0 < len(chunk) <= READ_CHUNK
            chunks.append(chunk)
            total += len(chunk)
        joined(writer)
        assert "error" not in out
        assert b"".join(chunks) == payload


def test_ten_megabytes_each_way_at_once() -> None:
    # Both sides write 10 MB while both read: pipes are 64 KiB, so this deadlocks unless the
    # writes really stream (partial writes, poll on EAGAIN) and the reads keep up.
    a, b = memory_pair()
    size = 10 * 1024 * 1024
    data_ab = os.urandom(size)
    data_ba = os.urandom(size)
    with a, b:
        workers = [
            run_thread(lambda: a.write(data_ab)),
            run_thread(lambda: b.write(data_ba)),
            run_thread(lambda: hashlib.sha256(read_exactly(b, size)).digest()),
            run_thread(lambda: hashlib.sha256(read_exactly(a, size)).digest()),
        ]
        for thread, _ in workers:
            joined(thread)
        for _, out in workers:
            assert "error" not in out, out["error"]
        assert workers[2][1]["result"] == hashlib.sha256(data_ab).digest()
        assert workers[3][1]["result"] == hashlib.sha256(data_ba).digest()


def test_close_write_gives_peer_eof_after_the_data() -> None:
    a, b = memory_pair()
    with a, b:
        a.write(b"last words\n")
        a.close_write()
        a.close_write()  # idempotent
        assert read_to_eof(b) == b"last words\n"
        assert b.read() == b""  # EOF is sticky
        with pytest.raises(ConnectionClosedError):
            a.write(b"more")
        # The other direction still works: a half-close is not a close.
        b.write(b"reply\n")
        assert read_exactly(a, 6) == b"reply\n"


def test_close_gives_peer_eof_after_the_data_and_breaks_its_writes() -> None:
    a, b = memory_pair()
    with b:
        a.write(b"tail")
        a.close()
        assert read_to_eof(b) == b"tail"
        with pytest.raises(ConnectionClosedError):
            b.write(b"anyone there?")


def test_peer_close_wakes_a_blocked_read() -> None:
    a, b = memory_pair()
    with a:
        reader, out = run_thread(a.read)
        b.close()
        joined(reader)
        assert out == {"result": b""}


def test_close_wakes_a_read_blocked_in_another_thread(poll_entered: threading.Event) -> None:
    a, b = memory_pair()
    with b:
        reader, out = run_thread(a.read)
        assert poll_entered.wait(JOIN)  # the reader is (about to be) blocked in poll()
        a.close()
        joined(reader)
        assert out == {"result": b""}
        assert a.read() == b""
        assert a.closed


def test_close_wakes_a_write_blocked_on_a_full_pipe(poll_entered: threading.Event) -> None:
    a, b = memory_pair()
    with b:
        writer, out = run_thread(lambda: a.write(b"x" * (4 * 1024 * 1024)))
        assert poll_entered.wait(JOIN)  # the writer filled the pipe and waits for POLLOUT
        a.close()
        joined(writer)
        assert isinstance(out.get("error"), ConnectionClosedError)


def test_peer_close_fails_a_write_blocked_on_a_full_pipe(poll_entered: threading.Event) -> None:
    a, b = memory_pair()
    with a:
        writer, out = run_thread(lambda: a.write(b"x" * (4 * 1024 * 1024)))
        assert poll_entered.wait(JOIN)
        b.close()
        joined(writer)
        assert isinstance(out.get("error"), ConnectionClosedError)


def test_close_is_idempotent_and_thread_safe() -> None:
    a, b = memory_pair()
    closers = [run_thread(a.close) for _ in range(8)]
    for thread, out in closers:
        joined(thread)
        assert "error" not in out
    a.close()
    a.close_write()
    b.close()
    b.close()
    assert a.read() == b""


def test_write_after_close_raises() -> None:
    a, b = memory_pair()
    a.close()
    b.close()
    with pytest.raises(ConnectionClosedError):
        a.write(b"x")
    with pytest.raises(ConnectionClosedError):
        b.write(b"x")


def test_no_fd_is_leaked_even_when_a_reader_closes_it(poll_entered: threading.Event) -> None:
    before = open_fds()
    if not before:
        pytest.skip("needs /proc/self/fd")
    a, b = memory_pair()
    assert len(open_fds() - before) == 12  # two data pipes, two wake-up pipes, two interrupt pipes
    reader, _ = run_thread(a.read)
    assert poll_entered.wait(JOIN)
    a.close()  # the reader still uses its fd: it must close it on its way out
    joined(reader)
    b.close()
    assert open_fds() == before


def test_close_leaves_an_fd_in_use_to_the_thread_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    # close() may not close an fd a reader is inside poll() on (its number could be reused by
    # an unrelated open): the reader closes it on its way out.
    inside = threading.Event()
    leave = threading.Event()

    def held() -> None:
        inside.set()
        assert leave.wait(JOIN)

    _patch_poll(monkeypatch, held)
    r, w = os.pipe()
    os.set_blocking(r, False)
    t = FdTransport(r, w, description="held")
    reader, out = run_thread(t.read)
    assert inside.wait(JOIN)
    t.close()
    os.fstat(r)  # still open: the reader is inside
    with pytest.raises(OSError):
        os.fstat(w)  # nobody was writing: closed at once
    leave.set()
    joined(reader)
    assert out == {"result": b""}
    with pytest.raises(OSError):
        os.fstat(r)  # closed by the reader on its way out
    assert t.read() == b""


def test_close_fds_false_leaves_the_fds_open() -> None:
    r, w = os.pipe()
    try:
        t = FdTransport(r, w, description="borrowed", close_fds=False)
        t.write(b"abc")
        assert t.read() == b"abc"
        t.close()
        os.fstat(r)  # still open
        os.fstat(w)
        assert "borrowed" in repr(t)
    finally:
        os.close(r)
        os.close(w)


def test_one_way_transports() -> None:
    r, w = os.pipe()
    reader = FdTransport(r, None, description="in")
    writer = FdTransport(None, w, description="out")
    with reader, writer:
        with pytest.raises(ConnectionClosedError):
            reader.write(b"x")
        assert writer.read() == b""
        writer.write(b"hello")
        writer.close_write()
        assert read_to_eof(reader) == b"hello"


def test_regular_file_and_blocking_pipe_modes(tmp_path: Any) -> None:
    # Shared blocking fds (stdio) take the poll-first path; regular files never wait.
    path = tmp_path / "out.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    r, w = os.pipe()  # left blocking on purpose
    payload = os.urandom(1024 * 1024)
    with FdTransport(r, fd, description="file") as t, FdTransport(None, w) as pipe_out:
        t.write(payload)
        writer, out = run_thread(lambda: pipe_out.write(payload))
        assert read_exactly(t, len(payload)) == payload
        joined(writer)
        assert "error" not in out
        pipe_out.close_write()
        assert t.read() == b""
    assert path.read_bytes() == payload


def test_a_close_cut_short_by_ctrl_c_never_closes_an_fd_twice() -> None:
    # A KeyboardInterrupt in the main thread can come right after an fd was closed. The next
    # release (the reader's, on its way out) must not close that number again: by then it may
    # be another file's (a check's temporary folder lost a directory fd that way).
    r, w = os.pipe()
    os.set_blocking(r, False)

    class Interrupted(FdTransport):
        cut = True

        def _fd_released(self, fd: int) -> None:
            super()._fd_released(fd)
            if self.cut:
                self.cut = False
                raise KeyboardInterrupt

    transport = Interrupted(r, None)
    with pytest.raises(KeyboardInterrupt):
        transport.close()
    reused_r, reused_w = os.pipe()  # the lowest free numbers: most likely the ones just closed
    try:
        transport._release()  # the reader's release on its way out
        os.fstat(reused_r)
        os.fstat(reused_w)  # both still open
    finally:
        os.close(reused_r)
        os.close(reused_w)
        os.close(w)
