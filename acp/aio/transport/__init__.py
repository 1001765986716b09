"""Byte pipes for the asyncio runtime (see :class:`AsyncTransport` for the contract)."""

from .base import READ_CHUNK, AsyncTransport
from .memory import MemoryTransport, memory_pair

__all__ = ["READ_CHUNK", "AsyncTransport", "MemoryTransport", "memory_pair"]
