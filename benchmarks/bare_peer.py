"""The baseline: a bare msgspec JSON-RPC peer over stdio, no SDK, one write per message.

Answers `echo` with its params and `stream {n}` with n `chunk` notifications then {"sent": n}.
"""

from __future__ import annotations

import os

import msgspec


def main() -> None:
    decode = msgspec.json.decode
    encode = msgspec.json.encode
    def write(data: bytes) -> None:  # unbuffered: one os.write per message
        os.write(1, data)

    for line in open(0, "rb", buffering=65536, closefd=False):
        msg = decode(line)
        method = msg.get("method")
        if method == "echo":
            write(encode({"jsonrpc": "2.0", "id": msg["id"], "result": msg["params"]}) + b"\n")
        elif method == "stream":
            n = msg["params"]["n"]
            for i in range(n):
                chunk = {"jsonrpc": "2.0", "method": "chunk", "params": {"sessionId": "s", "i": i}}
                write(encode(chunk) + b"\n")
            write(encode({"jsonrpc": "2.0", "id": msg["id"], "result": {"sent": n}}) + b"\n")
    os._exit(0)


if __name__ == "__main__":
    main()
