"""The stable surface added by the 2.4.0 schema: ``notice``, ``compaction_update`` and
``compaction_summary_chunk`` session updates with the client capabilities ``session.notices``
and ``session.compaction``, and the optional tool-call ``name``.

The agent side is checked over the bytes a raw client receives (nothing may go out to a
client that did not advertise the capability); the client side over a real scenario-agent
process.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import msgspec
import pytest

import acp
from acp import schema
from acp.errors import CapabilityError

from .helpers.agent_client import FakeClient
from .helpers.client_support import JsonWire

WAIT = 20.0
SCENARIO = (sys.executable, "-m", "acp.examples.scenario_agent")
SHOWS_BOTH = {"session": {"notices": {}, "compaction": {}}}


# ---------------------------------------------------------------------------------- client side


def test_a_client_receives_notices_and_compaction_typed_from_a_real_agent(no_thread_leak: None) -> None:
    wire = JsonWire()
    seen: list[tuple[str, Any]] = []
    with (
        acp.SyncClient.builder()
        .agent_process(*SCENARIO)
        .session_update_handler(lambda n: seen.append(("all", n.update)))
        .notice_handler(lambda n: seen.append(("notice", n.update)))
        .compaction_handler(lambda n: seen.append(("compaction", n.update)))
        .wire_tap(wire)
        .build()
    ) as client:
        client.initialize()
        advertised = wire.first("out", "initialize")["params"]["clientCapabilities"]
        assert advertised["session"] == {"compaction": {}, "notices": {}}
        sid = client.new_session("/tmp").session_id
        client.prompt(sid, "notice")
        client.prompt(sid, "compact")
    notices = [u for kind, u in seen if kind == "notice"]
    assert [type(u) for u in notices] == [schema.Notice] * 3
    assert [(u.severity, u.title) for u in notices] == [
        ("info", "Index ready"), ("warning", "Rate limit near"), ("error", "Linter crashed")]
    assert notices[0].description == "The workspace index was rebuilt." and notices[2].description is None
    compaction = [u for kind, u in seen if kind == "compaction"]
    assert [type(u).__name__ for u in compaction] == [
        "CompactionUpdate", "CompactionSummaryChunk", "CompactionSummaryChunk", "CompactionUpdate"]
    assert len({u.compaction_id for u in compaction}) == 1
    assert (compaction[0].status, compaction[-1].status) == ("in_progress", "completed")
    assert "".join(u.content.text for u in compaction[1:3]) == "The user asked for scenarios; the agent ran them."
    # The generic consumer saw each one first; the per-kind consumer saw nothing else.
    for index, (kind, update) in enumerate(seen):
        if kind != "all":
            assert seen[index - 1] == ("all", update)
    assert {type(u) for kind, u in seen if kind == "notice"} == {schema.Notice}
    wire_notice = next(u for u in wire.updates() if u["sessionUpdate"] == "notice")
    assert wire_notice == {"sessionUpdate": "notice", "severity": "info", "title": "Index ready",
                           "description": "The workspace index was rebuilt."}


def test_a_client_that_does_not_show_them_gets_none(no_thread_leak: None) -> None:
    wire = JsonWire()
    texts: list[str] = []

    def on_update(n: schema.SessionNotification) -> None:
        if isinstance(n.update, schema.AgentMessageChunk) and isinstance(n.update.content, schema.TextContent):
            texts.append(n.update.content.text)

    with acp.SyncClient.builder().agent_process(*SCENARIO).session_update_handler(on_update).wire_tap(wire).build() as client:
        client.initialize()
        assert "session" not in wire.first("out", "initialize")["params"]["clientCapabilities"]
        sid = client.new_session("/tmp").session_id
        client.prompt(sid, "notice")
        client.prompt(sid, "compact")
    kinds = {u["sessionUpdate"] for u in wire.updates()}
    assert not kinds & {"notice", "compaction_update", "compaction_summary_chunk"}
    assert "notice: the client does not show notices (no session.notices)\n" in texts
    assert "compact: the client does not show compaction (no session.compaction)\n" in texts


def test_client_capabilities_are_derived_from_handlers_and_flags() -> None:
    def derived(configure: Any) -> schema.ClientCapabilities:
        builder = acp.SyncClient.builder()
        configure(builder)
        return builder.derived_capabilities()

    assert derived(lambda b: b.session_update_handler(print)).session is None
    caps = derived(lambda b: b.notice_handler(print))
    assert caps.session is not None and caps.session.notices is not None and caps.session.compaction is None
    caps = derived(lambda b: b.on_compaction(print))
    assert caps.session is not None and caps.session.compaction is not None and caps.session.notices is None
    # A generic renderer says it shows them; the flag can be taken back.
    caps = derived(lambda b: b.session_update_handler(print).notices().compaction().compaction(False))
    assert caps.session is not None and caps.session.notices is not None and caps.session.compaction is None
    # Explicit session capabilities (config options) keep the derived ones next to them.
    explicit = schema.ClientCapabilities(
        session=schema.ClientSessionCapabilities(
            config_options=schema.SessionConfigOptionsCapabilities(boolean=schema.BooleanConfigOptionCapabilities())
        )
    )
    caps = derived(lambda b: b.client_capabilities(explicit).notice_handler(print))
    assert caps.session is not None and caps.session.config_options is not None and caps.session.notices is not None
    assert json.loads(schema.encode(caps))["session"] == {"configOptions": {"boolean": {}}, "notices": {}}
    with pytest.raises(TypeError):
        acp.SyncClient.builder().notice_handler("not a function")  # type: ignore[arg-type]


def test_negotiated_capabilities_name_them() -> None:
    none = acp.NegotiatedCapabilities(protocol_version=1)
    shown = acp.NegotiatedCapabilities(
        protocol_version=1,
        client=schema.ClientCapabilities(
            session=schema.ClientSessionCapabilities(
                notices=schema.NoticeCapabilities(), compaction=schema.CompactionCapabilities()
            )
        ),
    )
    assert not none.supports_notices() and not none.supports_compaction()
    assert shown.supports_notices() and shown.supports_compaction()
    with pytest.raises(CapabilityError, match="'notices'"):
        none.require_notices()
    with pytest.raises(CapabilityError, match="'compaction'"):
        none.require_update(schema.CompactionSummaryChunk(compaction_id="c", content=schema.TextContent(text="x")))
    assert none.allows_update(schema.AgentMessageChunk(content=schema.TextContent(text="x")))
    assert not none.allows_update(schema.Notice(severity="info", title="x"))
    shown.require_update(schema.Notice(severity="info", title="x"))
    assert {"notices", "compaction", "subagents"} <= set(acp.NegotiatedCapabilities.names())


# ---------------------------------------------------------------------------------- agent side


def _serve(body: Any, caps: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    """Run one prompt turn of ``body`` for a client advertising ``caps``; the updates the
    client received (as JSON) and what ``body`` returned through ``result``."""
    result: list[Any] = []

    def prompt(request: schema.PromptRequest, ctx: acp.PromptContext) -> str:
        result.append(body(ctx))
        return "end_turn"

    agent = (
        acp.SyncAgent.builder()
        .new_session_handler(lambda r, c: schema.NewSessionResponse(session_id="s"))
        .prompt_handler(prompt)
        .build()
    )
    with agent:
        fake = FakeClient(agent.serve_in_process(), caps=caps)
        fake.initialize()
        fake.new_session()
        assert fake.prompt("s", "go") == {"stopReason": "end_turn"}
        updates = [u["update"] for u in fake.updates]
        fake.close()
    return updates, result[0]


def test_notices_and_compaction_go_out_to_a_client_that_shows_them(no_thread_leak: None) -> None:
    def body(ctx: acp.PromptContext) -> Any:
        sent = [
            ctx.send_notice("Heads up", "details", severity="warning", meta={"k": 1}),
            ctx.session("s").send_notice("Plain"),
        ]
        compaction = ctx.start_compaction(summary="draft")
        sent += [
            ctx.send_compaction_summary(compaction, "piece"),
            ctx.update_compaction(compaction, "failed", error="boom"),
        ]
        ctx.start_compaction(compaction_id="c2")
        ctx.update_compaction("c2", summary=["final", schema.TextContent(text=" two")])
        return sent, compaction

    updates, (sent, compaction) = _serve(body, SHOWS_BOTH)
    assert sent == [True] * 4
    assert compaction.startswith("compaction_")
    assert updates == [
        {"sessionUpdate": "notice", "severity": "warning", "title": "Heads up", "description": "details", "_meta": {"k": 1}},
        {"sessionUpdate": "notice", "severity": "info", "title": "Plain"},
        {"sessionUpdate": "compaction_update", "compactionId": compaction, "status": "in_progress",
         "summary": [{"type": "text", "text": "draft"}]},
        {"sessionUpdate": "compaction_summary_chunk", "compactionId": compaction, "content": {"type": "text", "text": "piece"}},
        {"sessionUpdate": "compaction_update", "compactionId": compaction, "status": "failed", "error": "boom"},
        {"sessionUpdate": "compaction_update", "compactionId": "c2", "status": "in_progress"},
        {"sessionUpdate": "compaction_update", "compactionId": "c2", "status": "completed",
         "summary": [{"type": "text", "text": "final"}, {"type": "text", "text": " two"}]},
    ]


def test_they_are_refused_locally_when_the_client_did_not_advertise_them(no_thread_leak: None) -> None:
    def body(ctx: acp.PromptContext) -> Any:
        errors = []
        for send in (
            lambda: ctx.send_notice("Heads up"),
            lambda: ctx.session("s").send_notice("Replay"),
            lambda: ctx.send_update(schema.Notice(severity="info", title="raw")),
            lambda: ctx.start_compaction(),
            lambda: ctx.send_compaction_summary("c", "x"),
            lambda: ctx.update_compaction("c"),
        ):
            try:
                send()
            except CapabilityError as exc:
                errors.append(str(exc))
        ctx.send_message("still talking")
        return errors

    updates, errors = _serve(body, {"session": {"configOptions": {}}})
    assert len(errors) == 6
    assert "'notices'" in errors[0] and "'compaction'" in errors[3]
    assert "session/update 'notice'" in errors[0]
    # Nothing but the message reached the client: the turn went on.
    assert [u["sessionUpdate"] for u in updates] == ["agent_message_chunk"]
    # Only one of the two is advertised: the other is still refused.
    updates, errors = _serve(body, {"session": {"notices": {}}})
    assert len(errors) == 3 and all("'compaction'" in e for e in errors)
    assert [u["sessionUpdate"] for u in updates] == ["notice", "notice", "notice", "agent_message_chunk"]


def test_a_notice_needs_a_title(no_thread_leak: None) -> None:
    def body(ctx: acp.PromptContext) -> Any:
        with pytest.raises(ValueError, match="title"):
            ctx.send_notice("")
        return None

    updates, _ = _serve(body, SHOWS_BOTH)
    assert updates == []


def test_every_helper_that_announces_a_tool_call_takes_its_name(no_thread_leak: None) -> None:
    def body(ctx: acp.PromptContext) -> Any:
        call = ctx.start_tool_call("Read main.py", "read", name="read_file")
        ctx.update_tool_call(call, status="completed", name="read_file_v2")
        allowed = ctx.ask_permission("Apply the edit", "edit", name="apply_edit")
        choice = ctx.ask_choice("Which one?", "a", "b", name="pick_one")
        ctx.start_tool_call("Nameless")
        return allowed, choice

    lines: list[dict[str, Any]] = []
    result: list[Any] = []

    def prompt(request: schema.PromptRequest, ctx: acp.PromptContext) -> str:
        result.append(body(ctx))
        return "end_turn"

    agent = (
        acp.SyncAgent.builder()
        .new_session_handler(lambda r, c: schema.NewSessionResponse(session_id="s"))
        .prompt_handler(prompt)
        .build()
    )
    with agent:
        fake = FakeClient(
            agent.serve_in_process(), wire_tap=lambda d, line: lines.append(json.loads(line)) if d == "in" else None
        )
        fake.initialize()
        fake.new_session()
        fake.prompt("s", "go")
        fake.close()
    assert result == [(True, "a")]
    tool_calls = [m["params"]["update"] for m in lines
                  if m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] == "tool_call"]
    assert [t.get("name") for t in tool_calls] == ["read_file", "apply_edit", "pick_one", None]
    progress = next(m["params"]["update"] for m in lines if m.get("method") == "session/update"
                    and m["params"]["update"]["sessionUpdate"] == "tool_call_update")
    assert progress == {"sessionUpdate": "tool_call_update", "toolCallId": tool_calls[0]["toolCallId"],
                        "status": "completed", "name": "read_file_v2"}
    asked = [m["params"]["toolCall"] for m in lines if m.get("method") == "session/request_permission"]
    assert [a["name"] for a in asked] == ["apply_edit", "pick_one"]


def test_the_scenario_agent_names_its_tool_calls(no_thread_leak: None) -> None:
    wire = JsonWire()
    with acp.SyncClient.builder().agent_process(*SCENARIO).wire_tap(wire).build() as client:
        client.initialize()
        client.prompt(client.new_session("/tmp").session_id, "tool_calls")
    names = [u.get("name") for u in wire.updates() if u["sessionUpdate"] == "tool_call"]
    assert names == ["edit_file"]


def test_negotiated_capabilities_are_a_frozen_value() -> None:
    # A msgspec Struct (not a dataclass, for import time): immutable, compared by value, and
    # copied with changes by msgspec.structs.replace, as docs/reference.md says.
    caps = acp.NegotiatedCapabilities(protocol_version=1)
    assert caps == acp.NegotiatedCapabilities(1)
    assert caps.agent == schema.AgentCapabilities() and caps.client == schema.ClientCapabilities()
    assert caps.agent is not acp.NegotiatedCapabilities(1).agent  # a default per value, not one shared
    with pytest.raises(AttributeError):
        caps.protocol_version = 2  # type: ignore[misc]
    changed = msgspec.structs.replace(caps, agent=schema.AgentCapabilities(load_session=True))
    assert changed.supports_load_session() and not caps.supports_load_session()
    assert "protocol_version=1" in repr(caps)
