"""A deliberately non-conforming ACP agent for the conformance checker's tests.

It speaks just enough JSON-RPC to look alive, but breaks the rules: it echoes any protocol
version (even unsupported ones), answers notifications, answers unknown methods with a result
instead of -32601, accepts prompts on any session, and ignores lines that are not JSON.

Flags add more faults to each prompt turn: ``--fs`` calls ``fs/read_text_file`` although the
client offered no file system; ``--bad-update`` sends a ``session/update`` that does not match
the schema; ``--unknown-update`` sends one with an unknown ``sessionUpdate`` tag; ``--notice``
sends a ``notice`` although the client did not advertise ``session.notices``. ``--no-id-errors``
answers unknown methods with an error that has no ``id`` member at all.
"""

import json
import sys

FLAGS = set(sys.argv[1:])


def send(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def turn_faults(session_id: object) -> None:
    if "--fs" in FLAGS:
        send({"jsonrpc": "2.0", "id": "fs-1", "method": "fs/read_text_file",
              "params": {"sessionId": session_id, "path": "/etc/hostname"}})
    if "--bad-update" in FLAGS:
        send({"jsonrpc": "2.0", "method": "session/update",
              "params": {"sessionId": session_id, "update": {"sessionUpdate": "agent_message_chunk"}}})
    if "--notice" in FLAGS:
        send({"jsonrpc": "2.0", "method": "session/update",
              "params": {"sessionId": session_id, "update": {"sessionUpdate": "notice", "severity": "info", "title": "hi"}}})
    if "--unknown-update" in FLAGS:
        send({"jsonrpc": "2.0", "method": "session/update",
              "params": {"sessionId": session_id, "update": {"sessionUpdate": "from_the_future", "x": 1}}})


def main() -> None:
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue  # should answer -32700
        if not isinstance(msg, dict):
            continue
        method = msg.get("method")
        params = msg.get("params") or {}
        if method == "initialize":
            result = {"protocolVersion": params.get("protocolVersion"), "agentCapabilities": {}}
        elif "id" in msg and method is None:
            continue  # an answer to one of our requests
        elif method == "session/new":
            result = {"sessionId": "broken-1"}
        elif method == "session/prompt":
            turn_faults(params.get("sessionId"))
            result = {"stopReason": "end_turn"}
        elif "--no-id-errors" in FLAGS and "id" in msg:
            send({"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}})
            continue
        else:
            result = {}
        # answers everything, notifications included (id null)
        send({"jsonrpc": "2.0", "id": msg.get("id"), "result": result})


if __name__ == "__main__":
    main()
