"""The demo agent of agent_full.py served over WebSocket, as a subprocess for the remote tests.

Prints the server's URL on one stdout line, then serves until its stdin ends (or it is killed).
"""

from __future__ import annotations

import logging
import sys

from agent_full import build_agent  # run as a script: this folder is on sys.path


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    agent, _ = build_agent(grace=30.0)
    with agent, agent.serve_websocket() as server:
        print(server.url, flush=True)
        sys.stdin.read()  # until the test closes our stdin


if __name__ == "__main__":
    main()
