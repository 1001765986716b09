"""One built agent, several connections: isolation of capabilities and terminal ids, many
sessions at once, the serving entry points and close."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import acp.schema as S
from acp.agent import AgentConnection, PromptContext, SyncAgent
from acp.errors import CapabilityError
from acp.transport import memory_pair

from .helpers.agent_client import FULL_CAPS, WAIT, FakeClient


def _new_session(req: S.NewSessionRequest, ctx: Any) -> S.NewSessionResponse:
    return S.NewSessionResponse(session_id=req.cwd.rsplit("/", 1)[-1])


def test_capabilities_and_terminal_ids_never_cross_connections(no_thread_leak: None) -> None:
    terminals: dict[str, str] = {}
    outcomes: dict[str, str] = {}

    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        word, _, arg = ctx.prompt_text.partition(" ")
        try:
            if word == "create":
                terminals[req.session_id] = ctx.create_terminal("sleep", "1")
                outcomes[req.session_id] = f"terminal={ctx.client_capabilities.supports_terminal()}"
            elif word == "peek":
                ctx.terminal_output(arg)
                outcomes[req.session_id] = "peeked"
            elif word == "release":
                ctx.release_terminal(arg)
                outcomes[req.session_id] = "released"
        except CapabilityError as exc:
            outcomes[req.session_id] = f"refused: {exc}"
        return None

    agent = SyncAgent.builder().new_session_handler(_new_session).prompt_handler(prompt).build()
    with agent:
        a = FakeClient(agent.serve_in_process(), name="client-a")
        b = FakeClient(agent.serve_in_process(), name="client-b")
        c = FakeClient(agent.serve_in_process(), caps={}, name="client-c")
        a.initialize()
        b.initialize()
        c.initialize()
        handles = agent.connections
        assert len(handles) == 3
        assert sorted(h.capabilities.supports_terminal() for h in handles) == [False, True, True]

        a.prompt(a.new_session("/a"), "create")
        terminal = terminals["a"]
        assert outcomes["a"] == "terminal=True"
        # b advertised terminals too, but the id belongs to a's connection.
        b.prompt(b.new_session("/b"), f"peek {terminal}")
        assert outcomes["b"].startswith("refused") and "not created on this connection" in outcomes["b"]
        b.prompt("b", f"release {terminal}")
        assert outcomes["b"].startswith("refused")
        # c never advertised terminals: refused for its own lack of capability.
        c.prompt(c.new_session("/c"), f"peek {terminal}")
        assert outcomes["c"].startswith("refused") and "'terminal' capability" in outcomes["c"]
        assert b.calls == [] and c.calls == []  # nothing was sent to b or c
        # On its own connection the id works, and is released exactly once.
        a.prompt("a", f"peek {terminal}")
        assert outcomes["a"] == "peeked"
        a.prompt("a", f"release {terminal}")
        a.prompt("a", f"release {terminal}")
        assert outcomes["a"].startswith("refused")
        assert a.released == {terminal: 1}
        for client in (a, b, c):
            client.close()


def test_hundred_sessions_prompting_at_once(no_thread_leak: None) -> None:
    sessions = 100
    barrier = threading.Barrier(sessions, timeout=WAIT)

    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        ctx.send_message("start")
        barrier.wait()  # all 100 turns are active at the same time
        content = ctx.read_file(f"/files/{req.session_id}")
        ctx.send_message(content)
        return None

    agent = SyncAgent.builder().new_session_handler(_new_session).prompt_handler(prompt).build()
    with agent:
        clients = [FakeClient(agent.serve_in_process(), name=f"client-{i}") for i in range(2)]
        ids: list[tuple[FakeClient, str]] = []
        for client in clients:
            client.initialize()
            for n in range(sessions // len(clients)):
                sid = client.new_session(f"/{client.conn.name}-s{n}")
                client.files[f"/files/{sid}"] = f"content of {sid}"
                ids.append((client, sid))

        def send_batch(batch: list[tuple[FakeClient, str]]) -> list[Any]:
            # Each client thread sends its prompts without waiting, then collects the answers.
            futures = [client.prompt_future(sid, "go") for client, sid in batch]
            return [f.result(WAIT) for f in futures]

        batches = [ids[i::10] for i in range(10)]
        with ThreadPoolExecutor(max_workers=10) as pool:
            answers = [a for batch in pool.map(send_batch, batches) for a in batch]
        assert answers == [{"stopReason": "end_turn"}] * sessions
        for client, sid in ids:
            assert client.texts(sid) == ["start", f"content of {sid}"]
        for client in clients:
            client.close()


def test_serve_blocks_until_the_client_goes_away(no_thread_leak: None) -> None:
    agent = SyncAgent.builder().new_session_handler(_new_session).build()
    ours, theirs = memory_pair()
    served = threading.Event()

    def run() -> None:
        agent.serve(ours)
        served.set()

    thread = threading.Thread(target=run)
    thread.start()
    client = FakeClient(theirs)
    client.initialize()
    assert client.new_session("/x") == "x"
    assert not served.is_set()
    client.close()
    thread.join(WAIT)
    assert served.is_set()
    assert agent.connections == []


def test_connect_handle_and_context_manager(no_thread_leak: None) -> None:
    agent = SyncAgent.builder().new_session_handler(_new_session).build()
    with agent:
        ours, theirs = memory_pair()
        handle = agent.connect(ours)
        assert isinstance(handle, AgentConnection)
        client = FakeClient(theirs)
        assert not handle.initialized
        client.initialize(caps={"fs": {"readTextFile": True}})
        assert handle.initialized and handle.capabilities.supports_read_text_file()
        handle.session("s").send_message("outside a turn")
        client.wait_for(lambda: len(client.updates) == 1)
        other = FakeClient(agent.serve_in_process())
        other.initialize()
    # Leaving the block closed both connections: each client reads the end of input.
    assert handle.is_closed
    assert client.conn.wait_closed(WAIT) and other.conn.wait_closed(WAIT)
    with pytest.raises(RuntimeError):
        agent.connect(memory_pair()[0])
    client.close()
    other.close()


def test_user_executor_runs_handlers_and_is_not_shut_down(no_thread_leak: None) -> None:
    names: list[str] = []

    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        names.append(threading.current_thread().name)
        return None

    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="mine") as executor:
        agent = (
            SyncAgent.builder()
            .new_session_handler(_new_session)
            .prompt_handler(prompt)
            .handler_executor(executor)
            .build()
        )
        with agent:
            client = FakeClient(agent.serve_in_process(), caps=FULL_CAPS)
            client.initialize()
            client.prompt(client.new_session("/s"), "x")
            client.close()
        assert names[0].startswith("mine")
        assert executor.submit(lambda: 42).result(WAIT) == 42  # still usable
