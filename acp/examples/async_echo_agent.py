"""The echo agent on asyncio: the async twin of :mod:`acp.examples.echo_agent`.

Run it over stdio with ``python -m acp.examples.async_echo_agent``. Its prompt handler is an
``async def`` (run on the event loop, one task per turn); its ``session/new`` handler is the
sync echo agent's plain function, which an :class:`acp.AsyncAgent` runs on its executor,
never on the loop. The whole agent is :func:`build_agent`::

    agent = build_agent()
    asyncio.run(agent.serve_stdio())
"""

from __future__ import annotations

import asyncio
import logging
import sys

import acp
from acp import schema

from .echo_agent import CHUNK_SIZE, EchoAgent

__all__ = ["build_agent", "echo", "main"]


async def echo(text: str, ctx: acp.AsyncPromptContext) -> str:
    """Stream ``text`` back in pieces of ``CHUNK_SIZE``; the stop reason. Between pieces it
    yields to the loop, where a ``session/cancel`` cancels this task (the SDK then answers
    ``cancelled``)."""
    for start in range(0, len(text), CHUNK_SIZE):
        ctx.send_message(text[start : start + CHUNK_SIZE])
        await asyncio.sleep(0)
    return schema.StopReasons.END_TURN


def build_agent() -> acp.AsyncAgent:
    """The async echo agent, ready to serve (``await agent.serve_stdio()``...)."""
    state = EchoAgent()

    async def prompt(request: schema.PromptRequest, ctx: acp.AsyncPromptContext) -> str:
        state.check_session(request.session_id)
        return await echo(ctx.prompt_text, ctx)

    return (
        acp.AsyncAgent.builder()
        .agent_info(name="acp-async-echo-agent", version=acp.__version__, title="Echo agent (asyncio)")
        .new_session_handler(state.new_session)
        .prompt_handler(prompt)
        .build()
    )


def main() -> int:
    """Serve the async echo agent on stdin/stdout until the client goes away."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(build_agent().serve_stdio())
    return 0


if __name__ == "__main__":
    sys.exit(main())
