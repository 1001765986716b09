"""An SDK agent (SyncAgent) for the fault, load, fuzz and secrets tests; in process or over stdio.

The first word of the prompt text picks what the turn does:
  stream N          N agent_message_chunk updates "0".."N-1", then end_turn
  stream_ack N      N chunks, then the request ``_fault/ack`` {"n": N} to the client (which
                    flushes the stream and proves the client handled it), then waits until the
                    turn is cancelled (the tests kill the process meanwhile)
  forever           chunks "0", "1", ... until the turn is cancelled (or the client is gone)
  load K            K chunks "<sessionId>:<i>", then end_turn (the load tests check them)
  race US K         chunk "started K", waits up to US microseconds for a cancel (so the
                    client's session/cancel lands at every point of the turn), chunk
                    "raced K", then returns None (end_turn, or cancelled once cancelled)
  deaf MS           chunk "started", then waits MS milliseconds ignoring cancellation
  env               one chunk: this process's environment as JSON
  read PATH         fs/read_text_file; the content comes back as a chunk
  raise TEXT        raises ValueError(TEXT) (an unexpected exception)
  anything else     one chunk "echo: <text>"
Extension request ``_fault/ping`` answers {"pong": params}.

As a script: ``fault_agent.py [--log-level LEVEL]`` serves stdio with logging at LEVEL
(default WARNING) on stderr.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sys
import threading
from typing import Any

import acp.schema as S
from acp.agent import AgentRequestContext, PromptContext, SyncAgent

WAIT = 60.0


class FaultAgent:
    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.prompts = 0

    def new_session(self, req: S.NewSessionRequest, ctx: AgentRequestContext) -> S.NewSessionResponse:
        with self.lock:
            return S.NewSessionResponse(session_id=f"s{next(self.ids)}")

    def prompt(self, req: S.PromptRequest, ctx: PromptContext) -> Any:
        with self.lock:
            self.prompts += 1
        text = ctx.prompt_text
        word, _, rest = text.partition(" ")
        if word == "stream":
            for i in range(int(rest)):
                ctx.send_message(str(i))
            return S.StopReasons.END_TURN
        if word == "stream_ack":
            n = int(rest)
            for i in range(n):
                ctx.send_message(str(i))
            ctx.client.ext_request("_fault/ack", {"n": n})
            ctx.cancelled.wait(WAIT)
            return None
        if word == "forever":
            i = 0
            while not ctx.is_cancelled and ctx.send_message(str(i)):
                i += 1
            return None
        if word == "load":
            for i in range(int(rest)):
                ctx.send_message(f"{req.session_id}:{i}")
            return S.StopReasons.END_TURN
        if word == "race":
            wait_us, round_no = rest.split()
            ctx.send_message(f"started {round_no}")
            ctx.cancelled.wait(int(wait_us) / 1e6)
            ctx.send_message(f"raced {round_no}")
            return None
        if word == "deaf":
            ctx.send_message("started")
            threading.Event().wait(int(rest) / 1000)
            return None
        if word == "env":
            ctx.send_message(json.dumps(dict(os.environ), sort_keys=True))
            return None
        if word == "read":
            ctx.send_message(ctx.read_file(rest))
            return None
        if word == "raise":
            raise ValueError(rest)
        ctx.send_message(f"echo: {text}")
        return None


def build_agent(**options: Any) -> tuple[SyncAgent, FaultAgent]:
    """The fault agent; ``options`` are builder calls, e.g. ``cancel_grace_period=0``."""
    impl = FaultAgent()
    builder = (
        SyncAgent.builder()
        .agent_info("fault-agent", "1.0")
        .new_session_handler(impl.new_session)
        .prompt_handler(impl.prompt)
        .ext_request_handler("_fault/ping", lambda params, ctx: {"pong": params})
    )
    for name, value in options.items():
        getattr(builder, name)(value)
    return builder.build(), impl


def main() -> None:
    level = "WARNING"
    if "--log-level" in sys.argv:
        level = sys.argv[sys.argv.index("--log-level") + 1]
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    agent, _ = build_agent()
    agent.serve_stdio()


if __name__ == "__main__":
    main()
