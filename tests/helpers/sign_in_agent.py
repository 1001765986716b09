"""A bare JSON-RPC agent (no SDK) that needs a sign-in, the way real agents ask for one.

    sign_in_agent.py            serve ACP on stdio
    sign_in_agent.py --login    the terminal sign-in: print a line, mark the state file, exit 0

``initialize`` advertises two methods: ``browser`` (the agent's own: on ``authenticate`` it
prints a sign-in URL on stdout, outside JSON, as gemini-cli does, writes a line to stderr, then
waits: it never answers by itself, unless ``SIGN_IN_AUTO`` is set: then it signs in at once and
answers behind ``\x1b[?1049l`` on the same line, as gemini-cli does; a ``$/cancel_request`` for it
is noted on stderr and answered -32800) and ``cli-login`` (``type: terminal``, args ``--login``). ``session/new`` is refused
with ``auth_required`` (-32000) until the file named by ``SIGN_IN_STATE`` exists, which
``--login`` creates. A prompt is answered with one chunk, "signed in and ready".
"""

import json
import os
import sys

STATE = os.environ.get("SIGN_IN_STATE", "")
METHODS = [
    {"id": "browser", "name": "Sign in with a browser", "description": "Opens a sign-in page"},
    {"id": "cli-login", "name": "Log in in a terminal", "type": "terminal", "args": ["--login"],
     "env": {"SIGN_IN_MODE": "terminal"}},
]


def send(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def login_state() -> None:
    with open(STATE, "w") as f:
        f.write("signed in\n")


def login() -> None:
    print(f"Signed in at the terminal (mode {os.environ.get('SIGN_IN_MODE')}).", flush=True)
    login_state()


def serve() -> None:
    waiting_auth = None
    for line in sys.stdin:
        msg = json.loads(line)
        method, msg_id = msg.get("method"), msg.get("id")
        if method == "initialize":
            result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": METHODS,
                      "agentInfo": {"name": "sign-in-agent", "version": "1"}}
            send({"jsonrpc": "2.0", "id": msg_id, "result": result})
        elif method == "authenticate":
            waiting_auth = msg_id
            # Outside JSON, as gemini-cli prints its sign-in URL (with a colour escape).
            sys.stdout.write("\x1b[1mPlease visit https://login.example.test/device?code=WXYZ to sign in\x1b[0m\n")
            sys.stdout.flush()
            sys.stderr.write("waiting for the browser sign-in\n")
            sys.stderr.flush()
            if os.environ.get("SIGN_IN_AUTO"):  # the user signed in: answered as gemini-cli does,
                login_state()                    # behind the escape that leaves its screen
                sys.stdout.write("\x1b[?1049l" + json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": {}}) + "\n")
                sys.stdout.flush()
                waiting_auth = None
        elif method == "$/cancel_request" and msg.get("params", {}).get("requestId") == waiting_auth:
            sys.stderr.write("sign-in cancelled by the client\n")
            sys.stderr.flush()
            send({"jsonrpc": "2.0", "id": waiting_auth, "error": {"code": -32800, "message": "Request cancelled"}})
            waiting_auth = None
        elif method == "session/new":
            if STATE and os.path.exists(STATE):
                send({"jsonrpc": "2.0", "id": msg_id, "result": {"sessionId": "signed-1"}})
            else:
                send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32000, "message": "Authentication required"}})
        elif method == "session/prompt":
            chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "signed in and ready"}}
            send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "signed-1", "update": chunk}})
            send({"jsonrpc": "2.0", "id": msg_id, "result": {"stopReason": "end_turn"}})
        elif msg_id is not None and method is not None:
            send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    if sys.argv[1:] == ["--login"]:
        login()
    else:
        serve()
