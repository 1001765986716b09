"""AsyncAgent in one process, driven by hand over an in-memory pipe (fast, exact): the shared
builder and spec, the async contexts' helpers and their clean-up on cancel, blocking handlers
on the executor, turn rules, capability refusals, close with no task or thread left."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import acp
from acp import schema as S
from acp.aio.transport import MemoryTransport

from .helpers.aio_support import WAIT, RawPeer, run

pytestmark = pytest.mark.timeout(60)

CLIENT_CAPS = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}


class Peer(RawPeer):
    """A hand-driven client: requests by id, and everything else kept in arrival order."""

    def __init__(self, transport: MemoryTransport) -> None:
        super().__init__(transport)
        self.ids = iter(range(100, 10_000))

    def call(self, method: str, params: Any) -> int:
        msg_id = next(self.ids)
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return msg_id

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def reply(self, msg: dict[str, Any], result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})

    async def until(self, pred: Callable[[dict[str, Any]], bool]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Messages up to (not including) the first one ``pred`` accepts, and that one."""
        before = []
        while True:
            msg = await self.recv()
            if pred(msg):
                return before, msg
            before.append(msg)

    async def answer_of(self, msg_id: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return await self.until(lambda m: m.get("id") == msg_id and "method" not in m)

    async def start(self, caps: dict[str, Any] = CLIENT_CAPS) -> None:
        _, init = await self.answer_of(self.call("initialize", {"protocolVersion": 1, "clientCapabilities": caps}))
        assert "result" in init


def prompt_params(text: str, session: str = "s1") -> dict[str, Any]:
    return {"sessionId": session, "prompt": [{"type": "text", "text": text}]}


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [
        m["params"]["update"]["content"]["text"]
        for m in messages
        if m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    ]


def serve(agent: acp.AsyncAgent, body: Callable[[Peer], Awaitable[None]], users: str = "users-") -> None:
    """Run ``body`` against the agent; then close it: no task and no new thread left (but
    the threads of the user's own executor, named ``users``...)."""
    before = set(threading.enumerate())

    async def main() -> None:
        far = await agent.serve_in_process()
        try:
            await body(Peer(far))  # type: ignore[arg-type]
        finally:
            await agent.close()
            await far.close()

    run(main, WAIT)
    left = [t for t in threading.enumerate() if t not in before and t.is_alive() and not t.name.startswith(users)]
    assert not left, f"threads left behind: {left}"


# ---------------------------------------------------------------- the builder and the spec


def _register(builder: Any, prompt: Any) -> Any:
    return (
        builder.agent_info("same", "1.0")
        .new_session_handler(lambda r, c: S.NewSessionResponse(session_id="s1"))
        .load_session_handler(lambda r, c: None)
        .prompt_handler(prompt, image=True)
        .mcp_capabilities(http=True)
    )


def test_both_builders_share_registration_and_produce_the_same_spec() -> None:
    async def prompt(request: Any, ctx: Any) -> None:
        return None

    sync_spec = _register(acp.SyncAgent.builder(), lambda r, c: None).build().spec
    async_spec = _register(acp.AsyncAgent.builder(), prompt).build().spec
    assert sync_spec.capabilities == async_spec.capabilities
    assert sync_spec.name == async_spec.name == "same"
    assert isinstance(acp.AsyncAgent.builder(), acp.agent.AgentBuilder)
    assert isinstance(acp.SyncAgent.builder(), acp.agent.AgentBuilder)
    # The same mistakes fail the same way.
    for builder in (acp.SyncAgent.builder(), acp.AsyncAgent.builder()):
        with pytest.raises(ValueError, match="unstable"):
            builder.fork_session_handler(lambda r, c: None)
        with pytest.raises(ValueError, match="no prompt handler"):
            builder.prompt_capabilities(image=True).build()


def test_sync_builder_refuses_async_handlers() -> None:
    async def prompt(request: Any, ctx: Any) -> None:
        return None

    with pytest.raises(ValueError, match="AsyncAgent"):
        acp.SyncAgent.builder().prompt_handler(prompt)
    with pytest.raises(ValueError, match="AsyncAgent"):
        acp.SyncAgent.builder().ext_request_handler("_x", prompt)


# ---------------------------------------------------------------- handlers and contexts


def test_async_helpers_and_blocking_handlers_on_the_executor() -> None:
    executor = ThreadPoolExecutor(1, thread_name_prefix="users-pool")
    where: dict[str, str] = {}

    def new_session(request: S.NewSessionRequest, ctx: acp.AgentRequestContext) -> S.NewSessionResponse:
        where["new_session"] = threading.current_thread().name
        return S.NewSessionResponse(session_id="s1")

    def blocking_prompt(request: S.PromptRequest, ctx: acp.PromptContext) -> str:
        # A plain prompt handler: the blocking PromptContext, its calls made on the loop.
        where["prompt"] = threading.current_thread().name
        ctx.send_message("one")
        ctx.send_message(ctx.read_file("/a.txt"))
        return "end_turn"

    agent = (
        acp.AsyncAgent.builder()
        .new_session_handler(new_session)
        .prompt_handler(blocking_prompt)
        .handler_executor(executor)
        .build()
    )

    async def body(peer: Peer) -> None:
        await peer.start()
        await peer.answer_of(peer.call("session/new", {"cwd": "/", "mcpServers": []}))
        turn = peer.call("session/prompt", prompt_params("go"))
        before, read = await peer.until(lambda m: m.get("method") == "fs/read_text_file")
        assert texts(before) == ["one"]  # the update went out before the request
        peer.reply(read, {"content": "two"})
        before, answer = await peer.answer_of(turn)
        assert texts(before) == ["two"] and answer["result"] == {"stopReason": "end_turn"}

    serve(agent, body)
    executor.shutdown()
    assert where["new_session"].startswith("users-pool") and where["prompt"].startswith("users-pool")


def test_cancel_during_execute_kills_and_releases_the_terminal_once() -> None:
    outcome: list[str] = []

    async def prompt(request: S.PromptRequest, ctx: acp.AsyncPromptContext) -> str:
        try:
            await ctx.execute("sleep", "100")
        except asyncio.CancelledError:
            outcome.append("task cancelled")
            raise
        return "end_turn"

    agent = acp.AsyncAgent.builder().prompt_handler(prompt).build()

    async def body(peer: Peer) -> None:
        await peer.start()
        turn = peer.call("session/prompt", prompt_params("run"))
        _, create = await peer.until(lambda m: m.get("method") == "terminal/create")
        peer.reply(create, {"terminalId": "t1"})
        _, wait = await peer.until(lambda m: m.get("method") == "terminal/wait_for_exit")
        peer.notify("session/cancel", {"sessionId": "s1"})
        # The abandoned wait gets $/cancel_request, then kill, then release, then the answer.
        _, cancel = await peer.until(lambda m: m.get("method") == "$/cancel_request")
        assert cancel["params"]["requestId"] == wait["id"]
        _, kill = await peer.until(lambda m: m.get("method") == "terminal/kill")
        peer.reply(kill, {})
        _, release = await peer.until(lambda m: m.get("method") == "terminal/release")
        peer.reply(release, {})
        before, answer = await peer.answer_of(turn)
        assert answer["result"] == {"stopReason": "cancelled"}
        assert not [m for m in before if m.get("method", "").startswith("terminal/")]

    serve(agent, body)
    assert outcome == ["task cancelled"]


def test_capability_refusals_happen_before_anything_is_sent() -> None:
    refusals: list[str] = []

    async def prompt(request: S.PromptRequest, ctx: acp.AsyncPromptContext) -> str:
        for call in (lambda: ctx.read_file("/x"), lambda: ctx.execute("ls"), lambda: ctx.write_file("/x", "y")):
            try:
                await call()
            except acp.CapabilityError as exc:
                refusals.append(str(exc).split()[0])
        try:
            ctx.send_notice("hello")
        except acp.CapabilityError:
            refusals.append("notice")
        return "end_turn"

    agent = acp.AsyncAgent.builder().prompt_handler(prompt).build()

    async def body(peer: Peer) -> None:
        await peer.start(caps={})
        before, answer = await peer.answer_of(peer.call("session/prompt", prompt_params("x")))
        assert before == [] and answer["result"] == {"stopReason": "end_turn"}

    serve(agent, body)
    assert len(refusals) == 4


def _waiting_agent(late: list[bool], started: asyncio.Event, **options: Any) -> acp.AsyncAgent:
    async def prompt(request: S.PromptRequest, ctx: acp.AsyncPromptContext) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            late.append(ctx.send_message("cleaning up"))
        return "end_turn"

    builder = acp.AsyncAgent.builder().close_session_handler(lambda r, c: None).prompt_handler(prompt)
    for name, value in options.items():
        getattr(builder, name)(value)
    return builder.build()


def test_max_prompt_duration_answers_and_later_updates_are_dropped() -> None:
    late: list[bool] = []
    started = asyncio.Event()

    async def body(peer: Peer) -> None:
        await peer.start()
        before, answer = await peer.answer_of(peer.call("session/prompt", prompt_params("x")))
        assert answer["error"]["code"] == -32800 and texts(before) == []
        # The handler's clean-up ran after the answer: its update was dropped, not sent.
        await peer.answer_of(peer.call("session/close", {"sessionId": "s1"}))

    serve(_waiting_agent(late, started, max_prompt_duration=0.2), body)
    assert late == [False]


def test_session_close_cancels_the_turn_first() -> None:
    late: list[bool] = []
    started = asyncio.Event()

    async def body(peer: Peer) -> None:
        await peer.start()
        turn = peer.call("session/prompt", prompt_params("x"))
        await asyncio.wait_for(started.wait(), WAIT)
        closed = peer.call("session/close", {"sessionId": "s1"})
        # The cancelled task's clean-up update, then the turn's "cancelled", then the close.
        before, answer = await peer.until(lambda m: m.get("id") in (turn, closed))
        assert texts(before) == ["cleaning up"]
        assert answer["id"] == turn and answer["result"] == {"stopReason": "cancelled"}
        _, answer = await peer.answer_of(closed)
        assert answer["result"] == {}

    serve(_waiting_agent(late, started), body)
    assert late == [True]


def test_close_cancels_running_handler_tasks_in_process() -> None:
    cancelled: list[str] = []
    running = asyncio.Event()

    async def prompt(request: S.PromptRequest, ctx: acp.AsyncPromptContext) -> str:
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(request.session_id)
            raise
        return "end_turn"

    agent = acp.AsyncAgent.builder().prompt_handler(prompt).build()

    async def body(peer: Peer) -> None:
        await peer.start()
        for session in ("a", "b"):
            running.clear()
            peer.call("session/prompt", prompt_params("x", session))
            await asyncio.wait_for(running.wait(), WAIT)
        assert len(agent.connections) == 1

    serve(agent, body)  # closes the agent while both turns run
    assert sorted(cancelled) == ["a", "b"]
    assert agent.connections == []
