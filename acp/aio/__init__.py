"""The asyncio runtime over the same sans-I/O core (:mod:`acp.rpc`) as the threaded one.

Nothing here starts a thread of its own: the event loop's tasks read, dispatch and run
handlers; a blocking handler runs on an executor, never on the loop.
"""

from .connection import (
    DEFAULT_REQUEST_TIMEOUT,
    MAX_QUEUED_MESSAGES,
    AsyncConnection,
    AsyncInboundCall,
    Timer,
)

__all__ = ["DEFAULT_REQUEST_TIMEOUT", "MAX_QUEUED_MESSAGES", "AsyncConnection", "AsyncInboundCall", "Timer"]
