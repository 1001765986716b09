"""Cancellation and the one-answer-per-prompt rule: session/cancel wakes blocking context
calls, the grace period, max_prompt_duration, one turn per session, late cancels and late
updates. Timers are real, but every wait is on an event, never a sleep."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import acp.schema as S
from acp.agent import PromptContext, SyncAgent
from acp.errors import RequestCancelledError, RequestError
from acp.transport import memory_pair

from .helpers.agent_client import WAIT, AbandonLog, FakeClient, block_until_cancelled
from .helpers.agent_full import build_agent


def _new_session(req: S.NewSessionRequest, ctx: Any) -> S.NewSessionResponse:
    return S.NewSessionResponse(session_id=req.cwd.rsplit("/", 1)[-1])


class Tap:
    """Counts the answers (by id) the client receives, from the raw wire."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, direction: str, line: bytes) -> None:
        if direction == "in":
            with self.lock:
                self.lines.append(json.loads(line))

    def answers(self, msg_id: int) -> list[dict[str, Any]]:
        with self.lock:
            return [m for m in self.lines if m.get("id") == msg_id and "method" not in m]


def _serve(agent: SyncAgent, tap: Tap | None = None) -> FakeClient:
    client = FakeClient(agent.serve_in_process(), wire_tap=tap)
    client.initialize()
    return client


@pytest.fixture
def demo(no_thread_leak: None) -> Iterator[tuple[FakeClient, SyncAgent]]:
    agent, _ = build_agent()
    client = _serve(agent)
    yield client, agent
    client.close()
    agent.close()


def test_cancel_while_waiting_on_permission(demo: Any) -> None:
    client, _ = demo
    sid = client.new_session()
    asked, log = threading.Event(), AbandonLog()
    client.permission = block_until_cancelled(log, asked)
    future = client.prompt_future(sid, "permission")
    assert asked.wait(WAIT)
    client.cancel(sid)
    assert future.result(WAIT) == {"stopReason": "cancelled"}
    # ask_permission returned False; the tool call was announced, then settled as failed.
    assert client.texts(sid) == ["denied"]
    updates = [u["update"] for u in client.updates]
    assert [(u["sessionUpdate"], u["status"]) for u in updates if "status" in u] == [
        ("tool_call", "pending"),
        ("tool_call_update", "failed"),
    ]
    # The abandoned request got $/cancel_request: the client's handler saw it cancelled.
    assert log.done.wait(WAIT)
    assert log == ["abandoned"]


def test_cancel_during_execute_releases_exactly_once(demo: Any) -> None:
    client, _ = demo
    sid = client.new_session()
    client.block_terminals = True
    future = client.prompt_future(sid, "run sleep 100")
    client.wait_for(lambda: "terminal/wait_for_exit" in client.methods())
    client.cancel(sid)
    # The handler did not catch RequestCancelledError: a cancelled turn still answers "cancelled".
    assert future.result(WAIT) == {"stopReason": "cancelled"}
    (terminal_id,) = client.terminals
    client.wait_for(lambda: "cancelled:terminal/wait_for_exit" in client.methods())
    assert client.killed == {terminal_id: 1}
    assert client.released == {terminal_id: 1}
    methods = client.methods()
    assert methods.index("terminal/kill") < methods.index("terminal/release")
    # Nothing more is ever sent for that terminal: one more round trip proves the wire is quiet.
    client.prompt(sid, "hello")
    assert client.released == {terminal_id: 1}


def test_cancel_wakes_a_waiting_handler_and_hook_runs(demo: Any) -> None:
    client, agent = demo
    sid = client.new_session()
    future = client.prompt_future(sid, "wait")
    client.wait_for(lambda: client.texts(sid) == ["waiting"])
    client.cancel(sid)
    assert future.result(WAIT) == {"stopReason": "cancelled"}


def test_second_prompt_on_the_same_session(demo: Any) -> None:
    client, _ = demo
    sid = client.new_session()
    first = client.prompt_future(sid, "wait")
    client.wait_for(lambda: client.texts(sid) == ["waiting"])
    with pytest.raises(RequestError) as info:
        client.prompt(sid, "hello")
    assert info.value.code == -32600
    assert info.value.data == {"sessionId": sid}
    other = client.new_session()
    assert client.prompt(other, "hello") == {"stopReason": "end_turn"}  # other sessions are free
    client.cancel(sid)
    assert first.result(WAIT) == {"stopReason": "cancelled"}
    assert client.prompt(sid, "hello") == {"stopReason": "end_turn"}


class Late(list[bool]):
    """What each handler's final send_message returned, with an event per append."""

    def __init__(self) -> None:
        super().__init__()
        self.appended = threading.Semaphore(0)

    def add(self, value: bool) -> None:
        self.append(value)
        self.appended.release()


def _blocking_agent(started: threading.Event, release: threading.Event, late: Late, **opts: Any) -> SyncAgent:
    """A prompt handler that ignores cancellation until the test releases it."""

    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        started.set()
        release.wait(WAIT)
        late.add(ctx.send_message("too late"))
        return S.StopReasons.END_TURN

    builder = SyncAgent.builder().new_session_handler(_new_session).prompt_handler(prompt)
    for name, value in opts.items():
        getattr(builder, name)(value)
    return builder.build()


def test_grace_period_expiry_answers_cancelled_and_drops_the_late_answer(no_thread_leak: None) -> None:
    started, release, late = threading.Event(), threading.Event(), Late()
    tap = Tap()
    with _blocking_agent(started, release, late, cancel_grace_period=0.1) as agent:
        client = _serve(agent, tap)
        sid = client.new_session("/s1")
        future = client.prompt_future(sid, "x")
        assert started.wait(WAIT)
        client.cancel(sid)
        assert future.result(WAIT) == {"stopReason": "cancelled"}  # the SDK answered
        # The session is free again at once, even though the old handler still runs.
        release.set()
        assert late.appended.acquire(timeout=WAIT)
        assert late == [False]  # its update was dropped
        started.clear()
        release.clear()
        follow = client.prompt_future(sid, "y")
        assert started.wait(WAIT)
        release.set()
        assert follow.result(WAIT) == {"stopReason": "end_turn"}
        assert late == [False, True]
        prompt_ids = [m["id"] for m in tap.lines if "result" in m and "stopReason" in m["result"]]
        # Exactly one answer per prompt, and the dropped update never reached the wire.
        assert len(prompt_ids) == len(set(prompt_ids)) == 2
        assert client.texts(sid) == ["too late"]  # only the second turn's
        client.close()


def test_grace_period_disabled_waits_for_the_handler(no_thread_leak: None) -> None:
    started, release, late = threading.Event(), threading.Event(), Late()
    with _blocking_agent(started, release, late, cancel_grace_period=None) as agent:
        client = _serve(agent)
        sid = client.new_session("/s1")
        future = client.prompt_future(sid, "x")
        assert started.wait(WAIT)
        client.cancel(sid)
        # No SDK answer: a round trip on the same connection comes back first.
        assert client.conn.request("session/new", {"cwd": "/s2", "mcpServers": []}) == {"sessionId": "s2"}
        assert not future.done()
        release.set()
        # The handler's own answer ends the turn (and its update was still allowed); its stop
        # reason becomes "cancelled", as the spec requires after session/cancel.
        assert future.result(WAIT) == {"stopReason": "cancelled"}
        assert late == [True]
        client.close()


def test_max_prompt_duration(no_thread_leak: None) -> None:
    woke = threading.Event()

    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        if ctx.cancelled.wait(WAIT):
            woke.set()
        return S.StopReasons.END_TURN

    agent = (
        SyncAgent.builder()
        .new_session_handler(_new_session)
        .prompt_handler(prompt)
        .max_prompt_duration(0.1)
        .build()
    )
    with agent:
        client = _serve(agent)
        sid = client.new_session("/s1")
        with pytest.raises(RequestError) as info:
            client.prompt(sid, "x")
        assert info.value.code == -32800
        assert info.value.data == {"sessionId": sid}
        assert woke.wait(WAIT)  # the handler saw its turn cancelled
        client.close()


def test_handler_raising_after_cancel_answers_cancelled(no_thread_leak: None) -> None:
    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        ctx.send_message("go")
        ctx.cancelled.wait(WAIT)
        raise RuntimeError("aborted by cancel")

    agent = SyncAgent.builder().new_session_handler(_new_session).prompt_handler(prompt).build()
    with agent:
        client = _serve(agent)
        sid = client.new_session("/s1")
        future = client.prompt_future(sid, "x")
        client.wait_for(lambda: bool(client.updates))
        client.cancel(sid)
        assert future.result(WAIT) == {"stopReason": "cancelled"}
        client.close()


def test_late_cancel_does_not_touch_the_next_turn(no_thread_leak: None) -> None:
    seen: list[bool] = []
    hooks: list[str] = []

    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        seen.append(ctx.is_cancelled)
        return None

    agent = (
        SyncAgent.builder()
        .new_session_handler(_new_session)
        .prompt_handler(prompt)
        .cancel_handler(lambda note: hooks.append(note.session_id))
        .build()
    )
    with agent:
        client = _serve(agent)
        sid = client.new_session("/s1")
        assert client.prompt(sid, "one") == {"stopReason": "end_turn"}
        client.cancel(sid)  # late: the turn is over
        assert client.prompt(sid, "two") == {"stopReason": "end_turn"}
        assert seen == [False, False]
        assert hooks == [sid]  # the hook still ran
        client.close()


def test_updates_after_the_answer_are_dropped(no_thread_leak: None) -> None:
    contexts: list[PromptContext] = []

    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        contexts.append(ctx)
        ctx.send_message("in time")
        return None

    agent = SyncAgent.builder().new_session_handler(_new_session).prompt_handler(prompt).build()
    with agent:
        client = _serve(agent)
        sid = client.new_session("/s1")
        client.prompt(sid, "x")
        (ctx,) = contexts
        assert ctx.answered
        assert ctx.send_message("late") is False
        assert ctx.start_tool_call("late tool")  # returns an id, sends nothing
        client.prompt(sid, "y")  # a round trip: anything sent before it would be here
        assert client.texts(sid) == ["in time", "in time"]
        assert client.kinds(sid) == ["agent_message_chunk", "agent_message_chunk"]
        client.close()


def test_cancel_wakes_read_file_and_abandons_the_request(no_thread_leak: None) -> None:
    outcome: list[str] = []

    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        try:
            ctx.read_file("/slow")
        except RequestCancelledError:
            outcome.append("woke")
            raise
        return None

    agent = SyncAgent.builder().new_session_handler(_new_session).prompt_handler(prompt).build()
    with agent:
        client = _serve(agent)
        asked, abandoned = threading.Event(), threading.Event()

        def slow_read(params: Any, call: Any) -> Any:
            asked.set()
            if call.cancelled.wait(WAIT):
                abandoned.set()
            return {"content": "late"}

        client.conn.on_request("fs/read_text_file", slow_read)
        sid = client.new_session("/s1")
        future = client.prompt_future(sid, "x")
        assert asked.wait(WAIT)
        client.cancel(sid)
        assert future.result(WAIT) == {"stopReason": "cancelled"}
        assert outcome == ["woke"]
        assert abandoned.wait(WAIT)  # $/cancel_request reached the client
        client.close()


def test_cancel_request_on_the_prompt_ends_the_turn(no_thread_leak: None) -> None:
    started = threading.Event()
    woke = threading.Event()

    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        started.set()
        if ctx.cancelled.wait(WAIT):
            woke.set()
        return None

    agent = SyncAgent.builder().new_session_handler(_new_session).prompt_handler(prompt).build()
    with agent:
        client = _serve(agent)
        sid = client.new_session("/s1")
        future = client.prompt_future(sid, "x")
        assert started.wait(WAIT)
        future.cancel()  # $/cancel_request for the prompt itself
        assert woke.wait(WAIT)
        started.clear()
        second = client.prompt_future(sid, "y")  # the session is free again
        assert started.wait(WAIT)
        client.cancel(sid)
        assert second.result(WAIT) == {"stopReason": "cancelled"}
        client.close()


def test_client_going_away_cancels_turns_and_closes(no_thread_leak: None) -> None:
    started = threading.Event()
    woke = threading.Event()

    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        started.set()
        if ctx.cancelled.wait(WAIT):
            woke.set()
        return None

    agent = SyncAgent.builder().new_session_handler(_new_session).prompt_handler(prompt).build()
    with agent:
        client = _serve(agent)
        (handle,) = agent.connections
        sid = client.new_session("/s1")
        client.prompt_future(sid, "x")
        assert started.wait(WAIT)
        client.close()
        assert woke.wait(WAIT)
        assert handle.wait_closed(WAIT)
        assert agent.connections == []


def test_cancel_while_a_terminal_is_being_created_still_releases_it(demo: Any) -> None:
    client, _ = demo
    sid = client.new_session()
    asked, go = threading.Event(), threading.Event()

    def slow_create(params: Any, call: Any) -> Any:
        asked.set()
        go.wait(WAIT)
        return client._create(params, call)

    client.conn.on_request("terminal/create", slow_create)
    future = client.prompt_future(sid, "run make")
    assert asked.wait(WAIT)
    client.cancel(sid)
    go.set()  # the terminal now exists on the client: the agent must still release it
    assert future.result(WAIT) == {"stopReason": "cancelled"}
    (terminal_id,) = client.terminals
    client.wait_for(lambda: client.released == {terminal_id: 1})
    assert "terminal/wait_for_exit" not in client.methods()  # never waited: already cancelled


def test_cancel_while_eliciting_and_choosing(no_thread_leak: None) -> None:
    answers: list[Any] = []

    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        if ctx.prompt_text == "elicit":
            answers.append(type(ctx.elicit("name?", {"type": "object", "properties": {}})).__name__)
        else:
            answers.append(ctx.ask_choice("pick", "a", "b"))
        return None

    agent = SyncAgent.builder().new_session_handler(_new_session).prompt_handler(prompt).build()
    with agent:
        client = _serve(agent)
        asked, log = threading.Event(), AbandonLog()
        client.permission = block_until_cancelled(log, asked)

        def slow_elicit(params: Any, call: Any) -> Any:
            asked.set()
            call.cancelled.wait(WAIT)
            return {"action": "accept", "content": {}}

        client.elicitation = slow_elicit
        sid = client.new_session("/s1")
        for text in ("elicit", "choose"):
            asked.clear()
            future = client.prompt_future(sid, text)
            assert asked.wait(WAIT)
            client.cancel(sid)
            assert future.result(WAIT) == {"stopReason": "cancelled"}
        assert answers == ["CreateElicitationResponseCancel", None]
        client.close()


def test_unstable_client_calls_need_opt_in(no_thread_leak: None) -> None:
    from acp.errors import CapabilityError
    from acp.schema import unstable as U

    errors: list[str] = []

    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        try:
            ctx.client.message_mcp(U.MessageMcpRequest(server_id="x", request_id="r1", method="tools/list"))
        except CapabilityError as exc:
            errors.append(str(exc))
        return None

    agent = SyncAgent.builder().new_session_handler(_new_session).prompt_handler(prompt).build()
    with agent:
        client = _serve(agent)
        client.prompt(client.new_session("/s1"), "x")
        assert len(errors) == 1 and "unstable(True)" in errors[0]
        assert client.calls == []
        client.close()


def test_cancel_arriving_with_its_prompt(no_thread_leak: None) -> None:
    def prompt(req: S.PromptRequest, ctx: PromptContext) -> Any:
        assert ctx.cancelled.wait(10.0)  # the cancel read with the prompt must reach the turn
        return None

    agent = SyncAgent.builder().new_session_handler(_new_session).prompt_handler(prompt).build()
    with agent:
        ours, theirs = memory_pair()
        agent.connect(ours)
        lines = [
            {"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
             "params": {"sessionId": "s1", "prompt": [{"type": "text", "text": "x"}]}},
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}},
        ]
        theirs.write(b"".join(json.dumps(m).encode() + b"\n" for m in lines))  # one write
        buffer = b""
        while b"\n" not in buffer:
            buffer += theirs.read()
        theirs.close()
        assert json.loads(buffer.split(b"\n", 1)[0])["result"] == {"stopReason": "cancelled"}
