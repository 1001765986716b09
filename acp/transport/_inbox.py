"""The read buffer of a loop-native transport whose bytes arrive by callbacks on the event
loop (the asyncio Streamable HTTP client's event streams, the ASGI endpoint's requests): one
task reads, whatever is waiting goes out together. Standard library only."""

from __future__ import annotations

import asyncio
from collections import deque

from .base import READ_CHUNK

__all__ = ["AsyncInbox"]


class AsyncInbox:
    """Chunks put on the loop, read by one task; ``b""`` put is the end (read returns ``b""``
    from then on, after what came before it)."""

    __slots__ = ("_chunks", "_arrived", "_eof")

    def __init__(self) -> None:
        self._chunks: deque[bytes] = deque()
        self._arrived = asyncio.Event()
        self._eof = False  # read() returned the end

    def put(self, data: bytes) -> None:
        """Queue ``data`` (``b""``: the end) and wake the reader."""
        self._chunks.append(data)
        self._arrived.set()

    async def read(self) -> bytes:
        """Wait for what was put; up to :data:`READ_CHUNK` of it joined (one chunk may be
        bigger); ``b""`` at the end."""
        chunks = self._chunks
        while not chunks:
            if self._eof:
                return b""
            self._arrived.clear()
            await self._arrived.wait()
        item = chunks.popleft()
        if not item:
            self._eof = True
            return b""
        if not chunks or not chunks[0]:
            return item
        parts = [item]
        size = len(item)
        while size < READ_CHUNK and chunks and chunks[0]:  # what else is here goes with it
            more = chunks.popleft()
            parts.append(more)
            size += len(more)
        return b"".join(parts)
