"""AsyncAgent over real processes: our SyncClient drives tests/helpers/aio_agent.py over stdio,
and each guarantee of the agent side is checked on the wire (DESIGN sections 4, 4b, 5).

Waits are on events with timeouts (WAIT is a bound, never a delay).
"""

from __future__ import annotations

import json
import subprocess
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

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0


class Driver:
    """A SyncClient on the async agent script, recording what reaches its handlers in order."""

    def __init__(self, *agent_args: str, permission: str = "allow") -> None:
        self.events: list[tuple[str, Any]] = []  # ("update", text-or-kind) / ("permission", seen)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.permission = permission
        self.client = (
            acp.SyncClient.builder()
            .agent_process(*helper_argv("aio_agent", *agent_args))
            .session_update_handler(self._update)
            .request_permission_handler(self._permission)
            .read_text_file_handler(lambda request, ctx: S.ReadTextFileResponse(content=f"text of {request.path}"))
            .ext_notification_handler("_test/cancelled", lambda params: self._record("cancelled", params["sessionId"]))
            .ext_notification_handler("_test/holding", lambda params: self._record("holding", None))
            .request_timeout(WAIT)
            .build()
        )
        self.client.initialize()
        self.session = self.client.new_session(cwd="/").session_id

    def _record(self, kind: str, value: Any) -> None:
        with self._changed:
            self.events.append((kind, value))
            self._changed.notify_all()

    def _update(self, notification: S.SessionNotification) -> None:
        update = notification.update
        if isinstance(update, S.AgentMessageChunk) and isinstance(update.content, S.TextContent):
            self._record("update", update.content.text)
        else:
            kind = "tool_call" if isinstance(update, S.ToolCall) else "tool_call_update"
            self._record("update", f"{kind}:{getattr(update, 'status', None)}")

    def _permission(self, request: S.RequestPermissionRequest, ctx: Any) -> S.RequestPermissionResponse:
        with self._lock:
            seen = [value for kind, value in self.events if kind == "update"]
        self._record("permission", seen)
        option = "allow" if self.permission == "allow" else "reject"
        return S.RequestPermissionResponse(outcome=S.SelectedPermissionOutcome(option_id=option))

    def texts(self) -> list[Any]:
        with self._lock:
            return [value for kind, value in self.events if kind == "update"]

    def wait_for(self, kind: str, value: Any = None) -> None:
        with self._changed:
            assert self._changed.wait_for(
                lambda: any(k == kind and (value is None or v == value) for k, v in self.events), WAIT
            ), f"no {kind} {value!r} in {self.events}"

    def clear(self) -> None:
        with self._lock:
            self.events.clear()


@pytest.fixture
def driver() -> Iterator[Driver]:
    d = Driver()
    try:
        yield d
    finally:
        d.client.close()


def test_updates_arrive_in_order_before_the_answer(driver: Driver) -> None:
    response = driver.client.prompt(driver.session, "stream 300")
    assert response.stop_reason == "end_turn"
    # Every update was handled before prompt() returned, in the order sent.
    assert driver.texts() == [f"chunk-{i} of 300" for i in range(300)]


def test_a_request_follows_the_updates_sent_before_it(driver: Driver) -> None:
    assert driver.client.prompt(driver.session, "permission").stop_reason == "end_turn"
    (seen,) = [value for kind, value in driver.events if kind == "permission"]
    # The permission request reached the client after "before" and the pending tool call.
    assert seen == ["before", "tool_call:pending"]
    assert driver.texts() == ["before", "tool_call:pending", "tool_call_update:completed", "permission: allowed"]


def test_one_turn_per_session_and_session_cancel_cancels_the_task(driver: Driver) -> None:
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(driver.client.prompt, driver.session, "wait_for_cancel")
        driver.wait_for("update", "waiting")
        with pytest.raises(acp.RequestError) as refused:
            driver.client.prompt(driver.session, "stream 1")
        assert refused.value.code == -32600 and refused.value.data == {"sessionId": driver.session}
        driver.client.cancel(driver.session)
        assert first.result(WAIT).stop_reason == "cancelled"
    # The handler's task saw CancelledError (it said so before the answer went out).
    driver.wait_for("cancelled", driver.session)
    # The turn is over: the session takes the next prompt.
    driver.clear()
    assert driver.client.prompt(driver.session, "stream 2").stop_reason == "end_turn"
    assert driver.texts() == ["chunk-0 of 2", "chunk-1 of 2"]


def test_cancel_request_cancels_the_task(driver: Driver) -> None:
    # The client's timeout abandons the prompt with $/cancel_request.
    with pytest.raises(acp.RequestTimeoutError):
        driver.client.prompt(driver.session, "wait_for_cancel", timeout=1.0)
    driver.wait_for("cancelled", driver.session)
    assert driver.client.prompt(driver.session, "stream 1").stop_reason == "end_turn"


def test_blocking_handlers_run_off_the_loop(driver: Driver) -> None:
    where = driver.client.ext_request("_test/where", {})
    assert where["onLoop"] is False and "handler" in where["thread"]
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(driver.client.ext_request, "_test/hold", {})
        driver.wait_for("holding")
        # The loop still serves: an async handler answers while the blocking one waits.
        assert driver.client.ext_request("_test/release", {}) == {}
        assert held.result(WAIT) == {"released": True, "cancelled": False}


def test_close_cancels_every_running_handler(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    d = Driver("--report", str(report))
    pool = ThreadPoolExecutor(2)
    try:
        turn = pool.submit(d.client.prompt, d.session, "wait_for_cancel")
        held = pool.submit(d.client.ext_request, "_test/hold", {})
        d.wait_for("update", "waiting")
        d.wait_for("holding")
        process = d.client.process
        assert process is not None
    finally:
        d.client.close()  # end of the agent's input
    for future in (turn, held):
        try:
            future.result(WAIT)
        except acp.ConnectionClosedError:
            pass
    pool.shutdown()
    assert process.wait(WAIT) == 0
    state = json.loads(report.read_text())
    # Both handlers saw the cancellation, and nothing outlived the agent's connection.
    assert sorted(state["cancelled"]) == sorted([f"prompt:{d.session}", "hold"])
    assert state["tasks"] == [] and state["threads"] == []


def test_bad_input_is_answered_and_the_connection_goes_on() -> None:
    proc = subprocess.Popen(
        helper_argv("aio_agent"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None

    def exchange(line: bytes) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(line + b"\n")
        proc.stdin.flush()
        answer: dict[str, Any] = json.loads(proc.stdout.readline())
        return answer

    try:
        assert exchange(b"this is not json")["error"]["code"] == -32700
        assert exchange(b'{"jsonrpc": "2.0", "id": 1, "method": "no/such"}')["error"]["code"] == -32601
        bad = exchange(b'{"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": 3}}')
        assert bad["id"] == 2 and bad["error"]["code"] == -32602
        init = exchange(b'{"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"protocolVersion": 1}}')
        assert init["id"] == 3 and init["result"]["agentInfo"]["name"] == "acp-python-aio-agent"
    finally:
        proc.stdin.close()
        assert proc.wait(WAIT) == 0
        proc.stdout.close()
        assert proc.stderr is not None
        proc.stderr.close()


# ---------------------------------------------------------------- served by the ASGI app


@pytest.mark.parametrize("profile", ["ws", "http"])
def test_asgi_app_serves_an_async_agent_on_the_servers_loop(profile: str, no_thread_leak: None) -> None:
    from acp.examples.async_echo_agent import build_agent
    from acp.transport.http_server import HttpServer

    agent = build_agent()
    updates: list[S.SessionNotification] = []
    with HttpServer(agent.asgi_app()) as server:
        url = server.ws_url if profile == "ws" else server.url
        with acp.SyncClient.builder().connect(url).session_update_handler(updates.append).build() as client:
            assert client.initialize().agent_info.name == "acp-async-echo-agent"  # type: ignore[union-attr]
            session = client.new_session(cwd="/").session_id
            assert client.prompt(session, "over the ASGI loop").stop_reason == "end_turn"
            assert [u.update.content.text for u in updates] == ["over the ASGI loop"]  # type: ignore[union-attr]
            with pytest.raises(acp.RequestError) as unknown:
                client.prompt("no-such-session", "x")
            assert unknown.value.code == -32002
    assert agent.connections == []


# ---------------------------------------------------------------- interop: other SDKs' clients


def test_typescript_sdk_client_drives_an_async_agent(tmp_path: Path) -> None:
    from .helpers.interop_node import require_node, run_ts_client, texts

    node = require_node()
    notes, out = "/virtual/notes.txt", "/virtual/out.txt"
    config = {
        "cwd": str(tmp_path),
        "files": {notes: "alpha \u2713\n"},
        "steps": [
            {"prompt": "caps"},
            {"prompt": "stream 50"},
            {"prompt": "permission", "permission": "allow"},
            {"prompt": f"read {notes}"},
            {"prompt": f"write {out} from asyncio"},
            {"prompt": "terminal false"},
            {"prompt": "wait_for_cancel", "cancelAfterUpdates": 1},
            {"prompt": "permission", "permission": "cancel"},  # cancelled while the request is open
            {"prompt": "stream 2"},
        ],
    }
    summary, proc = run_ts_client(node, helper_argv("aio_agent"), config)
    assert proc.returncode == 0 and "error" not in summary, (summary.get("error"), proc.stderr)
    assert summary["initialize"]["agentInfo"]["name"] == "acp-python-aio-agent"
    turns = summary["turns"]
    for turn in turns:  # every update reached the TS client before the prompt's answer
        assert turn["updatesWhenAnswered"] == len(turn["updates"]) and turn["queued"] == turn["updates"]
    caps, stream, allow, read, write, terminal, cancelled, withdrawn, after = turns
    assert json.loads(texts(caps["updates"])[0]) == {"readTextFile": True, "writeTextFile": True, "terminal": True}
    assert texts(stream["updates"]) == [f"chunk-{i} of 50" for i in range(50)]
    assert [u["sessionUpdate"] for u in allow["updates"]] == [
        "agent_message_chunk", "tool_call", "tool_call_update", "agent_message_chunk"
    ]
    assert texts(allow["updates"]) == ["before", "permission: allowed"]
    assert texts(read["updates"]) == ["read: alpha \u2713\n"]
    assert summary["files"][out] == "from asyncio"
    assert texts(terminal["updates"]) == ["terminal: exit=1 output="]
    assert summary["terminals"]["liveAtEnd"] == 0
    assert texts(cancelled["updates"]) == ["waiting"] and cancelled["stopReason"] == "cancelled"
    # The permission request was withdrawn ($/cancel_request) when the task was cancelled, its
    # tool call settled as failed, and the turn answered "cancelled".
    assert withdrawn["permissionAbortedByAgent"] is True
    assert withdrawn["updates"][-1]["sessionUpdate"] == "tool_call_update"
    assert withdrawn["updates"][-1]["status"] == "failed"
    assert withdrawn["stopReason"] == "cancelled"
    assert texts(after["updates"]) == ["chunk-0 of 2", "chunk-1 of 2"] and after["stopReason"] == "end_turn"
    assert summary["agentExit"] == {"code": 0, "signal": None}


def test_official_python_sdk_client_drives_an_async_agent() -> None:
    from .helpers.interop_official import require_official, run_official_client

    python = require_official()
    config = {
        "agent": helper_argv("aio_agent"),
        "files": {"/virtual/notes.txt": "official \u2713"},
        "permission": "allow",
        "prompts": ["stream 20", "permission", "read /virtual/notes.txt", "wait", "stream 1"],
    }
    summary, proc = run_official_client(python, "stdio", "", config)
    assert all(step.get("ok") for step in summary["steps"]), (summary["steps"], proc.stderr)
    assert summary["agent_name"] == "acp-python-aio-agent"
    stream, permission, read, wait, after = summary["prompts"]
    assert stream["texts"] == [f"chunk-{i} of 20" for i in range(20)] and stream["stop_reason"] == "end_turn"
    assert permission["texts"] == ["before", "permission: allowed"]
    assert summary["permission_requests"][0]["options"] == ["allow", "reject"]
    assert read["texts"] == ["read: official \u2713"] and summary["reads"] == ["/virtual/notes.txt"]
    assert wait["texts"] == ["waiting"] and wait["stop_reason"] == "cancelled"
    assert after["texts"] == ["chunk-0 of 1"] and after["stop_reason"] == "end_turn"
    assert summary["agent_exit"] == 0


# ---------------------------------------------------------------- conformance (acp check)


@pytest.mark.parametrize(
    "argv, cancel",
    [
        ([sys.executable, "-m", "acp.examples.async_echo_agent"], None),
        (helper_argv("aio_agent"), "wait_for_cancel"),
    ],
    ids=["async_echo_agent", "aio_agent"],
)
def test_async_agents_conform(argv: list[str], cancel: str | None) -> None:
    from .test_conformance import check

    done = check(*(["--cancel-prompt", cancel] if cancel else []), "--", *argv)
    assert "verdict: CONFORMING" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 0
