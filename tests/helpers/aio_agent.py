"""An AsyncAgent over stdio, for tests/test_aio_agent.py (driven by our SyncClient) and the
interop tests (driven by the TypeScript and official Python SDKs' clients).

The first word of the prompt picks what the turn does (the words of interop_agent.py too):

  stream N           N agent_message_chunk updates "chunk-0 of N" .. "chunk-(N-1) of N"
  permission         update "before", then ask_permission; replies "permission: allowed|denied"
  read PATH          fs/read_text_file; replies "read: <content>"
  write PATH TEXT..  fs/write_text_file of TEXT; replies "wrote: <len> chars to PATH"
  terminal CMD ARG.. ctx.execute; replies "terminal: exit=<code> output=<out>"
  caps               replies the client capabilities it negotiated, as JSON
  wait_for_cancel    (or wait) replies "waiting", then awaits until its task is cancelled; tells the client
                     with the extension notification _test/cancelled {"sessionId"} and re-raises

Extension requests: ``_test/where`` (a blocking handler: its thread, whether it is the loop's),
``_test/hold`` (blocking: notifies ``_test/holding``, waits until ``_test/release`` or its
cancellation), ``_test/release`` (async). ``--report PATH``: once served, the tasks and threads
still alive (besides the main ones) and the handlers that saw cancellation, as JSON.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import sys
import threading
from typing import Any

import acp
from acp import schema as S
from acp.errors import RESOURCE_NOT_FOUND

HOLD_LIMIT = 30.0  # a bound, not a delay

ids = itertools.count(1)
sessions: set[str] = set()
seen_cancelled: list[str] = []
release = threading.Event()
loop_thread = threading.get_ident()


def new_session(request: S.NewSessionRequest, ctx: acp.AgentRequestContext) -> S.NewSessionResponse:
    # A blocking handler: runs on the executor, with the blocking context.
    assert threading.get_ident() != loop_thread
    session_id = f"aio-session-{next(ids)}"
    sessions.add(session_id)
    return S.NewSessionResponse(session_id=session_id)


async def prompt(request: S.PromptRequest, ctx: acp.AsyncPromptContext) -> str:
    if request.session_id not in sessions:
        raise acp.RequestError(RESOURCE_NOT_FOUND, "Unknown session", {"sessionId": request.session_id})
    word, _, rest = ctx.prompt_text.strip().partition(" ")
    args = rest.split()
    if word == "stream":
        count = int(args[0])
        for i in range(count):
            ctx.send_message(f"chunk-{i} of {count}")
    elif word == "permission":
        ctx.send_message("before")
        allowed = await ctx.ask_permission("Edit config.toml", kind=S.ToolKinds.EDIT)
        ctx.send_message(f"permission: {'allowed' if allowed else 'denied'}")
    elif word == "read":
        ctx.send_message("read: " + await ctx.read_file(args[0]))
    elif word == "write":
        text = rest.partition(" ")[2]
        await ctx.write_file(args[0], text)
        ctx.send_message(f"wrote: {len(text)} chars to {args[0]}")
    elif word == "terminal":
        result = await ctx.execute(*args)
        ctx.send_message(f"terminal: exit={result.exit_code} output={result.output.strip()}")
    elif word == "caps":
        caps = ctx.client_capabilities
        ctx.send_message(json.dumps({
            "readTextFile": caps.supports_read_text_file(),
            "writeTextFile": caps.supports_write_text_file(),
            "terminal": caps.supports_terminal(),
        }))
    elif word in ("wait_for_cancel", "wait"):
        ctx.send_message("waiting")
        try:
            await asyncio.Event().wait()  # only cancellation ends this
        except asyncio.CancelledError:
            seen_cancelled.append(f"prompt:{request.session_id}")
            ctx.client.ext_notification("_test/cancelled", {"sessionId": request.session_id})
            raise
    else:
        ctx.send_message(ctx.prompt_text)
    return S.StopReasons.END_TURN


def where(params: Any, ctx: acp.AgentRequestContext) -> dict[str, Any]:
    return {"thread": threading.current_thread().name, "onLoop": threading.get_ident() == loop_thread}


def hold(params: Any, ctx: acp.AgentRequestContext) -> dict[str, Any]:
    ctx.client.ext_notification("_test/holding", {})
    ctx.on_cancel(release.set)
    released = release.wait(HOLD_LIMIT)
    if ctx.is_cancelled:
        seen_cancelled.append("hold")
    return {"released": released, "cancelled": ctx.is_cancelled}


async def release_hold(params: Any, ctx: acp.AsyncAgentRequestContext) -> dict[str, Any]:
    release.set()
    return {}


agent = (
    acp.AsyncAgent.builder()
    .agent_info("acp-python-aio-agent", "1.0.0")
    .new_session_handler(new_session)
    .prompt_handler(prompt)
    .ext_request_handler("_test/where", where)
    .ext_request_handler("_test/hold", hold)
    .ext_request_handler("_test/release", release_hold)
    .cancel_grace_period(30)
    .close_timeout(10)
    .build()
)


async def main() -> None:
    global loop_thread
    loop_thread = threading.get_ident()
    await agent.serve_stdio()
    if "--report" in sys.argv:
        current = asyncio.current_task()
        report = {
            "tasks": [repr(t) for t in asyncio.all_tasks() if t is not current],
            "threads": [t.name for t in threading.enumerate() if t is not threading.main_thread()],
            "cancelled": seen_cancelled,
        }
        with open(sys.argv[sys.argv.index("--report") + 1], "w", encoding="utf-8") as out:
            json.dump(report, out)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(main())
