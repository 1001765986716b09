"""Forward compatibility (issue 12, points 5 and 6): variants and fields this SDK does not know
are kept, reachable and written back unchanged, in decoded values and over real processes.

Real peers' shapes: codex-acp's ``env_var`` auth methods (with ``vars``), a future MCP transport
in ``mcpServers``, claude-code's / gemini-cli's ``models`` in the session/new answer,
``sessionCapabilities.subagents``.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from acp import SyncClient, schema
from acp.schema import decoder, encode, extra_fields, with_extra_fields
from acp.transport import ProcessTransport

from .conftest import helper_argv
from .helpers.fault_support import RawPeer

WAIT = 10.0


def roundtrip(tp: Any, msg: Any) -> tuple[Any, Any]:
    value = decoder(tp).decode(json.dumps(msg).encode())
    return value, json.loads(encode(value))


# ---------------------------------------------------------------------------------------------
# Point 5: a present but unknown tag gives the Unknown value; a missing tag the default variant


def test_unknown_auth_method_type_is_not_taken_for_the_agent_variant() -> None:
    env = {"type": "env_var", "id": "k", "name": "Key", "vars": [{"name": "OPENAI_API_KEY"}]}
    value, back = roundtrip(list[schema.AuthMethod], [env, {"id": "a", "name": "Agent"}])
    assert isinstance(value[0], schema.UnknownAuthMethod) and value[0].tag == "env_var"
    assert value[0]["vars"] == [{"name": "OPENAI_API_KEY"}]
    assert isinstance(value[1], schema.AuthMethodAgent)  # no tag: the schema's default variant
    assert back == [env, {"id": "a", "name": "Agent"}]


def test_unknown_mcp_transport_is_not_taken_for_stdio() -> None:
    future = {"type": "future_transport", "name": "f", "command": "run"}
    stdio = {"name": "s", "command": "c", "args": [], "env": []}
    value, back = roundtrip(schema.NewSessionRequest, {"cwd": "/", "mcpServers": [future, stdio]})
    assert isinstance(value.mcp_servers[0], schema.UnknownMcpServer)
    assert isinstance(value.mcp_servers[1], schema.McpServerStdio)
    assert back["mcpServers"] == [future, stdio]


def test_default_variant_spelled_out_is_still_the_default_variant() -> None:
    # Some clients write the default variant's name as its tag: keep the variant, and the tag.
    stdio = {"type": "stdio", "name": "s", "command": "c", "args": [], "env": []}
    value, back = roundtrip(schema.McpServer, stdio)
    assert isinstance(value, schema.McpServerStdio) and extra_fields(value) == {"type": "stdio"}
    assert back == stdio
    agent, back = roundtrip(schema.AuthMethod, {"type": "agent", "id": "a", "name": "A"})
    assert isinstance(agent, schema.AuthMethodAgent) and back["type"] == "agent"


def test_unknown_tag_that_is_not_a_string_is_an_error() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"Expected `str`, got `int` - at `\$\[0\]\.type`"):
        decoder(list[schema.AuthMethod]).decode(b'[{"type": 7, "id": "a", "name": "A"}]')


# ---------------------------------------------------------------------------------------------
# Point 6: unknown fields of known types are reachable and written back


def test_unknown_fields_are_attributes_and_roundtrip() -> None:
    msg = {"sessionId": "s", "models": {"currentModelId": "m", "availableModels": []}, "fooBar": [1]}
    value, back = roundtrip(schema.NewSessionResponse, msg)
    assert isinstance(value, schema.NewSessionResponse) and value.session_id == "s"
    assert value.models == {"currentModelId": "m", "availableModels": []}  # type: ignore[attr-defined]
    assert value.foo_bar == [1]  # type: ignore[attr-defined]
    assert extra_fields(value) == {"models": msg["models"], "fooBar": [1]}
    assert back == msg


def test_unknown_fields_deep_inside_tagged_unions_roundtrip() -> None:
    msg = {
        "sessionId": "s",
        "update": {
            "sessionUpdate": "tool_call", "toolCallId": "t", "title": "Edit", "claudeTool": "Edit",
            "content": [{"type": "content", "content": {"type": "text", "text": "x", "lang": "py"}}],
        },
    }
    value, back = roundtrip(schema.SessionNotification, msg)
    assert isinstance(value.update, schema.ToolCall)
    assert extra_fields(value.update) == {"claudeTool": "Edit"}
    assert extra_fields(value.update.content[0].content) == {"lang": "py"}
    assert back == msg


def test_unknown_fields_in_capabilities_roundtrip() -> None:
    caps = {"sessionCapabilities": {"subagents": {"maxDepth": 2}, "close": {}}}
    value, back = roundtrip(schema.AgentCapabilities, caps)
    assert value.session_capabilities.close is not None
    assert extra_fields(value.session_capabilities) == {"subagents": {"maxDepth": 2}}
    assert back["sessionCapabilities"] == caps["sessionCapabilities"]


def test_values_without_unknown_fields_stay_plain() -> None:
    value = decoder(schema.NewSessionResponse).decode(b'{"sessionId":"s"}')
    assert type(value) is schema.NewSessionResponse and extra_fields(value) == {}


def test_key_that_cannot_be_a_field_name_is_dropped_not_an_error() -> None:
    value = decoder(schema.NewSessionResponse).decode(b'{"sessionId":"s","a\\"b":1,"ok":2}')
    assert extra_fields(value) == {"ok": 2}


def test_with_extra_fields_adds_and_keeps() -> None:
    plain = schema.NewSessionResponse(session_id="s")
    extended = with_extra_fields(plain, {"models": {"currentModelId": "m"}})
    assert isinstance(extended, schema.NewSessionResponse)
    assert json.loads(encode(extended)) == {"sessionId": "s", "models": {"currentModelId": "m"}}
    more = with_extra_fields(extended, {"x": 1})
    assert extra_fields(more) == {"models": {"currentModelId": "m"}, "x": 1}
    assert msgspec.structs.replace(more, session_id="t").x == 1  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="already declares"):
        with_extra_fields(plain, {"sessionId": "t"})


def test_many_key_sets_do_not_grow_without_bound() -> None:
    from acp.schema import _runtime

    for i in range(_runtime._MAX_EXTENDED + 50):
        value = decoder(schema.NewSessionResponse).decode(json.dumps({"sessionId": "s", f"k{i}": i}).encode())
        assert extra_fields(value) == {f"k{i}": i}
    assert len(_runtime._EXTENDED) <= _runtime._MAX_EXTENDED


# ---------------------------------------------------------------------------------------------
# Over real processes


def test_client_keeps_what_a_real_agent_sends(no_thread_leak: None) -> None:
    from .helpers import real_peer_agent as peer

    updates: list[schema.SessionNotification] = []
    with (SyncClient.builder()
            .agent_process(*helper_argv("real_peer_agent"))
            .session_update_handler(updates.append)
            .request_timeout(WAIT)
            .build()) as client:
        init = client.initialize()
        env, agent = init.auth_methods
        assert isinstance(env, schema.UnknownAuthMethod) and env.tag == "env_var"
        assert env["vars"] == [{"name": "OPENAI_API_KEY", "label": "API key"}]
        assert isinstance(agent, schema.AuthMethodAgent) and agent.id == "chatgpt"
        assert extra_fields(init.agent_capabilities.session_capabilities) == {"subagents": {"maxDepth": 2}}
        assert json.loads(encode(init))["authMethods"] == peer.INITIALIZE["authMethods"]

        session = client.new_session(cwd="/tmp")
        assert session.session_id == "s1" and extra_fields(session) == {"models": peer.MODELS}

        # The client sends back what it got (a proxy, a session store): nothing lost.
        future = schema.UnknownMcpServer({"type": "future_transport", "name": "f", "command": "run"})
        client.new_session(cwd="/tmp", mcp_servers=[future])
        client.prompt("s1", "go")
        assert [json.loads(encode(u.update)) for u in updates] == [peer.CHUNK_UPDATE, peer.UNKNOWN_UPDATE]
        received = client.ext_request("_peer/received", {})
        assert received["session/new"][1]["mcpServers"] == [dict(future)]


def test_agent_handler_sees_unknown_fields_and_variants(no_thread_leak: None) -> None:
    peer = RawPeer(ProcessTransport(helper_argv("forward_compat_agent")))
    try:
        init = peer.request(1, "initialize", {
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": False}, "notYetInSchema": True},
        })
        assert init["result"]["protocolVersion"] == 1
        params = {
            "cwd": "/tmp",
            "mcpServers": [
                {"type": "future_transport", "name": "f", "command": "run"},
                {"type": "stdio", "name": "s", "command": "c", "args": [], "env": []},
                {"name": "plain", "command": "c", "args": [], "env": []},
            ],
            "systemPromptFlavor": "terse",
        }
        answer = peer.request(2, "session/new", params)["result"]
        meta = answer["_meta"]
        assert meta["servers"] == ["UnknownMcpServer", "McpServerStdio", "McpServerStdio"]
        assert meta["extra"] == {"systemPromptFlavor": "terse"}
        assert meta["reencoded"] == params
        assert answer["models"] == {"currentModelId": "m1", "availableModels": []}
    finally:
        peer.close()
