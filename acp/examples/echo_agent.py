"""The smallest correct ACP agent: it streams the prompt's text back, then ends the turn.

Run it over stdio with ``python -m acp.examples.echo_agent``; try it with
``python -m acp chat``. The whole agent is :func:`build_agent`::

    agent = build_agent()
    agent.serve_stdio()
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading

import acp
from acp import schema
from acp.errors import RESOURCE_NOT_FOUND

__all__ = ["EchoAgent", "build_agent", "echo", "main", "CHUNK_SIZE"]

CHUNK_SIZE = 1024
"""The echo is streamed in pieces of at most this many characters."""

_log = logging.getLogger("acp.examples.echo")


class EchoAgent:
    """The echo agent's state: the ids of the sessions it created (handlers run on threads)."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._sessions: set[str] = set()

    def new_session(
        self, request: schema.NewSessionRequest, ctx: acp.AgentRequestContext
    ) -> schema.NewSessionResponse:
        """A session is just an id."""
        with self._lock:
            session_id = f"echo-{next(self._ids)}"
            self._sessions.add(session_id)
        return schema.NewSessionResponse(session_id=session_id)

    def check_session(self, session_id: str) -> None:
        """Refuse a session this agent did not create (-32002, resource not found)."""
        with self._lock:
            known = session_id in self._sessions
        if not known:
            raise acp.RequestError(RESOURCE_NOT_FOUND, f"Unknown session {session_id!r}", {"sessionId": session_id})

    def prompt(self, request: schema.PromptRequest, ctx: acp.PromptContext) -> str:
        """Stream the prompt's text back as ``agent_message_chunk`` updates, then ``end_turn``."""
        self.check_session(request.session_id)
        return echo(ctx.prompt_text, ctx)


def echo(text: str, ctx: acp.PromptContext) -> str:
    """Stream ``text`` back in pieces of :data:`CHUNK_SIZE`; the stop reason."""
    for start in range(0, len(text), CHUNK_SIZE):
        if ctx.is_cancelled:
            return schema.StopReasons.CANCELLED
        ctx.send_message(text[start : start + CHUNK_SIZE])
    return schema.StopReasons.END_TURN


def build_agent() -> acp.SyncAgent:
    """The echo agent, ready to serve (``.serve_stdio()``, ``.serve_in_process()``...)."""
    state = EchoAgent()
    return (
        acp.SyncAgent.builder()
        .agent_info(name="acp-echo-agent", version=acp.__version__, title="Echo agent")
        .new_session_handler(state.new_session)
        .prompt_handler(state.prompt)
        .build()
    )


def main() -> int:
    """Serve the echo agent on stdin/stdout until the client goes away."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    build_agent().serve_stdio()
    return 0


if __name__ == "__main__":
    sys.exit(main())
