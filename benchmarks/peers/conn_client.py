"""The client at the engine level: acp.connection.Connection over a spawned process."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from _common import CWD, ChunkCounter, agent_command, parse_args, read_answer, run_sync

from acp.connection import Connection, InboundCall
from acp.transport import ProcessTransport

AGENT = agent_command([sys.executable, str(Path(__file__).with_name("conn_agent.py"))])


class ConnClient:
    def __init__(self) -> None:
        self.chunks = ChunkCounter()
        self.reads = 0
        self.conn = Connection(ProcessTransport(AGENT), name="bench-client")
        self.conn.on_notification("session/update", self.on_update)
        self.conn.on_request("fs/read_text_file", self.on_read)
        self.conn.start()

    def on_update(self, params: Any) -> None:
        self.chunks(params["update"]["content"]["text"])

    def on_read(self, params: Any, call: InboundCall) -> Any:
        self.reads += 1
        return {"content": read_answer(params["path"])}

    def initialize(self) -> None:
        capabilities = {"fs": {"readTextFile": True, "writeTextFile": False}}
        self.conn.request("initialize", {"protocolVersion": 1, "clientCapabilities": capabilities})

    def new_session(self) -> str:
        return str(self.conn.request("session/new", {"cwd": CWD, "mcpServers": []})["sessionId"])

    def prompt(self, session_id: str, text: str) -> str:
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        return str(self.conn.request("session/prompt", params)["stopReason"])

    def prepare_concurrency(self) -> None:
        pass

    def close(self) -> None:
        self.conn.close(graceful=True)


if __name__ == "__main__":
    scenario, n = parse_args()
    run_sync(scenario, n, ConnClient)
