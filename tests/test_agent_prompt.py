"""PromptContext end to end: a raw Connection acting as the client drives the demo agent
(tests/helpers/agent_full.py) over a memory pair; every byte goes through the pipes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from acp import schema
from acp.agent import SyncAgent
from acp.errors import RequestError

from .helpers.agent_client import FakeClient
from .helpers.agent_full import DemoAgent, build_agent


@pytest.fixture
def served(no_thread_leak: None) -> Iterator[tuple[FakeClient, DemoAgent, SyncAgent]]:
    agent, demo = build_agent()
    client = FakeClient(agent.serve_in_process())
    client.initialize()
    yield client, demo, agent
    client.close()
    agent.close()


def test_stream_answers_after_every_update(served: Any) -> None:
    client, _, _ = served
    sid = client.new_session()
    assert client.prompt(sid, "stream 50") == {"stopReason": "end_turn"}
    # The answer came after every update (updates precede the response on the wire).
    assert client.texts(sid) == [f"chunk {i}" for i in range(50)]


@contextmanager
def _one_turn(prompt: Any) -> Iterator[tuple[FakeClient, str]]:
    """An agent with this prompt handler, in process, after one prompt ("go") ended the turn."""
    agent = (SyncAgent.builder()
             .new_session_handler(lambda request, ctx: schema.NewSessionResponse(session_id="s"))
             .prompt_handler(prompt)
             .build())
    client = FakeClient(agent.serve_in_process())
    try:
        client.initialize()
        sid = client.new_session()
        assert client.prompt(sid, "go") == {"stopReason": "end_turn"}
        yield client, sid
    finally:
        client.close()
        agent.close()


def test_send_message_meta_goes_out_as_the_chunks_meta(no_thread_leak: None) -> None:
    def prompt(request: Any, ctx: Any) -> None:
        ctx.send_message("traced", meta={"trace": {"id": "t-1"}, "n": 1})
        ctx.send_message("plain")
        ctx.send_thought("hmm", meta={"k": 1})
        ctx.send_user_message("again", meta={"k": 2})

    with _one_turn(prompt) as (client, _):
        # What the client decoded from the wire: `_meta` on the first chunk, none on the second.
        assert [u["update"] for u in client.updates] == [
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "traced"},
             "_meta": {"trace": {"id": "t-1"}, "n": 1}},
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "plain"}},
            {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}, "_meta": {"k": 1}},
            {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "again"}, "_meta": {"k": 2}},
        ]


@pytest.mark.parametrize("session_id", ["s", "", 'q"uo\\te', "sëssion ✓"])
@pytest.mark.parametrize("text", ["", "plain", 'a "quoted"\n\ttext\\', "ünïcødé ✓ 😀", "\x00\x1f"])
def test_a_plain_text_chunk_goes_out_as_the_bytes_its_structs_encode_to(session_id: str, text: str) -> None:
    # send_message's plain-text chunk skips the Structs: its params are a per-session frame
    # around the encoded text, and must be byte for byte what the Structs encode to.
    from acp.agent import context

    frame = context._CHUNK_FRAMES.get(session_id) or context._chunk_frame(session_id)
    expected = schema.encode(
        schema.SessionNotification(session_id=session_id, update=schema.AgentMessageChunk(content=schema.TextContent(text=text)))
    )
    assert frame[0] + schema.encode(text) + frame[1] == expected


def test_chunks_on_both_sides_of_the_framed_size_arrive_whole_and_in_order(no_thread_leak: None) -> None:
    # Up to 64 KiB a plain chunk goes out framed (Raw bytes); above, through the Structs (one
    # copy fewer of a big text). The client sees the same kind of update either way.
    from acp.agent import context

    sizes = [context._MAX_FRAMED_CHUNK, context._MAX_FRAMED_CHUNK + 1, 3 << 20]
    texts = [str(i) * size for i, size in enumerate(sizes)]

    def prompt(request: Any, ctx: Any) -> None:
        for text in texts:
            ctx.send_message(text)

    with _one_turn(prompt) as (client, sid):
        assert client.texts(sid) == texts


def test_a_text_that_cannot_be_encoded_fails_the_send_and_nothing_goes_out(no_thread_leak: None) -> None:
    failures: list[type[BaseException]] = []

    def prompt(request: Any, ctx: Any) -> None:
        try:
            ctx.send_message("lone \ud800 surrogate")
        except UnicodeEncodeError as exc:
            failures.append(type(exc))
        ctx.send_message("after")

    with _one_turn(prompt) as (client, sid):
        assert failures == [UnicodeEncodeError]  # as encoding the Structs raises
        assert client.texts(sid) == ["after"]


def test_tool_calls_and_plan(served: Any) -> None:
    client, _, _ = served
    sid = client.new_session()
    client.prompt(sid, "tools")
    updates = [u["update"] for u in client.updates]
    assert [u["sessionUpdate"] for u in updates] == ["tool_call", "tool_call_update", "tool_call_update"]
    assert updates[0]["kind"] == "read" and updates[0]["status"] == "pending"
    assert {u["toolCallId"] for u in updates} == {updates[0]["toolCallId"]}
    assert updates[2]["content"] == [{"type": "content", "content": {"type": "text", "text": "done"}}]
    client.prompt(sid, "plan")
    plan = client.updates[-1]["update"]
    assert client.updates[-2]["update"]["sessionUpdate"] == "agent_thought_chunk"
    assert plan == {
        "sessionUpdate": "plan",
        "entries": [
            {"content": "step one", "priority": "high", "status": "pending"},
            {"content": "step two", "priority": "low", "status": "pending"},
        ],
    }


def test_files(served: Any) -> None:
    client, _, _ = served
    sid = client.new_session()
    client.files["/work/a.txt"] = "hello"
    client.prompt(sid, "read /work/a.txt")
    client.prompt(sid, "tryread /work/missing.txt")
    client.prompt(sid, "write /work/b.txt new text")
    assert client.texts(sid) == ["hello", "None"]
    assert client.files["/work/b.txt"] == "new text"
    assert client.calls[0] == ("fs/read_text_file", {"sessionId": sid, "path": "/work/a.txt"})
    # read_file (not try_) raises: the handler's error becomes the prompt's error answer.
    with pytest.raises(RequestError) as info:
        client.prompt(sid, "read /work/missing.txt")
    assert info.value.code == -32002


def test_permission_allowed_and_denied(served: Any) -> None:
    client, _, _ = served
    sid = client.new_session()
    assert client.prompt(sid, "permission") == {"stopReason": "end_turn"}
    request = client.calls[0][1]
    assert request["sessionId"] == sid
    assert request["toolCall"]["kind"] == "edit" and request["toolCall"]["status"] == "pending"
    assert [(o["optionId"], o["kind"]) for o in request["options"]] == [
        ("allow", "allow_once"),
        ("reject", "reject_once"),
    ]
    tool_call, settled = client.updates[0]["update"], client.updates[1]["update"]
    # A real tool_call was announced before the request, then settled.
    assert tool_call["sessionUpdate"] == "tool_call" and tool_call["status"] == "pending"
    assert tool_call["toolCallId"] == request["toolCall"]["toolCallId"]
    assert settled == {"sessionUpdate": "tool_call_update", "toolCallId": tool_call["toolCallId"], "status": "completed"}
    assert client.texts(sid) == ["allowed"]

    client.permission = lambda p, call: {"outcome": {"outcome": "selected", "optionId": "reject"}}
    client.prompt(sid, "permission")
    assert client.texts(sid)[-1] == "denied"
    client.permission = lambda p, call: {"outcome": {"outcome": "cancelled"}}
    client.prompt(sid, "permission")
    assert client.texts(sid)[-1] == "denied"
    assert client.updates[-2]["update"]["status"] == "failed"


def test_choice(served: Any) -> None:
    client, _, _ = served
    sid = client.new_session()
    client.permission = lambda p, call: {"outcome": {"outcome": "selected", "optionId": p["options"][1]["optionId"]}}
    client.prompt(sid, "choice red green blue")
    assert client.texts(sid) == ["choice=green"]
    assert [o["name"] for o in client.calls[0][1]["options"]] == ["red", "green", "blue"]
    client.permission = lambda p, call: {"outcome": {"outcome": "cancelled"}}
    client.prompt(sid, "choice red green")
    assert client.texts(sid)[-1] == "choice=None"


def test_choice_with_an_option_never_offered(served: Any) -> None:
    client, _, _ = served
    sid = client.new_session()
    client.permission = lambda p, call: {"outcome": {"outcome": "selected", "optionId": "sneaky"}}
    with pytest.raises(RequestError) as info:
        client.prompt(sid, "choice red green")
    assert info.value.code == -32603
    assert "sneaky" in info.value.message
    assert client.updates[-1]["update"]["status"] == "failed"


def test_execute_releases_once(served: Any) -> None:
    client, _, _ = served
    sid = client.new_session()
    client.terminal_output = "3 passed\n"
    client.prompt(sid, "run pytest -q")
    assert client.texts(sid) == ["exit=0 signal=None success=True out=3 passed\n"]
    (terminal,) = client.terminals.values()
    assert terminal.params == {"sessionId": sid, "command": "pytest", "args": ["-q"], "cwd": "/work"}
    assert client.methods() == ["terminal/create", "terminal/wait_for_exit", "terminal/output", "terminal/release"]
    assert client.released == {terminal.id: 1}

    client.terminal_exit_code = 2
    client.prompt(sid, "run false")
    assert client.texts(sid)[-1].startswith("exit=2 signal=None success=False")
    assert all(n == 1 for n in client.released.values()) and len(client.released) == 2


def test_execute_releases_when_the_client_fails(served: Any) -> None:
    client, _, _ = served
    sid = client.new_session()

    def broken(params: Any, call: Any) -> Any:
        raise RequestError(-32603, "terminal broke")

    client.conn.on_request("terminal/output", broken)
    with pytest.raises(RequestError):
        client.prompt(sid, "run ls")
    (terminal_id,) = client.terminals
    assert client.released == {terminal_id: 1}


def test_elicit(served: Any) -> None:
    client, _, _ = served
    sid = client.new_session()
    client.prompt(sid, "elicit")
    assert client.texts(sid) == ["elicit=CreateElicitationResponseAccept:{'name': 'Ada'}"]
    request = client.calls[0][1]
    assert request["mode"] == "form" and request["sessionId"] == sid
    assert request["requestedSchema"]["properties"] == {"name": {"type": "string"}}
    client.elicitation = lambda p, call: {"action": "decline"}
    client.prompt(sid, "elicit")
    assert client.texts(sid)[-1] == "elicit=CreateElicitationResponseDecline:None"


def test_ext_methods_both_ways(served: Any) -> None:
    client, _, _ = served
    sid = client.new_session()
    client.prompt(sid, "ext")
    assert client.texts(sid) == ["ext={'pong': {'n': 1}}"]
    client.wait_for(lambda: ("_demo/note", {"n": 2}) in client.calls)
    assert client.conn.request("_demo/echo", {"a": [1]}) == {"echo": {"a": [1]}}
    with pytest.raises(RequestError) as info:
        client.conn.request("_demo/unknown", {})
    assert info.value.code == -32601
    client.conn.notify("_demo/unknown_note", {})  # ignored
    assert client.conn.request("_demo/echo", [5]) == {"echo": [5]}


def test_handler_errors(served: Any) -> None:
    client, _, _ = served
    sid = client.new_session()
    with pytest.raises(RequestError) as info:
        client.prompt(sid, "fail now")
    assert (info.value.code, info.value.message, info.value.data) == (-32002, "nope", {"what": "now"})
    with pytest.raises(RequestError) as info:
        client.prompt(sid, "crash")
    assert info.value.code == -32603 and info.value.message == "Internal error"
    # The turn ended: the session takes prompts again.
    assert client.prompt(sid, "hello") == {"stopReason": "end_turn"}


def test_capability_refusals_send_nothing(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent:
        client = FakeClient(agent.serve_in_process(), caps={})
        client.initialize()
        sid = client.new_session()
        client.prompt(sid, "refused")
        assert client.texts(sid) == ["CapabilityError,CapabilityError,CapabilityError,CapabilityError"]
        client.prompt(sid, "caps")
        assert client.texts(sid)[-1] == "read=False terminal=False"
        # The prompt's answer follows its updates and requests: nothing was ever sent.
        assert client.calls == []
        client.close()


def test_before_initialize_nothing_is_advertised(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent:
        client = FakeClient(agent.serve_in_process())
        sid = client.new_session()
        client.prompt(sid, "refused")
        assert client.texts(sid) == ["CapabilityError,CapabilityError,CapabilityError,CapabilityError"]
        assert client.calls == []
        client.close()
