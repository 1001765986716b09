"""Byte pipes for the asyncio runtime (see :class:`AsyncTransport` for the contract)."""

from .base import READ_CHUNK, AsyncTransport
from .process import ProcessTransport
from .stdio import StdioTransport

__all__ = ["READ_CHUNK", "AsyncTransport", "ProcessTransport", "StdioTransport"]
