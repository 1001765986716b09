"""The SDK agent as a real subprocess (tests/helpers/agent_full.py over stdio), driven by a raw
Connection acting as the client: streams, tool calls, permission, files, terminals,
elicitation, cancellation, history replay, and a clean exit at end of input."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from acp.transport import ProcessTransport

from .conftest import helper_argv
from .helpers.agent_client import WAIT, AbandonLog, FakeClient, block_until_cancelled


@pytest.fixture
def agent_process(no_thread_leak: None) -> Iterator[tuple[FakeClient, ProcessTransport]]:
    transport = ProcessTransport(helper_argv("agent_full", "--grace", "30"))
    client = FakeClient(transport)
    yield client, transport
    client.close()


def test_full_agent_over_a_subprocess(agent_process: Any) -> None:
    client, transport = agent_process
    answer = client.initialize()
    assert answer["agentInfo"] == {"name": "demo-agent", "title": "Demo", "version": "1.0"}
    assert answer["agentCapabilities"]["loadSession"] is True
    sid = client.new_session("/work")

    assert client.prompt(sid, "stream 200") == {"stopReason": "end_turn"}
    assert client.texts(sid) == [f"chunk {i}" for i in range(200)]

    client.prompt(sid, "tools")
    assert client.kinds(sid)[-3:] == ["tool_call", "tool_call_update", "tool_call_update"]

    client.prompt(sid, "permission")
    assert client.texts(sid)[-1] == "allowed"
    assert client.kinds(sid)[-3:] == ["tool_call", "tool_call_update", "agent_message_chunk"]
    permission = [p for m, p in client.calls if m == "session/request_permission"][0]
    assert permission["toolCall"]["kind"] == "edit"

    client.files["/work/in.txt"] = "from the client"
    client.prompt(sid, "read /work/in.txt")
    assert client.texts(sid)[-1] == "from the client"
    client.prompt(sid, "write /work/out.txt written by the agent")
    assert client.files["/work/out.txt"] == "written by the agent"

    client.terminal_output = "built\n"
    client.prompt(sid, "run make all")
    assert client.texts(sid)[-1] == "exit=0 signal=None success=True out=built\n"
    assert list(client.released.values()) == [1]

    client.prompt(sid, "elicit")
    assert client.texts(sid)[-1] == "elicit=CreateElicitationResponseAccept:{'name': 'Ada'}"

    # Cancellation while the agent waits on a permission answer.
    asked, log = threading.Event(), AbandonLog()
    client.permission = block_until_cancelled(log, asked)
    future = client.prompt_future(sid, "permission")
    assert asked.wait(WAIT)
    client.cancel(sid)
    assert future.result(WAIT) == {"stopReason": "cancelled"}
    assert client.texts(sid)[-1] == "denied"

    # Cancellation while a command runs: the terminal is killed and released exactly once.
    client.block_terminals = True
    future = client.prompt_future(sid, "run sleep 100")
    client.wait_for(lambda: client.methods().count("terminal/wait_for_exit") == 2)
    client.cancel(sid)
    assert future.result(WAIT) == {"stopReason": "cancelled"}
    assert list(client.released.values()) == [1, 1]
    assert sum(client.killed.values()) == 1

    # A handler that waits for the cancel.
    future = client.prompt_future(sid, "wait")
    client.wait_for(lambda: client.texts(sid)[-1] == "waiting")
    client.cancel(sid)
    assert future.result(WAIT) == {"stopReason": "cancelled"}

    # History replay through session/load.
    before = len(client.updates)
    assert client.conn.request("session/load", {"sessionId": sid, "cwd": "/work", "mcpServers": []}) == {}
    assert client.updates[before]["update"] == {
        "sessionUpdate": "user_message_chunk",
        "content": {"type": "text", "text": "stream 200"},
    }

    # End of input: the agent answers what it got and exits cleanly.
    transport.close_write()
    assert transport.wait(WAIT) == 0


def test_subprocess_exits_when_stdin_ends_mid_turn(agent_process: Any) -> None:
    client, transport = agent_process
    client.initialize()
    sid = client.new_session("/work")
    future = client.prompt_future(sid, "wait")
    client.wait_for(lambda: client.texts(sid) == ["waiting"])
    transport.close_write()  # the client goes away mid-turn
    # The turn is cancelled, answered, and the process exits on its own.
    assert future.result(WAIT) == {"stopReason": "cancelled"}
    assert transport.wait(WAIT) == 0
