"""The demo agent of agent_full.py served remotely, as a subprocess for the remote tests.

``remote_agent.py [ws|http]``: WebSocket (the default) or Streamable HTTP. Prints the server's
URL on one stdout line, then serves until its stdin ends (or it is killed).
"""

from __future__ import annotations

import logging
import sys

from agent_full import build_agent  # run as a script: this folder is on sys.path


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    agent, _ = build_agent(grace=30.0)
    profile = sys.argv[1] if len(sys.argv) > 1 else "ws"
    with agent, (agent.serve_http() if profile == "http" else agent.serve_websocket()) as server:
        print(server.url, flush=True)
        sys.stdin.read()  # until the test closes our stdin


if __name__ == "__main__":
    main()
