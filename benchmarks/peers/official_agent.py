"""The agent on the official Python SDK (PyPI agent-client-protocol; asyncio + pydantic).

Runs in benchmarks/.venv-official, where ``acp`` is that SDK, not ours.
"""

from __future__ import annotations

import asyncio
from typing import Any

from _common import FILE_CONTENT, READ_PATH, agent_reply, big_path, big_text

from acp import (
    PROTOCOL_VERSION,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    run_agent,
    update_agent_message_text,
)
from acp.schema import AgentCapabilities, Implementation


class BenchAgent:
    def __init__(self) -> None:
        self.sessions: dict[str, str] = {}
        self.conn: Any = None

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=False),
            agent_info=Implementation(name="bench", version="1"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        session_id = f"s{len(self.sessions) + 1}"
        self.sessions[session_id] = cwd
        return NewSessionResponse(session_id=session_id)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        action, n = agent_reply(prompt[0].text)
        if action == "stream":
            for i in range(n):
                await self.conn.session_update(session_id, update_agent_message_text(str(i)))
        elif action == "read":
            for _ in range(n):
                answer = await self.conn.read_text_file(session_id=session_id, path=READ_PATH)
                if len(answer.content) != len(FILE_CONTENT):
                    return PromptResponse(stop_reason="refusal")
        elif action == "big_read":
            answer = await self.conn.read_text_file(session_id=session_id, path=big_path(n))
            if len(answer.content) != n:
                return PromptResponse(stop_reason="refusal")
        elif action == "big_update":
            await self.conn.session_update(session_id, update_agent_message_text(big_text(n)))
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        pass


if __name__ == "__main__":
    asyncio.run(run_agent(BenchAgent()))
