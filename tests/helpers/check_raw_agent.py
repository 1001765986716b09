"""A hand-written ACP agent (no SDK) that conforms, for ``acp check``'s tests, unless told not to.

It speaks JSON-RPC by hand: version negotiation, -32700 / -32600 / -32601, notifications never
answered, unique session ids, unknown sessions refused, exit at end of input. It advertises
``sessionCapabilities.close``, and a ``session/close`` cancels a running turn (the prompt
``wait`` holds the turn until cancelled or closed). Being independent of the SDK, it keeps
showing what the checker sees whatever the SDK does on close.

``--dup-ids``           the second ``session/new`` answers the first id again
``--close-keeps-turn``  ``session/close`` answers ``{}`` but leaves the running turn running
``--future-field``      advertises ``sessionCapabilities.subagents``, a field newer than the schema
                        (as ``@agentclientprotocol/codex-acp`` 2.6 does)
``--speaks-v2``         asked for a version above 1, it answers version 2 in the v2 draft's shape
                        (``info``, ``capabilities``), as ``@agentclientprotocol/codex-acp`` 2.6 does
"""

import json
import sys
import threading

FLAGS = set(sys.argv[1:])
write_lock = threading.Lock()
state_lock = threading.Lock()
sessions: dict = {}  # session id -> the threading.Event of its running turn, or None
counter = [0]


def send(obj: dict) -> None:
    with write_lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def answer(msg_id: object, result: object) -> None:
    send({"jsonrpc": "2.0", "id": msg_id, "result": result})


def error(msg_id: object, code: int, message: str) -> None:
    send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})


def chunk(session_id: str, text: str) -> None:
    send({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": session_id,
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}},
    }})


def wait_turn(msg_id: object, session_id: str, stop: threading.Event) -> None:
    chunk(session_id, "waiting")
    stop.wait()
    with state_lock:
        sessions[session_id] = None
    answer(msg_id, {"stopReason": "cancelled"})


def prompt(msg_id: object, params: dict) -> None:
    session_id = params.get("sessionId")
    with state_lock:
        known = session_id in sessions
        busy = known and sessions[session_id] is not None
    if not known:
        return error(msg_id, -32002, f"Unknown session {session_id!r}")
    if busy:
        return error(msg_id, -32600, "A prompt turn is already active for this session")
    blocks = params.get("prompt") or []
    text = "".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    if text == "wait":
        stop = threading.Event()
        with state_lock:
            sessions[session_id] = stop
        threading.Thread(target=wait_turn, args=(msg_id, session_id, stop), daemon=True).start()
        return
    chunk(session_id, f"got {len(text)} characters")
    answer(msg_id, {"stopReason": "end_turn"})


def stop_turn(session_id: object) -> None:
    with state_lock:
        stop = sessions.get(session_id)
    if stop is not None:
        stop.set()


def handle(msg: dict) -> None:
    method = msg.get("method")
    params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
    if "id" not in msg:  # a notification: never answered
        if method == "session/cancel":
            stop_turn(params.get("sessionId"))
        return
    msg_id = msg["id"]
    if not isinstance(method, str):
        return error(msg_id, -32600, "Invalid request")
    if method == "initialize":
        asked = params.get("protocolVersion")
        if "--speaks-v2" in FLAGS and isinstance(asked, int) and asked >= 2:
            return answer(msg_id, {
                "protocolVersion": 2,
                "info": {"name": "check-raw-agent", "version": "1"},
                "capabilities": {"session": {"prompt": {"image": {}}}},
                "authMethods": [{"methodId": "token", "type": "agent", "name": "Token"}],
            })
        session_capabilities: dict = {"close": {}}
        if "--future-field" in FLAGS:
            session_capabilities["subagents"] = {}
        return answer(msg_id, {
            "protocolVersion": 1,
            "agentCapabilities": {"sessionCapabilities": session_capabilities},
            "agentInfo": {"name": "check-raw-agent", "version": "1"},
        })
    if method == "session/new":
        with state_lock:
            counter[0] += 1
            repeat = "--dup-ids" in FLAGS and counter[0] == 2
            session_id = "raw-1" if repeat else f"raw-{counter[0]}"
            sessions.setdefault(session_id, None)
        return answer(msg_id, {"sessionId": session_id})
    if method == "session/prompt":
        return prompt(msg_id, params)
    if method == "session/close":
        if "--close-keeps-turn" not in FLAGS:
            stop_turn(params.get("sessionId"))
        return answer(msg_id, {})
    error(msg_id, -32601, "Method not found")


def main() -> None:
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            error(None, -32700, "Parse error")
            continue
        if isinstance(msg, dict) and (msg.get("method") is not None or "id" not in msg):
            handle(msg)
        # a batch (a JSON array) or an answer: nothing to do


if __name__ == "__main__":
    main()
