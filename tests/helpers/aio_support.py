"""Helpers for the asyncio runtime's tests: run a coroutine under a timeout with no task left
behind, and a hand-driven raw peer on the far end of an in-memory transport."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from acp.aio.transport import MemoryTransport

T = TypeVar("T")

WAIT = 10.0


def run(main: Callable[[], Awaitable[T]], timeout: float = WAIT) -> T:
    """``asyncio.run(main())`` bounded by ``timeout``; fails if a task outlives ``main``."""

    async def wrapper() -> T:
        result = await asyncio.wait_for(main(), timeout)
        current = asyncio.current_task()
        left = [task for task in asyncio.all_tasks() if task is not current]
        assert not left, f"tasks left behind: {left}"
        return result

    return asyncio.run(wrapper())


async def yield_loop(times: int = 20) -> None:
    """Let the loop run other ready callbacks ``times`` rounds (no clock involved)."""
    for _ in range(times):
        await asyncio.sleep(0)


class RawPeer:
    """The far end of a transport driven by hand: write raw bytes, read whole JSON lines."""

    def __init__(self, transport: MemoryTransport) -> None:
        self.transport = transport
        self._buffer = b""

    def send(self, *messages: bytes | dict[str, Any]) -> None:
        """Write the messages in one write (so the other side reads them in one chunk)."""
        self.transport.write(b"".join(m if isinstance(m, bytes) else json.dumps(m).encode() + b"\n" for m in messages))

    async def recv(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            chunk = await asyncio.wait_for(self.transport.read(), WAIT)
            if not chunk:
                raise EOFError
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        result: dict[str, Any] = json.loads(line)
        return result


class PullOnly:
    """An AsyncTransport proxy without ``set_receiver``: a connection over it reads with its
    reader task (``await read()``), the path of transports that cannot push."""

    def __init__(self, inner: MemoryTransport) -> None:
        self._inner = inner

    async def read(self) -> bytes:
        return await self._inner.read()

    def write(self, data: bytes | bytearray) -> None:
        self._inner.write(data)

    async def drain(self) -> None:
        await self._inner.drain()

    def close_write(self) -> None:
        self._inner.close_write()

    async def close(self) -> None:
        await self._inner.close()

    @property
    def description(self) -> str:
        return self._inner.description

    @property
    def buffered(self) -> int:
        return self._inner.buffered
