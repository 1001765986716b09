"""A minimal loop-native AsyncTransport over two pipe file objects, for tests and benchmarks.

``loop.connect_read_pipe`` / ``connect_write_pipe``: no thread, real bytes between processes.
The SDK's own stdio and process transports (acp.aio.transport.StdioTransport and
ProcessTransport, branch aio-pipes) replace this once they are merged; this keeps the runtime's
process tests independent of them.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from typing import IO, Any

from acp.errors import ConnectionClosedError

__all__ = ["PipeTransport", "open_stdio", "spawn"]

_READ_LIMIT = 1024 * 1024  # pause reading while this much is buffered and unread


class _ReadSide(asyncio.Protocol):
    def __init__(self, owner: PipeTransport) -> None:
        self.owner = owner

    def data_received(self, data: bytes) -> None:
        self.owner._on_data(data)

    def eof_received(self) -> bool:
        self.owner._on_eof()
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.owner._on_eof()


class _WriteSide(asyncio.BaseProtocol):
    def __init__(self, owner: PipeTransport) -> None:
        self.owner = owner

    def pause_writing(self) -> None:
        self.owner._paused = True

    def resume_writing(self) -> None:
        self.owner._paused = False
        self.owner._wake_drainers()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.owner._write_lost = True
        self.owner._paused = False
        self.owner._wake_drainers()


class PipeTransport:
    """An AsyncTransport over a read pipe and a write pipe (a process's stdin/stdout, or a
    child's)."""

    def __init__(self, description: str) -> None:
        self.description = description
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._eof = False
        self._closed = False
        self._write_lost = False
        self._paused = False
        self._reading_paused = False
        self._reader: asyncio.Future[None] | None = None
        self._drainers: list[asyncio.Future[None]] = []
        self._rt: asyncio.ReadTransport | None = None
        self._wt: asyncio.WriteTransport | None = None
        # Push mode (ReceivingTransport): data_received hands each chunk straight over.
        self._receiver: Callable[[bytes], None] | None = None
        self._eof_pushed = False

    @classmethod
    async def open(cls, read_file: IO[bytes], write_file: IO[bytes], description: str = "pipes") -> PipeTransport:
        loop = asyncio.get_running_loop()
        self = cls(description)
        self._rt, _ = await loop.connect_read_pipe(lambda: _ReadSide(self), read_file)
        wt, _ = await loop.connect_write_pipe(lambda: _WriteSide(self), write_file)
        self._wt = wt  # type: ignore[assignment]
        return self

    async def read(self) -> bytes:
        while not self._chunks:
            if self._eof or self._closed:
                return b""
            waiter = self._reader = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._reader = None
        if len(self._chunks) == 1:
            data = self._chunks.popleft()
        else:
            data = b"".join(self._chunks)
            self._chunks.clear()
        self._buffered = 0
        if self._reading_paused and self._buffered < _READ_LIMIT and self._rt is not None:
            self._reading_paused = False
            self._rt.resume_reading()
        return data

    def write(self, data: bytes | bytearray) -> None:
        if self._closed or self._write_lost or self._wt is None or self._wt.is_closing():
            raise ConnectionClosedError("connection closed")
        self._wt.write(data)

    async def drain(self) -> None:
        while self._paused and not self._write_lost:
            waiter = asyncio.get_running_loop().create_future()
            self._drainers.append(waiter)
            await waiter

    def close_write(self) -> None:
        if self._wt is not None and not self._wt.is_closing():
            self._wt.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.close_write()
        if self._rt is not None:
            self._rt.close()
        self._wake_reader()
        self._wake_drainers()
        self._push_eof()
        await asyncio.sleep(0)  # let the pipe transports run their connection_lost

    def set_receiver(self, receiver: Callable[[bytes], None]) -> None:
        self._receiver = receiver
        if self._chunks:
            data = b"".join(self._chunks)
            self._chunks.clear()
            self._buffered = 0
            receiver(data)
        if self._eof or self._closed:
            self._push_eof()

    def pause_reading(self) -> None:
        if self._rt is not None and not self._reading_paused:
            self._reading_paused = True
            self._rt.pause_reading()

    def resume_reading(self) -> None:
        if self._rt is not None and self._reading_paused:
            self._reading_paused = False
            self._rt.resume_reading()

    def _push_eof(self) -> None:
        if self._receiver is not None and not self._eof_pushed:
            self._eof_pushed = True
            self._receiver(b"")

    def _on_data(self, data: bytes) -> None:
        if self._receiver is not None:
            if not self._closed:
                self._receiver(data)
            return
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered >= _READ_LIMIT and not self._reading_paused and self._rt is not None:
            self._reading_paused = True
            self._rt.pause_reading()
        self._wake_reader()

    def _on_eof(self) -> None:
        self._eof = True
        self._wake_reader()
        self._push_eof()

    def _wake_reader(self) -> None:
        waiter = self._reader
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_drainers(self) -> None:
        drainers, self._drainers = self._drainers, []
        for waiter in drainers:
            if not waiter.done():
                waiter.set_result(None)


async def open_stdio() -> PipeTransport:
    """This process's stdin and stdout."""
    return await PipeTransport.open(sys.stdin.buffer, sys.stdout.buffer, "stdio")


async def spawn(argv: list[str], **popen: Any) -> tuple[PipeTransport, subprocess.Popen[bytes]]:
    """Start ``argv`` with pipes for stdin/stdout; returns the transport to it and the process
    (wait for it once the transport is closed: it exits on end of input)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, **popen)
    assert proc.stdin is not None and proc.stdout is not None
    transport = await PipeTransport.open(proc.stdout, proc.stdin, f"process {proc.pid}")
    return transport, proc
