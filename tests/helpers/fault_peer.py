"""A misbehaving JSON-RPC peer process for the fault tests; raw bytes only (no acp import).

It reads newline-delimited JSON from stdin and writes with ``os.write`` straight to fd 1 (no
buffering), so whatever it wrote before it dies is in the pipe. Requests it understands:

  echo(params)              -> params
  hang({})                  -> notification ``started`` {"id": <id>}, then never answers
  stream_then_die({n})      -> n notifications ``chunk`` {"i": k}, then SIGKILLs itself
  stream_forever({})        -> ``chunk`` notifications with i = 0, 1, 2 ... until killed
  close_stdout({})          -> notification ``closing``, closes fd 1, keeps reading stdin
                               until EOF (then exits 0)
  close_stdout_stay({})     -> the same, but ignores stdin EOF: runs until SIGTERM/SIGKILL
  half_line({})             -> a notification ``chunk`` {"i": 0}, half a response line, exit 0

Anything else is answered with error -32601.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading


def write(obj: object) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def main() -> None:
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return
        msg = json.loads(line)
        method, msg_id, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if msg_id is None:
            continue  # notifications ($/cancel_request...) are ignored
        if method == "echo":
            write({"jsonrpc": "2.0", "id": msg_id, "result": params})
        elif method == "hang":
            write({"jsonrpc": "2.0", "method": "started", "params": {"id": msg_id}})
        elif method == "stream_then_die":
            for k in range(params["n"]):
                write({"jsonrpc": "2.0", "method": "chunk", "params": {"i": k}})
            os.kill(os.getpid(), signal.SIGKILL)
        elif method == "stream_forever":
            k = 0
            while True:
                write({"jsonrpc": "2.0", "method": "chunk", "params": {"i": k}})
                k += 1
        elif method in ("close_stdout", "close_stdout_stay"):
            write({"jsonrpc": "2.0", "method": "closing", "params": {}})
            os.close(1)
            while stdin.readline():
                pass
            if method == "close_stdout_stay":
                threading.Event().wait()  # until SIGTERM / SIGKILL
            return
        elif method == "half_line":
            write({"jsonrpc": "2.0", "method": "chunk", "params": {"i": 0}})
            os.write(1, b'{"jsonrpc":"2.0","id":%d,"res' % msg_id)
            os._exit(0)
        else:
            write({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
