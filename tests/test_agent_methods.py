"""Every agent-side stable method end to end, unstable ones only after opt-in, and what
handlers may return."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import acp.schema as S
from acp.agent import SyncAgent
from acp.errors import RequestError

from .helpers.agent_client import FakeClient
from .helpers.agent_full import DemoAgent, build_agent


@pytest.fixture
def served(no_thread_leak: None) -> Iterator[tuple[FakeClient, DemoAgent]]:
    agent, demo = build_agent()
    client = FakeClient(agent.serve_in_process())
    client.initialize()
    yield client, demo
    client.close()
    agent.close()


def test_every_stable_method(served: Any) -> None:
    client, demo = served
    req = client.conn.request
    assert req("authenticate", {"methodId": "token"}) == {}
    assert demo.authenticated == ["token"]
    with pytest.raises(RequestError) as info:
        req("authenticate", {"methodId": "password"})  # not among the advertised methods
    assert info.value.code == -32602
    sid = client.new_session("/w1")
    other = client.new_session("/w2")
    assert req("session/list", {}) == {
        "sessions": [{"sessionId": sid, "cwd": "/w1"}, {"sessionId": other, "cwd": "/w2"}]
    }
    assert req("session/set_mode", {"sessionId": sid, "modeId": "code"}) == {}
    assert client.updates[-1]["update"] == {"sessionUpdate": "current_mode_update", "currentModeId": "code"}
    assert req("session/set_config_option", {"sessionId": sid, "configId": "model", "value": "fast"}) == {
        "configOptions": []
    }
    assert client.prompt(sid, "first question") == {"stopReason": "end_turn"}
    before = len(client.updates)
    # session/load replays the history through ctx.session(...).send_update before answering.
    assert req("session/load", {"sessionId": sid, "cwd": "/w1", "mcpServers": []}) == {}
    replay = client.updates[before:]
    assert [u["update"]["sessionUpdate"] for u in replay] == ["user_message_chunk", "agent_message_chunk"]
    assert replay[0]["update"]["content"]["text"] == "first question"
    with pytest.raises(RequestError) as info:
        req("session/load", {"sessionId": "nope", "cwd": "/", "mcpServers": []})
    assert info.value.code == -32002
    assert req("session/resume", {"sessionId": sid, "cwd": "/w1"}) == {}
    assert req("session/close", {"sessionId": other}) == {}
    assert req("session/delete", {"sessionId": sid}) == {}
    assert req("session/list", {}) == {"sessions": []}
    assert req("logout", {}) == {}
    assert demo.authenticated == []
    client.cancel("whatever")  # no turn: ignored, but the hook is called
    assert req("session/list", {}) == {"sessions": []}
    assert demo.cancels == ["whatever"]


def test_invalid_params_and_unknown_methods(served: Any) -> None:
    client, _ = served
    with pytest.raises(RequestError) as info:
        client.conn.request("session/new", {"cwd": 5})
    assert info.value.code == -32602
    with pytest.raises(RequestError) as info:
        client.conn.request("session/fork", {"sessionId": "s", "cwd": "/"})
    assert info.value.code == -32601


def test_none_where_the_response_has_required_fields(no_thread_leak: None) -> None:
    agent = SyncAgent.builder().new_session_handler(lambda r, c: None).build()
    with agent:
        client = FakeClient(agent.serve_in_process())
        with pytest.raises(RequestError) as info:
            client.new_session()
        assert info.value.code == -32603
        client.close()


def test_unstable_methods_only_after_opt_in(no_thread_leak: None) -> None:
    from acp.schema import unstable as U

    messages: list[Any] = []
    stable_only = SyncAgent.builder().new_session_handler(lambda r, c: S.NewSessionResponse(session_id="s")).build()
    opted = (
        SyncAgent.builder()
        .unstable(True)
        .new_session_handler(lambda r, c: S.NewSessionResponse(session_id="s"))
        .fork_session_handler(lambda r, c: U.ForkSessionResponse(session_id=r.session_id + "-fork"))
        .list_providers_handler(lambda r, c: U.ListProvidersResponse(providers=[]))
        .mcp_message_handler(lambda r, c: messages.append(r) or U.MessageMcpResponse(result={"ok": r.method}))
        .build()
    )
    with stable_only, opted:
        plain = FakeClient(stable_only.serve_in_process())
        plain.initialize()
        for method, params in (
            ("session/fork", {"sessionId": "s", "cwd": "/"}),
            ("providers/list", {}),
            ("mcp/message", {"serverId": "m", "requestId": "r1", "method": "tools/list"}),
        ):
            with pytest.raises(RequestError) as info:
                plain.conn.request(method, params)
            assert info.value.code == -32601, method
        client = FakeClient(opted.serve_in_process())
        caps = client.initialize()["agentCapabilities"]
        assert caps["sessionCapabilities"]["fork"] == {}
        assert caps["providers"] == {}
        assert client.conn.request("session/fork", {"sessionId": "s", "cwd": "/"}) == {"sessionId": "s-fork"}
        assert client.conn.request("providers/list", {}) == {"providers": []}
        answer = client.conn.request("mcp/message", {"serverId": "m", "requestId": "r1", "method": "tools/list"})
        assert answer == {"result": {"ok": "tools/list"}}
        assert [m.server_id for m in messages] == ["m"]
        plain.close()
        client.close()
