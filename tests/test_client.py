"""SyncClient against a fake agent on the raw Connection, over an in-process pair of pipes."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from acp import schema
from acp.client import (
    ClientRequestContext,
    SyncClient,
    SyncClientBuilder,
    UnsupportedProtocolVersionError,
)
from acp.errors import (
    AcpError,
    CapabilityError,
    ConnectionClosedError,
    RequestError,
    RequestTimeoutError,
)

from .helpers.client_support import WAIT, AgentSide, FakeTerminals, make_client, texts
from .helpers.fault_support import in_thread

Factory = Callable[..., tuple[SyncClient, AgentSide]]


@pytest.fixture
def connect(no_thread_leak: None) -> Iterator[Factory]:
    """make_client, closing everything it made at the end of the test."""
    made: list[tuple[SyncClient, AgentSide]] = []

    def factory(configure: Callable[[SyncClientBuilder], Any] | None = None, **options: Any) -> tuple[SyncClient, AgentSide]:
        pair = make_client(configure, **options)
        made.append(pair)
        return pair

    yield factory
    for client, side in made:
        client.close()
        side.close()


def _updates(collected: list[schema.SessionNotification]) -> Callable[[SyncClientBuilder], Any]:
    return lambda b: b.session_update_handler(collected.append)


# ---------------------------------------------------------------------------------------------
# initialize and capabilities


def test_initialize_records_the_negotiation(connect: Factory) -> None:
    client, side = connect(lambda b: b.client_info("my-editor", "2.0", title="My Editor"))
    with pytest.raises(CapabilityError, match="initialize"):
        client.capabilities  # noqa: B018
    assert client.agent_info is None and not client.is_initialized
    response = client.initialize()
    assert isinstance(response, schema.InitializeResponse)
    assert response.protocol_version == 1
    assert client.is_initialized
    assert client.agent_info == schema.Implementation(name="fake-agent", version="0.1")
    caps = client.capabilities
    assert caps.protocol_version == 1
    assert caps.supports_load_session() and caps.supports_list_sessions() and caps.supports_logout()
    assert [m.id for m in caps.auth_methods] == ["token"]
    sent = side.agent.params_of("initialize")[0]
    assert sent["protocolVersion"] == 1
    assert sent["clientInfo"] == {"name": "my-editor", "version": "2.0", "title": "My Editor"}


def test_initialize_twice_is_refused(connect: Factory) -> None:
    client, side = connect()
    client.initialize()
    with pytest.raises(AcpError, match="already initialized"):
        client.initialize()
    assert side.agent.methods() == ["initialize"]


def test_a_protocol_version_we_do_not_speak_is_refused_locally(connect: Factory) -> None:
    client, side = connect()
    with pytest.raises(ValueError, match="not supported"):
        client.initialize(protocol_version=7)
    client.initialize()
    assert side.agent.methods() == ["initialize"]


def test_an_unsupported_agent_version_closes_the_connection(connect: Factory) -> None:
    client, side = connect(protocol_version=99)
    with pytest.raises(UnsupportedProtocolVersionError, match="version 99") as info:
        client.initialize()
    assert (info.value.requested, info.value.answered) == (1, 99)
    assert client.is_closed and not client.is_initialized
    with pytest.raises(ConnectionClosedError):
        client.new_session("/work")
    assert side.conn.wait_closed(WAIT)  # the agent saw the connection end


def _all_handlers(b: SyncClientBuilder) -> None:
    b.read_text_file_handler(lambda r, c: "x").write_text_file_handler(lambda r, c: None)
    b.terminal_handlers(FakeTerminals()).create_elicitation_handler(lambda r, c: None, form=True, url=True)
    b.complete_elicitation_handler(lambda n: None)


@pytest.mark.parametrize(
    ("configure", "expected"),
    [
        (None, {}),
        (lambda b: b.read_text_file_handler(lambda r, c: "x"), {"fs": {"readTextFile": True}}),
        (lambda b: b.write_text_file_handler(lambda r, c: None), {"fs": {"writeTextFile": True}}),
        (lambda b: b.terminal_handlers(FakeTerminals()), {"terminal": True}),
        (lambda b: b.create_elicitation_handler(lambda r, c: None), {"elicitation": {"form": {}}}),
        (
            _all_handlers,
            {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True,
             "elicitation": {"form": {}, "url": {}}},
        ),
    ],
    ids=["none", "read", "write", "terminal", "elicitation", "all"],
)
def test_the_agent_sees_capabilities_derived_from_handlers(
    connect: Factory, configure: Callable[[SyncClientBuilder], Any] | None, expected: dict[str, Any]
) -> None:
    client, side = connect(configure)
    client.initialize()
    caps = side.agent.params_of("initialize")[0]["clientCapabilities"]
    # Only what the handlers justify is advertised (false / absent otherwise).
    advertised = {k: v for k, v in caps.items() if v not in ({}, False)}
    assert advertised == expected
    assert client.capabilities.supports_read_text_file() == ("readTextFile" in expected.get("fs", {}))
    assert client.capabilities.supports_terminal() == ("terminal" in expected)


# ---------------------------------------------------------------------------------------------
# every stable method


def test_every_stable_method_end_to_end(connect: Factory) -> None:
    updates: list[schema.SessionNotification] = []
    client, side = connect(_updates(updates))
    client.initialize()
    agent = side.agent

    assert isinstance(client.authenticate("token"), schema.AuthenticateResponse)
    with pytest.raises(RequestError) as info:
        client.authenticate("nope")
    assert info.value.code == -32602

    new = client.new_session("/work", meta={"trace": "t1"})
    assert isinstance(new, schema.NewSessionResponse)
    assert new.session_id == "sess-1"
    assert new.modes is not None and new.modes.current_mode_id == "ask"
    assert agent.params_of("session/new")[-1] == {"cwd": "/work", "mcpServers": [], "_meta": {"trace": "t1"}}

    loaded = client.load_session("old-1", "/work")
    assert isinstance(loaded, schema.LoadSessionResponse)
    assert loaded.modes is not None and loaded.modes.current_mode_id == "code"
    # The replayed history was handled before load_session returned.
    assert [type(n.update).__name__ for n in updates] == ["UserMessageChunk", "AgentMessageChunk"]
    assert agent.params_of("session/load")[-1] == {"sessionId": "old-1", "cwd": "/work", "mcpServers": []}

    page = client.list_sessions(cwd="/work")
    assert isinstance(page, schema.ListSessionsResponse)
    assert [s.session_id for s in page.sessions] == ["old-0", "old-1"]
    assert page.next_cursor == "2"

    resumed = client.resume_session("old-1", "/work")
    assert isinstance(resumed, schema.ResumeSessionResponse)
    assert agent.params_of("session/resume")[-1] == {"sessionId": "old-1", "cwd": "/work"}

    updates.clear()
    assert isinstance(client.set_session_mode(new.session_id, "code"), schema.SetSessionModeResponse)
    assert isinstance(updates[0].update, schema.CurrentModeUpdate)
    assert updates[0].update.current_mode_id == "code"

    chosen = client.set_session_config_option(new.session_id, "model", "fast")
    assert isinstance(chosen, schema.SetSessionConfigOptionResponse)
    option = chosen.config_options[0]
    assert isinstance(option, schema.SessionConfigOptionSelect) and option.current_value == "fast"
    flag = client.set_session_config_option(new.session_id, "verbose", True)
    assert isinstance(flag.config_options[0], schema.SessionConfigOptionBoolean)
    assert agent.params_of("session/set_config_option")[-1] == {
        "sessionId": new.session_id, "configId": "verbose", "value": True, "type": "boolean"}

    updates.clear()
    answer = client.prompt(new.session_id, "hello there")
    assert isinstance(answer, schema.PromptResponse)
    assert answer.stop_reason == "end_turn"
    assert texts(updates) == ["echo: hello there"]

    assert isinstance(client.close_session(new.session_id), schema.CloseSessionResponse)
    assert isinstance(client.delete_session("old-1"), schema.DeleteSessionResponse)
    assert isinstance(client.logout(), schema.LogoutResponse)
    assert agent.methods() == [
        "initialize", "authenticate", "authenticate", "session/new", "session/load", "session/list",
        "session/resume", "session/set_mode", "session/set_config_option", "session/set_config_option",
        "session/prompt", "session/close", "session/delete", "logout",
    ]


def test_prompt_with_a_string_sends_one_text_block(connect: Factory) -> None:
    client, side = connect()
    client.initialize()
    sid = client.new_session("/work").session_id
    client.prompt(sid, "just text")
    client.prompt(sid, ["a", schema.TextContent(text="b"), schema.ResourceLink(name="m", uri="file:///m.py")])
    sent = side.agent.params_of("session/prompt")
    assert sent[0]["prompt"] == [{"type": "text", "text": "just text"}]
    assert sent[1]["prompt"] == [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"},
        {"type": "resource_link", "name": "m", "uri": "file:///m.py"},
    ]


def test_full_request_objects_take_the_same_path(connect: Factory) -> None:
    updates: list[schema.SessionNotification] = []
    client, side = connect(_updates(updates))
    init = client.call(schema.InitializeRequest(protocol_version=1))
    assert isinstance(init, schema.InitializeResponse) and client.is_initialized
    new = client.call(schema.NewSessionRequest(cwd="/work", mcp_servers=[]))
    assert isinstance(new, schema.NewSessionResponse)
    done = client.call(schema.PromptRequest(session_id=new.session_id, prompt=[schema.TextContent(text="hi")]))
    assert isinstance(done, schema.PromptResponse) and texts(updates) == ["echo: hi"]
    assert client.call(schema.CancelNotification(session_id=new.session_id)) is None
    with pytest.raises(TypeError, match="not the params type"):
        client.call(schema.TextContent(text="no method"))
    client.call(schema.ListSessionsRequest())  # round trip: the cancel was handled before it
    assert side.agent.methods()[-2:] == ["session/cancel", "session/list"]


# ---------------------------------------------------------------------------------------------
# local refusals


def test_calls_before_initialize_are_refused_and_nothing_is_sent(connect: Factory) -> None:
    client, side = connect()
    attempts: list[Callable[[], Any]] = [
        lambda: client.authenticate("token"),
        lambda: client.new_session("/work"),
        lambda: client.load_session("s", "/work"),
        lambda: client.list_sessions(),
        lambda: client.iter_sessions(),
        lambda: client.prompt("s", "hi"),
        lambda: client.cancel("s"),
        lambda: client.set_session_mode("s", "code"),
        lambda: client.ext_request("_agent/echo", {}),
        lambda: client.ext_notification("_agent/note", {}),
        lambda: client.logout(),
    ]
    for attempt in attempts:
        with pytest.raises(CapabilityError, match="initialize"):
            attempt()
    client.initialize()
    lines = side.received_lines()
    assert len(lines) == 1 and json.loads(lines[0])["method"] == "initialize"


def test_methods_the_agent_did_not_advertise_are_refused(connect: Factory) -> None:
    client, side = connect(advertise=[])
    client.initialize()
    attempts: dict[str, Callable[[], Any]] = {
        "session/load": lambda: client.load_session("s", "/work"),
        "session/list": lambda: client.list_sessions(),
        "iter": lambda: client.iter_sessions(),
        "session/resume": lambda: client.resume_session("s", "/work"),
        "session/close": lambda: client.close_session("s"),
        "session/delete": lambda: client.delete_session("s"),
        "logout": lambda: client.logout(),
        "dirs": lambda: client.new_session("/work", additional_directories=["/other"]),
        "image": lambda: client.prompt("s", [schema.ImageContent(data="AAAA", mime_type="image/png")]),
        "mcp http": lambda: client.new_session(
            "/work", mcp_servers=[schema.McpServerHttp(name="m", url="http://x", headers=[])]),
    }
    for name, attempt in attempts.items():
        with pytest.raises(CapabilityError, match="did not advertise"):
            attempt()
            pytest.fail(f"{name} was not refused")
    assert side.agent.methods() == ["initialize"]
    assert len(side.received_lines()) == 1


def test_advertised_optional_parameters_are_sent(connect: Factory) -> None:
    client, side = connect()
    client.initialize()
    sid = client.new_session("/work", additional_directories=["/lib"]).session_id
    client.prompt(sid, [schema.ImageContent(data="AAAA", mime_type="image/png")])
    assert side.agent.params_of("session/new")[0]["additionalDirectories"] == ["/lib"]
    assert side.agent.params_of("session/prompt")[0]["prompt"][0]["type"] == "image"


def test_relative_paths_are_refused_locally(connect: Factory) -> None:
    client, side = connect()
    client.initialize()
    with pytest.raises(ValueError, match="absolute"):
        client.new_session("relative/dir")
    with pytest.raises(ValueError, match="absolute"):
        client.new_session("/work", additional_directories=["lib"])
    assert side.agent.methods() == ["initialize"]


def test_ext_method_names_must_start_with_an_underscore(connect: Factory) -> None:
    client, side = connect()
    client.initialize()
    with pytest.raises(ValueError, match="start with '_'"):
        client.ext_request("session/new", {"cwd": "/"})
    with pytest.raises(ValueError, match="start with '_'"):
        client.ext_notification("session/cancel", {})
    with pytest.raises(TypeError, match="object or array"):
        client.ext_request("_agent/echo", 5)
    assert side.agent.methods() == ["initialize"]


# ---------------------------------------------------------------------------------------------
# listing


def test_iter_sessions_follows_cursors(connect: Factory) -> None:
    client, side = connect(sessions=5, page_size=2)
    client.initialize()
    assert [s.session_id for s in client.iter_sessions(cwd="/work")] == [f"old-{k}" for k in range(5)]
    sent = side.agent.params_of("session/list")
    assert [p.get("cursor") for p in sent] == [None, "2", "4"]
    assert all(p["cwd"] == "/work" for p in sent)


def test_iter_sessions_is_lazy(connect: Factory) -> None:
    client, side = connect(sessions=5, page_size=2)
    client.initialize()
    sessions = client.iter_sessions()
    assert next(sessions).session_id == "old-0"
    assert len(side.agent.params_of("session/list")) == 1


def test_iter_sessions_of_an_empty_agent(connect: Factory) -> None:
    client, _ = connect(sessions=0)
    client.initialize()
    assert list(client.iter_sessions()) == []


# ---------------------------------------------------------------------------------------------
# ordering


def test_when_prompt_returns_every_update_was_seen_by_every_consumer_in_order(connect: Factory) -> None:
    n = 400
    log: list[tuple[str, int]] = []
    first: list[int] = []
    second: list[int] = []
    pause = threading.Event()  # never set: wait() just makes a slow consumer

    def slow(notification: schema.SessionNotification) -> None:
        k = int(texts([notification])[0])
        if k % 50 == 0:
            pause.wait(0.002)
        first.append(k)
        log.append(("first", k))

    def fast(notification: schema.SessionNotification) -> None:
        k = int(texts([notification])[0])
        second.append(k)
        log.append(("second", k))

    client, _ = connect(lambda b: b.session_update_handler(slow).session_update_handler(fast))
    client.initialize()
    sid = client.new_session("/work").session_id
    for _ in range(3):
        first.clear()
        second.clear()
        log.clear()
        assert client.prompt(sid, f"stream {n}").stop_reason == "end_turn"
        assert first == list(range(n))
        assert second == list(range(n))
        # Each update went to both consumers, in registration order, before the next update.
        assert log == [(who, k) for k in range(n) for who in ("first", "second")]


def test_a_failing_consumer_does_not_starve_the_next_one(connect: Factory) -> None:
    seen: list[str] = []

    def broken(notification: schema.SessionNotification) -> None:
        raise RuntimeError("consumer bug")

    client, _ = connect(lambda b: b.session_update_handler(broken).session_update_handler(lambda n: seen.extend(texts([n]))))
    client.initialize()
    sid = client.new_session("/work").session_id
    client.prompt(sid, "stream 3")
    assert seen == ["0", "1", "2"]


# ---------------------------------------------------------------------------------------------
# agent -> client calls


def test_fs_terminal_and_elicitation_callbacks(connect: Factory, tmp_path: Path) -> None:
    updates: list[schema.SessionNotification] = []
    contexts: list[ClientRequestContext] = []
    terminals = FakeTerminals()
    (tmp_path / "in.txt").write_text("file body")

    def read(request: schema.ReadTextFileRequest, ctx: ClientRequestContext) -> str:
        contexts.append(ctx)
        return Path(request.path).read_text()  # a plain str is accepted

    def write(request: schema.WriteTextFileRequest, ctx: ClientRequestContext) -> None:
        Path(request.path).write_text(request.content)

    def elicit(request: Any, ctx: ClientRequestContext) -> Any:
        assert isinstance(request, schema.CreateElicitationRequestForm)
        return schema.CreateElicitationResponseAccept(content={"name": "Ada"})

    client, _ = connect(lambda b: b.session_update_handler(updates.append).read_text_file_handler(read)
                        .write_text_file_handler(write).terminal_handlers(terminals)
                        .create_elicitation_handler(elicit))
    client.initialize()
    sid = client.new_session("/work").session_id
    client.prompt(sid, f"read {tmp_path / 'in.txt'}")
    client.prompt(sid, f"write {tmp_path / 'out.txt'} new body")
    client.prompt(sid, "terminal echo hi")
    client.prompt(sid, "elicit")
    assert texts(updates) == ["read=file body", "wrote", "exit=0 out=hi\n", 'elicit=accept {"name": "Ada"}']
    assert (tmp_path / "out.txt").read_text() == "new body"
    assert terminals.released == ["term-1"] and terminals.sessions == [sid]
    assert contexts[0].session_id == sid and contexts[0].method == "fs/read_text_file"
    assert not contexts[0].is_cancelled


def test_a_missing_file_is_answered_resource_not_found(connect: Factory) -> None:
    def read(request: schema.ReadTextFileRequest, ctx: ClientRequestContext) -> str:
        return Path(request.path).read_text()

    client, _ = connect(lambda b: b.read_text_file_handler(read))
    client.initialize()
    sid = client.new_session("/work").session_id
    # The agent's fs call fails with -32002; its prompt handler lets that error through.
    with pytest.raises(RequestError) as info:
        client.prompt(sid, "read /nonexistent/file.txt")
    assert info.value.code == -32002


def test_permission_selected(connect: Factory) -> None:
    updates: list[schema.SessionNotification] = []
    seen_tool_call: list[bool] = []

    def allow(request: schema.RequestPermissionRequest, ctx: ClientRequestContext) -> schema.RequestPermissionResponse:
        # The tool_call update sent before the request was handled before it (ordering).
        seen_tool_call.append(any(isinstance(n.update, schema.ToolCall) for n in updates))
        return schema.RequestPermissionResponse(outcome=schema.SelectedPermissionOutcome(option_id="allow"))

    client, _ = connect(lambda b: b.session_update_handler(updates.append).request_permission_handler(allow))
    client.initialize()
    sid = client.new_session("/work").session_id
    assert client.prompt(sid, "permission").stop_reason == "end_turn"
    assert texts(updates) == ["outcome=selected:allow"]
    assert seen_tool_call == [True]


def test_without_a_permission_handler_the_sdk_answers_cancelled(connect: Factory) -> None:
    updates: list[schema.SessionNotification] = []
    client, _ = connect(_updates(updates))
    client.initialize()
    sid = client.new_session("/work").session_id
    assert client.prompt(sid, "permission").stop_reason == "cancelled"
    assert texts(updates) == ["outcome=cancelled"]


def _out_responses(lines: list[tuple[str, bytes]], request_id: Any) -> list[dict[str, Any]]:
    out = []
    for direction, line in lines:
        msg = json.loads(line)
        if direction == "out" and "method" not in msg and msg.get("id") == request_id:
            out.append(msg)
    return out


def test_cancel_answers_pending_permission_requests_cancelled(connect: Factory) -> None:
    updates: list[schema.SessionNotification] = []
    wire: list[tuple[str, bytes]] = []
    entered = threading.Event()
    saw_cancel: list[bool] = []
    request_ids: list[Any] = []

    def ask_user(request: schema.RequestPermissionRequest, ctx: ClientRequestContext) -> schema.RequestPermissionResponse:
        request_ids.append(ctx.request_id)
        entered.set()
        # A UI that only notices the cancellation: it then answers anyway, too late.
        saw_cancel.append(ctx.cancelled.wait(WAIT))
        return schema.RequestPermissionResponse(outcome=schema.SelectedPermissionOutcome(option_id="allow"))

    client, _ = connect(lambda b: b.session_update_handler(updates.append)
                        .request_permission_handler(ask_user).wire_tap(lambda d, line: wire.append((d, line))))
    client.initialize()
    sid = client.new_session("/work").session_id
    future, thread = in_thread(lambda: client.prompt(sid, "permission"), "test-prompt")
    assert entered.wait(WAIT)
    client.cancel(sid)
    answer = future.result(WAIT)
    thread.join(WAIT)
    assert answer.stop_reason == "cancelled"
    assert texts(updates) == ["outcome=cancelled"]
    client.close()  # graceful: waits for the handler, so its late answer has been dealt with
    # (Not before: the prompt's answer may come back before the handler, woken by the same
    # cancel, has run on.)
    assert saw_cancel == [True]
    responses = _out_responses(wire, request_ids[0])
    assert responses == [{"jsonrpc": "2.0", "id": request_ids[0], "result": {"outcome": {"outcome": "cancelled"}}}]
    cancels = [json.loads(line) for d, line in wire if d == "out" and b"session/cancel" in line]
    assert cancels == [{"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}]


def test_a_permission_request_arriving_after_cancel_is_answered_without_the_handler(connect: Factory) -> None:
    updates: list[schema.SessionNotification] = []
    called: list[str] = []

    def ask_user(request: schema.RequestPermissionRequest, ctx: ClientRequestContext) -> schema.RequestPermissionResponse:
        called.append(request.session_id)
        return schema.RequestPermissionResponse(outcome=schema.SelectedPermissionOutcome(option_id="allow"))

    client, side = connect(lambda b: b.session_update_handler(updates.append).request_permission_handler(ask_user))
    client.initialize()
    sid = client.new_session("/work").session_id
    future, thread = in_thread(lambda: client.prompt(sid, "late-permission"), "test-prompt")
    assert side.agent.holding.wait(WAIT)
    client.cancel(sid)
    assert future.result(WAIT).stop_reason == "cancelled"
    thread.join(WAIT)
    assert texts(updates) == ["outcome=cancelled"]
    assert called == []
    # Once that turn is over, permission requests reach the handler again.
    assert client.prompt(sid, "permission").stop_reason == "end_turn"
    assert called == [sid]


def test_cancel_only_touches_its_own_session(connect: Factory) -> None:
    entered = threading.Event()
    release = threading.Event()
    cancelled_flags: list[bool] = []

    def ask_user(request: schema.RequestPermissionRequest, ctx: ClientRequestContext) -> schema.RequestPermissionResponse:
        entered.set()
        release.wait(WAIT)
        cancelled_flags.append(ctx.is_cancelled)
        return schema.RequestPermissionResponse(outcome=schema.SelectedPermissionOutcome(option_id="allow"))

    client, _ = connect(lambda b: b.request_permission_handler(ask_user))
    client.initialize()
    busy = client.new_session("/work").session_id
    other = client.new_session("/work").session_id
    future, thread = in_thread(lambda: client.prompt(busy, "permission"), "test-prompt")
    assert entered.wait(WAIT)
    client.cancel(other)
    release.set()
    assert future.result(WAIT).stop_reason == "end_turn"
    thread.join(WAIT)
    assert cancelled_flags == [False]


def test_cancel_ends_a_held_turn(connect: Factory) -> None:
    client, side = connect()
    client.initialize()
    sid = client.new_session("/work").session_id
    future, thread = in_thread(lambda: client.prompt(sid, "hold"), "test-prompt")
    assert side.agent.holding.wait(WAIT)
    client.cancel(sid)
    assert future.result(WAIT).stop_reason == "cancelled"
    thread.join(WAIT)


def test_prompt_timeout_cancels_the_request(connect: Factory) -> None:
    client, side = connect(lambda b: b.prompt_timeout(0.3))
    client.initialize()
    sid = client.new_session("/work").session_id
    with pytest.raises(RequestTimeoutError):
        client.prompt(sid, "hold")
    # The client stays usable; the agent got $/cancel_request for the abandoned prompt.
    assert client.prompt(sid, "hi").stop_reason == "end_turn"
    assert any(b"$/cancel_request" in line for line in side.received_lines())


def test_a_prompt_in_flight_when_the_connection_dies_raises(connect: Factory) -> None:
    client, side = connect()
    client.initialize()
    sid = client.new_session("/work").session_id
    future, thread = in_thread(lambda: client.prompt(sid, "hold"), "test-prompt")
    assert side.agent.holding.wait(WAIT)
    side.close()
    with pytest.raises(ConnectionClosedError):
        future.result(WAIT)
    thread.join(WAIT)
    assert client.is_closed
    with pytest.raises(ConnectionClosedError):
        client.new_session("/work")


# ---------------------------------------------------------------------------------------------
# extensions, unstable, options


def test_ext_methods_both_ways(connect: Factory) -> None:
    pings: list[Any] = []
    hello_ctx: list[ClientRequestContext] = []

    def hello(params: Any, ctx: ClientRequestContext) -> Any:
        hello_ctx.append(ctx)
        return {"hi": params["x"]}

    updates: list[schema.SessionNotification] = []
    client, _ = connect(lambda b: b.session_update_handler(updates.append)
                        .ext_request_handler("_client/hello", hello)
                        .ext_notification_handler("_client/ping", pings.append))
    client.initialize()
    assert client.ext_request("_agent/echo", {"a": [1, 2]}) == {"echo": {"a": [1, 2]}}
    client.ext_notification("_agent/note", {"k": "v"})
    assert client.ext_request("_agent/notes") == {"notes": [{"k": "v"}]}
    sid = client.new_session("/work").session_id
    client.prompt(sid, "ext")
    assert texts(updates) == ['ext={"hi": 1}']
    assert pings == [{"n": 2}]  # handled before prompt() returned
    assert hello_ctx[0].session_id is None and hello_ctx[0].method == "_client/hello"
    # The raw escape hatch reaches the agent without the typed API.
    assert hello_ctx[0].agent.request("_agent/echo", [5]) == {"echo": [5]}


def test_unstable_methods_need_the_opt_in(connect: Factory) -> None:
    client, side = connect()
    client.initialize()
    for attempt in (
        lambda: client.fork_session("s", "/work"),
        lambda: client.list_providers(),
        lambda: client.set_provider("p", "openai", "http://x"),
    ):
        with pytest.raises(CapabilityError, match=r"unstable\(True\)"):
            attempt()
    assert side.agent.methods() == ["initialize"]


def test_unstable_methods_after_the_opt_in(connect: Factory) -> None:
    client, side = connect(lambda b: b.unstable(True))
    client.initialize()
    forked = client.fork_session("sess-1", "/work")
    assert type(forked).__name__ == "ForkSessionResponse" and forked.session_id == "fork-of-sess-1"
    assert client.list_providers().providers == []
    client.set_provider("p", "openai", "http://x")
    client.disable_provider("p")
    assert side.agent.methods() == [
        "initialize", "session/fork", "providers/list", "providers/set", "providers/disable"]


def test_unstable_methods_still_need_the_agent_capability(connect: Factory) -> None:
    client, side = connect(lambda b: b.unstable(True), advertise=[])
    client.initialize()
    with pytest.raises(CapabilityError, match="did not advertise"):
        client.fork_session("s", "/work")
    with pytest.raises(CapabilityError, match="did not advertise"):
        client.list_providers()
    assert side.agent.methods() == ["initialize"]


def test_wire_tap_writes_a_jsonl_transcript(connect: Factory, tmp_path: Path) -> None:
    path = tmp_path / "wire.jsonl"
    client, _ = connect(lambda b: b.wire_tap(path))
    client.initialize()
    client.new_session("/work")
    client.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["dir"], r["msg"].get("method")) for r in records] == [
        ("out", "initialize"), ("in", None), ("out", "session/new"), ("in", None)]
    assert records[1]["msg"]["result"]["agentInfo"]["name"] == "fake-agent"
    assert records[3]["msg"]["result"]["sessionId"] == "sess-1"
    assert all(isinstance(r["t"], float) for r in records)


def test_handlers_run_on_the_users_executor(connect: Factory) -> None:
    threads: list[str] = []
    with ThreadPoolExecutor(2, thread_name_prefix="user-pool") as pool:
        def read(request: schema.ReadTextFileRequest, ctx: ClientRequestContext) -> str:
            threads.append(threading.current_thread().name)
            return "x"

        client, _ = connect(lambda b: b.handler_executor(pool).read_text_file_handler(read))
        client.initialize()
        sid = client.new_session("/work").session_id
        client.prompt(sid, "read /x")
        client.close()
        assert threads and threads[0].startswith("user-pool")
        assert pool.submit(lambda: 42).result(WAIT) == 42  # not shut down by the client


def test_close_is_idempotent_and_the_context_manager_closes(no_thread_leak: None) -> None:
    client, side = make_client()
    try:
        with client as entered:
            assert entered is client
            entered.initialize()
        assert client.is_closed
        client.close()
        with pytest.raises(ConnectionClosedError):
            client.new_session("/work")
        assert side.conn.wait_closed(WAIT)
        assert client.process is None
    finally:
        side.close()
