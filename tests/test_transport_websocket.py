"""ACP over WebSocket (acp.transport.websocket), over real loopback sockets: every facade method
end to end, many concurrent clients against one agent server, a server killed mid-stream,
malformed frames, refusals at the upgrade (origin, auth, path, capacity), limits and close."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

try:
    import websockets  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise
    pytest.skip("the ws extra (websockets) is not installed", allow_module_level=True)

from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as raw_connect

import acp
from acp.agent import SyncAgent
from acp.client import LocalFiles, SyncClient
from acp.errors import ConnectionClosedError
from acp.transport.websocket import (
    CONNECTION_ID_HEADER,
    RefuseConnection,
    RemoteConnectionError,
    WebSocketServer,
    WebSocketTransport,
    connect_websocket,
)

from .conftest import helper_argv
from .helpers.agent_full import DemoAgent, build_agent
from .helpers.client_support import texts
from .helpers.remote_suite import Updates, exercise_every_method

WAIT = 20.0


@pytest.fixture
def served(no_thread_leak: None) -> Iterator[tuple[WebSocketServer, DemoAgent]]:
    agent, demo = build_agent(grace=30.0)
    server = agent.serve_websocket()
    yield server, demo
    server.close()
    agent.close()


# ---------------------------------------------------------------------------- end to end


def test_every_facade_method_over_websocket(
    served: tuple[WebSocketServer, DemoAgent], tmp_path: Path
) -> None:
    server, demo = served
    exercise_every_method(SyncClient.builder().connect(server.url, open_timeout=WAIT), demo, tmp_path)


def test_connection_id_header_and_one_agent_connection_per_socket(
    served: tuple[WebSocketServer, DemoAgent],
) -> None:
    server, _ = served
    first = connect_websocket(server.url)
    second = connect_websocket(server.url)
    try:
        assert first.connection_id and second.connection_id
        assert first.connection_id != second.connection_id
        with SyncClient.builder().transport(first).build() as a, SyncClient.builder().transport(second).build() as b:
            a.initialize()
            b.initialize()
            assert len(server.connections) == 2
            assert all(c.initialized for c in server.connections)
            assert "websocket" in first.description
    finally:
        first.close()
        second.close()


def test_capabilities_are_per_connection(served: tuple[WebSocketServer, DemoAgent], tmp_path: Path) -> None:
    server, _ = served
    (tmp_path / "f.txt").write_text("visible")
    files = LocalFiles([str(tmp_path)])
    with_fs, without = Updates(), Updates()
    with (
        SyncClient.builder().connect(server.url).session_update_handler(with_fs)
        .read_text_file_handler(files.read_text_file).build()
    ) as a, SyncClient.builder().connect(server.url).session_update_handler(without).build() as b:
        a.initialize()
        b.initialize()
        sa = a.new_session(cwd=str(tmp_path)).session_id
        sb = b.new_session(cwd=str(tmp_path)).session_id
        a.prompt(sa, f"read {tmp_path}/f.txt")
        b.prompt(sb, "caps")
        a.prompt(sa, "caps")
        assert texts(with_fs.items) == ["visible", "read=True terminal=False"]
        assert texts(without.items) == ["read=False terminal=False"]
        with pytest.raises(acp.RequestError):  # the agent's ctx.read_file is refused locally
            b.prompt(sb, f"read {tmp_path}/f.txt")
        b.prompt(sb, "refused")
        assert texts(without.items)[-1] == "CapabilityError,CapabilityError,CapabilityError,CapabilityError"


# ---------------------------------------------------------------------------- load


def test_many_concurrent_clients_against_one_server(served: tuple[WebSocketServer, DemoAgent], tmp_path: Path) -> None:
    server, _ = served
    count = 200 if os.environ.get("ACP_LOAD") == "full" else 50
    chunks = 100
    (tmp_path / "f.txt").write_text("shared file")
    files = LocalFiles([str(tmp_path)])
    barrier = threading.Barrier(count, timeout=60)

    def one(i: int) -> str:
        updates = Updates()
        builder = SyncClient.builder().connect(server.url, open_timeout=60).session_update_handler(updates)
        fs = i % 2 == 0
        if fs:
            builder.read_text_file_handler(files.read_text_file)
        with builder.request_timeout(60).build() as client:
            client.initialize()
            sid = client.new_session(cwd=str(tmp_path)).session_id
            barrier.wait()  # every client is connected before anyone prompts
            for turn in range(2):
                assert client.prompt(sid, f"stream {chunks}").stop_reason == "end_turn"
                assert texts(updates.items) == [f"chunk {k}" for k in range(chunks)] * (turn + 1)
            client.prompt(sid, "caps")
            assert texts(updates.items)[-1] == f"read={fs} terminal=False"
            if fs:
                client.prompt(sid, f"read {tmp_path}/f.txt")
                assert texts(updates.items)[-1] == "shared file"
            else:
                client.prompt(sid, "refused")
                assert texts(updates.items)[-1].startswith("CapabilityError")
            return sid

    with ThreadPoolExecutor(count) as pool:
        sids = list(pool.map(one, range(count), timeout=240))
    assert len(set(sids)) == count


# ---------------------------------------------------------------------------- faults


def test_server_killed_mid_stream(no_thread_leak: None) -> None:
    proc = subprocess.Popen(
        helper_argv("remote_agent"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("ws://127.0.0.1:")
        updates = Updates()
        with SyncClient.builder().connect(url).session_update_handler(updates).build() as client:
            client.initialize()
            sid = client.new_session(cwd="/work").session_id
            with ThreadPoolExecutor(1) as pool:
                future = pool.submit(client.prompt, sid, "stream 100000000")
                updates.wait_for(lambda items: len(items) >= 200)
                proc.kill()
                with pytest.raises(ConnectionClosedError):
                    future.result(WAIT)
            with pytest.raises(ConnectionClosedError):
                client.list_sessions()
    finally:
        proc.kill()
        proc.wait(WAIT)
        if proc.stdin is not None:
            proc.stdin.close()
        if proc.stdout is not None:
            proc.stdout.close()


def test_binary_frames_are_ignored_and_garbage_gets_a_parse_error(
    served: tuple[WebSocketServer, DemoAgent], caplog: pytest.LogCaptureFixture
) -> None:
    server, _ = served
    with raw_connect(server.url) as ws:
        assert ws.response is not None and ws.response.headers.get(CONNECTION_ID_HEADER)
        ws.send(b"\x00\x01binary")
        ws.send("this is not json")
        error = json.loads(ws.recv(timeout=WAIT))
        assert error["id"] is None and error["error"]["code"] == -32700
        # Pretty-printed JSON (newlines inside one frame) is still one message.
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
        ws.send(json.dumps(init, indent=2))
        answer = json.loads(ws.recv(timeout=WAIT))
        assert answer["id"] == 1 and answer["result"]["agentInfo"]["name"] == "demo-agent"
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "nope"}))
        assert json.loads(ws.recv(timeout=WAIT))["error"]["code"] == -32601
    assert any("binary frame" in r.getMessage() for r in caplog.records)


def test_a_message_over_the_limit_closes_the_socket(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent, agent.serve_websocket(max_message_bytes=4096) as server:
        with SyncClient.builder().connect(server.url).build() as client:
            client.initialize()
            sid = client.new_session(cwd="/work").session_id
            with pytest.raises(ConnectionClosedError):
                client.prompt(sid, "x" * 10_000)


def test_big_file_contents_pass(served: tuple[WebSocketServer, DemoAgent], tmp_path: Path) -> None:
    server, _ = served
    big = ("0123456789abcdef" * 64 + "\n") * 5000  # ~5 MiB, one message each way
    (tmp_path / "big.txt").write_text(big)
    files = LocalFiles([str(tmp_path)])
    updates = Updates()
    with (
        SyncClient.builder().connect(server.url).session_update_handler(updates)
        .read_text_file_handler(files.read_text_file).build()
    ) as client:
        client.initialize()
        sid = client.new_session(cwd=str(tmp_path)).session_id
        client.prompt(sid, f"read {tmp_path}/big.txt")
        assert texts(updates.items) == [big]


# ---------------------------------------------------------------------------- refusals


def test_a_foreign_origin_is_refused_with_403(served: tuple[WebSocketServer, DemoAgent]) -> None:
    server, _ = served
    with pytest.raises(RemoteConnectionError) as info:
        SyncClient.builder().connect(server.url, headers={"Origin": "https://evil.example"}).build()
    assert info.value.status == 403 and "403" in str(info.value)
    assert isinstance(info.value, ConnectionClosedError)
    # A page from this machine, and a client without Origin, are let in.
    for headers in ({"Origin": "http://localhost:3000"}, None):
        with SyncClient.builder().connect(server.url, headers=headers).build() as client:
            client.initialize()


def test_an_explicit_origin_list(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent, agent.serve_websocket(origins=["https://editor.example"]) as server:
        with raw_connect(server.url, origin="https://editor.example"):  # type: ignore[arg-type]
            pass
        with pytest.raises(InvalidStatus) as info:
            raw_connect(server.url, origin="http://localhost:1234")  # type: ignore[arg-type]
        assert info.value.response.status_code == 403


def test_authentication_at_the_upgrade(no_thread_leak: None) -> None:
    def authenticate(headers: Any) -> int | None:
        token = headers.get("Authorization")
        if token == "Bearer banned":
            raise RefuseConnection(403, "this token is banned")
        return None if token == "Bearer good" else 401

    agent, _ = build_agent()
    with agent, agent.serve_websocket(authenticate=authenticate) as server:
        with pytest.raises(RemoteConnectionError) as info:
            SyncClient.builder().connect(server.url).build()
        assert info.value.status == 401 and "HTTP 401" in str(info.value)
        with pytest.raises(RemoteConnectionError) as info:
            SyncClient.builder().connect(server.url, headers={"Authorization": "Bearer banned"}).build()
        assert info.value.status == 403 and "this token is banned" in str(info.value)
        headers = {"Authorization": "Bearer good"}
        with SyncClient.builder().connect(server.url, headers=headers).build() as client:
            assert client.initialize().agent_info is not None


def test_wrong_path_unreachable_server_and_bad_urls(served: tuple[WebSocketServer, DemoAgent]) -> None:
    server, _ = served
    with pytest.raises(RemoteConnectionError) as info:
        connect_websocket(server.url.replace("/acp", "/other"))
    assert info.value.status == 404
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(RemoteConnectionError) as info:
        SyncClient.builder().connect(f"ws://127.0.0.1:{port}/acp", open_timeout=WAIT).build()
    assert info.value.status is None and f"ws://127.0.0.1:{port}/acp" in str(info.value)
    with pytest.raises(ValueError, match="unsupported URL"):
        SyncClient.builder().connect("ftp://example.com/acp")
    with pytest.raises(ValueError, match="exactly one transport"):
        SyncClient.builder().connect(server.url).transport(connect_websocket(server.url)).build()


def test_max_connections(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent, agent.serve_websocket(max_connections=2) as server:
        first = _initialized(connect_websocket(server.url))
        (first_handle,) = server.connections
        second = _initialized(connect_websocket(server.url))
        with pytest.raises(RemoteConnectionError) as info:
            connect_websocket(server.url)
        assert info.value.status == 503
        first.close()
        assert first_handle.wait_closed(WAIT)
        third = connect_websocket(server.url)
        second.close()
        third.close()


def _initialized(transport: WebSocketTransport) -> WebSocketTransport:
    """Once initialize is answered, the server has registered this connection."""
    transport.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n')
    assert b'"id":1' in transport.read()
    return transport


# ---------------------------------------------------------------------------- lifecycle


def test_idle_connections_are_closed(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent, agent.serve_websocket(idle_timeout=0.2) as server:
        with SyncClient.builder().connect(server.url).build() as client:
            client.initialize()
            (handle,) = server.connections
            assert handle.wait_closed(WAIT)
            with pytest.raises(ConnectionClosedError):
                client.list_sessions()


def test_closing_the_server_answers_turns_in_flight(no_thread_leak: None) -> None:
    agent, _ = build_agent(grace=30.0)
    updates = Updates()
    server = agent.serve_websocket()
    try:
        with SyncClient.builder().connect(server.url).session_update_handler(updates).build() as client:
            client.initialize()
            sid = client.new_session(cwd="/work").session_id
            with ThreadPoolExecutor(1) as pool:
                future = pool.submit(client.prompt, sid, "wait")
                updates.wait_for(lambda items: texts(items) == ["waiting"])
                server.close(timeout=WAIT)
                assert future.result(WAIT).stop_reason == "cancelled"
            with pytest.raises(ConnectionClosedError):
                client.list_sessions()
        assert server.closed and server.connections == []
        with pytest.raises(RemoteConnectionError):
            connect_websocket(server.url, open_timeout=WAIT)
    finally:
        server.close()
        agent.close()


def test_serve_forever_returns_after_close(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent:
        server = agent.serve_websocket()
        runner = threading.Thread(target=server.serve_forever)
        runner.start()
        assert server.port > 0 and server.url == f"ws://127.0.0.1:{server.port}/acp"
        server.close()
        runner.join(WAIT)
        assert not runner.is_alive()
        server.close()  # idempotent


def test_transport_contract(served: tuple[WebSocketServer, DemoAgent]) -> None:
    server, _ = served
    transport = connect_websocket(server.url)
    assert isinstance(transport, WebSocketTransport)
    transport.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
                    b'{"jsonrpc":"2.0","id":2,"method":"session/list","params":{}}\n')
    received = b""
    while received.count(b"\n") < 2:
        data = transport.read()
        assert data
        received += data
    ids = [json.loads(line)["id"] for line in received.splitlines()]
    assert ids == [1, 2]
    reader_result: list[bytes] = []
    reader = threading.Thread(target=lambda: reader_result.append(transport.read()))
    reader.start()
    transport.close()  # wakes the blocked read
    reader.join(WAIT)
    assert reader_result == [b""]
    with pytest.raises(ConnectionClosedError):
        transport.write(b"{}\n")
    transport.close()


def test_an_agent_closed_refuses_new_sockets(no_thread_leak: None) -> None:
    agent: SyncAgent
    agent, _ = build_agent()
    server = agent.serve_websocket()
    agent.close()
    try:
        transport = connect_websocket(server.url)
        assert transport.read() == b""  # accepted, then closed: the agent serves nobody now
        transport.close()
    finally:
        server.close()


def test_importing_acp_never_imports_websockets() -> None:
    code = (
        "import sys, acp, acp.transport, acp.client, acp.agent\n"
        "acp.SyncClient.builder().connect('ws://127.0.0.1:1/acp')\n"
        "assert 'websockets' not in sys.modules, 'websockets imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=WAIT)


def test_close_write_ends_the_connection_for_the_server(served: tuple[WebSocketServer, DemoAgent]) -> None:
    server, _ = served
    transport = connect_websocket(server.url)
    transport.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n')
    assert b'"id":1' in transport.read()
    (handle,) = server.connections
    transport.close_write()  # WebSocket has no half-close: the whole socket closes
    assert handle.wait_closed(WAIT)
    assert transport.read() == b""
    transport.close()
