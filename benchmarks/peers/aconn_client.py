"""The client at the engine level on asyncio: acp.aio.AsyncConnection over a spawned
aconn_agent.py (plain dict params, no facade; the transports the facades use), run by ``_common.run_async`` like the asyncio
facade's client, so every scenario of the bench contract runs on it (concurrent: 8 tasks)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from _common import CWD, ChunkCounter, parse_args, read_answer, run_async

from acp.aio import AsyncConnection, AsyncInboundCall
from acp.aio.transport import ProcessTransport

AGENT = [sys.executable, str(Path(__file__).with_name("aconn_agent.py"))]


class AconnClient:
    def __init__(self) -> None:
        self.chunks = ChunkCounter()
        self.reads = 0
        self.conn: Any = None

    async def open(self) -> AconnClient:
        # The transport AsyncClient.agent_process() uses: only the facade is left out.
        conn = self.conn = AsyncConnection(await ProcessTransport.spawn(AGENT), name="bench-client")
        conn.on_notification("session/update", self.on_update)
        conn.on_request("fs/read_text_file", self.on_read)
        conn.start()
        return self

    def on_update(self, params: Any) -> None:
        self.chunks(params["update"]["content"]["text"])

    def on_read(self, params: Any, call: AsyncInboundCall) -> Any:
        self.reads += 1
        return {"content": read_answer(params["path"])}

    async def initialize(self) -> None:
        capabilities = {"fs": {"readTextFile": True, "writeTextFile": False}}
        await self.conn.request("initialize", {"protocolVersion": 1, "clientCapabilities": capabilities})

    async def new_session(self) -> str:
        return str((await self.conn.request("session/new", {"cwd": CWD, "mcpServers": []}))["sessionId"])

    async def prompt(self, session_id: str, text: str) -> str:
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        return str((await self.conn.request("session/prompt", params))["stopReason"])

    async def close(self) -> None:
        await self.conn.close(graceful=True)  # (closes the transport: the agent exits at EOF)


if __name__ == "__main__":
    scenario, n = parse_args()
    run_async(scenario, n, lambda: AconnClient().open())
