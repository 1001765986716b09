"""The agent on our SDK: acp.SyncAgent."""

from __future__ import annotations

import os
from typing import Any

from _common import FILE_CONTENT, READ_PATH, agent_reply, big_path, big_text

import acp
from acp import schema

sessions: dict[str, str] = {}
ORDERING: Any = os.environ.get("ACP_BENCH_ORDERING", "connection")  # see ours_client.py
WAIT_SPIN = os.environ.get("ACP_BENCH_WAIT_SPIN")  # see ours_client.py


def new_session(request: schema.NewSessionRequest, ctx: object) -> schema.NewSessionResponse:
    session_id = f"s{len(sessions) + 1}"
    sessions[session_id] = request.cwd
    return schema.NewSessionResponse(session_id=session_id)


def prompt(request: schema.PromptRequest, ctx: acp.PromptContext) -> str | None:
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
            if len(read(READ_PATH)) != len(FILE_CONTENT):
                return "refusal"
    elif action == "big_read":
        if len(ctx.read_file(big_path(n))) != n:
            return "refusal"
    elif action == "big_update":
        ctx.send_message(big_text(n))
    return "end_turn"


def main() -> None:
    builder = (
        acp.SyncAgent.builder()
        .agent_info(name="bench", version="1")
        .new_session_handler(new_session)
        .prompt_handler(prompt)
    )
    if ORDERING != "connection":  # only then: the --baseline build may predate ordering()
        builder.ordering(ORDERING)
    if WAIT_SPIN is not None:
        builder.wait_spin(float(WAIT_SPIN))
    builder.build().serve_stdio()


if __name__ == "__main__":
    main()
