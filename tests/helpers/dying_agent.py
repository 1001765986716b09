"""An agent that dies in its first prompt turn: two lines on stderr, then SIGTERM to itself."""

from __future__ import annotations

import os
import signal
import sys

import acp


def prompt(request: acp.schema.PromptRequest, ctx: acp.PromptContext) -> str:
    ctx.send_message("about to crash")
    sys.stderr.write("loading the model\nfatal: the model crashed\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGTERM)
    return "end_turn"


def new_session(request: acp.schema.NewSessionRequest, ctx: acp.AgentRequestContext) -> acp.schema.NewSessionResponse:
    return acp.schema.NewSessionResponse(session_id="doomed")


if __name__ == "__main__":
    builder = acp.SyncAgent.builder().agent_info(name="dying", version="1")
    builder.new_session_handler(new_session).prompt_handler(prompt).build().serve_stdio()
