"""The agent at the engine level on asyncio: acp.aio.AsyncConnection over stdio (the transport
AsyncAgent.serve_stdio() uses) with plain dict params and ``async def`` handlers (each request
its own task, as a facade will run it)."""

from __future__ import annotations

import asyncio
from typing import Any

from _common import FILE_CONTENT, READ_PATH, agent_reply, big_path, big_text

from acp.aio import AsyncConnection, AsyncInboundCall
from acp.aio.transport import StdioTransport


async def main() -> None:
    conn = AsyncConnection(StdioTransport(), name="bench-agent")
    sessions: dict[str, str] = {}

    async def initialize(params: Any, call: AsyncInboundCall) -> Any:
        return {
            "protocolVersion": 1,
            "agentCapabilities": {"loadSession": False},
            "agentInfo": {"name": "bench", "version": "1"},
        }

    async def new_session(params: Any, call: AsyncInboundCall) -> Any:
        session_id = f"s{len(sessions) + 1}"
        sessions[session_id] = params["cwd"]
        return {"sessionId": session_id}

    async def prompt(params: Any, call: AsyncInboundCall) -> Any:
        session_id = params["sessionId"]
        action, n = agent_reply(params["prompt"][0]["text"])
        if action == "stream":
            notify = conn.notify
            for i in range(n):
                update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": str(i)}}
                notify("session/update", {"sessionId": session_id, "update": update})
        elif action == "read":
            request = conn.request
            for _ in range(n):
                answer = await request("fs/read_text_file", {"sessionId": session_id, "path": READ_PATH})
                if len(answer["content"]) != len(FILE_CONTENT):
                    return {"stopReason": "refusal"}
        elif action == "big_read":
            answer = await conn.request("fs/read_text_file", {"sessionId": session_id, "path": big_path(n)})
            if len(answer["content"]) != n:
                return {"stopReason": "refusal"}
        elif action == "big_update":
            update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": big_text(n)}}
            conn.notify("session/update", {"sessionId": session_id, "update": update})
        return {"stopReason": "end_turn"}

    conn.on_request("initialize", initialize)
    conn.on_request("session/new", new_session)
    conn.on_request("session/prompt", prompt)
    conn.on_notification("session/cancel", lambda params: None)
    conn.start()
    await conn.wait_closed()
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
