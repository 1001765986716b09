"""SyncClientBuilder: build refusals and capabilities derived from the registered handlers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from acp import schema
from acp.client import SyncClient, SyncClientBuilder
from acp.transport import memory_pair

from .helpers.client_support import FakeTerminals, make_client


def _noop(*args: Any) -> None:
    return None


@pytest.fixture
def builder() -> Iterator[SyncClientBuilder]:
    yield SyncClient.builder()


def test_build_without_transport_fails(builder: SyncClientBuilder) -> None:
    with pytest.raises(ValueError, match="exactly one transport.*got 0"):
        builder.build()


def test_build_with_two_transports_fails_before_spawning_anything(builder: SyncClientBuilder) -> None:
    a, b = memory_pair()
    try:
        # A command that does not exist: had build() spawned it, FileNotFoundError would say so.
        builder.transport(a).agent_process("/nonexistent/agent-binary")
        with pytest.raises(ValueError, match="exactly one transport.*got 2"):
            builder.build()
    finally:
        a.close()
        b.close()


def test_agent_process_needs_a_command(builder: SyncClientBuilder) -> None:
    with pytest.raises(ValueError, match="needs a command"):
        builder.agent_process()


def test_a_missing_agent_executable_is_named(builder: SyncClientBuilder) -> None:
    with pytest.raises(FileNotFoundError, match="nonexistent/agent-binary"):
        builder.agent_process("/nonexistent/agent-binary").build()


def test_partial_terminal_handlers_fail_naming_the_missing_ones(builder: SyncClientBuilder) -> None:
    a, b = memory_pair()
    try:
        builder.transport(a).create_terminal_handler(_noop).kill_terminal_handler(_noop)
        with pytest.raises(ValueError) as info:
            builder.build()
        message = str(info.value)
        for missing in ("terminal_output_handler", "release_terminal_handler", "wait_for_terminal_exit_handler"):
            assert missing in message
        assert "create_terminal_handler" not in message
        assert "kill_terminal_handler" not in message
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("name", ["noslash", "ext/method", "", "_"])
def test_ext_names_must_start_with_an_underscore(builder: SyncClientBuilder, name: str) -> None:
    with pytest.raises(ValueError, match="start with '_'"):
        builder.ext_request_handler(name, _noop)
    with pytest.raises(ValueError, match="start with '_'"):
        builder.ext_notification_handler(name, _noop)


def test_a_handler_registered_twice_is_refused(builder: SyncClientBuilder) -> None:
    builder.read_text_file_handler(_noop)
    with pytest.raises(ValueError, match="already registered"):
        builder.read_text_file_handler(_noop)
    builder.ext_request_handler("_x", _noop)
    with pytest.raises(ValueError, match="already registered"):
        builder.ext_request_handler("_x", _noop)


def test_a_non_callable_handler_is_refused(builder: SyncClientBuilder) -> None:
    with pytest.raises(TypeError, match="not callable"):
        builder.read_text_file_handler("read")  # type: ignore[arg-type]


def test_elicitation_needs_a_mode(builder: SyncClientBuilder) -> None:
    with pytest.raises(ValueError, match="form and/or url"):
        builder.create_elicitation_handler(_noop, form=False, url=False)


def test_complete_elicitation_without_create_fails(builder: SyncClientBuilder) -> None:
    builder.complete_elicitation_handler(_noop)
    with pytest.raises(ValueError, match="needs a create_elicitation_handler"):
        builder.derived_capabilities()


@pytest.mark.parametrize(
    ("caps", "complaint"),
    [
        (schema.ClientCapabilities(fs=schema.FileSystemCapabilities(read_text_file=True)), "read_text_file_handler"),
        (schema.ClientCapabilities(fs=schema.FileSystemCapabilities(write_text_file=True)), "write_text_file_handler"),
        (schema.ClientCapabilities(terminal=True), "five terminal handlers"),
        (schema.ClientCapabilities(elicitation=schema.ElicitationCapabilities(form=schema.ElicitationFormCapabilities())), "create_elicitation_handler"),
    ],
)
def test_an_explicit_capability_without_its_handler_fails(
    builder: SyncClientBuilder, caps: schema.ClientCapabilities, complaint: str
) -> None:
    builder.client_capabilities(caps)
    with pytest.raises(ValueError, match=complaint):
        builder.derived_capabilities()


def test_explicit_capabilities_that_need_no_handler_are_kept(builder: SyncClientBuilder) -> None:
    builder.client_capabilities(
        schema.ClientCapabilities(auth=schema.AuthCapabilities(terminal=True), field_meta={"x.example/feature": True})
    )
    builder.read_text_file_handler(_noop)
    caps = builder.derived_capabilities()
    assert caps.auth.terminal is True
    assert caps.field_meta == {"x.example/feature": True}
    assert caps.fs.read_text_file is True


def test_no_handlers_derive_no_capabilities(builder: SyncClientBuilder) -> None:
    caps = builder.derived_capabilities()
    assert caps.fs.read_text_file is False
    assert caps.fs.write_text_file is False
    assert caps.terminal is False
    assert caps.elicitation is None


def test_terminal_handlers_registers_all_five(builder: SyncClientBuilder) -> None:
    assert builder.terminal_handlers(FakeTerminals()).derived_capabilities().terminal is True


def test_elicitation_modes_follow_the_handler(builder: SyncClientBuilder) -> None:
    caps = builder.create_elicitation_handler(_noop, form=False, url=True).derived_capabilities()
    assert caps.elicitation is not None
    assert caps.elicitation.form is None
    assert caps.elicitation.url is not None


@pytest.mark.parametrize("value", [0, -1.5])
def test_timeouts_must_be_positive(builder: SyncClientBuilder, value: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        builder.request_timeout(value)
    with pytest.raises(ValueError, match="positive"):
        builder.prompt_timeout(value)


def test_decorator_style_registers_the_same_handlers(no_thread_leak: None) -> None:
    seen: list[Any] = []

    def configure(b: SyncClientBuilder) -> None:
        @b.on_session_update
        def on_update(n: schema.SessionNotification) -> None:
            seen.append(n.update)

        @b.on_read_text_file
        def read(request: schema.ReadTextFileRequest, ctx: Any) -> str:
            return "decorated"

        @b.on_create_elicitation(form=True, url=True)
        def elicit(request: Any, ctx: Any) -> Any:
            return schema.CreateElicitationResponseCancel()

        @b.on_ext_request("_client/hello")
        def hello(params: Any, ctx: Any) -> Any:
            return {"hi": params["x"]}

        assert on_update.__name__ == "on_update"  # the decorator returns the function itself

    client, side = make_client(configure)
    try:
        client.initialize()
        caps = side.agent.params_of("initialize")[0]["clientCapabilities"]
        assert caps["fs"] == {"readTextFile": True}
        assert caps["elicitation"] == {"form": {}, "url": {}}
        sid = client.new_session("/work").session_id
        client.prompt(sid, "read /x")
        client.prompt(sid, "ext")
        assert [u.content.text for u in seen] == ["read=decorated", 'ext={"hi": 1}']
    finally:
        client.close()
        side.close()


def test_wait_spin_reaches_the_connection_and_refuses_negative_seconds(builder: SyncClientBuilder) -> None:
    from acp.connection import DEFAULT_WAIT_SPIN

    for bad in (-0.5, float("nan"), False):
        with pytest.raises(ValueError, match="wait_spin"):
            builder.wait_spin(bad)
    ours, theirs = memory_pair()
    assert builder.transport(ours).config().wait_spin == DEFAULT_WAIT_SPIN
    client = builder.wait_spin(0.002).build()
    try:
        assert client._conn.wait_spin == 0.002
    finally:
        client.close()
        theirs.close()
