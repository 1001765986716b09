"""The asyncio floor, agent side: plain msgspec dicts on an event loop, no SDK.

What any asyncio agent pays at least: the loop wakes on stdin (``add_reader``), one ``os.read``
per wake-up, lines split and decoded, answers written at once. A prompt that calls the client
(``read N``) runs as a task awaiting a future per call, as an ``async def`` handler must; every
other request is answered inline in the read callback, which no SDK with concurrent handlers
can do, so this is a lower bound.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import msgspec
from _common import FILE_CONTENT, READ_PATH, LineBuffer, agent_reply, big_path, big_text

encode = msgspec.json.encode
decode = msgspec.json.decode


def write(message: dict[str, Any]) -> None:
    os.write(1, encode(message) + b"\n")


class Agent:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.done = loop.create_future()
        self.lines = LineBuffer()
        self.sessions: dict[str, str] = {}
        self.next_id = 0
        self.waiters: dict[int, asyncio.Future[Any]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        os.set_blocking(0, False)
        loop.add_reader(0, self.on_readable)

    def on_readable(self) -> None:
        data = os.read(0, 65536)
        if not data:
            self.loop.remove_reader(0)
            self.done.set_result(None)
            return
        for line in self.lines.feed(data):
            self.on_message(decode(line))

    def on_message(self, msg: dict[str, Any]) -> None:
        if "method" not in msg:  # an answer to one of our calls
            self.waiters.pop(msg["id"]).set_result(msg["result"])
        elif "id" in msg:  # notifications (session/cancel) are ignored
            params = msg["params"]
            if msg["method"] == "session/prompt" and params["prompt"][0]["text"].startswith(("read ", "big_read ")):
                task = self.loop.create_task(self.read_prompt(msg["id"], params))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            else:
                write({"jsonrpc": "2.0", "id": msg["id"], "result": self.handle(msg["method"], params)})

    def handle(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize":
            return {
                "protocolVersion": 1,
                "agentCapabilities": {"loadSession": False},
                "agentInfo": {"name": "bench", "version": "1"},
            }
        if method == "session/new":
            session_id = f"s{len(self.sessions) + 1}"
            self.sessions[session_id] = params["cwd"]
            return {"sessionId": session_id}
        if method == "session/prompt":
            action, n = agent_reply(params["prompt"][0]["text"])
            if action == "stream":
                session_id = params["sessionId"]
                for i in range(n):
                    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": str(i)}}
                    write({"jsonrpc": "2.0", "method": "session/update",
                           "params": {"sessionId": session_id, "update": update}})
            elif action == "big_update":
                update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": big_text(n)}}
                write({"jsonrpc": "2.0", "method": "session/update",
                       "params": {"sessionId": params["sessionId"], "update": update}})
            return {"stopReason": "end_turn"}
        raise ValueError(f"unexpected method {method}")

    async def read_prompt(self, msg_id: int, params: dict[str, Any]) -> None:
        action, n = agent_reply(params["prompt"][0]["text"])
        stop = "end_turn"
        if action == "big_read":
            result = await self.call("fs/read_text_file", {"sessionId": params["sessionId"], "path": big_path(n)})
            stop = "end_turn" if len(result["content"]) == n else "refusal"
        for _ in range(n if action == "read" else 0):
            result = await self.call("fs/read_text_file", {"sessionId": params["sessionId"], "path": READ_PATH})
            if len(result["content"]) != len(FILE_CONTENT):
                stop = "refusal"
        write({"jsonrpc": "2.0", "id": msg_id, "result": {"stopReason": stop}})

    def call(self, method: str, params: dict[str, Any]) -> asyncio.Future[Any]:
        self.next_id += 1
        future = self.waiters[self.next_id] = self.loop.create_future()
        write({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return future


async def main() -> None:
    await Agent(asyncio.get_running_loop()).done


if __name__ == "__main__":
    asyncio.run(main())
    os._exit(0)
