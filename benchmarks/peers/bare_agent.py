"""The baseline agent: plain msgspec dicts, blocking reads, one os.write per message, no SDK."""

from __future__ import annotations

import os
from typing import Any

import msgspec
from _common import FILE_CONTENT, READ_PATH, agent_reply, big_path, big_text

encode = msgspec.json.encode
decode = msgspec.json.decode


def write(message: dict[str, Any]) -> None:
    os.write(1, encode(message) + b"\n")


class Agent:
    def __init__(self) -> None:
        self.reader = open(0, "rb", buffering=65536, closefd=False)
        self.sessions: dict[str, str] = {}
        self.next_id = 0

    def serve(self) -> None:
        while line := self.reader.readline():
            msg = decode(line)
            if "id" in msg and "method" in msg:  # notifications (session/cancel) are ignored
                result = self.handle(msg["method"], msg["params"])
                write({"jsonrpc": "2.0", "id": msg["id"], "result": result})

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
            return {"stopReason": self.prompt(params["sessionId"], params["prompt"][0]["text"])}
        raise ValueError(f"unexpected method {method}")

    def prompt(self, session_id: str, text: str) -> str:
        action, n = agent_reply(text)
        if action == "stream":
            for i in range(n):
                update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": str(i)}}
                write({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}})
        elif action == "read":
            for _ in range(n):
                if len(self.call("fs/read_text_file", {"sessionId": session_id, "path": READ_PATH})["content"]) != len(FILE_CONTENT):
                    return "refusal"
        elif action == "big_read":
            if len(self.call("fs/read_text_file", {"sessionId": session_id, "path": big_path(n)})["content"]) != n:
                return "refusal"
        elif action == "big_update":
            update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": big_text(n)}}
            write({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}})
        return "end_turn"

    def call(self, method: str, params: dict[str, Any]) -> Any:
        """A request to the client; the client sends nothing else meanwhile in these scenarios."""
        self.next_id += 1
        write({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        answer = decode(self.reader.readline())
        assert answer.get("id") == self.next_id, answer
        return answer["result"]


if __name__ == "__main__":
    Agent().serve()
    os._exit(0)
