"""An agent for the ordering-mode tests; argv[1] is its ordering ("connection" | "session"),
argv[2] (optional) ``async``: an ``AsyncAgent`` with ``async def`` handlers instead of the
``SyncAgent``.

Prompt texts: ``stream N`` sends N message chunks ("0".."N-1"); ``ping N`` sends N chunks then
the session-less ext notification ``_test/ping``; ``ask N`` sends N chunks then asks permission.
"""

from __future__ import annotations

import asyncio
import sys

import acp
from acp import schema

counter = [0]


def new_session(request: schema.NewSessionRequest, ctx: object) -> schema.NewSessionResponse:
    counter[0] += 1
    return schema.NewSessionResponse(session_id=f"s{counter[0]}")


def prompt(request: schema.PromptRequest, ctx: acp.PromptContext) -> str:
    action, n = ctx.prompt_text.split()
    for i in range(int(n)):
        ctx.send_message(str(i))
    if action == "ping":
        ctx.client.ext_notification("_test/ping", {"after": int(n)})  # no sessionId
    elif action == "ask":
        ctx.ask_permission("go on")
    return "end_turn"


async def async_new_session(request: schema.NewSessionRequest, ctx: object) -> schema.NewSessionResponse:
    return new_session(request, ctx)


async def async_prompt(request: schema.PromptRequest, ctx: acp.AsyncPromptContext) -> str:
    action, n = ctx.prompt_text.split()
    for i in range(int(n)):
        ctx.send_message(str(i))
    if action == "ping":
        ctx.client.ext_notification("_test/ping", {"after": int(n)})
    elif action == "ask":
        await ctx.ask_permission("go on")
    return "end_turn"


def main() -> None:
    ordering = sys.argv[1]
    if sys.argv[2:] == ["async"]:
        agent = (
            acp.AsyncAgent.builder()
            .agent_info(name="session-order", version="1")
            .ordering(ordering)  # type: ignore[arg-type]
            .new_session_handler(async_new_session)
            .prompt_handler(async_prompt)
            .build()
        )
        asyncio.run(agent.serve_stdio())
        return
    (
        acp.SyncAgent.builder()
        .agent_info(name="session-order", version="1")
        .ordering(ordering)  # type: ignore[arg-type]
        .new_session_handler(new_session)
        .prompt_handler(prompt)
        .build()
        .serve_stdio()
    )


if __name__ == "__main__":
    main()
