"""A SyncAgent for the ordering-mode tests; argv[1] is its ordering ("connection" | "session").

Prompt texts: ``stream N`` sends N message chunks ("0".."N-1"); ``ping N`` sends N chunks then
the session-less ext notification ``_test/ping``; ``ask N`` sends N chunks then asks permission.
"""

from __future__ import annotations

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


def main() -> None:
    (
        acp.SyncAgent.builder()
        .agent_info(name="session-order", version="1")
        .ordering(sys.argv[1])  # type: ignore[arg-type]
        .new_session_handler(new_session)
        .prompt_handler(prompt)
        .build()
        .serve_stdio()
    )


if __name__ == "__main__":
    main()
