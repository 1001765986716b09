"""The baseline client: plain msgspec dicts and blocking reads on the calling thread, no SDK.

Only the concurrent scenario starts a reader thread (8 callers cannot all read the pipe).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import msgspec
from _common import CWD, ChunkCounter, parse_args, read_answer, run_sync

encode = msgspec.json.encode
decode = msgspec.json.decode
AGENT = [sys.executable, str(Path(__file__).with_name("bare_agent.py"))]


class BareClient:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(AGENT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.fd = self.proc.stdin.fileno()
        self.reader = open(self.proc.stdout.fileno(), "rb", buffering=65536, closefd=False)
        self.ids = itertools.count(1)
        self.chunks = ChunkCounter()
        self.reads = 0
        self.write_lock = threading.Lock()
        self.waiters: dict[int, list[Any]] | None = None  # set once the reader thread runs

    def write(self, message: dict[str, Any]) -> None:
        data = encode(message) + b"\n"
        with self.write_lock:
            os.write(self.fd, data)

    def call(self, method: str, params: dict[str, Any]) -> Any:
        msg_id = next(self.ids)
        if self.waiters is not None:
            return self.call_threaded(msg_id, method, params)
        self.write({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        while True:
            msg = decode(self.reader.readline())
            if "method" in msg:
                self.on_message(msg)
            else:
                assert msg["id"] == msg_id, msg
                return msg["result"]

    def call_threaded(self, msg_id: int, method: str, params: dict[str, Any]) -> Any:
        lock = threading.Lock()
        lock.acquire()
        slot: list[Any] = [lock, None]
        assert self.waiters is not None
        self.waiters[msg_id] = slot
        self.write({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        lock.acquire()
        return slot[1]

    def prepare_concurrency(self) -> None:
        """Hand reading to a thread that routes answers to their callers."""
        self.waiters = {}
        threading.Thread(target=self.read_loop, daemon=True).start()

    def read_loop(self) -> None:
        assert self.waiters is not None
        while line := self.reader.readline():
            msg = decode(line)
            if "method" in msg:
                self.on_message(msg)
            else:
                slot = self.waiters.pop(msg["id"])
                slot[1] = msg["result"]
                slot[0].release()

    def on_message(self, msg: dict[str, Any]) -> None:
        method = msg["method"]
        if method == "session/update":
            self.chunks(msg["params"]["update"]["content"]["text"])
        elif method == "fs/read_text_file":
            self.reads += 1
            self.write({"jsonrpc": "2.0", "id": msg["id"], "result": {"content": read_answer(msg["params"]["path"])}})

    # ------------------------------------------------------------ the SyncBenchClient protocol

    def initialize(self) -> None:
        capabilities = {"fs": {"readTextFile": True, "writeTextFile": False}}
        self.call("initialize", {"protocolVersion": 1, "clientCapabilities": capabilities})

    def new_session(self) -> str:
        result = self.call("session/new", {"cwd": CWD, "mcpServers": []})
        return str(result["sessionId"])

    def prompt(self, session_id: str, text: str) -> str:
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        return str(self.call("session/prompt", params)["stopReason"])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


if __name__ == "__main__":
    scenario, n = parse_args()
    run_sync(scenario, n, BareClient)
