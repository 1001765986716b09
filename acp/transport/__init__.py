"""Byte pipes under the connection engine: stdio, a spawned process, an in-memory pair.

Transports move opaque bytes and know nothing about JSON or lines; see :class:`Transport` for
the contract. Everything here is stdlib-only and cheap to import: each name is imported on first
use (the process pieces, ``signal`` and the URL parsing load only when asked for; ``subprocess``
only when a process is spawned). POSIX only. The remote transports live in their own modules,
imported only when used: :mod:`acp.transport.websocket` (``websockets``),
:mod:`acp.transport.http_client` (``httpx``) and :mod:`acp.transport.http_server` (ASGI).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import READ_CHUNK, Transport

# public name -> module that defines it (imported lazily by __getattr__)
_LAZY: dict[str, str] = {
    "FdTransport": "acp.transport.fd",
    "ProcessTransport": "acp.transport.process",
    "RefuseConnection": "acp.transport._serving",
    "RemoteConnectionError": "acp.transport._remote",
    "StdioTransport": "acp.transport.stdio",
    "memory_pair": "acp.transport.memory",
}

if TYPE_CHECKING:
    from ._remote import RemoteConnectionError
    from ._serving import RefuseConnection
    from .fd import FdTransport
    from .memory import memory_pair
    from .process import ProcessTransport
    from .stdio import StdioTransport


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'acp.transport' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "READ_CHUNK",
    "FdTransport",
    "ProcessTransport",
    "RefuseConnection",
    "RemoteConnectionError",
    "StdioTransport",
    "Transport",
    "memory_pair",
]
