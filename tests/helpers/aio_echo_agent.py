"""A minimal asyncio agent for the ASGI tests: an AsyncConnectionServer (``connect_async``) whose
every connection is a raw AsyncConnection with async handlers, living on the ASGI server's loop.

Prompts: ``stream N`` sends N ``agent_message_chunk`` updates (``chunk 0`` ...), ``read PATH``
asks the client for the file (``fs/read_text_file``) and sends its text back, ``wait`` waits
until the turn is cancelled (``session/cancel`` or the server closing), anything else is echoed
(``echo: TEXT``). Test-only: the facade version is ``acp.AsyncAgent``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

from acp.aio import AsyncConnection, AsyncInboundCall
from acp.aio.transport import AsyncTransport


class EchoConnection:
    """One served connection (an AsyncServedConnection): closes itself at end of input."""

    def __init__(self, server: AsyncEchoAgent, transport: AsyncTransport) -> None:
        self.server = server
        self.conn = AsyncConnection(transport, name=f"echo-{next(server.ids)}")
        self.name = self.conn.name
        self.turns: dict[str, asyncio.Event] = {}  # session id -> its turn's cancel flag
        self.sessions = itertools.count(1)
        conn = self.conn
        conn.on_request("initialize", self.initialize)
        conn.on_request("session/new", self.new_session)
        conn.on_request("session/prompt", self.prompt)
        conn.on_notification("session/cancel", self.cancel, immediate=True)
        conn.start()
        self.closed = asyncio.Event()
        self._watcher = asyncio.ensure_future(self._close_at_end())

    async def _close_at_end(self) -> None:
        await self.conn.wait_closed()
        await self.conn.close()
        self.closed.set()
        self.server.on_closed(self)

    # -- AsyncServedConnection ---------------------------------------------------------------

    async def wait_closed(self, timeout: float | None = None) -> bool:
        try:
            await asyncio.wait_for(self.closed.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def cancel_turns(self) -> None:
        for flag in self.turns.values():
            flag.set()

    async def close(self, graceful: bool = False, timeout: float | None = 5.0) -> None:
        await self.conn.close(graceful, timeout)
        await self._watcher

    # -- handlers ----------------------------------------------------------------------------

    async def initialize(self, params: Any, call: AsyncInboundCall) -> dict[str, Any]:
        self.client_capabilities = params.get("clientCapabilities", {})
        return {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": [],
                "agentInfo": {"name": "async-echo", "version": "1.0"}}

    async def new_session(self, params: Any, call: AsyncInboundCall) -> dict[str, Any]:
        return {"sessionId": f"s{next(self.sessions)}"}

    async def prompt(self, params: Any, call: AsyncInboundCall) -> dict[str, Any]:
        sid = params["sessionId"]
        text = " ".join(block.get("text", "") for block in params["prompt"])
        flag = self.turns[sid] = asyncio.Event()
        try:
            if text.startswith("stream "):
                for i in range(int(text.split()[1])):
                    self.say(sid, f"chunk {i}")
            elif text.startswith("read "):
                answer = await self.conn.request("fs/read_text_file", {"sessionId": sid, "path": text[5:]})
                self.say(sid, answer["content"])
            elif text == "wait":
                self.say(sid, "waiting")
                await flag.wait()
                return {"stopReason": "cancelled"}
            else:
                self.say(sid, f"echo: {text}")
            return {"stopReason": "end_turn"}
        finally:
            del self.turns[sid]

    def cancel(self, params: Any) -> None:
        flag = self.turns.get(params["sessionId"])
        if flag is not None:
            flag.set()

    def say(self, sid: str, text: str) -> None:
        self.conn.notify("session/update", {"sessionId": sid, "update": {
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}})


class AsyncEchoAgent:
    """An AsyncConnectionServer: ``connect_async(transport)`` serves one connection on the
    running loop. ``opened`` / ``closed`` count connections (read them from any thread)."""

    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.live: set[EchoConnection] = set()
        self.opened = 0
        self.closed = 0
        self.cond = threading.Condition()  # the tests wait on it from their own thread
        self.app: Any = None  # set by a test: on_closed records how many connections it lists
        self.listed_at_close: list[int] = []

    async def connect_async(self, transport: AsyncTransport) -> EchoConnection:
        connection = EchoConnection(self, transport)
        with self.cond:
            self.live.add(connection)
            self.opened += 1
            self.cond.notify_all()
        return connection

    def on_closed(self, connection: EchoConnection) -> None:
        listed = len(self.app.connections) if self.app is not None else None
        with self.cond:
            if listed is not None:
                self.listed_at_close.append(listed)
            self.live.discard(connection)
            self.closed += 1
            self.cond.notify_all()

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> None:
        """Block (a test's thread) until ``predicate(self)`` holds."""
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self), timeout), "timed out"
