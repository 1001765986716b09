"""SyncAgent.builder(): refusals, decorator style, derived capabilities, unstable opt-in and
protocol version negotiation (checked on the wire)."""

from __future__ import annotations

from typing import Any

import pytest

import acp.schema as S
from acp.agent import SyncAgent, negotiate_version
from acp.transport import memory_pair

from .helpers.agent_client import FakeClient
from .helpers.agent_full import build_agent


def _noop(request: Any, ctx: Any) -> Any:
    return None


def _session(request: Any, ctx: Any) -> S.NewSessionResponse:
    return S.NewSessionResponse(session_id="s")


def test_none_and_duplicate_handlers_are_refused() -> None:
    builder = SyncAgent.builder()
    with pytest.raises(ValueError, match="None"):
        builder.prompt_handler(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="None"):
        builder.new_session_handler(None)  # type: ignore[arg-type]
    builder.prompt_handler(_noop)
    with pytest.raises(ValueError, match="already registered"):
        builder.prompt_handler(_noop)
    with pytest.raises(ValueError, match="already registered"):
        builder.on_prompt(_noop)
    builder.ext_request_handler("_x/y", _noop)
    with pytest.raises(ValueError, match="already registered"):
        builder.ext_notification_handler("_x/y", _noop)


def test_capabilities_without_their_handler_are_refused() -> None:
    with pytest.raises(ValueError, match="new_session"):
        SyncAgent.builder().additional_directories(True).build()
    with pytest.raises(ValueError, match="prompt handler"):
        SyncAgent.builder().prompt_capabilities(image=True).build()
    with pytest.raises(ValueError, match="new_session"):
        SyncAgent.builder().mcp_capabilities(http=True).prompt_handler(_noop).build()
    with pytest.raises(ValueError, match="authenticate"):
        SyncAgent.builder().auth_methods(S.AuthMethodAgent(id="a", name="A")).build()
    # With their handlers, the same configurations build.
    SyncAgent.builder().new_session_handler(_session).additional_directories(True).mcp_capabilities(sse=True).build()


def test_extension_names_and_option_values() -> None:
    builder = SyncAgent.builder()
    with pytest.raises(ValueError, match="start with '_'"):
        builder.ext_request_handler("x/y", _noop)
    with pytest.raises(ValueError, match="start with '_'"):
        builder.ext_notification_handler("notify", _noop)
    with pytest.raises(ValueError):
        builder.cancel_grace_period(-1)
    with pytest.raises(ValueError):
        builder.max_prompt_duration(0)
    builder.cancel_grace_period(None).max_prompt_duration(None).request_timeout(None)


def test_unstable_registration_needs_opt_in() -> None:
    builder = SyncAgent.builder()
    for register in (
        builder.fork_session_handler,
        builder.list_providers_handler,
        builder.set_provider_handler,
        builder.mcp_message_handler,
    ):
        with pytest.raises(ValueError, match=r"unstable\(True\)"):
            register(_noop)
    with pytest.raises(ValueError, match=r"unstable\(True\)"):
        builder.on_unstable("list_providers")(_noop)
    builder.unstable(True).fork_session_handler(_noop).list_providers_handler(_noop)
    caps = builder.build().spec.capabilities
    assert caps.session_capabilities.fork is not None
    assert caps.providers is not None


def test_derived_capabilities_in_the_initialize_answer(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent:
        client = FakeClient(agent.serve_in_process())
        answer = client.initialize()
        assert answer == {
            "protocolVersion": 1,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": True, "embeddedContext": True},
                "mcpCapabilities": {"http": True},
                "sessionCapabilities": {
                    "list": {},
                    "delete": {},
                    "resume": {},
                    "close": {},
                    "additionalDirectories": {},
                },
                "auth": {"logout": {}},
            },
            "authMethods": [{"id": "token", "name": "Token"}],
            "agentInfo": {"name": "demo-agent", "title": "Demo", "version": "1.0"},
        }
        client.close()


def test_minimal_agent_advertises_nothing_optional(no_thread_leak: None) -> None:
    agent = SyncAgent.builder().new_session_handler(_session).prompt_handler(_noop).build()
    with agent:
        client = FakeClient(agent.serve_in_process())
        answer = client.initialize()
        assert answer == {
            "protocolVersion": 1,
            "agentCapabilities": {
                "promptCapabilities": {},
                "mcpCapabilities": {},
                "sessionCapabilities": {},
                "auth": {},
            },
        }
        client.close()


@pytest.mark.parametrize(("asked", "answered"), [(1, 1), (999, 1), (0, 1), (2, 1)])
def test_version_negotiation(asked: int, answered: int, no_thread_leak: None) -> None:
    assert negotiate_version(asked) == answered
    agent = SyncAgent.builder().new_session_handler(_session).prompt_handler(_noop).build()
    with agent:
        client = FakeClient(agent.serve_in_process())
        assert client.initialize(version=asked)["protocolVersion"] == answered
        (handle,) = agent.connections
        assert handle.capabilities.protocol_version == answered
        client.close()


def test_user_initialize_is_used_as_is_and_both_sides_recorded(no_thread_leak: None) -> None:
    seen: list[Any] = []

    def initialize(request: S.InitializeRequest, ctx: Any) -> S.InitializeResponse:
        seen.append(request.client_info)
        return S.InitializeResponse(
            protocol_version=1, agent_capabilities=S.AgentCapabilities(load_session=True)
        )

    agent = SyncAgent.builder().initialize_handler(initialize).prompt_handler(_noop).build()
    with agent:
        client = FakeClient(agent.serve_in_process())
        answer = client.initialize()
        assert answer["agentCapabilities"]["loadSession"] is True
        assert seen[0].name == "fake"
        (handle,) = agent.connections
        assert handle.initialized
        assert handle.capabilities.supports_load_session()
        assert handle.capabilities.supports_terminal()  # the client's side, recorded too
        client.close()


def _requests(builder_fn: Any) -> dict[str, Any]:
    """What an agent answers to a fixed script, for comparing registration styles."""
    agent = builder_fn()
    with agent:
        client = FakeClient(agent.serve_in_process())
        out = {
            "init": client.initialize(),
            "new": client.conn.request("session/new", {"cwd": "/w", "mcpServers": []}),
            "prompt": client.prompt("s", "hi"),
            "updates": client.updates,
        }
        client.close()
    return out


def test_decorator_style_is_equivalent(no_thread_leak: None) -> None:
    def prompt(request: S.PromptRequest, ctx: Any) -> Any:
        ctx.send_message("hello")
        return S.StopReasons.MAX_TOKENS

    def fluent() -> SyncAgent:
        return (
            SyncAgent.builder()
            .new_session_handler(_session)
            .prompt_handler(prompt, image=True)
            .list_sessions_handler(lambda r, c: S.ListSessionsResponse(sessions=[]))
            .build()
        )

    def decorated() -> SyncAgent:
        builder = SyncAgent.builder()

        @builder.on_new_session
        def new_session(request: Any, ctx: Any) -> Any:
            return _session(request, ctx)

        @builder.on_prompt(image=True)
        def on_prompt(request: S.PromptRequest, ctx: Any) -> Any:
            return prompt(request, ctx)

        @builder.on_list_sessions
        def list_sessions(request: Any, ctx: Any) -> Any:
            return S.ListSessionsResponse(sessions=[])

        assert on_prompt.__name__ == "on_prompt"  # the decorator returns the function itself
        return builder.build()

    a, b = _requests(fluent), _requests(decorated)
    assert a == b
    assert a["prompt"] == {"stopReason": "max_tokens"}
    assert a["init"]["agentCapabilities"]["promptCapabilities"] == {"image": True}

    bare = SyncAgent.builder()
    bare.on_prompt(prompt)  # bare decorator form
    assert bare.build().spec.handlers["session/prompt"] is prompt


def test_wait_spin_reaches_each_connection_and_refuses_negative_seconds(no_thread_leak: None) -> None:
    from acp.connection import DEFAULT_WAIT_SPIN

    assert SyncAgent.builder().build().spec.wait_spin == DEFAULT_WAIT_SPIN
    for bad in (-1, float("nan"), True, "1"):
        with pytest.raises(ValueError, match="wait_spin"):
            SyncAgent.builder().wait_spin(bad)  # type: ignore[arg-type]
    agent = SyncAgent.builder().wait_spin(0).build()
    assert agent.spec.wait_spin == 0
    ours, theirs = memory_pair()
    handle = agent.connect(ours)
    try:
        assert handle.connection.wait_spin == 0
    finally:
        handle.close()
        theirs.close()
