"""Interop with the official TypeScript SDK (npm @agentclientprotocol/sdk, pinned in tests/interop).

Both directions over real processes and real pipes:

* TS client -> our agent: tests/interop/client.mjs (the SDK's ``client()`` builder over
  ``ndJsonStream``) spawns tests/helpers/interop_agent.py (our ``SyncAgent``) and prints a JSON
  summary of everything it saw; the tests assert on it.
* Our client -> TS agent: our ``SyncClient`` spawns tests/interop/agent.mjs (the SDK's
  ``agent()`` builder) and serves it with LocalFiles / LocalTerminals / a permission handler.

Without node the tests skip locally and FAIL under CI (see tests/helpers/interop_node.py).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import acp
from acp import schema as S

from .conftest import helper_argv
from .helpers.interop_node import INTEROP_DIR, TS_SDK_VERSION, require_node, run_ts_client, texts

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0  # upper bound on every wait; never a delay


@pytest.fixture(scope="module")
def node() -> str:
    return require_node()


# ====================================================================== TS client -> our agent

VIRTUAL_NOTES = "/virtual/project/notes.txt"
VIRTUAL_OUT = "/virtual/project/out.txt"


def _full_config(cwd: str) -> dict[str, Any]:
    return {
        "cwd": cwd,
        "files": {VIRTUAL_NOTES: "alpha\nbeta\n\u00e9t\u00e9 \u2713\n"},
        "steps": [
            {"prompt": "caps"},
            {"prompt": "stream 7"},
            {"prompt": "permission", "permission": "allow"},
            {"prompt": "permission", "permission": "reject"},
            {"prompt": f"read {VIRTUAL_NOTES}"},
            {"prompt": f"write {VIRTUAL_OUT} hello from python \u2713"},
            {"prompt": f"{'terminal'} {sys.executable} -c print('interop-ok')"},
            {"prompt": "terminal false"},
            {"prompt": "wait_for_cancel", "cancelAfterUpdates": 1},
            {"prompt": "permission", "permission": "cancel"},  # cancelled with the prompt open
            {"prompt": "stream 2"},  # the session still works after cancelled turns
        ],
    }


def _turn(summary: dict[str, Any], index: int, prompt_start: str) -> dict[str, Any]:
    turn: dict[str, Any] = summary["turns"][index]
    assert turn["prompt"].startswith(prompt_start), turn["prompt"]
    # The SDK's two views of a turn agree: the session/update handler and ActiveSession's queue.
    assert turn["queued"] == turn["updates"], "ActiveSession queue and notification handler disagree"
    # Every update of the turn reached the TS client before the prompt's answer.
    assert turn["updatesWhenAnswered"] == len(turn["updates"])
    return turn


def test_ts_client_drives_our_agent(node: str, tmp_path: Path) -> None:
    summary, proc = run_ts_client(node, helper_argv("interop_agent"), _full_config(str(tmp_path)))
    assert proc.returncode == 0 and "error" not in summary, (summary.get("error"), proc.stderr)
    assert summary["sdkVersion"] == TS_SDK_VERSION

    # initialize: protocol 1 and exactly the capabilities our builder derived, as TS parsed them.
    init = summary["initialize"]
    assert init["protocolVersion"] == 1 == summary["protocolVersionConstant"]
    caps = init["agentCapabilities"]
    assert caps["loadSession"] is True
    assert caps["promptCapabilities"] == {"image": True, "embeddedContext": True}
    assert not caps.get("mcpCapabilities", {}).get("http") and not caps.get("mcpCapabilities", {}).get("sse")
    assert init["agentInfo"] == {"name": "acp-python-interop-agent", "version": "1.2.3", "title": "acp interop agent"}
    assert init.get("authMethods", []) == []
    session_id = summary["newSession"]["sessionId"]
    assert session_id == "py-session-1"

    turns = summary["turns"]
    assert len(turns) == 11
    # caps: our agent negotiated what the TS client advertised.
    caps_turn = _turn(summary, 0, "caps")
    assert json.loads(texts(caps_turn["updates"])[0]) == {
        "protocolVersion": 1,
        "readTextFile": True,
        "writeTextFile": True,
        "terminal": True,
        "clientInfo": {"name": "ts-interop-client", "version": TS_SDK_VERSION},
    }

    # stream: 7 chunks, in order, nothing else, end_turn.
    stream = _turn(summary, 1, "stream 7")
    assert stream["updates"] == [
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"chunk-{i} of 7"}}
        for i in range(7)
    ]
    assert stream["stopReason"] == "end_turn" == stream["queuedStopReason"]

    # permission: a pending tool call, the request, the settled tool call, then the reply.
    allow, reject = _turn(summary, 2, "permission"), _turn(summary, 3, "permission")
    requests = summary["permissionRequests"]
    assert len(requests) == 3
    for turn, request, word, status in (
        (allow, requests[0], "allowed", "completed"),
        (reject, requests[1], "denied", "failed"),  # a denied edit is not shown as done
    ):
        kinds = [u["sessionUpdate"] for u in turn["updates"]]
        assert kinds == ["tool_call", "tool_call_update", "agent_message_chunk"]
        call, settled = turn["updates"][0], turn["updates"][1]
        assert call["status"] == "pending" and call["kind"] == "edit" and call["title"] == "Edit config.toml"
        assert request["sessionId"] == session_id
        assert request["toolCall"]["toolCallId"] == call["toolCallId"] == settled["toolCallId"]
        assert settled["status"] == status
        assert {o["kind"] for o in request["options"]} == {"allow_once", "reject_once"}
        assert texts(turn["updates"]) == [f"permission: {word}"]
        assert turn["stopReason"] == "end_turn"

    # fs: the read served from the TS client's in-memory map (non-ASCII intact), the write landed.
    read = _turn(summary, 4, "read")
    assert texts(read["updates"]) == ["read: alpha\nbeta\n\u00e9t\u00e9 \u2713\n"]
    assert summary["fsReads"] == [{"sessionId": session_id, "path": VIRTUAL_NOTES}]
    write = _turn(summary, 5, "write")
    assert texts(write["updates"]) == [f"wrote: 19 chars to {VIRTUAL_OUT}"]
    assert summary["fsWrites"] == [{"sessionId": session_id, "path": VIRTUAL_OUT, "content": "hello from python \u2713"}]
    assert summary["files"][VIRTUAL_OUT] == "hello from python \u2713"

    # terminal: ctx.execute = create, wait_for_exit, output, release, exactly once each.
    ok, failing = _turn(summary, 6, "terminal"), _turn(summary, 7, "terminal false")
    assert texts(ok["updates"]) == ["terminal: exit=0 output=interop-ok\n"]
    assert texts(failing["updates"]) == ["terminal: exit=1 output="]
    created = summary["terminals"]["created"]
    assert [c["command"] for c in created] == [sys.executable, "false"]
    assert created[0]["args"] == ["-c", "print('interop-ok')"]
    assert summary["terminals"]["calls"] == [
        [method, f"term-{n}"] for n in (1, 2) for method in ("create", "wait_for_exit", "output", "release")
    ]
    assert summary["terminals"]["liveAtEnd"] == 0

    # cancel: session/cancel sent after the first update; the turn ends "cancelled".
    cancelled = _turn(summary, 8, "wait_for_cancel")
    assert cancelled["cancelSent"] is True
    assert texts(cancelled["updates"]) == ["waiting"]
    assert cancelled["stopReason"] == "cancelled" == cancelled["queuedStopReason"]
    # cancel while session/request_permission is pending: our agent withdraws the request
    # ($/cancel_request, which aborted the TS handler's signal), settles the tool call as
    # failed, and ends the turn "cancelled".
    withdrawn = _turn(summary, 9, "permission")
    assert withdrawn["cancelRequested"] is True and withdrawn["permissionAbortedByAgent"] is True
    assert [u["sessionUpdate"] for u in withdrawn["updates"]] == ["tool_call", "tool_call_update", "agent_message_chunk"]
    assert withdrawn["updates"][1]["status"] == "failed"
    assert texts(withdrawn["updates"]) == ["permission: denied"]
    assert withdrawn["stopReason"] == "cancelled" == withdrawn["queuedStopReason"]
    after = _turn(summary, 10, "stream 2")
    assert texts(after["updates"]) == ["chunk-0 of 2", "chunk-1 of 2"] and after["stopReason"] == "end_turn"

    # Nothing arrived outside a turn; the agent exited cleanly once the TS client closed stdin.
    assert "strayUpdates" not in summary
    assert summary["agentExit"] == {"code": 0, "signal": None}


def test_ts_client_sees_our_agents_errors(node: str, tmp_path: Path) -> None:
    """A client error inside a turn (fs read of a missing file: -32002) reaches the TS client as
    the prompt's error, code and data intact; the session keeps working."""
    config = {
        "cwd": str(tmp_path),
        "files": {},
        "steps": [
            {"prompt": "read /virtual/missing.txt", "expectError": True},
            {"prompt": "stream 1"},
        ],
    }
    summary, proc = run_ts_client(node, helper_argv("interop_agent"), config)
    assert proc.returncode == 0 and "error" not in summary, (summary.get("error"), proc.stderr)
    failed, ok = summary["turns"]
    assert failed["error"]["code"] == -32002
    assert failed["error"]["data"] == {"uri": "/virtual/missing.txt"}
    assert failed["queuedError"] == -32002 and failed["updates"] == []
    assert texts(ok["updates"]) == ["chunk-0 of 1"] and ok["stopReason"] == "end_turn"
    assert summary["agentExit"] == {"code": 0, "signal": None}


def test_ts_client_drives_scenario_agent(node: str, tmp_path: Path) -> None:
    """The example scenario agent (acp.examples.scenario_agent) under the TS client, when present."""
    try:
        import acp.examples.scenario_agent  # noqa: F401
    except ImportError:
        pytest.skip("acp.examples.scenario_agent is not there yet")
    config = {
        "cwd": str(tmp_path),
        "files": {VIRTUAL_NOTES: "scenario text\n"},
        "steps": [
            {"prompt": "echo hello ts"},
            {"prompt": "stream 4"},
            {"prompt": "tool_calls"},
            {"prompt": "plan"},
            {"prompt": "permission"},
            {"prompt": f"read {VIRTUAL_NOTES}"},
            {"prompt": f"write {VIRTUAL_OUT} scenario wrote this"},
            {"prompt": "terminal echo scenario-ok"},
            {"prompt": "error -32002", "expectError": True},
            {"prompt": "full"},
            {"prompt": "wait_for_cancel", "cancelAfterUpdates": 1},
        ],
    }
    summary, proc = run_ts_client(node, [sys.executable, "-m", "acp.examples.scenario_agent"], config)
    assert proc.returncode == 0 and "error" not in summary, (summary.get("error"), proc.stderr)
    init = summary["initialize"]
    assert init["protocolVersion"] == 1 and init["agentInfo"]["name"] == "acp-scenario-agent"
    assert init["agentCapabilities"]["loadSession"] is True
    assert set(init["agentCapabilities"]["sessionCapabilities"]) >= {"list", "delete", "resume", "close"}
    turns = {t["prompt"].split()[0]: t for t in summary["turns"]}
    assert len(turns) == len(config["steps"])
    for turn in summary["turns"]:
        assert turn["queued"] == turn["updates"] and turn["updatesWhenAnswered"] == len(turn["updates"])
        if "error" not in turn:
            expected = "cancelled" if turn["prompt"] == "wait_for_cancel" else "end_turn"
            assert turn["stopReason"] == expected == turn["queuedStopReason"], turn["prompt"]
    assert texts(turns["echo"]["updates"]) == ["hello ts"]
    assert texts(turns["stream"]["updates"]) == [f"chunk {i}/4\n" for i in range(1, 5)]
    kinds = [u["sessionUpdate"] for u in turns["tool_calls"]["updates"]]
    assert kinds[:3] == ["tool_call", "tool_call_update", "tool_call_update"]
    assert [u["status"] for u in turns["tool_calls"]["updates"][:3]] == ["pending", "in_progress", "completed"]
    plans = [u for u in turns["plan"]["updates"] if u["sessionUpdate"] == "plan"]
    assert plans and all(e["status"] == "completed" for e in plans[-1]["entries"])
    assert len(summary["permissionRequests"]) >= 1
    assert any("allowed" in t for t in texts(turns["permission"]["updates"]))
    assert summary["fsReads"][0]["path"] == VIRTUAL_NOTES
    assert any("scenario text" in t for t in texts(turns["read"]["updates"]))
    assert summary["files"][VIRTUAL_OUT] == "scenario wrote this"
    assert any("scenario-ok" in t for t in texts(turns["terminal"]["updates"]))
    assert turns["error"]["error"]["code"] == -32002
    assert texts(turns["full"]["updates"])[-1].startswith("full: done")
    calls = summary["terminals"]["calls"]
    assert [c[0] for c in calls].count("create") == [c[0] for c in calls].count("release") >= 2
    assert summary["terminals"]["liveAtEnd"] == 0
    assert summary["agentExit"] == {"code": 0, "signal": None}


# ====================================================================== our client -> TS agent


class Recorder:
    """Our client's session/update handler: every update in order, plus events to wait on."""

    def __init__(self) -> None:
        self.updates: list[S.SessionUpdate] = []
        self.lock = threading.Lock()
        self.waiting = threading.Event()

    def __call__(self, note: S.SessionNotification) -> None:
        with self.lock:
            self.updates.append(note.update)
        if isinstance(note.update, S.AgentMessageChunk) and getattr(note.update.content, "text", None) == "waiting":
            self.waiting.set()

    def take(self) -> list[S.SessionUpdate]:
        with self.lock:
            taken, self.updates = self.updates, []
        return taken


def chunk_texts(updates: list[S.SessionUpdate]) -> list[str]:
    return [u.content.text for u in updates if isinstance(u, S.AgentMessageChunk) and isinstance(u.content, S.TextContent)]


class Permissions:
    """A permission handler that answers by option kind, or blocks until the turn is cancelled."""

    def __init__(self) -> None:
        self.requests: list[S.RequestPermissionRequest] = []
        self.answer = "allow"  # "allow" | "reject" | "block"
        self.entered = threading.Event()
        self.saw_cancel: list[bool] = []

    def __call__(self, request: S.RequestPermissionRequest, ctx: acp.ClientRequestContext) -> S.RequestPermissionResponse:
        self.requests.append(request)
        if self.answer == "block":
            self.entered.set()
            self.saw_cancel.append(ctx.cancelled.wait(WAIT))
            return S.RequestPermissionResponse(outcome=S.CancelledPermissionOutcome())
        kind = "allow_once" if self.answer == "allow" else "reject_once"
        option = next(o for o in request.options if o.kind == kind)
        return S.RequestPermissionResponse(outcome=S.SelectedPermissionOutcome(option_id=option.option_id))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("one\ntwo\nthree\n\u00fcml\u00e4ut\n", encoding="utf-8")
    return tmp_path


@pytest.fixture
def ts_agent(node: str, workspace: Path, no_thread_leak: None) -> Iterator[tuple[acp.SyncClient, Recorder, Permissions, acp.LocalTerminals]]:
    recorder, permissions = Recorder(), Permissions()
    files = acp.LocalFiles([workspace])
    terminals = acp.LocalTerminals()
    client = (
        acp.SyncClient.builder()
        .agent_process(node, str(INTEROP_DIR / "agent.mjs"), cwd=str(INTEROP_DIR))
        .client_info("acp-python-interop-client", "0.0.1")
        .session_update_handler(recorder)
        .request_permission_handler(permissions)
        .read_text_file_handler(files.read_text_file)
        .write_text_file_handler(files.write_text_file)
        .terminal_handlers(terminals)
        .request_timeout(WAIT)
        .prompt_timeout(WAIT)
        .build()
    )
    try:
        yield client, recorder, permissions, terminals
        # Every terminal the TS agent created was released by it.
        assert terminals.terminal_ids() == []
    finally:
        client.close()
        terminals.close()
    process = client.process
    assert process is not None
    # Closing our side ended the TS agent's input: it exited on its own, cleanly.
    assert process.wait(WAIT) == 0


def test_our_client_drives_ts_agent(ts_agent: Any, workspace: Path) -> None:
    client, recorder, permissions, _ = ts_agent
    init = client.initialize()
    assert init.protocol_version == 1
    assert init.agent_info == S.Implementation(name="ts-interop-agent", version="2.4.0-interop")
    assert init.agent_capabilities.load_session is False
    assert init.agent_capabilities.prompt_capabilities.embedded_context is True
    assert init.agent_capabilities.prompt_capabilities.image is False
    assert client.capabilities.supports_embedded_context_prompts()
    session_id = client.new_session(str(workspace)).session_id
    assert session_id == "ts-session-1"

    # caps: the TS agent parsed our initialize request (derived capabilities + clientInfo).
    assert client.prompt(session_id, "caps").stop_reason == "end_turn"
    seen = json.loads(chunk_texts(recorder.take())[0])
    assert seen["protocolVersion"] == 1
    assert seen["clientCapabilities"]["fs"] == {"readTextFile": True, "writeTextFile": True}
    assert seen["clientCapabilities"]["terminal"] is True
    assert seen["clientInfo"] == {"name": "acp-python-interop-client", "version": "0.0.1"}

    # stream: when prompt() returns, every chunk has been handled, in order (our guarantee).
    count = 300
    response = client.prompt(session_id, f"stream {count}")
    handled = recorder.take()  # taken the instant prompt() returned
    assert response.stop_reason == "end_turn"
    assert chunk_texts(handled) == [f"ts-chunk-{i} of {count}" for i in range(count)]
    assert len(handled) == count

    # permission, allowed then rejected: the TS agent saw our choice.
    for answer, option_id in (("allow", "ts-allow"), ("reject", "ts-reject")):
        permissions.answer = answer
        assert client.prompt(session_id, "permission").stop_reason == "end_turn"
        updates = recorder.take()
        assert [type(u) for u in updates] == [S.ToolCall, S.ToolCallProgress, S.AgentMessageChunk]
        assert updates[0].status == "pending" and updates[0].kind == "delete"
        assert updates[1].status == "completed" and updates[1].tool_call_id == updates[0].tool_call_id
        assert chunk_texts(updates) == [f'permission: {{"outcome":"selected","optionId":"{option_id}"}}']
        request = permissions.requests[-1]
        assert request.session_id == session_id and request.tool_call.tool_call_id == updates[0].tool_call_id
        assert [(o.option_id, o.kind) for o in request.options] == [("ts-allow", "allow_once"), ("ts-reject", "reject_once")]

    # fs: LocalFiles served the TS agent's reads (whole file, then line/limit) and its write.
    notes = workspace / "notes.txt"
    assert client.prompt(session_id, f"read {notes}").stop_reason == "end_turn"
    assert chunk_texts(recorder.take()) == ["read: one\ntwo\nthree\n\u00fcml\u00e4ut\n"]
    client.prompt(session_id, f"read {notes} 2 2")
    assert chunk_texts(recorder.take()) == ["read: two\nthree\n"]
    client.prompt(session_id, f"read {workspace / 'missing.txt'}")
    [missing] = chunk_texts(recorder.take())
    assert missing.startswith("error: -32002 ")
    client.prompt(session_id, f"read {workspace.parent / 'outside.txt'}")
    [outside] = chunk_texts(recorder.take())
    assert outside.startswith("error: -32602 ")
    target, content = workspace / "sub" / "written.txt", "written by the TS agent \u2713"
    assert client.prompt(session_id, f"write {target} {content}").stop_reason == "end_turn"
    assert chunk_texts(recorder.take()) == [f"wrote: {len(content)} chars to {target}"]
    assert target.read_text(encoding="utf-8") == content

    # terminal: LocalTerminals ran the commands; TerminalHandle waited, read, released.
    assert client.prompt(session_id, "terminal echo interop-terminal-ok").stop_reason == "end_turn"
    assert chunk_texts(recorder.take()) == [
        'terminal: exit=0 signal=null status={"exitCode":0} truncated=false output=interop-terminal-ok\n'
    ]
    client.prompt(session_id, "terminal false")
    [failed] = chunk_texts(recorder.take())
    assert failed.startswith('terminal: exit=1 signal=null status={"exitCode":1}'), failed


def test_a_ts_agents_thrown_error_reads_well_on_our_side(ts_agent: Any, workspace: Path) -> None:
    # The TS SDK answers a handler's exception with -32603 "Internal error" and the reason in
    # data.details; str() of our RequestError shows that reason.
    client, _, _, _ = ts_agent
    client.initialize()
    session_id = client.new_session(str(workspace)).session_id
    reason = "Missing credentials. Please pass an api_key or set ANTHROPIC_API_KEY"
    with pytest.raises(acp.RequestError) as info:
        client.prompt(session_id, f"throw {reason}")
    error = info.value
    assert (error.code, error.message, error.data) == (-32603, "Internal error", {"details": reason})
    assert str(error) == f"Internal error (code -32603): {reason}"
    # The agent lives on: the session still works.
    assert client.prompt(session_id, "stream 1").stop_reason == "end_turn"


def test_our_client_cancels_ts_agent_turn(ts_agent: Any, workspace: Path) -> None:
    client, recorder, _, _ = ts_agent
    client.initialize()
    session_id = client.new_session(str(workspace)).session_id
    with ThreadPoolExecutor(1, thread_name_prefix="interop-prompt") as pool:
        turn = pool.submit(client.prompt, session_id, "wait_for_cancel")
        assert recorder.waiting.wait(WAIT), "the TS agent never started its long turn"
        assert not turn.done()
        client.cancel(session_id)
        response = turn.result(WAIT)
    assert response.stop_reason == "cancelled"
    assert chunk_texts(recorder.take()) == ["waiting"]
    # The session is usable after the cancelled turn.
    assert client.prompt(session_id, "stream 2").stop_reason == "end_turn"
    assert chunk_texts(recorder.take()) == ["ts-chunk-0 of 2", "ts-chunk-1 of 2"]


def test_our_client_cancel_answers_ts_agents_pending_permission(ts_agent: Any, workspace: Path) -> None:
    """client.cancel() answers the TS agent's pending session/request_permission "cancelled"
    (as the spec requires) and the handler sees ctx.cancelled; the TS agent ends the turn."""
    client, recorder, permissions, _ = ts_agent
    client.initialize()
    session_id = client.new_session(str(workspace)).session_id
    permissions.answer = "block"
    with ThreadPoolExecutor(1, thread_name_prefix="interop-prompt") as pool:
        turn = pool.submit(client.prompt, session_id, "permission")
        assert permissions.entered.wait(WAIT), "the permission request never reached our handler"
        client.cancel(session_id)
        response = turn.result(WAIT)
    assert response.stop_reason == "cancelled"
    updates = recorder.take()
    assert [type(u) for u in updates] == [S.ToolCall, S.ToolCallProgress, S.AgentMessageChunk]
    assert updates[1].status == "failed"
    assert chunk_texts(updates) == ['permission: {"outcome":"cancelled"}']
    assert permissions.saw_cancel == [True]
