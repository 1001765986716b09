"""The agent on our asyncio facade: acp.AsyncAgent (async def handlers on the event loop)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from _common import FILE_CONTENT, READ_PATH, agent_reply, big_path, big_text

import acp
from acp import schema

sessions: dict[str, str] = {}
ORDERING: Any = os.environ.get("ACP_BENCH_ORDERING", "connection")  # see ours_async_client.py


async def new_session(request: schema.NewSessionRequest, ctx: object) -> schema.NewSessionResponse:
    session_id = f"s{len(sessions) + 1}"
    sessions[session_id] = request.cwd
    return schema.NewSessionResponse(session_id=session_id)


async def prompt(request: schema.PromptRequest, ctx: acp.AsyncPromptContext) -> str | None:
    block = request.prompt[0]
    assert isinstance(block, schema.TextContent)
    action, n = agent_reply(block.text)
    if action == "stream":
        send = ctx.send_message
        for i in range(n):
            send(str(i))
    elif action == "read":
        read = ctx.read_file
        for _ in range(n):
            if len(await read(READ_PATH)) != len(FILE_CONTENT):
                return "refusal"
    elif action == "big_read":
        if len(await ctx.read_file(big_path(n))) != n:
            return "refusal"
    elif action == "big_update":
        ctx.send_message(big_text(n))
    return "end_turn"


async def main() -> None:
    builder = (
        acp.AsyncAgent.builder()
        .agent_info(name="bench", version="1")
        .new_session_handler(new_session)
        .prompt_handler(prompt)
    )
    if ORDERING != "connection":  # only then: an install that predates ordering() still runs
        builder.ordering(ORDERING)
    await builder.build().serve_stdio()


if __name__ == "__main__":
    profile = os.environ.get("ACP_BENCH_PROFILE_AGENT")  # a path: write the agent's cProfile stats there
    if profile:
        import cProfile

        cProfile.run("asyncio.run(main())", profile)
    else:
        asyncio.run(main())
