"""The asyncio floor, client side: plain msgspec dicts on an event loop, no SDK, run by
``_common.run_async`` like the asyncio SDKs' clients.

The loop wakes on the agent's stdout (``add_reader``, one ``os.read`` per wake-up); answers
resolve a future per call, updates and ``fs/read_text_file`` are handled inline in the read
callback. Against bare_async_agent.py this is about the least an asyncio pair can cost per
message on this machine: the floor under the ours-async and official rows.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
from _common import CWD, ChunkCounter, LineBuffer, parse_args, read_answer, run_async

encode = msgspec.json.encode
decode = msgspec.json.decode
AGENT = [sys.executable, str(Path(__file__).with_name("bare_async_agent.py"))]


class BareAsyncClient:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(AGENT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.out = self.proc.stdin.fileno()
        self.input = self.proc.stdout.fileno()
        self.ids = itertools.count(1)
        self.chunks = ChunkCounter()
        self.reads = 0
        self.lines = LineBuffer()
        self.waiters: dict[int, asyncio.Future[Any]] = {}
        self.loop = asyncio.get_running_loop()
        os.set_blocking(self.input, False)
        self.loop.add_reader(self.input, self.on_readable)

    def write(self, message: dict[str, Any]) -> None:
        os.write(self.out, encode(message) + b"\n")

    def on_readable(self) -> None:
        data = os.read(self.input, 65536)
        if not data:
            self.loop.remove_reader(self.input)
            return
        for line in self.lines.feed(data):
            msg = decode(line)
            method = msg.get("method")
            if method is None:
                self.waiters.pop(msg["id"]).set_result(msg["result"])
            elif method == "session/update":
                self.chunks(msg["params"]["update"]["content"]["text"])
            elif method == "fs/read_text_file":
                self.reads += 1
                self.write({"jsonrpc": "2.0", "id": msg["id"], "result": {"content": read_answer(msg["params"]["path"])}})

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        msg_id = next(self.ids)
        future = self.waiters[msg_id] = self.loop.create_future()
        self.write({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return await future

    # ------------------------------------------------------------ the AsyncBenchClient protocol

    async def initialize(self) -> None:
        capabilities = {"fs": {"readTextFile": True, "writeTextFile": False}}
        await self.call("initialize", {"protocolVersion": 1, "clientCapabilities": capabilities})

    async def new_session(self) -> str:
        return str((await self.call("session/new", {"cwd": CWD, "mcpServers": []}))["sessionId"])

    async def prompt(self, session_id: str, text: str) -> str:
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        return str((await self.call("session/prompt", params))["stopReason"])

    async def close(self) -> None:
        self.loop.remove_reader(self.input)
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        await self.loop.run_in_executor(None, self.proc.wait)


async def open_client() -> BareAsyncClient:
    return BareAsyncClient()


if __name__ == "__main__":
    scenario, n = parse_args()
    run_async(scenario, n, open_client)
