"""acp.testing: connect(), SessionRecorder, ScriptedPermissions, MemoryFiles."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import acp
from acp import schema
from acp.examples import echo_agent
from acp.testing import MemoryFiles, RecordedToolCall, ScriptedPermissions, SessionRecorder, connect

WAIT = 10.0


def _agent(prompt: Any) -> acp.SyncAgent:
    return (
        acp.SyncAgent.builder()
        .new_session_handler(lambda req, ctx: schema.NewSessionResponse(session_id="s-1"))
        .prompt_handler(prompt)
        .build()
    )


def test_connect_initializes_and_closes_both_sides(no_thread_leak: None) -> None:
    agent = echo_agent.build_agent()
    recorder = SessionRecorder()
    client = connect(agent, acp.SyncClient.builder().session_update_handler(recorder))
    with client:
        assert client.is_initialized
        assert len(agent.connections) == 1
        session = client.new_session(cwd="/tmp")
        assert client.prompt(session.session_id, "ping").stop_reason == "end_turn"
    assert recorder.messages_text() == "ping"
    assert agent.connections == []  # the agent's side closed with the client
    assert client.is_closed


def test_connect_without_initialize() -> None:
    with connect(echo_agent.build_agent(), initialize=False) as client:
        assert not client.is_initialized
        client.initialize()
        assert client.agent_info is not None


def test_recorder_tool_calls_and_text() -> None:
    def prompt(req: schema.PromptRequest, ctx: acp.PromptContext) -> str:
        ctx.send_thought("hmm ")
        ctx.send_message("a")
        call = ctx.start_tool_call("Edit x", schema.ToolKinds.EDIT, tool_call_id="t1")
        ctx.update_tool_call(call, status="in_progress", content="working")
        ctx.update_tool_call(
            call, status="completed", content=[schema.Diff(path="/x", old_text="1", new_text="2")], raw_output={"ok": 1}
        )
        ctx.send_plan([("step", "high", "completed")])
        ctx.send_message("b")
        return "end_turn"

    recorder = SessionRecorder()
    with connect(_agent(prompt), acp.SyncClient.builder().session_update_handler(recorder)) as client:
        client.prompt(client.new_session(cwd="/tmp").session_id, "go")
    assert recorder.messages_text() == "ab"
    assert recorder.messages_text("s-1") == "ab" and recorder.messages_text("other") == ""
    assert recorder.thoughts_text() == "hmm "
    (call,) = recorder.tool_calls()
    assert isinstance(call, RecordedToolCall)
    assert (call.tool_call_id, call.title, call.kind, call.status, call.updates) == ("t1", "Edit x", "edit", "completed", 2)
    assert call.diffs()[0].new_text == "2" and call.raw_output == {"ok": 1}
    last = recorder.last_plan()
    assert last is not None and last.entries[0].content == "step"
    assert len(recorder) == 7
    recorder.clear()
    assert len(recorder) == 0 and recorder.last_plan() is None


def test_recorder_wait_for_an_update_during_a_turn() -> None:
    release = threading.Event()

    def prompt(req: schema.PromptRequest, ctx: acp.PromptContext) -> str:
        ctx.send_message("started")
        release.wait(WAIT)
        return "end_turn"

    recorder = SessionRecorder()
    with connect(_agent(prompt), acp.SyncClient.builder().session_update_handler(recorder)) as client:
        session = client.new_session(cwd="/tmp")
        worker = threading.Thread(target=client.prompt, args=(session.session_id, "go"))
        worker.start()
        assert recorder.wait_for(lambda r: r.messages_text() == "started", WAIT)
        assert not recorder.wait_for(lambda r: "never" in r.messages_text(), 0.01)
        release.set()
        worker.join(WAIT)


def test_scripted_permissions_in_order() -> None:
    outcomes: list[bool] = []

    def prompt(req: schema.PromptRequest, ctx: acp.PromptContext) -> str:
        for _ in range(4):
            outcomes.append(ctx.ask_permission("do it", schema.ToolKinds.EDIT))
        return "end_turn"

    permissions = ScriptedPermissions("allow", "reject", None, then="allow")
    with connect(_agent(prompt), acp.SyncClient.builder().request_permission_handler(permissions)) as client:
        client.prompt(client.new_session(cwd="/tmp").session_id, "go")
    assert outcomes == [True, False, False, True]
    assert len(permissions.requests) == 4 and permissions.remaining == 0


def test_scripted_permissions_by_option_id_kind_and_response() -> None:
    request = schema.RequestPermissionRequest(
        session_id="s",
        tool_call=schema.ToolCallUpdate(tool_call_id="t"),
        options=[
            schema.PermissionOption(option_id="yes", name="Yes", kind="allow_always"),
            schema.PermissionOption(option_id="no", name="No", kind="reject_once"),
        ],
    )
    custom = schema.RequestPermissionResponse(outcome=schema.CancelledPermissionOutcome())
    permissions = ScriptedPermissions("no", "allow_always", "allow", custom, "cancel", "maybe")
    picked = [permissions(request, None).outcome for _ in range(5)]
    assert [getattr(o, "option_id", None) for o in picked] == ["no", "yes", "yes", None, None]
    with pytest.raises(acp.RequestError) as info:
        permissions(request, None)
    assert info.value.code == -32602


def test_memory_files() -> None:
    files = MemoryFiles({"/p/a.txt": "one\ntwo\nthree\n"})

    def prompt(req: schema.PromptRequest, ctx: acp.PromptContext) -> str:
        ctx.send_message(ctx.read_file("/p/a.txt", line=2, limit=1))
        ctx.write_file("/p/b.txt", "new")
        ctx.send_message(repr(ctx.try_read_file("/p/missing.txt")))
        return "end_turn"

    recorder = SessionRecorder()
    builder = files.register(acp.SyncClient.builder().session_update_handler(recorder))
    with connect(_agent(prompt), builder) as client:
        assert client.client_capabilities.fs.read_text_file and client.client_capabilities.fs.write_text_file
        client.prompt(client.new_session(cwd="/tmp").session_id, "go")
    assert recorder.messages_text() == "two\nNone"
    assert files["/p/b.txt"] == "new" and "/p/b.txt" in files
    assert files.writes == [("/p/b.txt", "new")]
    assert files.snapshot() == {"/p/a.txt": "one\ntwo\nthree\n", "/p/b.txt": "new"}
    with pytest.raises(acp.RequestError) as info:
        files.read_text_file(schema.ReadTextFileRequest(session_id="s", path="relative.txt"), None)
    assert info.value.code == -32602


def test_connect_refuses_a_builder_with_a_transport(no_thread_leak: None) -> None:
    agent = echo_agent.build_agent()
    builder = acp.SyncClient.builder().agent_process("/no/such/agent")
    with pytest.raises(ValueError, match="exactly one transport"):
        connect(agent, builder)
    assert agent.connections == []
