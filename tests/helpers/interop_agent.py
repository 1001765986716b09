"""The agent the TypeScript SDK's client drives (tests/test_interop_ts.py), built with our SDK.

Run as a script it serves stdio. The first word of the prompt picks what the turn does:

  stream N             N agent_message_chunk updates "chunk-0 of N" .. "chunk-(N-1) of N"
  permission           a tool call + session/request_permission; replies "permission: allowed|denied"
  read PATH            fs/read_text_file; replies "read: <content>"
  write PATH TEXT..    fs/write_text_file of TEXT; replies "wrote: <len> chars to PATH"
  terminal CMD ARG..   ctx.execute in a client terminal; replies "terminal: exit=<code> output=<out>"
  wait_for_cancel      replies "waiting", then blocks until session/cancel; ends "cancelled"
  caps                 replies the client capabilities and clientInfo it negotiated, as JSON

Anything else is echoed. Each turn's stop reason is end_turn unless it was cancelled.
"""

from __future__ import annotations

import itertools
import json
import logging
import sys
import threading

import acp.schema as S
from acp import AgentRequestContext, PromptContext, SyncAgent

AGENT_NAME = "acp-python-interop-agent"
AGENT_VERSION = "1.2.3"
CANCEL_WAIT_LIMIT = 30.0  # a bound, not a delay: the turn waits for session/cancel


class InteropAgent:
    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.cancels: list[str] = []

    def new_session(self, request: S.NewSessionRequest, ctx: AgentRequestContext) -> S.NewSessionResponse:
        with self._lock:
            return S.NewSessionResponse(session_id=f"py-session-{next(self._ids)}")

    def load_session(self, request: S.LoadSessionRequest, ctx: AgentRequestContext) -> None:
        return None

    def on_cancel(self, note: S.CancelNotification) -> None:
        self.cancels.append(note.session_id)

    def prompt(self, request: S.PromptRequest, ctx: PromptContext) -> str:
        text = ctx.prompt_text.strip()
        word, _, rest = text.partition(" ")
        args = rest.split()
        if word == "stream":
            count = int(args[0])
            for i in range(count):
                ctx.send_message(f"chunk-{i} of {count}")
            return S.StopReasons.END_TURN
        if word == "permission":
            allowed = ctx.ask_permission("Edit config.toml", kind=S.ToolKinds.EDIT)
            ctx.send_message(f"permission: {'allowed' if allowed else 'denied'}")
            return S.StopReasons.CANCELLED if ctx.is_cancelled else S.StopReasons.END_TURN
        if word == "read":
            ctx.send_message(f"read: {ctx.read_file(args[0])}")
            return S.StopReasons.END_TURN
        if word == "write":
            path, _, content = rest.partition(" ")
            ctx.write_file(path, content)
            ctx.send_message(f"wrote: {len(content)} chars to {path}")
            return S.StopReasons.END_TURN
        if word == "terminal":
            result = ctx.execute(*args)
            ctx.send_message(f"terminal: exit={result.exit_code} output={result.output}")
            return S.StopReasons.END_TURN
        if word == "wait_for_cancel":
            ctx.send_message("waiting")
            ctx.cancelled.wait(CANCEL_WAIT_LIMIT)
            return S.StopReasons.CANCELLED if ctx.is_cancelled else S.StopReasons.END_TURN
        if word == "caps":
            caps = ctx.capabilities
            info = caps.client_info
            ctx.send_message(
                json.dumps(
                    {
                        "protocolVersion": caps.protocol_version,
                        "readTextFile": caps.supports_read_text_file(),
                        "writeTextFile": caps.supports_write_text_file(),
                        "terminal": caps.supports_terminal(),
                        "clientInfo": None if info is None else {"name": info.name, "version": info.version},
                    },
                    sort_keys=True,
                )
            )
            return S.StopReasons.END_TURN
        ctx.send_message(f"echo: {text}")
        return S.StopReasons.END_TURN


def build_agent(impl: InteropAgent | None = None) -> SyncAgent:
    impl = impl or InteropAgent()
    return (
        SyncAgent.builder()
        .agent_info(AGENT_NAME, AGENT_VERSION, title="acp interop agent")
        .new_session_handler(impl.new_session)
        .load_session_handler(impl.load_session)
        .prompt_handler(impl.prompt, image=True, embedded_context=True)
        .cancel_handler(impl.on_cancel)
        .build()
    )


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    build_agent().serve_stdio()


if __name__ == "__main__":
    main()
