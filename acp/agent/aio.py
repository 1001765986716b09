"""``AsyncAgent``: a built agent served on an asyncio event loop, any number of connections.

The twin of :class:`~acp.agent.SyncAgent` over :class:`acp.aio.connection.AsyncConnection`:
the same builder methods (:class:`AsyncAgentBuilder`), the same spec, the same protocol rules
(:mod:`acp.agent.handling`, :mod:`acp.agent.turns`). Handlers may be ``async def`` (run on the
loop, each request as its own task) or plain blocking functions (run on the executor, never on
the loop). Everything negotiated belongs to one :class:`AsyncAgentConnection`; when a client
goes away, its connection cancels its turns, gives running handlers ``close_timeout`` seconds
to answer, and closes itself.
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..aio.connection import AsyncConnection
from ..aio.transport import memory_pair
from . import aio_dispatch
from .aio_context import AsyncClientProxy
from .builder import AgentBuilder
from .serving import AgentBase, AgentConnectionBase
from .spec import AgentSpec

if TYPE_CHECKING:
    from ..aio.transport import AsyncTransport

__all__ = ["AsyncAgent", "AsyncAgentBuilder", "AsyncAgentConnection"]

_log = logging.getLogger("acp.agent")


class AsyncAgentBuilder(AgentBuilder[Any, Any]):
    """Collects handlers and options (the methods of :class:`~acp.agent.SyncAgentBuilder`);
    :meth:`build` makes an :class:`AsyncAgent`. A handler is an ``async def`` (awaited on the
    loop, with the async contexts: ``AsyncPromptContext``...) or a plain blocking function
    (run on the executor: ``handler_executor(...)``'s, or one each connection owns, with the
    blocking contexts: ``PromptContext``...)."""

    def build(self) -> AsyncAgent:
        """Check the configuration and make the agent (no loop needed yet)."""
        return AsyncAgent(self._spec())


class AsyncAgentConnection(AgentConnectionBase):
    """One client connected to an :class:`AsyncAgent`.

    ``capabilities`` is what this client negotiated; ``client`` makes raw (awaitable) calls
    into this client outside any turn; ``session(id)`` sends a session's updates outside a turn.
    """

    def __init__(self, agent: AsyncAgent, spec: AgentSpec, transport: AsyncTransport, name: str) -> None:
        self._agent = agent
        self._spec = spec
        self.name = name
        self.connection = AsyncConnection(
            transport,
            executor=spec.executor,
            request_timeout=spec.request_timeout,
            name=name,
            ordering=spec.ordering,
        )
        self._init_state(spec, self.connection)  # grace periods, deadlines: the loop's timers
        self._closing: asyncio.Task[None] | None = None
        self._closed: asyncio.Event = asyncio.Event()
        aio_dispatch.install(spec, self._state, self.connection)
        self.connection.on_close(self._on_input_end)

    @property
    def client(self) -> AsyncClientProxy:
        """Raw typed calls into this client, outside any prompt turn (``await ...``)."""
        return AsyncClientProxy(self._state)

    def _proxy(self) -> AsyncClientProxy:
        return AsyncClientProxy(self._state)

    async def wait_closed(self, timeout: float | None = None) -> bool:
        """Wait until the connection is closed (client gone, or :meth:`close`); False if
        ``timeout`` ran out first."""
        if not self._closed.is_set():
            try:
                await asyncio.wait_for(self._closed.wait(), timeout)
            except asyncio.TimeoutError:
                return False
        return True

    async def close(self, graceful: bool = False, timeout: float | None = 5.0) -> None:
        """Close this connection; idempotent (a second call waits for the first).

        ``graceful=False`` cancels every turn and handler task and stops at once.
        ``graceful=True`` stops taking requests and waits up to ``timeout`` for running
        handlers to answer, then closes.
        """
        task = self._closing
        if task is None:
            task = self._closing = asyncio.ensure_future(self._close(graceful, timeout))
        if task is not asyncio.current_task():
            await asyncio.shield(task)

    async def _close(self, graceful: bool, timeout: float | None) -> None:
        try:
            if not graceful:
                self._state.turns.cancel_all(closing=True)
            # The engine cancels every running request (prompt turns included) as close begins.
            await self.connection.close(graceful=graceful, timeout=timeout)
            self._state.turns.abort_all()
        finally:
            self._agent._forget(self)
            self._closed.set()
            _log.debug("%s closed", self.name)

    def _on_input_end(self) -> None:
        # The engine calls this (on the loop) once the input ended, or on close(). The client
        # is gone: cancel every turn so handlers answer, then close within the bound.
        if self._closing is not None:
            return
        _log.debug("%s: input ended", self.name)
        self._state.turns.cancel_all(closing=True)
        self._closing = asyncio.ensure_future(self._close(True, self._spec.close_timeout))


class AsyncAgent(AgentBase[AsyncAgentConnection]):
    """A built agent for an asyncio program. Serve it with ``await`` :meth:`serve_stdio`,
    :meth:`serve`, :meth:`connect` or :meth:`serve_in_process`, or mount :meth:`asgi_app`;
    ``async with agent:`` (or ``await agent.close()``) closes every connection.

    ::

        agent = acp.AsyncAgent.builder().agent_info("demo", "1.0").prompt_handler(prompt).build()
        asyncio.run(agent.serve_stdio())
    """

    @staticmethod
    def builder() -> AsyncAgentBuilder:
        """A new builder."""
        return AsyncAgentBuilder()

    async def connect(self, transport: AsyncTransport) -> AsyncAgentConnection:
        """Start serving ``transport`` on the running loop; returns its handle at once."""
        if self._closed:
            await transport.close()
            raise RuntimeError("this agent is closed")
        handle = AsyncAgentConnection(self, self._spec, transport, self._next_name())
        with self._lock:
            self._connections.add(handle)
        handle.connection.start()
        return handle

    async def connect_async(self, transport: AsyncTransport) -> AsyncAgentConnection:
        """Same as :meth:`connect` (the name the ASGI app's ``AsyncConnectionServer`` uses)."""
        return await self.connect(transport)

    async def serve(self, transport: AsyncTransport) -> None:
        """Serve ``transport`` until the client goes away (end of input) or :meth:`close`."""
        handle = await self.connect(transport)
        try:
            await handle.wait_closed()
        finally:
            await handle.close(graceful=True, timeout=self._spec.close_timeout)

    async def serve_stdio(self) -> None:
        """Serve this process's stdin/stdout until stdin ends: everything received is
        answered, then this returns. Logs go to stderr."""
        from ..aio.transport import StdioTransport

        await self.serve(StdioTransport())

    async def serve_in_process(self) -> AsyncTransport:
        """Serve one end of an in-memory pipe on this loop; return the other end, for a client
        on the same loop. Closing the agent closes it (the client reads end of input)."""
        ours, theirs = memory_pair()
        await self.connect(ours)
        return theirs

    async def close(self, timeout: float | None = 5.0) -> None:
        """Close every connection (every turn and running handler task is cancelled at once,
        on all of them); no new ones are accepted."""
        self._closed = True
        connections = self.connections
        for handle in connections:
            handle.cancel_turns()
        await asyncio.gather(*(handle.close(graceful=False, timeout=timeout) for handle in connections))

    async def __aenter__(self) -> AsyncAgent:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
