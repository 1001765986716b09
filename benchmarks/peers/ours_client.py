"""The client on our SDK: acp.SyncClient driving ours_agent.py (acp.SyncAgent)."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _common import (
    CWD,
    ChunkCounter,
    agent_command,
    parse_args,
    read_answer,
    run_sync,
    unavailable,
)

import acp
from acp import schema

AGENT = agent_command([sys.executable, str(Path(__file__).with_name("ours_agent.py"))])
# "session" for the ours-session rows (ours_session_client.py); the agent reads it too.
ORDERING: Any = os.environ.get("ACP_BENCH_ORDERING", "connection")
# ACP_BENCH_WAIT_SPIN=0: no polling for answers on either side, so CPU per operation is work
# (the agent reads it too).
WAIT_SPIN = os.environ.get("ACP_BENCH_WAIT_SPIN")


class OursClient:
    def __init__(self) -> None:
        self.chunks = ChunkCounter()
        self.reads = 0
        builder = (
            acp.SyncClient.builder()
            .agent_process(*AGENT)
            .session_update_handler(self.on_update)
            .read_text_file_handler(self.on_read)
        )
        if ORDERING != "connection":  # only then: the --baseline build may predate ordering()
            builder.ordering(ORDERING)
        if WAIT_SPIN is not None:
            builder.wait_spin(float(WAIT_SPIN))
        self.stack = ExitStack()
        self.client: Any = self.stack.enter_context(builder.build())

    def on_update(self, notification: schema.SessionNotification) -> None:
        update = notification.update
        assert isinstance(update, schema.AgentMessageChunk)
        content = update.content
        assert isinstance(content, schema.TextContent)
        self.chunks(content.text)

    def on_read(self, request: schema.ReadTextFileRequest, ctx: object) -> schema.ReadTextFileResponse:
        self.reads += 1
        return schema.ReadTextFileResponse(content=read_answer(request.path))

    def initialize(self) -> None:
        self.client.initialize()

    def new_session(self) -> str:
        return str(self.client.new_session(cwd=CWD).session_id)

    def prompt(self, session_id: str, text: str) -> str:
        return str(self.client.prompt(session_id, text).stop_reason)  # StopReason is a str

    def prepare_concurrency(self) -> None:
        pass

    def close(self) -> None:
        self.stack.close()


if __name__ == "__main__":
    scenario, n = parse_args()
    missing = [name for name in ("SyncAgent", "SyncClient", "PromptContext") if not hasattr(acp, name)]
    if missing:
        unavailable(f"acp.{', acp.'.join(missing)} not available yet")
    run_sync(scenario, n, OursClient)
