"""Byte pipes for the asyncio runtime (see :class:`AsyncTransport` for the contract)."""

from .base import READ_CHUNK, AsyncTransport

__all__ = ["READ_CHUNK", "AsyncTransport"]
