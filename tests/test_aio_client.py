"""``acp.AsyncClient`` over real subprocesses: the scenario agent and the echo agent (our
``SyncAgent``s), the TypeScript SDK's example agent and the official Python SDK's agent.

What is proved on the client side: updates in arrival order and all handled before the awaiting
``prompt()`` resumes (with a slow ``async def`` handler); an agent request handled after the
updates sent before it; the deadlock rule (an update handler awaits its own request); blocking
handlers (the ready-made ones too) run off the loop thread; a timed-out call sends
``$/cancel_request``; ``cancel`` and task cancellation end the turn; close leaves no task and no
thread behind; a dead agent process is a ``ConnectionClosedError`` with its stderr tail.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import acp
from acp import schema as S
from acp.errors import CapabilityError, ConnectionClosedError, RequestTimeoutError

from .conftest import helper_argv
from .helpers.aio_support import run

pytestmark = pytest.mark.timeout(120)

T = TypeVar("T")
WAIT = 30.0  # upper bound on every wait; never a delay
SCENARIO = [sys.executable, "-m", "acp.examples.scenario_agent"]
ECHO = [sys.executable, "-m", "acp.examples.echo_agent"]


def go(main: Callable[[], Awaitable[T]]) -> T:
    """Run ``main`` on a fresh loop, bounded, failing if a task outlives it."""
    return run(main, timeout=WAIT)


class Wire:
    """A wire tap keeping every JSON message, by direction."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, direction: str, line: bytes) -> None:
        self.lines.append((direction, json.loads(line)))

    def sent(self, method: str) -> list[dict[str, Any]]:
        return [m for d, m in self.lines if d == "out" and m.get("method") == method]

    def request_id(self, method: str) -> Any:
        return self.sent(method)[-1]["id"]


def texts(updates: list[Any]) -> list[str]:
    return [u.content.text for u in updates if isinstance(u, S.AgentMessageChunk)]


def builder(argv: list[str] = SCENARIO, **process: Any) -> acp.AsyncClientBuilder:
    return acp.AsyncClient.builder().agent_process(*argv, **process).request_timeout(WAIT)


async def started(client: acp.AsyncClient) -> str:
    await client.initialize()
    return (await client.new_session(os.getcwd())).session_id


# ====================================================================== ordering


def test_updates_in_order_all_handled_before_prompt_returns(no_thread_leak: None) -> None:
    seen: list[Any] = []

    async def slow_update(note: S.SessionNotification) -> None:
        await asyncio.sleep(0.001)  # slower than the agent sends: updates queue up
        seen.append(note.update)

    async def main() -> None:
        async with builder().session_update_handler(slow_update).build() as client:
            session_id = await started(client)
            response = await client.prompt(session_id, "stream 40")
            # Not one update is still queued or running when prompt() resumes.
            assert texts(seen) == [f"chunk {i}/40\n" for i in range(1, 41)]
            assert response.stop_reason == "end_turn"

    go(main)


def test_an_agent_request_comes_after_the_updates_sent_before_it(no_thread_leak: None) -> None:
    seen: list[Any] = []
    at_request: list[list[Any]] = []

    async def slow_update(note: S.SessionNotification) -> None:
        await asyncio.sleep(0.002)
        seen.append(note.update)

    async def permission(request: S.RequestPermissionRequest, ctx: acp.ClientRequestContext) -> Any:
        at_request.append([*seen, request.tool_call.tool_call_id])
        return S.RequestPermissionResponse(outcome=S.SelectedPermissionOutcome(option_id=request.options[0].option_id))

    async def main() -> None:
        b = builder().session_update_handler(slow_update).request_permission_handler(permission)
        async with b.build() as client:
            session_id = await started(client)
            assert (await client.prompt(session_id, "permission")).stop_reason == "end_turn"
        # The agent announced the request's tool call first: its handler had seen it, and
        # every update before it, all handled (in order) before the request reached it.
        (*before, asked_for) = at_request[0]
        assert isinstance(before[-1], S.ToolCall) and before[-1].tool_call_id == asked_for
        assert seen[: len(before)] == before
        assert texts(seen)[-1] == "permission: allowed\n"

    go(main)


def test_an_update_handler_may_await_its_own_request(no_thread_leak: None) -> None:
    """The deadlock rule: the answer to a request made inside an update handler is not queued
    behind that handler."""
    listed: list[list[str]] = []

    async def main() -> None:
        client_box: list[acp.AsyncClient] = []

        async def on_update(note: S.SessionNotification) -> None:
            if not listed:
                page = await client_box[0].list_sessions()
                listed.append([info.session_id for info in page.sessions])

        async with builder().session_update_handler(on_update).build() as client:
            client_box.append(client)
            session_id = await started(client)
            assert (await client.prompt(session_id, "stream 3")).stop_reason == "end_turn"
            assert listed == [[session_id]]

    go(main)


def test_a_late_update_reaches_the_handler_after_the_turn(no_thread_leak: None) -> None:
    """As on the threaded client: an update the agent sends after the prompt's answer is not
    part of the turn, and is handled when it comes (``acp chat`` redraws its prompt for it)."""

    async def main() -> None:
        late = asyncio.Event()
        seen: list[str] = []

        async def on_update(note: S.SessionNotification) -> None:
            seen.extend(texts([note.update]))
            if seen[-1:] == ["late: after\n"]:
                late.set()

        async with builder().session_update_handler(on_update).build() as client:
            session_id = await started(client)
            assert (await client.prompt(session_id, "late after")).stop_reason == "end_turn"
            assert "late: after\n" not in seen  # not before the answer
            await late.wait()

    go(main)


# ====================================================================== where handlers run


def test_blocking_handlers_run_on_the_executor_never_on_the_loop(no_thread_leak: None) -> None:
    update_threads: set[str] = set()
    permission_threads: list[str] = []
    seen: list[Any] = []

    def blocking_update(note: S.SessionNotification) -> None:
        update_threads.add(threading.current_thread().name)
        seen.append(note.update)

    def blocking_permission(request: S.RequestPermissionRequest, ctx: acp.ClientRequestContext) -> Any:
        permission_threads.append(threading.current_thread().name)
        assert isinstance(ctx.cancelled, threading.Event)  # a blocking handler may wait on it
        return S.RequestPermissionResponse(outcome=S.SelectedPermissionOutcome(option_id=request.options[0].option_id))

    async def main() -> None:
        loop_thread = threading.current_thread().name
        b = builder().session_update_handler(blocking_update).request_permission_handler(blocking_permission)
        async with b.build() as client:
            session_id = await started(client)
            assert (await client.prompt(session_id, "stream 5")).stop_reason == "end_turn"
            assert texts(seen) == [f"chunk {i}/5\n" for i in range(1, 6)]
            assert (await client.prompt(session_id, "permission")).stop_reason == "end_turn"
        assert update_threads and loop_thread not in update_threads
        assert permission_threads and permission_threads[0] != loop_thread
        assert texts(seen)[-1] == "permission: allowed\n"

    go(main)


def test_a_contexts_cancelled_event_is_made_lazily_and_still_set() -> None:
    # The Event is made on first read (from the loop or a pool thread): read before the
    # cancel it is set by it, read after it it is already set, and it is one Event.
    from acp.aio.connection import AsyncInboundCall
    from acp.client.aio import _ThreadSafeCall

    early_call = AsyncInboundCall(None, 1, "fs/read_text_file")  # type: ignore[arg-type]
    early = _ThreadSafeCall(early_call)
    made: list[threading.Event] = []
    reader = threading.Thread(target=lambda: made.append(early.cancelled))
    reader.start()
    reader.join(5)
    assert made and not made[0].is_set()
    early_call.cancel()
    assert made[0].is_set() and early.cancelled is made[0] and early.is_cancelled

    late_call = AsyncInboundCall(None, 2, "fs/read_text_file")  # type: ignore[arg-type]
    late = _ThreadSafeCall(late_call)
    late_call.cancel()
    assert late.cancelled.is_set()
    assert _ThreadSafeCall(late_call).cancelled.is_set()  # made after the cancel


def test_the_ready_made_handlers_run_unchanged(tmp_path: Path, no_thread_leak: None) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("alpha\nbeta\n", encoding="utf-8")
    seen: list[Any] = []
    files = acp.LocalFiles([tmp_path])
    terminals = acp.LocalTerminals()

    async def main() -> None:
        b = (
            builder()
            .session_update_handler(lambda note: seen.append(note.update))
            .read_text_file_handler(files.read_text_file)
            .write_text_file_handler(files.write_text_file)
            .terminal_handlers(terminals)
            .request_permission_handler(acp.PermissionPolicy(default="allow"))
        )
        async with b.build() as client:
            await client.initialize()
            session_id = (await client.new_session(str(tmp_path))).session_id
            assert (await client.prompt(session_id, f"read {notes}")).stop_reason == "end_turn"
            assert "alpha\nbeta\n" in "".join(texts(seen))
            out = tmp_path / "out.txt"
            assert (await client.prompt(session_id, f"write {out} hello")).stop_reason == "end_turn"
            assert out.read_text(encoding="utf-8") == "hello"
            seen.clear()
            command = f"terminal {sys.executable} -c print('from-a-terminal')"
            assert (await client.prompt(session_id, command)).stop_reason == "end_turn"
            assert "from-a-terminal" in "".join(texts(seen))
            assert (await client.prompt(session_id, "permission")).stop_reason == "end_turn"
            assert texts(seen)[-1] == "permission: allowed\n"

    try:
        go(main)
    finally:
        terminals.close()


# ====================================================================== timeouts, cancellation


def test_a_timed_out_call_sends_cancel_request(no_thread_leak: None) -> None:
    wire = Wire()

    async def main() -> None:
        async with builder().wire_tap(wire).build() as client:
            session_id = await started(client)
            with pytest.raises(RequestTimeoutError):
                await client.prompt(session_id, "wait_for_cancel", timeout=0.3)
            prompt_id = wire.request_id("session/prompt")
            assert [m["params"] for m in wire.sent("$/cancel_request")] == [{"requestId": prompt_id}]
            # The client still works, and the agent still answers.
            assert (await client.list_sessions()).sessions[0].session_id == session_id

    go(main)


def _watching(waiting: asyncio.Event, seen: list[Any]) -> Callable[[S.SessionNotification], Awaitable[None]]:
    async def on_update(note: S.SessionNotification) -> None:
        seen.append(note.update)
        if texts([note.update]) == ["waiting for session/cancel...\n"]:
            waiting.set()

    return on_update


def test_cancel_ends_the_turn_with_cancelled(no_thread_leak: None) -> None:
    async def main() -> None:
        waiting = asyncio.Event()
        seen: list[Any] = []
        async with builder().session_update_handler(_watching(waiting, seen)).build() as client:
            session_id = await started(client)
            turn = asyncio.ensure_future(client.prompt(session_id, "wait_for_cancel"))
            await waiting.wait()
            await client.cancel(session_id)
            assert (await turn).stop_reason == "cancelled"

    go(main)


def test_cancelling_the_prompt_task_sends_session_cancel(no_thread_leak: None) -> None:
    """Task cancellation is turn cancellation: ``session/cancel`` goes out (the spec's way to
    stop a turn), the task ends with CancelledError, the session can take the next prompt."""
    wire = Wire()

    async def main() -> None:
        waiting = asyncio.Event()
        seen: list[Any] = []
        b = builder().session_update_handler(_watching(waiting, seen)).wire_tap(wire)
        async with b.build() as client:
            session_id = await started(client)
            turn = asyncio.ensure_future(client.prompt(session_id, "wait_for_cancel"))
            await waiting.wait()
            turn.cancel()
            with pytest.raises(asyncio.CancelledError):
                await turn
            assert [m["params"]["sessionId"] for m in wire.sent("session/cancel")] == [session_id]
            # The agent ended that turn: a new prompt is not refused as a second active turn.
            seen.clear()
            assert (await client.prompt(session_id, "echo again")).stop_reason == "end_turn"
            assert texts(seen) == ["again"]

    go(main)


# ====================================================================== lifecycle, errors


def test_close_leaves_no_task_and_no_thread(no_thread_leak: None) -> None:
    """``run`` fails on a task left behind, ``no_thread_leak`` on a thread (the executor that
    ran the blocking handler is shut down and joined)."""

    async def main() -> None:
        b = builder().session_update_handler(lambda note: None)  # blocking: uses the executor
        client = await b.build()
        session_id = await started(client)
        assert (await client.prompt(session_id, "stream 3")).stop_reason == "end_turn"
        await client.close()
        await client.close()  # idempotent
        assert client.is_closed
        assert client.process is not None and await client.process.wait(WAIT) == 0
        with pytest.raises(ConnectionClosedError, match="the client is closed"):
            await client.new_session(os.getcwd())

    go(main)


def test_a_dead_agent_process_is_connection_closed_with_its_stderr_tail(no_thread_leak: None) -> None:
    async def main() -> None:
        async with acp.AsyncClient.builder().agent_process(*helper_argv("exiting_agent", "crash")).build() as client:
            session_id = await started(client)
            with pytest.raises(ConnectionClosedError) as pending:
                await client.prompt(session_id, "go")  # pending when the agent died
            with pytest.raises(ConnectionClosedError) as later:
                await client.new_session(os.getcwd())  # a call after it died
        for error, method in ((pending.value, "session/prompt"), (later.value, "session/new")):
            assert error.returncode == 3
            lines = error.stderr_tail.splitlines()
            assert lines[0] == "starting the turn"
            assert lines[-1] == "RuntimeError: model backend unreachable: connection refused"
            assert str(error).startswith(f"{method}: the agent process exited with code 3")

    go(main)


def test_refusals_before_anything_is_sent(no_thread_leak: None) -> None:
    wire = Wire()

    async def main() -> None:
        async with builder().wire_tap(wire).build() as client:
            with pytest.raises(CapabilityError, match="initialize"):
                await client.new_session(os.getcwd())
            with pytest.raises(CapabilityError, match=r"AsyncClient\.builder\(\)\.unstable"):
                await client.fork_session("s", os.getcwd())
            assert wire.lines == []  # nothing went out
            await client.initialize()
            with pytest.raises(CapabilityError, match="image"):
                await client.prompt("s", [S.ImageContent(data="", mime_type="image/png")])
            with pytest.raises(ValueError, match="absolute"):
                await client.new_session("relative/dir")
            assert [m.get("method") for d, m in wire.lines if d == "out"] == ["initialize"]
            sessions = [info.session_id async for info in client.iter_sessions()]
            assert sessions == []

    go(main)


def test_build_is_awaitable_and_an_async_context_manager(no_thread_leak: None) -> None:
    async def main() -> None:
        client = await acp.AsyncClient.builder().agent_process(*ECHO).build()
        async with client:
            assert (await client.initialize()).agent_info is not None
            assert repr(client).endswith("initialized)")
        assert client.is_closed
        async with acp.AsyncClient.builder().agent_process(*ECHO).build() as other:
            session_id = await started(other)
            assert (await other.prompt(session_id, "hi")).stop_reason == "end_turn"
        assert other.is_closed

    go(main)


def test_builders_check_their_handlers_and_transports() -> None:
    async def handler(note: Any) -> None:
        return None

    with pytest.raises(TypeError, match="AsyncClient.builder"):
        acp.SyncClient.builder().session_update_handler(handler)
    with pytest.raises(ValueError, match="exactly one transport"):
        acp.AsyncClient.builder().session_update_handler(handler).config()
    with pytest.raises(ValueError, match="terminal handlers are all or none"):
        acp.AsyncClient.builder().agent_process(*ECHO).create_terminal_handler(handler).config()
    config = acp.AsyncClient.builder().agent_process(*ECHO).config()
    assert (config.request_timeout, config.prompt_timeout) == (60.0, None)
    # Same registration code, same derived capabilities on both builders.
    for b in (acp.SyncClient.builder(), acp.AsyncClient.builder()):
        caps = b.agent_process(*ECHO).read_text_file_handler(lambda request, ctx: "").derived_capabilities()
        assert caps.fs == S.FileSystemCapabilities(read_text_file=True, write_text_file=False)


# ====================================================================== interop


def test_our_async_client_drives_the_ts_sdk_agent(tmp_path: Path, no_thread_leak: None) -> None:
    from .helpers.interop_node import INTEROP_DIR, require_node

    node = require_node()
    notes = tmp_path / "notes.txt"
    notes.write_text("one\ntwo\n", encoding="utf-8")
    files = acp.LocalFiles([tmp_path])
    seen: list[Any] = []

    async def slow_update(note: S.SessionNotification) -> None:
        await asyncio.sleep(0)  # yields to the loop between updates
        seen.append(note.update)

    async def allow(request: S.RequestPermissionRequest, ctx: acp.ClientRequestContext) -> Any:
        option = next(o for o in request.options if o.kind == "allow_once")
        return S.RequestPermissionResponse(outcome=S.SelectedPermissionOutcome(option_id=option.option_id))

    async def main() -> None:
        b = (
            acp.AsyncClient.builder()
            .agent_process(node, str(INTEROP_DIR / "agent.mjs"), cwd=str(INTEROP_DIR))
            .session_update_handler(slow_update)
            .request_permission_handler(allow)
            .read_text_file_handler(files.read_text_file)  # blocking: on the executor
            .request_timeout(WAIT)
        )
        async with b.build() as client:
            init = await client.initialize()
            assert init.agent_info == S.Implementation(name="ts-interop-agent", version="2.4.0-interop")
            session_id = (await client.new_session(str(tmp_path))).session_id
            count = 200
            assert (await client.prompt(session_id, f"stream {count}")).stop_reason == "end_turn"
            assert texts(seen) == [f"ts-chunk-{i} of {count}" for i in range(count)]
            seen.clear()
            assert (await client.prompt(session_id, "permission")).stop_reason == "end_turn"
            assert [type(u) for u in seen] == [S.ToolCall, S.ToolCallProgress, S.AgentMessageChunk]
            assert texts(seen) == ['permission: {"outcome":"selected","optionId":"ts-allow"}']
            seen.clear()
            assert (await client.prompt(session_id, f"read {notes}")).stop_reason == "end_turn"
            assert texts(seen) == ["read: one\ntwo\n"]
        process = client.process
        assert process is not None and await process.wait(WAIT) == 0  # it exited on its own

    go(main)


def test_our_async_client_drives_the_official_python_sdk_agent(no_thread_leak: None) -> None:
    from .helpers.interop_official import PYTHON, _env, require_official

    require_official()
    peers = Path(__file__).resolve().parent.parent / "benchmarks" / "peers"
    reads: list[str] = []
    seen: list[Any] = []

    async def read(request: S.ReadTextFileRequest, ctx: acp.ClientRequestContext) -> str:
        reads.append(request.path)
        return "x" * 1024  # what the agent checks it got

    async def main() -> None:
        b = (
            acp.AsyncClient.builder()
            .agent_process(str(PYTHON), str(peers / "official_agent.py"), cwd=str(peers), env=_env(), inherit_env=False)
            .session_update_handler(lambda note: seen.append(note.update))  # blocking: executor
            .read_text_file_handler(read)
            .request_timeout(WAIT)
        )
        async with b.build() as client:
            assert (await client.initialize()).agent_info == S.Implementation(name="bench", version="1")
            session_id = (await client.new_session(os.getcwd())).session_id
            assert (await client.prompt(session_id, "stream 50")).stop_reason == "end_turn"
            assert texts(seen) == [str(i) for i in range(50)]
            assert (await client.prompt(session_id, "read 3")).stop_reason == "end_turn"
            assert reads == ["/acp-bench/virtual-1k.txt"] * 3  # benchmarks/peers/_common.READ_PATH

    go(main)


# ====================================================================== remote


@pytest.mark.parametrize("profile", ["websocket", "http"])
def test_connect_reaches_a_remote_agent(profile: str, no_thread_leak: None) -> None:
    """``connect(url)`` opens the asyncio WebSocket / Streamable HTTP transport; the ordering
    guarantee holds over it as over a pipe."""
    for extra in ("websockets",) if profile == "websocket" else ("httpx", "uvicorn"):
        pytest.importorskip(extra)
    from acp.examples.scenario_agent import build_agent

    seen: list[Any] = []

    async def slow_update(note: S.SessionNotification) -> None:
        await asyncio.sleep(0)
        seen.append(note.update)

    agent = build_agent()
    with agent, (agent.serve_websocket() if profile == "websocket" else agent.serve_http()) as server:

        async def main() -> None:
            b = acp.AsyncClient.builder().connect(server.url).session_update_handler(slow_update)
            async with b.build() as client:
                session_id = await started(client)
                assert (await client.prompt(session_id, "stream 30")).stop_reason == "end_turn"
                assert texts(seen) == [f"chunk {i}/30\n" for i in range(1, 31)]

        go(main)


def test_a_wire_tap_path_gets_the_transcript(tmp_path: Path, no_thread_leak: None) -> None:
    transcript = tmp_path / "wire.jsonl"

    async def main() -> None:
        async with builder(ECHO).wire_tap(transcript).build() as client:
            await client.initialize()

    go(main)
    lines = transcript.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 and '"initialize"' in lines[0]  # the request and its answer
