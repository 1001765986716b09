"""A bare JSON-RPC agent (no SDK) that fails the way real agents do, for the error-message tests.

    exiting_agent.py MODE

``initialize`` is answered normally; then, by MODE:
  error-data   ``session/new`` is answered the way the official TypeScript/Python SDKs answer a
               handler's exception: ``{"code": -32603, "message": "Internal error", "data":
               {"details": "<the exception's message>"}}``
  crash        ``session/new`` works; ``session/prompt`` sends one chunk, writes a Python
               traceback to stderr, and exits with status 3 without answering
  hang         ``session/new`` works; ``session/prompt`` writes "hanging in prompt" to stderr
               and never answers (the tests kill the process)
"""

import json
import os
import sys
import time
import traceback

MODE = sys.argv[1]
CREDENTIALS = "Missing credentials. Please pass an `apiKey`, or set the `ANTHROPIC_API_KEY` environment variable."


def send(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def backend_call() -> None:
    raise RuntimeError("model backend unreachable: connection refused")


def main() -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        method, msg_id = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": msg_id, "result": {"protocolVersion": 1, "agentCapabilities": {}}})
        elif method == "session/new" and MODE == "error-data":
            error = {"code": -32603, "message": "Internal error", "data": {"details": CREDENTIALS}}
            send({"jsonrpc": "2.0", "id": msg_id, "error": error})
        elif method == "session/new":
            send({"jsonrpc": "2.0", "id": msg_id, "result": {"sessionId": "s1"}})
        elif method == "session/prompt" and MODE == "crash":
            chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "thinking"}}
            send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": chunk}})
            sys.stderr.write("starting the turn\n")
            try:
                backend_call()
            except RuntimeError:
                traceback.print_exc()
            sys.stderr.flush()
            os._exit(3)
        elif method == "session/prompt" and MODE == "hang":
            sys.stderr.write("hanging in prompt\n")
            sys.stderr.flush()
            while True:
                time.sleep(60)


if __name__ == "__main__":
    main()
