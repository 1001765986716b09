"""The example agents, driven by SyncClient over real subprocesses (every scenario, every
session method), plus a few in-process checks through acp.testing."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import acp
from acp import schema
from acp.examples import echo_agent, scenario_agent
from acp.testing import ScriptedPermissions, SessionRecorder, connect

WAIT = 15.0
SCENARIO = [sys.executable, "-m", "acp.examples.scenario_agent"]
ECHO = [sys.executable, "-m", "acp.examples.echo_agent"]


class Harness:
    """A spawned agent, an initialized client with every capability, and what it recorded."""

    def __init__(self, argv: list[str], folder: Path, *, permissions: Any = None, elicit: bool = True,
                 capabilities: schema.ClientCapabilities | None = None) -> None:
        self.folder = str(folder.resolve())
        self.recorder = SessionRecorder()
        self.permissions = permissions if permissions is not None else ScriptedPermissions("allow")
        self.terminals = acp.LocalTerminals(allowed_cwd_roots=[self.folder])
        files = acp.LocalFiles([self.folder])
        self.elicitations: list[schema.CreateElicitationRequest] = []
        builder = (
            acp.SyncClient.builder()
            .agent_process(*argv)
            .request_timeout(WAIT)
            .session_update_handler(self.recorder)
            .request_permission_handler(self.permissions)
            .read_text_file_handler(files.read_text_file)
            .write_text_file_handler(files.write_text_file)
            .terminal_handlers(self.terminals)
        )
        if elicit:
            builder.create_elicitation_handler(self._elicit)
        if capabilities is not None:
            builder.client_capabilities(capabilities)
        self.client = builder.build()
        self.init = self.client.initialize()
        self.session_id = self.client.new_session(cwd=self.folder).session_id

    def _elicit(self, request: schema.CreateElicitationRequest, ctx: Any) -> schema.CreateElicitationResponse:
        self.elicitations.append(request)
        return schema.CreateElicitationResponseAccept(content={"name": "Ada", "colour": "green"})

    def prompt(self, text: str) -> schema.PromptResponse:
        self.recorder.clear()
        return self.client.prompt(self.session_id, text, timeout=WAIT)

    def close(self) -> None:
        self.client.close()
        self.terminals.close()


@pytest.fixture
def scenario(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(SCENARIO, tmp_path)
    yield harness
    harness.close()


# ---------------------------------------------------------------------------- echo agent


def test_echo_agent_streams_the_prompt_back(tmp_path: Path) -> None:
    harness = Harness(ECHO, tmp_path, elicit=False)
    try:
        assert harness.init.agent_info is not None and harness.init.agent_info.name == "acp-echo-agent"
        assert harness.prompt("Hello, echo!").stop_reason == "end_turn"
        assert harness.recorder.messages_text() == "Hello, echo!"
        long_text = "x" * (echo_agent.CHUNK_SIZE * 3 + 5)
        harness.prompt(long_text)
        assert harness.recorder.messages_text() == long_text
        assert len(harness.recorder.of_type(schema.AgentMessageChunk)) == 4
    finally:
        harness.close()


def test_echo_agent_refuses_an_unknown_session(tmp_path: Path) -> None:
    with connect(echo_agent.build_agent()) as client:
        with pytest.raises(acp.RequestError) as info:
            client.prompt("no-such-session", "hi")
    assert info.value.code == -32002


# ---------------------------------------------------------------------------- scenarios


def test_echo_and_stream(scenario: Harness) -> None:
    assert scenario.prompt("echo hello world").stop_reason == "end_turn"
    assert scenario.recorder.messages_text() == "hello world"
    scenario.prompt("stream 4")
    chunks = scenario.recorder.of_type(schema.AgentMessageChunk)
    assert [c.content.text for c in chunks] == [f"chunk {i}/4\n" for i in range(1, 5)]


def test_tool_calls_end_completed_with_a_diff(scenario: Harness) -> None:
    scenario.prompt("tool_calls")
    (call,) = scenario.recorder.tool_calls()
    assert call.status == "completed" and call.kind == "edit" and call.updates == 2
    (diff,) = call.diffs()
    assert diff.path == str(Path(scenario.folder) / "hello.py")
    assert diff.old_text == 'print("hello")\n' and diff.new_text == 'print("hello, world")\n'
    statuses = [u.status for u in scenario.recorder.updates() if isinstance(u, (schema.ToolCall, schema.ToolCallProgress))]
    assert statuses == ["pending", "in_progress", "completed"]


@pytest.mark.parametrize(
    ("answer", "expected", "status"),
    [("allow", "allowed", "completed"), ("reject", "rejected", "failed"), (None, "rejected", "failed")],
)
def test_permission_reports_the_outcome(tmp_path: Path, answer: str | None, expected: str, status: str) -> None:
    permissions = ScriptedPermissions(answer)
    harness = Harness(SCENARIO, tmp_path, permissions=permissions)
    try:
        response = harness.prompt("permission")
        assert f"permission: {expected}" in harness.recorder.messages_text()
        assert response.stop_reason == "end_turn"
        (request,) = permissions.requests
        assert request.tool_call.kind == "edit"
        assert {o.kind for o in request.options} == {"allow_once", "reject_once"}
        assert [c.status for c in harness.recorder.tool_calls()] == [status]
    finally:
        harness.close()


def test_mode_auto_approves_without_asking(scenario: Harness) -> None:
    scenario.client.set_session_mode(scenario.session_id, "auto")
    scenario.prompt("permission")
    assert "allowed (by mode 'auto'" in scenario.recorder.messages_text()
    assert isinstance(scenario.permissions, ScriptedPermissions) and scenario.permissions.requests == []
    with pytest.raises(acp.RequestError) as info:
        scenario.client.set_session_mode(scenario.session_id, "no-such-mode")
    assert info.value.code == -32602


def test_read_and_write_through_the_client(scenario: Harness) -> None:
    target = Path(scenario.folder) / "sub" / "note.txt"
    scenario.prompt(f"write {target} some text here")
    assert target.read_text() == "some text here"
    (call,) = scenario.recorder.tool_calls()
    assert call.status == "completed" and call.diffs()[0].new_text == "some text here"
    scenario.prompt(f"read {target}")
    assert scenario.recorder.messages_text() == "some text here"
    assert scenario.recorder.tool_calls()[0].status == "completed"


def test_read_failure_is_a_failed_tool_call(scenario: Harness) -> None:
    outside = "/definitely/not/inside/the/roots.txt"
    assert scenario.prompt(f"read {outside}").stop_reason == "end_turn"
    (call,) = scenario.recorder.tool_calls()
    assert call.status == "failed"
    assert "read: failed" in scenario.recorder.messages_text()


def test_terminal_reports_output_and_exit_code(scenario: Harness) -> None:
    scenario.prompt("terminal sh -c 'echo out-text; exit 3'")
    text = scenario.recorder.messages_text()
    assert "terminal: exit code 3" in text and "out-text" in text
    (call,) = scenario.recorder.tool_calls()
    assert call.status == "failed" and call.raw_output == {"exitCode": 3}
    assert scenario.terminals.terminal_ids() == []  # released


def test_plan_updates_until_completed(scenario: Harness) -> None:
    scenario.prompt("plan")
    plans = scenario.recorder.plans()
    assert len(plans) == 4
    assert [e.status for e in plans[0].entries] == ["in_progress", "pending", "pending"]
    assert [e.status for e in plans[-1].entries] == ["completed"] * 3


def test_elicit_form(scenario: Harness) -> None:
    scenario.prompt("elicit")
    assert "elicit: accepted {'name': 'Ada', 'colour': 'green'}" in scenario.recorder.messages_text()
    (request,) = scenario.elicitations
    assert isinstance(request, schema.CreateElicitationRequestForm)


def test_elicit_without_the_capability(tmp_path: Path) -> None:
    harness = Harness(SCENARIO, tmp_path, elicit=False)
    try:
        harness.prompt("elicit")
        assert "does not offer form elicitation" in harness.recorder.messages_text()
    finally:
        harness.close()


def test_wait_for_cancel(scenario: Harness) -> None:
    result: list[schema.PromptResponse] = []
    worker = threading.Thread(target=lambda: result.append(scenario.prompt("wait_for_cancel")))
    worker.start()
    assert scenario.recorder.wait_for(lambda r: "waiting" in r.messages_text(), WAIT)
    scenario.client.cancel(scenario.session_id)
    worker.join(WAIT)
    assert not worker.is_alive()
    assert result[0].stop_reason == "cancelled"


def test_error_scenario_answers_with_the_code(scenario: Harness) -> None:
    with pytest.raises(acp.RequestError) as info:
        scenario.prompt("error -32042")
    assert info.value.code == -32042
    assert scenario.prompt("echo still fine").stop_reason == "end_turn"


def test_unknown_scenario_gets_help(scenario: Harness) -> None:
    scenario.prompt("dance")
    assert "Unknown scenario 'dance'" in scenario.recorder.messages_text()


def test_full_runs_everything(scenario: Harness) -> None:
    assert scenario.prompt("full").stop_reason == "end_turn"
    text = scenario.recorder.messages_text()
    for part in ("Hello!", "chunk 3/3", "Proposed an edit", "permission: allowed", "wrote 24 characters",
                 "Notes written over ACP.", "terminal: exit code 0", "notes.txt", "elicit: accepted", "full: done"):
        assert part in text, part
    titles = [c.title for c in scenario.recorder.tool_calls()]
    assert titles == ["Edit hello.py", "Apply the edit to hello.py", "Write notes.txt", "Read notes.txt", "Run ls"]
    last = scenario.recorder.last_plan()
    assert last is not None and all(e.status == "completed" for e in last.entries)
    assert list(Path(scenario.folder).iterdir()) == []  # the temporary folder was removed


def test_full_skips_what_the_client_does_not_offer(tmp_path: Path) -> None:
    recorder = SessionRecorder()
    builder = (acp.SyncClient.builder().agent_process(*SCENARIO)
               .session_update_handler(recorder).request_permission_handler(ScriptedPermissions("reject")))
    with builder.build() as client:
        client.initialize()
        session = client.new_session(cwd=str(tmp_path.resolve()))
        assert client.prompt(session.session_id, "full").stop_reason == "end_turn"
    thoughts = recorder.thoughts_text()
    for missing in ("fs/write_text_file", "fs/read_text_file", "terminal/*", "form elicitation"):
        assert missing in thoughts
    assert "permission: rejected" in recorder.messages_text()
    assert [c.title for c in recorder.tool_calls()] == ["Edit hello.py", "Apply the edit to hello.py"]


# ---------------------------------------------------------------------------- sessions


def test_agent_advertises_session_methods(scenario: Harness) -> None:
    caps = scenario.client.capabilities
    assert caps.supports_load_session() and caps.supports_list_sessions()
    assert caps.supports_resume_session() and caps.supports_close_session() and caps.supports_delete_session()


def test_session_lifecycle(scenario: Harness) -> None:
    client, first = scenario.client, scenario.session_id
    scenario.prompt("echo one")
    second = client.new_session(cwd=scenario.folder).session_id
    listed = client.list_sessions(cwd=scenario.folder).sessions
    assert [s.session_id for s in listed] == [second, first]
    assert listed[1].title == "echo one" and listed[1].updated_at
    assert client.list_sessions(cwd="/elsewhere").sessions == []

    # load replays the conversation
    scenario.recorder.clear()
    loaded = client.load_session(first, cwd=scenario.folder)
    assert loaded.modes is not None and loaded.modes.current_mode_id == "ask"
    assert scenario.recorder.user_text(first) == "echo one"
    assert scenario.recorder.messages_text(first) == "one"

    # close: no more prompts until resumed
    client.close_session(first)
    with pytest.raises(acp.RequestError):
        client.prompt(first, "echo closed")
    client.resume_session(first, cwd=scenario.folder)
    assert client.prompt(first, "echo again").stop_reason == "end_turn"

    # delete: gone for good
    client.delete_session(second)
    assert [s.session_id for s in client.list_sessions().sessions] == [first]
    with pytest.raises(acp.RequestError) as info:
        client.load_session(second, cwd=scenario.folder)
    assert info.value.code == -32002
    # Deleting what is already gone (or never existed) succeeds, as the spec advises.
    client.delete_session(second)
    client.delete_session("no-such-session")


def test_session_close_cancels_the_running_turn(scenario: Harness) -> None:
    """``session/close`` mid-turn: the SDK cancels the turn and answers it ``cancelled`` before
    the scenario agent's close handler runs; the session then refuses prompts until resumed."""
    result: list[schema.PromptResponse] = []
    worker = threading.Thread(target=lambda: result.append(scenario.prompt("wait_for_cancel")))
    worker.start()
    assert scenario.recorder.wait_for(lambda r: "waiting" in r.messages_text(), WAIT)
    scenario.client.close_session(scenario.session_id)
    worker.join(WAIT)
    assert not worker.is_alive()
    assert result[0].stop_reason == "cancelled"
    with pytest.raises(acp.RequestError) as info:
        scenario.prompt("echo closed")
    assert info.value.code == -32002 and "closed" in info.value.message


def test_session_info_update_on_first_prompt(scenario: Harness) -> None:
    scenario.prompt("echo first")
    (info,) = scenario.recorder.of_type(schema.SessionInfoUpdate)
    assert info.title == "echo first"
    scenario.prompt("echo second")
    assert scenario.recorder.of_type(schema.SessionInfoUpdate) == []


def test_config_options_select(scenario: Harness) -> None:
    response = scenario.client.set_session_config_option(scenario.session_id, "model", "large")
    (model,) = response.config_options  # no boolean option: the client did not advertise them
    assert isinstance(model, schema.SessionConfigOptionSelect) and model.current_value == "large"
    with pytest.raises(acp.RequestError) as info:
        scenario.client.set_session_config_option(scenario.session_id, "model", "huge")
    assert info.value.code == -32602
    with pytest.raises(acp.RequestError):
        scenario.client.set_session_config_option(scenario.session_id, "verbose", True)


def test_config_options_boolean_when_the_client_supports_them(tmp_path: Path) -> None:
    caps = schema.ClientCapabilities(
        session=schema.ClientSessionCapabilities(
            config_options=schema.SessionConfigOptionsCapabilities(boolean=schema.BooleanConfigOptionCapabilities())
        )
    )
    harness = Harness(SCENARIO, tmp_path, capabilities=caps)
    try:
        response = harness.client.set_session_config_option(harness.session_id, "verbose", True)
        verbose = [o for o in response.config_options if isinstance(o, schema.SessionConfigOptionBoolean)]
        assert verbose and verbose[0].current_value is True
        harness.prompt("full")
        assert "Step 1/8: Say hello" in harness.recorder.thoughts_text()
    finally:
        harness.close()


# ---------------------------------------------------------------------------- in process


def test_scenario_agent_in_process(tmp_path: Path) -> None:
    recorder = SessionRecorder()
    builder = acp.SyncClient.builder().session_update_handler(recorder)
    with connect(scenario_agent.build_agent(), builder) as client:
        session = client.new_session(cwd=str(tmp_path))
        client.prompt(session.session_id, "stream 2")
        client.prompt(session.session_id, "tool_calls")
    assert recorder.messages_text().startswith("chunk 1/2\nchunk 2/2\n")
    assert recorder.tool_calls()[0].status == "completed"
