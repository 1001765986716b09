"""The unstable surface of the 2.4.0 schema, behind the opt-in on both sides: session status,
archive / unarchive, set_title, auth status (and ``auth/status_update``), system prompts,
subagent updates and the ``error`` stop reason of an idle subagent.

The end-to-end tests drive a real agent process (tests/helpers/unstable_agent.py) with a real
``SyncClient``; the refusals check the bytes that did (not) go out.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import acp
from acp import schema
from acp.errors import CapabilityError, RequestError
from acp.schema import unstable as U

from .conftest import helper_argv
from .helpers.agent_client import FakeClient
from .helpers.client_support import JsonWire

WAIT = 20.0


class Updates(list):  # type: ignore[type-arg]
    """The session updates a consumer saw, with a wait for one that matches."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()

    def __call__(self, notification: Any) -> None:
        with self._cond:
            self.append(notification)
            self._cond.notify_all()

    def wait_for(self, predicate: Any) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: any(predicate(n) for n in self), WAIT), "update not seen"


@pytest.fixture
def process_client(no_thread_leak: None) -> Iterator[tuple[acp.SyncClient, JsonWire, list[Any], list[Any], list[Any]]]:
    wire = JsonWire()
    updates = Updates()
    subagents: list[Any] = []
    auth: list[Any] = []

    client = (
        acp.SyncClient.builder()
        .agent_process(*helper_argv("unstable_agent"))
        .unstable(True)
        .session_update_handler(updates)
        .subagent_handler(subagents.append)
        .auth_status_update_handler(auth.append)
        .wire_tap(wire)
        .request_timeout(WAIT)
        .build()
    )
    with client:
        client.initialize()
        yield client, wire, updates, subagents, auth


def test_capabilities_are_derived_and_advertised_both_ways(process_client: Any) -> None:
    client, wire, *_ = process_client
    agent_caps = wire.result_of("initialize")["result"]["agentCapabilities"]
    session_caps = agent_caps["sessionCapabilities"]
    assert session_caps["status"] == {} and session_caps["archive"] == {} and session_caps["title"] == {}
    assert session_caps["systemPrompt"] == {"mode": {"override": {}}}
    assert agent_caps["auth"]["status"] == {}
    assert wire.first("out", "initialize")["params"]["clientCapabilities"]["subagents"] == {}
    caps = client.capabilities
    for name in ("session_status", "archive_session", "set_session_title", "auth_status",
                 "system_prompt", "system_prompt_override", "subagents"):
        assert caps.supports(name), name
    assert caps.supports_auth_status() and caps.supports_subagents()


def test_session_status_archive_unarchive_and_title_end_to_end(process_client: Any) -> None:
    client, wire, *_ = process_client
    sid = client.new_session("/work").session_id
    assert client.session_status(sid).status == U.SessionStatuses.OPEN
    assert client.set_session_title(sid, "  Fix the tests  ").title == "Fix the tests"
    assert isinstance(client.archive_session(sid), U.ArchiveSessionResponse)
    assert client.session_status(sid).status == U.SessionStatuses.SAVED
    assert [s.session_id for s in client.list_sessions().sessions] == []
    only = client.list_sessions(archived="only").sessions
    assert [(s.session_id, s.title, s.archived) for s in only] == [(sid, "Fix the tests", True)]
    assert [s.session_id for s in client.iter_sessions(archived="include")] == [sid]
    assert isinstance(client.unarchive_session(sid), U.UnarchiveSessionResponse)
    assert [s.session_id for s in client.list_sessions().sessions] == [sid]
    assert wire.first("out", "session/set_title")["params"] == {"sessionId": sid, "title": "  Fix the tests  "}
    assert wire.first("out", "session/list")["params"] == {}  # no filter: nothing unstable sent
    with pytest.raises(RequestError) as info:
        client.session_status("nope")
    assert info.value.code == -32002 and info.value.data == {"sessionId": "nope"}
    with pytest.raises(RequestError) as info:
        client.set_session_title(sid, "   ")
    assert info.value.code == -32602


def test_auth_status_and_its_update_notification(process_client: Any) -> None:
    client, wire, _, _, auth = process_client
    status = client.auth_status()
    assert status.state == U.AuthStates.AUTHENTICATED
    assert [(a.label, a.email, a.active) for a in status.accounts or []] == [("Work", "dev@example.com", True)]
    sid = client.new_session("/work").session_id
    client.prompt(sid, "auth")
    # The repeated status was not sent again; both that were arrived typed, before prompt() returned.
    assert [type(n) for n in auth] == [U.AuthStatusUpdateNotification] * 2
    assert [n.state for n in auth] == ["unauthenticated", "authenticated"]
    assert wire.methods("in").count("auth/status_update") == 2


def test_subagent_updates_with_the_error_stop_reason(process_client: Any) -> None:
    client, wire, updates, subagents, _ = process_client
    sid = client.new_session("/work").session_id
    client.prompt(sid, "subagent")
    child = f"{sid}-child"
    assert [n.session_id for n in subagents] == [sid, sid, sid]
    first, running, idle = (n.update for n in subagents)
    assert isinstance(first, U.SubagentUpdate) and first.session_id == child
    assert (first.title, first.description, first.state) == ("tester", "runs the tests", None)
    assert first.capabilities is not None and first.capabilities.cancel is not None
    assert isinstance(running.state, U.RunningStateUpdate)
    assert isinstance(idle.state, U.StateUpdateIdle)
    assert idle.state.stop_reason == "error"
    assert idle.state.error is not None and (idle.state.error.code, idle.state.error.message) == (-32603, "the child crashed")
    # The child's own traffic came under its id, after the announcement.
    order = [(n.session_id, type(n.update).__name__) for n in updates]
    assert order.index((child, "AgentMessageChunk")) > order.index((sid, "SubagentUpdate"))
    raw = [m["params"]["update"] for d, m in wire.lines if d == "in" and m.get("method") == "session/update"]
    assert {"sessionUpdate": "subagent_update", "sessionId": child, "state": {
        "state": "idle", "stopReason": "error", "error": {"code": -32603, "message": "the child crashed"}}} in raw


def test_system_prompts_reach_the_agent_in_both_modes(process_client: Any) -> None:
    client, wire, updates, *_ = process_client
    sid = client.new_session("/work", system_prompt="Be terse.").session_id
    override = U.SystemPrompt(mode="override", content=[schema.TextContent(text="You are a linter.")])
    sid2 = client.new_session("/work", system_prompt=override).session_id
    client.prompt(sid, "prompt?")
    client.prompt(sid2, "prompt?")
    said = [n.update.content.text for n in updates if isinstance(n.update, schema.AgentMessageChunk)]
    assert said == [repr(("append", "Be terse.")), repr(("override", "You are a linter."))]
    assert wire.first("out", "session/new")["params"]["systemPrompt"] == {
        "mode": "append", "content": [{"type": "text", "text": "Be terse."}]}
    with pytest.raises(ValueError, match="must not be empty"):
        client.new_session("/work", system_prompt=U.SystemPrompt(mode="append", content=[]))


def test_archive_cancels_the_running_turn(process_client: Any) -> None:
    client, _, updates, *_ = process_client
    sid = client.new_session("/work").session_id
    answer: list[Any] = []
    thread = threading.Thread(target=lambda: answer.append(client.prompt(sid, "wait")))
    thread.start()
    updates.wait_for(lambda n: n.session_id == sid and isinstance(n.update, schema.AgentMessageChunk))
    client.archive_session(sid)
    thread.join(WAIT)
    assert not thread.is_alive() and answer[0].stop_reason == "cancelled"


# ---------------------------------------------------------------------------------- refusals


def _no_unstable_client(wire: JsonWire) -> acp.SyncClient:
    return acp.SyncClient.builder().agent_process(*helper_argv("unstable_agent")).wire_tap(wire).build()


def test_without_the_opt_in_every_unstable_call_is_refused_before_sending(no_thread_leak: None) -> None:
    wire = JsonWire()
    with _no_unstable_client(wire) as client:
        client.initialize()
        sid = client.new_session("/work").session_id
        sent = len(wire.lines)
        calls = {
            "session/status": lambda: client.session_status(sid),
            "session/archive": lambda: client.archive_session(sid),
            "session/unarchive": lambda: client.unarchive_session(sid),
            "session/set_title": lambda: client.set_session_title(sid, "t"),
            "auth/status": lambda: client.auth_status(),
            "system_prompt": lambda: client.new_session("/work", system_prompt="x"),
            "archived": lambda: client.list_sessions(archived="include"),
        }
        for call in calls.values():
            with pytest.raises(CapabilityError, match=r"unstable\(True\)"):
                call()
        assert len(wire.lines) == sent, "something went out"


def test_unstable_client_handlers_need_the_opt_in() -> None:
    for configure in (
        lambda b: b.subagent_handler(print),
        lambda b: b.subagents(),
        lambda b: b.auth_status_update_handler(print),
    ):
        builder = acp.SyncClient.builder()
        configure(builder)
        with pytest.raises(ValueError, match=r"unstable\(True\)"):
            builder.derived_capabilities()


def test_unstable_calls_need_the_agents_capability(no_thread_leak: None) -> None:
    wire = JsonWire()
    agent = (
        acp.SyncAgent.builder().unstable(True)
        .new_session_handler(lambda r, c: schema.NewSessionResponse(session_id="s"))
        .list_sessions_handler(lambda r, c: schema.ListSessionsResponse(sessions=[]))
        .build()
    )
    with agent, acp.SyncClient.builder().transport(agent.serve_in_process()).unstable(True).wire_tap(wire).build() as client:
        client.initialize()
        sent = len(wire.lines)
        for call, capability in (
            (lambda: client.session_status("s"), "session_status"),
            (lambda: client.archive_session("s"), "archive_session"),
            (lambda: client.unarchive_session("s"), "archive_session"),
            (lambda: client.set_session_title("s", "t"), "set_session_title"),
            (lambda: client.auth_status(), "auth_status"),
            (lambda: client.new_session("/w", system_prompt="x"), "system_prompt"),
            (lambda: client.list_sessions(archived="only"), "archive_session"),
        ):
            with pytest.raises(CapabilityError, match=capability):
                call()
        assert len(wire.lines) == sent


def test_override_mode_needs_its_own_capability(no_thread_leak: None) -> None:
    agent = (
        acp.SyncAgent.builder().unstable(True)
        .new_session_handler(lambda r, c: schema.NewSessionResponse(session_id="s"))
        .system_prompt()
        .build()
    )
    override = U.SystemPrompt(mode="override", content=[schema.TextContent(text="x")])
    with agent, acp.SyncClient.builder().transport(agent.serve_in_process()).unstable(True).build() as client:
        client.initialize()
        assert client.capabilities.supports_system_prompt()
        assert not client.capabilities.supports_system_prompt_override()
        assert client.new_session("/w", system_prompt="append is fine").session_id == "s"
        with pytest.raises(CapabilityError, match="system_prompt_override"):
            client.new_session("/w", system_prompt=override)


def test_the_agent_refuses_system_prompts_it_did_not_advertise(no_thread_leak: None) -> None:
    created: list[Any] = []
    plain = (
        acp.SyncAgent.builder()
        .new_session_handler(lambda r, c: created.append(r) or schema.NewSessionResponse(session_id="s"))
        .build()
    )
    append_only = (
        acp.SyncAgent.builder().unstable(True)
        .new_session_handler(lambda r, c: created.append(r) or schema.NewSessionResponse(session_id="s"))
        .system_prompt()
        .build()
    )
    text = [{"type": "text", "text": "x"}]
    with plain, append_only:
        for agent, mode, expected in (
            (plain, "append", "does not accept"),
            (append_only, "override", "'override'"),
            (append_only, "_custom", "unsupported systemPrompt mode"),
        ):
            fake = FakeClient(agent.serve_in_process())
            fake.initialize()
            with pytest.raises(RequestError, match=expected) as info:
                fake.conn.request("session/new", {"cwd": "/", "mcpServers": [], "systemPrompt": {"mode": mode, "content": text}})
            assert info.value.code == -32602
            fake.close()
        fake = FakeClient(append_only.serve_in_process())
        fake.initialize()
        fake.conn.request("session/new", {"cwd": "/", "mcpServers": [], "systemPrompt": {"mode": "append", "content": text}})
        fake.close()
    assert len(created) == 1 and created[0].system_prompt.mode == "append"


def test_unstable_agent_registrations_need_the_opt_in() -> None:
    builder = acp.SyncAgent.builder()
    for register in (
        builder.session_status_handler,
        builder.archive_session_handler,
        builder.unarchive_session_handler,
        builder.set_session_title_handler,
        builder.auth_status_handler,
    ):
        with pytest.raises(ValueError, match=r"unstable\(True\)"):
            register(lambda r, c: None)
    with pytest.raises(ValueError, match=r"unstable\(True\)"):
        builder.system_prompt()
    half = acp.SyncAgent.builder().unstable(True).archive_session_handler(lambda r, c: None)
    with pytest.raises(ValueError, match="both or neither"):
        half.build()
    with pytest.raises(ValueError, match="new_session"):
        acp.SyncAgent.builder().unstable(True).system_prompt().build()


def test_without_the_opt_in_the_agent_answers_method_not_found(no_thread_leak: None) -> None:
    agent = acp.SyncAgent.builder().new_session_handler(lambda r, c: schema.NewSessionResponse(session_id="s")).build()
    with agent:
        fake = FakeClient(agent.serve_in_process())
        fake.initialize()
        for method, params in (
            ("session/status", {"sessionId": "s"}),
            ("session/archive", {"sessionId": "s"}),
            ("session/unarchive", {"sessionId": "s"}),
            ("session/set_title", {"sessionId": "s", "title": "t"}),
            ("auth/status", {}),
        ):
            with pytest.raises(RequestError) as info:
                fake.conn.request(method, params)
            assert info.value.code == -32601, method
        fake.close()


# ---------------------------------------------------------------------------------- agent-side refusals


def _prompt_agent(body: Any, unstable: bool = True, auth: bool = False) -> acp.SyncAgent:
    builder = acp.SyncAgent.builder().unstable(unstable)
    builder.new_session_handler(lambda r, c: schema.NewSessionResponse(session_id="s"))
    builder.prompt_handler(body)
    if auth:
        builder.auth_status_handler(lambda r, c: U.AuthStatusResponse(state="unknown"))
    return builder.build()


def test_subagent_updates_are_refused_locally_without_the_clients_capability(no_thread_leak: None) -> None:
    errors: list[str] = []

    def body(request: Any, ctx: acp.PromptContext) -> str:
        for send in (
            lambda: ctx.send_subagent_update("child", title="t"),
            lambda: ctx.send_update(U.SessionMessageChunk(message_id="m", content=schema.TextContent(text="x"))),
            lambda: ctx.client.auth_status_update(U.AuthStatusUpdateNotification(state="unknown")),
        ):
            try:
                send()
            except CapabilityError as exc:
                errors.append(str(exc))
        return "end_turn"

    lines: list[bytes] = []
    agent = _prompt_agent(body)
    with agent:
        fake = FakeClient(agent.serve_in_process(), wire_tap=lambda d, line: lines.append(line) if d == "in" else None)
        fake.initialize()
        fake.new_session()
        fake.prompt("s", "go")
        fake.close()
    assert len(errors) == 3
    assert "'subagents'" in errors[0] and "'subagents'" in errors[1]
    assert "auth_status" in errors[2]
    assert not any(b"subagent_update" in line or b"session_message" in line or b"auth/status_update" in line for line in lines)


def test_subagent_updates_need_the_agents_opt_in_too(no_thread_leak: None) -> None:
    errors: list[str] = []

    def body(request: Any, ctx: acp.PromptContext) -> str:
        try:
            ctx.send_update(U.SubagentUpdate(session_id="child"))
        except CapabilityError as exc:
            errors.append(str(exc))
        return "end_turn"

    agent = _prompt_agent(body, unstable=False)
    with agent:
        fake = FakeClient(agent.serve_in_process(), caps={"subagents": {}})
        fake.initialize()
        fake.new_session()
        fake.prompt("s", "go")
        fake.close()
    assert errors and "unstable(True)" in errors[0]


def test_send_subagent_update_checks_its_arguments(no_thread_leak: None) -> None:
    problems: list[str] = []

    def body(request: Any, ctx: acp.PromptContext) -> str:
        for kwargs in (
            {"state": "running", "stop_reason": "end_turn"},
            {"stop_reason": "end_turn", "error": schema.Error(code=1, message="x")},
            {"state": "sleeping"},
        ):
            try:
                ctx.send_subagent_update("child", **kwargs)
            except ValueError as exc:
                problems.append(str(exc))
        ctx.send_subagent_update("child", stop_reason="end_turn")  # implies idle
        return "end_turn"

    agent = _prompt_agent(body)
    with agent:
        fake = FakeClient(agent.serve_in_process(), caps={"subagents": {}})
        fake.initialize()
        fake.new_session()
        fake.prompt("s", "go")
        update = fake.updates[-1]
        fake.close()
    assert len(problems) == 3
    assert update["update"] == {"sessionUpdate": "subagent_update", "sessionId": "child",
                                "state": {"state": "idle", "stopReason": "end_turn"}}
