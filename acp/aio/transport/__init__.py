"""Byte pipes for the asyncio runtime (see :class:`AsyncTransport` for the contract)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import READ_CHUNK, AsyncTransport, ReceivingTransport
from .memory import MemoryTransport, memory_pair
from .process import ProcessTransport
from .stdio import StdioTransport

if TYPE_CHECKING:
    from .http_client import connect_http
    from .websocket import connect_websocket

__all__ = [
    "READ_CHUNK",
    "AsyncTransport",
    "MemoryTransport",
    "ProcessTransport",
    "ReceivingTransport",
    "StdioTransport",
    "connect_http",
    "connect_websocket",
    "memory_pair",
]

# The remote transports import their library (websockets, httpx) only when first used.
_LAZY = {"connect_http": ".http_client", "connect_websocket": ".websocket"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value
