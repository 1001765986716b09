"""Push reading (ReceivingTransport) on the fd transports: acp.aio.transport._fd.FdTransport
over real pipes, a regular file and a pty, and ProcessTransport against a real child."""

from __future__ import annotations

import asyncio
import os
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

from acp.aio.transport._fd import FdTransport

from .test_aio_transport_process import JOIN, child, run


class Sink:
    """A receiver that collects what is pushed and signals each arrival."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.ends = 0
        self.arrived = asyncio.Event()

    def __call__(self, data: bytes) -> None:
        if data:
            self.chunks.append(data)
        else:
            self.ends += 1
        self.arrived.set()

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)

    async def until(self, predicate: object) -> None:
        async def wait() -> None:
            while not predicate():  # type: ignore[operator]
                self.arrived.clear()
                await self.arrived.wait()

        await asyncio.wait_for(wait(), JOIN)


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def test_a_pipe_is_pushed_in_order_then_eof_once(pipe: tuple[int, int]) -> None:
    r, w = pipe

    async def main() -> None:
        t = FdTransport(r, None, description="pipe")
        sink = Sink()
        t.set_receiver(sink)
        with pytest.raises(RuntimeError, match="pushed"):
            await t.read()
        os.write(w, b"one\n")
        await sink.until(lambda: sink.data == b"one\n")
        os.write(w, b"two\n")
        os.close(w)
        await sink.until(lambda: sink.ends)
        assert sink.data == b"one\ntwo\n"
        await t.close()
        await asyncio.sleep(0)
        assert sink.ends == 1  # not pushed again by close()
        assert t._read_fd is None  # released (the fixture's close of r fails harmlessly)

    run(main)


def test_pause_stops_reading_and_resume_pushes_what_waited(pipe: tuple[int, int]) -> None:
    r, w = pipe

    async def main() -> None:
        t = FdTransport(r, None, description="pipe")
        sink = Sink()
        t.set_receiver(sink)
        t.pause_reading()
        os.write(w, b"held\n")
        for _ in range(5):
            await asyncio.sleep(0)
        assert sink.chunks == []  # the bytes stay in the pipe
        assert os.read(r, 0) == b""  # (the fd is still ours and open)
        t.resume_reading()
        await sink.until(lambda: sink.data == b"held\n")
        await t.close()

    run(main)


def test_close_pushes_the_end_once_from_a_callback(pipe: tuple[int, int]) -> None:
    r, w = pipe

    async def main() -> None:
        t = FdTransport(r, None, description="pipe")
        sink = Sink()
        t.set_receiver(sink)
        os.write(w, b"unread\n")  # close() neither reads nor pushes it
        await t.close()
        await sink.until(lambda: sink.ends)
        for _ in range(3):
            await asyncio.sleep(0)
        assert (sink.chunks, sink.ends) == ([], 1)

    run(main)


def test_the_receiver_may_close_the_transport(pipe: tuple[int, int]) -> None:
    r, w = pipe

    async def main() -> None:
        t = FdTransport(r, None, description="pipe")
        sink = Sink()
        closing: list[asyncio.Task[None]] = []

        def receive(data: bytes) -> None:
            sink(data)
            if data and not closing:
                closing.append(asyncio.ensure_future(t.close()))

        t.set_receiver(receive)
        os.write(w, b"a\n")
        await sink.until(lambda: sink.ends)
        await closing[0]
        assert (sink.data, sink.ends) == (b"a\n", 1)

    run(main)


def test_a_regular_file_is_pushed_a_chunk_per_callback(tmp_path: Path) -> None:
    source = tmp_path / "in.bin"
    payload = os.urandom(300_000)  # several READ_CHUNKs
    source.write_bytes(payload)

    async def main() -> None:
        fd = os.open(source, os.O_RDONLY)
        t = FdTransport(fd, None, description="file")
        sink = Sink()
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while not sink.ends:
                ticks += 1
                await asyncio.sleep(0)

        tick = asyncio.ensure_future(ticker())
        t.set_receiver(sink)
        await sink.until(lambda: sink.ends)
        await tick
        assert sink.data == payload and sink.ends == 1
        assert ticks >= len(sink.chunks) - 1  # other tasks ran between the reads
        await t.close()

    run(main)


def test_a_terminal_is_pushed_without_touching_its_flags() -> None:
    master, slave = os.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[3] &= ~termios.ECHO
    termios.tcsetattr(slave, termios.TCSANOW, attrs)

    async def main() -> None:
        fd = os.dup(slave)
        t = FdTransport(fd, None, description="tty")
        sink = Sink()
        t.set_receiver(sink)
        os.write(master, b"line\n")
        await sink.until(lambda: b"line\n" in sink.data)
        assert os.get_blocking(slave)  # left blocking: the loop said when to read
        os.write(master, b"\x04")  # ^D at a line start: end of input
        await sink.until(lambda: sink.ends)
        await t.close()

    try:
        run(main)
    finally:
        os.close(master)
        os.close(slave)


def test_a_child_process_pushed_through_backpressure() -> None:
    async def main() -> None:
        t = await child("echo")
        sink = Sink()
        t.set_receiver(sink)
        blob = b"x" * 200_000 + b"\n"
        t.pause_reading()
        t.write(blob)
        await t.drain()
        t.resume_reading()
        await sink.until(lambda: sink.data == blob)
        t.close_write()  # the echo child exits at EOF: the end is pushed
        await sink.until(lambda: sink.ends)
        await t.close()
        assert sink.ends == 1

    run(main)


def test_a_backlog_goes_out_on_the_next_write_without_a_loop_turn() -> None:
    """A handler that streams many updates without yielding: once the pipe is full the rest is
    buffered, and each later write offers the backlog to the fd again, so the peer can read it
    while the producer is still running (not only once it returns to the loop)."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)

    async def main() -> None:
        transport = FdTransport(None, w, description="backlog")
        try:
            capacity = 0
            first = b"x" * 65536
            while True:  # fill the pipe, and a little more
                transport.write(first)
                capacity += len(first)
                if transport._chunks:
                    break
            taken = 0
            while True:  # the peer reads everything the pipe holds (no loop turn on our side)
                try:
                    taken += len(os.read(r, 1 << 20))
                except BlockingIOError:
                    break
            transport.write(b"tail")  # no await since the pipe filled up
            rest = b""
            while True:
                try:
                    rest += os.read(r, 1 << 20)
                except BlockingIOError:
                    break
            assert rest, "the backlog stayed buffered until the loop ran"
            assert taken + len(rest) + transport._buffered == capacity + 4
        finally:
            await transport.close()

    try:
        run(main)
    finally:
        os.close(r)
