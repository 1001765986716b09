"""The client on the official Python SDK, driving official_agent.py, run by
``_common.run_async`` (the concurrent scenario runs 8 tasks instead of 8 threads).

Runs in benchmarks/.venv-official, where ``acp`` is that SDK, not ours.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

from _common import CWD, ChunkCounter, parse_args, read_answer, run_async

from acp import PROTOCOL_VERSION, ReadTextFileResponse, spawn_agent_process, text_block
from acp.schema import ClientCapabilities, FileSystemCapabilities

AGENT = str(Path(__file__).with_name("official_agent.py"))


class BenchClient:
    def __init__(self) -> None:
        self.chunks = ChunkCounter()
        self.reads = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.chunks(update.content.text)

    async def read_text_file(self, session_id: str, path: str, **kwargs: Any) -> ReadTextFileResponse:
        self.reads += 1
        return ReadTextFileResponse(content=read_answer(path))


class Adapter:
    """The official SDK's connection behind _common.AsyncBenchClient."""

    def __init__(self) -> None:
        self.client = BenchClient()
        self.chunks = self.client.chunks
        self.stack = contextlib.AsyncExitStack()
        self.conn: Any = None

    async def open(self) -> Adapter:
        self.conn, _process = await self.stack.enter_async_context(spawn_agent_process(self.client, sys.executable, AGENT))
        return self

    @property
    def reads(self) -> int:
        return self.client.reads

    async def initialize(self) -> None:
        capabilities = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=False))
        await self.conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities)

    async def new_session(self) -> str:
        return str((await self.conn.new_session(cwd=CWD, mcp_servers=[])).session_id)

    async def prompt(self, session_id: str, text: str) -> str:
        return str((await self.conn.prompt(session_id=session_id, prompt=[text_block(text)])).stop_reason)

    async def close(self) -> None:
        await self.stack.aclose()


if __name__ == "__main__":
    run_async(*parse_args(), lambda: Adapter().open())
