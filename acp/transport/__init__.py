"""Byte pipes under the connection engine: stdio, a spawned process, an in-memory pair.

Transports move opaque bytes and know nothing about JSON or lines; see :class:`Transport` for
the contract. Everything here is stdlib-only and cheap to import (``subprocess`` is imported
only when a process is spawned). POSIX only. The remote transports live in their own modules,
imported only when used: :mod:`acp.transport.websocket` (``websockets``),
:mod:`acp.transport.http_client` (``httpx``) and :mod:`acp.transport.http_server` (ASGI).
"""

from ._remote import RemoteConnectionError
from ._serving import RefuseConnection
from .base import READ_CHUNK, Transport
from .fd import FdTransport
from .memory import memory_pair
from .process import ProcessTransport
from .stdio import StdioTransport

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
