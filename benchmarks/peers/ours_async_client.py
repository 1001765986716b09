"""The client on our asyncio facade: acp.AsyncClient driving ours_async_agent.py (acp.AsyncAgent),
run by ``_common.run_async`` like the official SDK's client."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from _common import CWD, ChunkCounter, parse_args, read_answer, run_async, unavailable

import acp
from acp import schema

AGENT = [sys.executable, str(Path(__file__).with_name("ours_async_agent.py"))]
# "session" for the ours-async-session rows (ours_async_session_client.py); the agent reads it too.
ORDERING: Any = os.environ.get("ACP_BENCH_ORDERING", "connection")


class OursAsyncClient:
    def __init__(self) -> None:
        self.chunks = ChunkCounter()
        self.reads = 0
        self.client: Any = None

    async def open(self) -> OursAsyncClient:
        builder = (
            acp.AsyncClient.builder()
            .agent_process(*AGENT)
            .session_update_handler(self.on_update)
            .read_text_file_handler(self.on_read)
        )
        if ORDERING != "connection":  # only then: an install that predates ordering() still runs
            builder.ordering(ORDERING)
        self.client = await builder.build()
        return self

    async def on_update(self, notification: schema.SessionNotification) -> None:
        update = notification.update
        assert isinstance(update, schema.AgentMessageChunk)
        content = update.content
        assert isinstance(content, schema.TextContent)
        self.chunks(content.text)

    async def on_read(self, request: schema.ReadTextFileRequest, ctx: object) -> schema.ReadTextFileResponse:
        self.reads += 1
        return schema.ReadTextFileResponse(content=read_answer(request.path))

    async def initialize(self) -> None:
        await self.client.initialize()

    async def new_session(self) -> str:
        return str((await self.client.new_session(cwd=CWD)).session_id)

    async def prompt(self, session_id: str, text: str) -> str:
        return str((await self.client.prompt(session_id, text)).stop_reason)  # StopReason is a str

    async def close(self) -> None:
        await self.client.close()


if __name__ == "__main__":
    scenario, n = parse_args()
    missing = [name for name in ("AsyncAgent", "AsyncClient", "AsyncPromptContext") if not hasattr(acp, name)]
    if missing:
        unavailable(f"acp.{', acp.'.join(missing)} not available yet")
    run_async(scenario, n, lambda: OursAsyncClient().open())
