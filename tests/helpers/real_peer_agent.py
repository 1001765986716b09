"""A raw agent process (stdlib only, no acp) that answers with messages in the shapes real
third-party agents send, for the forward-compatibility tests.

- ``initialize``: codex-acp's auth methods (``"type": "env_var"`` with ``vars``, a variant this
  SDK does not know) next to a plain agent method, and ``sessionCapabilities.subagents`` (a
  field ``SessionCapabilities`` does not declare).
- ``session/new``: claude-code's / gemini-cli's ``models`` next to the known fields.
- ``session/prompt``: one chunk with an unknown field, one update of an unknown kind, end_turn.
- ``_peer/received``: every params object it was sent, by method, as received (raw JSON).
"""

from __future__ import annotations

import json
import sys
from typing import Any

INITIALIZE = {
    "protocolVersion": 1,
    "agentCapabilities": {
        "loadSession": False,
        "sessionCapabilities": {"subagents": {"maxDepth": 2}},
    },
    "authMethods": [
        {"type": "env_var", "id": "openai-key", "name": "OpenAI API key",
         "vars": [{"name": "OPENAI_API_KEY", "label": "API key"}]},
        {"id": "chatgpt", "name": "Log in with ChatGPT", "description": "Opens a browser"},
    ],
}
MODELS = {"currentModelId": "sonnet", "availableModels": [{"modelId": "sonnet", "name": "Sonnet"}]}
CHUNK_UPDATE = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"},
                "parentToolUseId": "toolu_1"}
UNKNOWN_UPDATE = {"sessionUpdate": "hologram", "payload": {"a": [1, None]}}


def send(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def main() -> None:
    received: dict[str, list[Any]] = {}
    for line in sys.stdin:
        msg = json.loads(line)
        method, params = msg.get("method"), msg.get("params")
        if method is None or "id" not in msg:
            continue  # answers and notifications need nothing back
        received.setdefault(method, []).append(params)
        result: Any
        if method == "initialize":
            result = INITIALIZE
        elif method == "session/new":
            result = {"sessionId": "s1", "models": MODELS}
        elif method == "session/prompt":
            for update in (CHUNK_UPDATE, UNKNOWN_UPDATE):
                send({"jsonrpc": "2.0", "method": "session/update",
                      "params": {"sessionId": params["sessionId"], "update": update}})
            result = {"stopReason": "end_turn"}
        elif method == "_peer/received":
            result = received
        else:
            send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "Method not found"}})
            continue
        send({"jsonrpc": "2.0", "id": msg["id"], "result": result})


if __name__ == "__main__":
    main()
