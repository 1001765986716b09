"""ACP over Streamable HTTP (acp.transport.http_server / http_client) and the WebSocket profile of
the same ASGI endpoint, over real loopback sockets under uvicorn (and hypercorn for HTTP/2):
every facade method end to end, the RFD's routing and error statuses on the raw wire,
session-scoped streams, many concurrent clients, a server killed mid-stream, refusals, cookies,
idle connections, and closing with turns in flight."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest

try:
    import httpx
    import uvicorn  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise
    pytest.skip("the http extra (httpx, uvicorn) is not installed", allow_module_level=True)

import acp
from acp.client import LocalFiles, SyncClient
from acp.errors import ConnectionClosedError
from acp.transport._remote import CONNECTION_ID_HEADER, SESSION_ID_HEADER, RemoteConnectionError
from acp.transport.http_client import SseParser, connect_http
from acp.transport.http_server import AcpAsgiApp, HttpServer

from .conftest import helper_argv
from .helpers.agent_full import DemoAgent, build_agent
from .helpers.client_support import texts
from .helpers.remote_suite import Updates, exercise_every_method

WAIT = 20.0
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
JSON = {"Content-Type": "application/json"}
SSE = {"Accept": "text/event-stream"}


@pytest.fixture
def served(no_thread_leak: None) -> Iterator[tuple[HttpServer, DemoAgent]]:
    agent, demo = build_agent(grace=30.0)
    server = agent.serve_http()
    yield server, demo
    server.close()
    agent.close()


@pytest.fixture
def wire(served: tuple[HttpServer, DemoAgent]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{served[0].port}", timeout=WAIT) as client:
        yield client


def _initialize(wire: httpx.Client) -> str:
    response = wire.post("/acp", json=INIT)
    assert response.status_code == 200
    assert response.json()["result"]["agentInfo"]["name"] == "demo-agent"
    return response.headers[CONNECTION_ID_HEADER]


class EventReader:
    """Reads one SSE stream on a thread; collects the decoded messages."""

    def __init__(self, client: httpx.Client, headers: dict[str, str]) -> None:
        self.items: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        self.status: int | None = None
        self.ended = threading.Event()
        self._opened = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(client, headers), daemon=True)
        self._thread.start()
        assert self._opened.wait(WAIT)

    def _run(self, client: httpx.Client, headers: dict[str, str]) -> None:
        parser = SseParser()
        try:
            with client.stream("GET", "/acp", headers={**SSE, **headers}, timeout=httpx.Timeout(WAIT, read=None)) as r:
                self.status = r.status_code
                self._opened.set()
                for chunk in r.iter_bytes():
                    for line in parser.feed(chunk):
                        with self.cond:
                            self.items.append(json.loads(line))
                            self.cond.notify_all()
        except httpx.HTTPError:
            pass
        finally:
            self._opened.set()
            self.ended.set()

    def wait_for(self, predicate: Any) -> list[dict[str, Any]]:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self.items), WAIT), f"timed out; got {self.items}"
            return list(self.items)


def _chunks(items: list[dict[str, Any]]) -> list[str]:
    return [
        m["params"]["update"]["content"]["text"]
        for m in items
        if m.get("method") == "session/update" and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
    ]


# ---------------------------------------------------------------------------- end to end


def test_every_facade_method_over_streamable_http(served: tuple[HttpServer, DemoAgent], tmp_path: Path) -> None:
    server, demo = served
    exercise_every_method(SyncClient.builder().connect(server.url, open_timeout=WAIT), demo, tmp_path)
    assert server.connections == []  # closing the client DELETEd its connection


def test_every_facade_method_with_session_scoped_streams(served: tuple[HttpServer, DemoAgent], tmp_path: Path) -> None:
    server, demo = served
    builder = SyncClient.builder().connect(server.url, open_timeout=WAIT, session_streams=True)
    exercise_every_method(builder, demo, tmp_path)


def test_every_facade_method_over_the_endpoints_websocket(
    served: tuple[HttpServer, DemoAgent], tmp_path: Path
) -> None:
    server, demo = served
    assert server.ws_url == f"ws://127.0.0.1:{server.port}/acp"
    exercise_every_method(SyncClient.builder().connect(server.ws_url, open_timeout=WAIT), demo, tmp_path)


def test_capabilities_and_sessions_are_per_connection(served: tuple[HttpServer, DemoAgent], tmp_path: Path) -> None:
    server, _ = served
    (tmp_path / "f.txt").write_text("visible")
    files = LocalFiles([str(tmp_path)])
    with_fs, without = Updates(), Updates()
    with (
        SyncClient.builder().connect(server.url).session_update_handler(with_fs)
        .read_text_file_handler(files.read_text_file).build()
    ) as a, SyncClient.builder().connect(server.ws_url).session_update_handler(without).build() as b:
        a.initialize()
        b.initialize()
        assert len(server.connections) == 2
        sa = a.new_session(cwd=str(tmp_path)).session_id
        sb = b.new_session(cwd=str(tmp_path)).session_id
        a.prompt(sa, f"read {tmp_path}/f.txt")
        b.prompt(sb, "caps")
        a.prompt(sa, "caps")
        assert texts(with_fs.items) == ["visible", "read=True terminal=False"]
        assert texts(without.items) == ["read=False terminal=False"]


def test_big_messages_pass_both_ways(served: tuple[HttpServer, DemoAgent], tmp_path: Path) -> None:
    server, _ = served
    big = ("0123456789abcdef" * 64 + "\n") * 5000  # ~5 MiB, one message each way
    (tmp_path / "big.txt").write_text(big)
    files = LocalFiles([str(tmp_path)])
    updates = Updates()
    with SyncClient.builder().connect(server.url).session_update_handler(updates).read_text_file_handler(
        files.read_text_file
    ).build() as client:
        client.initialize()
        sid = client.new_session(cwd=str(tmp_path)).session_id
        client.prompt(sid, f"read {tmp_path}/big.txt")
        assert texts(updates.items)[-1] == big
        client.prompt(sid, "echo " + "y" * 2_000_000)
        assert texts(updates.items)[-1] == "echo: echo " + "y" * 2_000_000


def test_many_concurrent_clients_against_one_server(served: tuple[HttpServer, DemoAgent], tmp_path: Path) -> None:
    server, _ = served
    count = 100 if os.environ.get("ACP_LOAD") == "full" else 20
    chunks = 50
    barrier = threading.Barrier(count, timeout=60)

    def one(i: int) -> str:
        updates = Updates()
        url = server.url if i % 2 == 0 else server.ws_url  # both profiles at once
        with SyncClient.builder().connect(url, open_timeout=60).session_update_handler(updates).request_timeout(
            60
        ).build() as client:
            client.initialize()
            sid = client.new_session(cwd=str(tmp_path)).session_id
            barrier.wait()
            for turn in range(2):
                assert client.prompt(sid, f"stream {chunks}").stop_reason == "end_turn"
                assert texts(updates.items) == [f"chunk {k}" for k in range(chunks)] * (turn + 1)
            return sid

    with ThreadPoolExecutor(count) as pool:
        sids = list(pool.map(one, range(count), timeout=240))
    assert len(set(sids)) == count


# ---------------------------------------------------------------------------- the wire (RFD)


def test_initialize_is_answered_200_with_a_connection_id(wire: httpx.Client) -> None:
    first = _initialize(wire)
    second = _initialize(wire)
    assert first and second and first != second


def test_posts_are_answered_202_and_answers_arrive_on_the_stream(wire: httpx.Client) -> None:
    cid = _initialize(wire)
    stream = EventReader(wire, {CONNECTION_ID_HEADER: cid})
    assert stream.status == 200
    new = {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}}
    response = wire.post("/acp", json=new, headers={CONNECTION_ID_HEADER: cid})
    assert response.status_code == 202 and response.content == b""
    sid = stream.wait_for(lambda items: items)[0]["result"]["sessionId"]
    prompt = {"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
              "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "stream 5"}]}}
    assert wire.post("/acp", json=prompt, headers={CONNECTION_ID_HEADER: cid, SESSION_ID_HEADER: sid}).status_code == 202
    items = stream.wait_for(lambda items: any(m.get("id") == 3 for m in items))
    assert _chunks(items) == [f"chunk {i}" for i in range(5)]
    assert items[-1] == {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}}
    # DELETE ends the connection: the stream ends, the id is forgotten.
    assert wire.delete("/acp", headers={CONNECTION_ID_HEADER: cid}).status_code == 202
    assert stream.ended.wait(WAIT)
    assert wire.post("/acp", json=new, headers={CONNECTION_ID_HEADER: cid}).status_code == 404


def test_error_statuses(wire: httpx.Client) -> None:
    cid = _initialize(wire)
    known = {CONNECTION_ID_HEADER: cid}
    listing = {"jsonrpc": "2.0", "id": 5, "method": "session/list", "params": {}}
    # POST
    assert wire.post("/acp", json=listing).status_code == 400  # no connection id, not initialize
    assert wire.post("/acp", json=listing, headers={CONNECTION_ID_HEADER: "nope"}).status_code == 404
    assert wire.post("/acp", content=json.dumps(listing), headers={**known, "Content-Type": "text/plain"}).status_code == 415
    assert wire.post("/acp", json=[listing], headers=known).status_code == 501
    bad = wire.post("/acp", content=b"{not json", headers={**known, **JSON})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == -32700
    invalid = wire.post("/acp", content=b'{"jsonrpc":"2.0","id":7}', headers={**known, **JSON})
    assert invalid.status_code == 400 and invalid.json()["error"]["code"] == -32600
    prompt = {"jsonrpc": "2.0", "id": 6, "method": "session/prompt",
              "params": {"sessionId": "s1", "prompt": [{"type": "text", "text": "x"}]}}
    assert wire.post("/acp", json=prompt, headers=known).status_code == 400  # no Acp-Session-Id
    assert wire.post("/acp", json=prompt, headers={**known, SESSION_ID_HEADER: "s2"}).status_code == 400
    # GET
    assert wire.get("/acp", headers={**known, "Accept": "application/json"}).status_code == 406
    assert wire.get("/acp", headers=SSE).status_code == 400
    assert wire.get("/acp", headers={**SSE, CONNECTION_ID_HEADER: "nope"}).status_code == 404
    # DELETE, other methods, other paths
    assert wire.delete("/acp").status_code == 400
    assert wire.delete("/acp", headers={CONNECTION_ID_HEADER: "nope"}).status_code == 404
    assert wire.put("/acp", json=listing, headers=known).status_code == 405
    assert wire.post("/elsewhere", json=INIT).status_code == 404
    # The connection is still fine after all that.
    stream = EventReader(wire, known)
    assert wire.post("/acp", json=listing, headers=known).status_code == 202
    (answer,) = stream.wait_for(lambda items: items)
    assert answer["id"] == 5 and answer["result"]["sessions"] == []
    # One stream per scope at a time.
    assert wire.get("/acp", headers={**SSE, **known}).status_code == 409


def test_a_post_over_the_limit_is_refused_with_413(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent, agent.serve_http(max_message_bytes=4096) as server, httpx.Client(timeout=WAIT) as wire:
        response = wire.post(server.url, json=INIT)
        cid = response.headers[CONNECTION_ID_HEADER]
        big = {"jsonrpc": "2.0", "id": 2, "method": "session/list", "params": {"x": "y" * 10_000}}
        assert wire.post(server.url, json=big, headers={CONNECTION_ID_HEADER: cid}).status_code == 413


def test_messages_before_the_stream_opens_wait_for_it(wire: httpx.Client) -> None:
    cid = _initialize(wire)
    for i in range(3):
        body = {"jsonrpc": "2.0", "id": 10 + i, "method": "session/list", "params": {}}
        assert wire.post("/acp", json=body, headers={CONNECTION_ID_HEADER: cid}).status_code == 202
    stream = EventReader(wire, {CONNECTION_ID_HEADER: cid})
    items = stream.wait_for(lambda items: len(items) == 3)
    assert [m["id"] for m in items] == [10, 11, 12]


def test_session_scoped_streams(wire: httpx.Client) -> None:
    cid = _initialize(wire)
    known = {CONNECTION_ID_HEADER: cid}
    main = EventReader(wire, known)
    for i, _ in enumerate(range(2)):
        new = {"jsonrpc": "2.0", "id": 2 + i, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}}
        wire.post("/acp", json=new, headers=known)
    answers = main.wait_for(lambda items: len(items) == 2)
    s1, s2 = (a["result"]["sessionId"] for a in answers)
    scoped = EventReader(wire, {**known, SESSION_ID_HEADER: s1})
    assert scoped.status == 200
    for n, sid in ((10, s1), (11, s2)):
        prompt = {"jsonrpc": "2.0", "id": n, "method": "session/prompt",
                  "params": {"sessionId": sid, "prompt": [{"type": "text", "text": f"stream {n - 7}"}]}}
        assert wire.post("/acp", json=prompt, headers={**known, SESSION_ID_HEADER: sid}).status_code == 202
        (scoped if sid == s1 else main).wait_for(lambda items, n=n: any(m.get("id") == n for m in items))
    # s1's updates and answer went to its own stream; s2's to the connection's.
    assert _chunks(scoped.items) == [f"chunk {i}" for i in range(3)]
    assert {m["params"]["sessionId"] for m in scoped.items if "method" in m} == {s1}
    assert _chunks(main.items) == [f"chunk {i}" for i in range(4)]
    assert all(m["params"]["sessionId"] == s2 for m in main.items if "method" in m)
    assert wire.get("/acp", headers={**SSE, **known, SESSION_ID_HEADER: s1}).status_code == 409


def test_the_endpoint_mounts_under_a_prefix(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    app = agent.asgi_app()

    async def mounted(scope: Any, receive: Any, send: Any) -> None:
        # What a framework's Mount does: the prefix moves to root_path.
        if scope["type"] != "lifespan":
            scope = dict(scope, root_path="/agents/demo")
        await app(scope, receive, send)

    mounted.started = app.started  # type: ignore[attr-defined]
    mounted.max_message_bytes = app.max_message_bytes  # type: ignore[attr-defined]
    mounted.path = app.path  # type: ignore[attr-defined]
    mounted.close = app.close  # type: ignore[attr-defined]
    mounted.connections = app.connections  # type: ignore[attr-defined]
    with agent, HttpServer(mounted, port=0) as server:  # type: ignore[arg-type]
        url = f"http://127.0.0.1:{server.port}/agents/demo/acp"
        with SyncClient.builder().connect(url).build() as client:
            assert client.initialize().agent_info is not None


# ---------------------------------------------------------------------------- refusals


def test_origin_and_authentication_refusals(no_thread_leak: None) -> None:
    agent, _ = build_agent()

    def authenticate(headers: Any) -> int | None:
        return None if headers.get("authorization") == "Bearer good" else 401

    with agent, agent.serve_http(authenticate=authenticate, origins=["https://editor.example"]) as server:
        with pytest.raises(RemoteConnectionError) as refused:
            SyncClient.builder().connect(server.url).build()
        assert refused.value.status == 401
        with pytest.raises(RemoteConnectionError) as refused:
            SyncClient.builder().connect(server.url, headers={"Authorization": "Bearer bad"}).build()
        assert refused.value.status == 401
        good = {"Authorization": "Bearer good"}
        with pytest.raises(RemoteConnectionError) as refused:
            SyncClient.builder().connect(server.url, headers={**good, "Origin": "https://evil.example"}).build()
        assert refused.value.status == 403
        with pytest.raises(RemoteConnectionError) as refused:  # the WebSocket profile too
            SyncClient.builder().connect(server.ws_url, headers={**good, "Origin": "https://evil.example"}).build()
        assert refused.value.status == 403
        for url in (server.url, server.ws_url):
            headers = {**good, "Origin": "https://editor.example"}
            with SyncClient.builder().connect(url, headers=headers).build() as client:
                assert client.initialize().agent_info is not None
        # Every request is checked, not only the first.
        with httpx.Client(timeout=WAIT) as wire:
            cid = wire.post(server.url, json=INIT, headers=good).headers[CONNECTION_ID_HEADER]
            assert wire.get(server.url, headers={**SSE, CONNECTION_ID_HEADER: cid}).status_code == 401
            assert wire.delete(server.url, headers={CONNECTION_ID_HEADER: cid}).status_code == 401


def test_unreachable_server_and_wrong_path(served: tuple[HttpServer, DemoAgent]) -> None:
    server, _ = served
    with pytest.raises(RemoteConnectionError) as refused:
        SyncClient.builder().connect(server.url.replace("/acp", "/nothing")).build()
    assert refused.value.status == 404
    with pytest.raises(RemoteConnectionError) as unreachable:
        SyncClient.builder().connect("http://127.0.0.1:1/acp", open_timeout=WAIT).build()
    assert unreachable.value.status is None and isinstance(unreachable.value, ConnectionClosedError)


def test_max_connections(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent, agent.serve_http(max_connections=2) as server:
        with SyncClient.builder().connect(server.url).build() as a, SyncClient.builder().connect(server.ws_url).build() as b:
            a.initialize()
            b.initialize()
            third = SyncClient.builder().connect(server.url).build()
            with third, pytest.raises(RemoteConnectionError) as refused:
                third.initialize()
            assert refused.value.status == 503
            with pytest.raises(RemoteConnectionError) as refused:
                SyncClient.builder().connect(server.ws_url).build()
            assert refused.value.status == 503


# ---------------------------------------------------------------------------- cookies


def test_cookies_are_kept_for_the_connection_and_sent_on_every_request(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    app = agent.asgi_app()
    seen: list[tuple[str, str | None]] = []
    versions: list[str | None] = []

    async def sticky(scope: Any, receive: Any, send: Any) -> None:
        # What a sticky load balancer does: pin the client with a cookie on the first answer.
        if scope["type"] == "lifespan":
            await app(scope, receive, send)
            return
        cookie = dict(scope["headers"]).get(b"cookie")
        seen.append((scope.get("method", "WS"), cookie.decode() if cookie else None))
        version = dict(scope["headers"]).get(b"acp-protocol-version")
        versions.append(version.decode() if version else None)

        async def send_with_cookie(message: Any) -> None:
            if message["type"] in ("http.response.start", "websocket.accept") and cookie is None:
                message = dict(message, headers=[*message.get("headers", []), (b"set-cookie", b"backend=b7; Path=/")])
            await send(message)

        await app(scope, receive, send_with_cookie)

    for name in ("started", "max_message_bytes", "path", "close", "connections"):
        setattr(sticky, name, getattr(app, name))
    with agent, HttpServer(sticky, port=0) as server:  # type: ignore[arg-type]
        url = f"http://127.0.0.1:{server.port}/acp"
        with SyncClient.builder().connect(url).build() as client:
            client.initialize()
            client.new_session(cwd="/w")
        methods = [m for m, _ in seen]
        assert methods[:2] == ["GET", "POST"] and "DELETE" in methods  # probe, initialize, ..., end
        assert versions[1] is None and set(versions[2:]) == {"1"}  # Acp-Protocol-Version after initialize
        assert seen[0][1] is None and all(c == "backend=b7" for _, c in seen[1:])
        # A jar of the caller's own outlives the connection: a reconnect sends the cookie at once.
        jar = CookieJar()
        seen.clear()
        with SyncClient.builder().connect(url, cookies=jar).build() as client:
            client.initialize()
        assert [c.name for c in jar] == ["backend"]
        seen.clear()
        for target in (url, f"ws://127.0.0.1:{server.port}/acp"):
            with SyncClient.builder().connect(target, cookies=jar).build() as client:
                client.initialize()
        assert seen and all(c == "backend=b7" for _, c in seen)


# ---------------------------------------------------------------------------- HTTP/2


def test_http2_under_hypercorn(no_thread_leak: None, tmp_path: Path) -> None:
    hypercorn = pytest.importorskip("hypercorn.asyncio")
    from hypercorn.config import Config

    pytest.importorskip("h2")
    agent, _ = build_agent()
    app = agent.asgi_app()
    versions: list[str] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            versions.append(scope["http_version"])
        await app(scope, receive, send)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]  # hypercorn owns (and closes) the listening socket
    config.accesslog = None
    config.errorlog = None
    stop = threading.Event()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        await hypercorn.serve(recording, config, shutdown_trigger=lambda: loop.run_in_executor(None, stop.wait))

    runner = threading.Thread(target=asyncio.run, args=(main(),))
    runner.start()
    try:
        assert app.started.wait(WAIT)
        url = f"http://127.0.0.1:{port}/acp"
        updates = Updates()
        with SyncClient.builder().connect(url, http2=True).session_update_handler(updates).build() as client:
            client.initialize()
            sid = client.new_session(cwd=str(tmp_path)).session_id
            assert client.prompt(sid, "stream 20").stop_reason == "end_turn"
            assert texts(updates.items) == [f"chunk {i}" for i in range(20)]
        assert versions and set(versions) == {"2"}
    finally:
        app.close()
        stop.set()
        runner.join(WAIT)
        agent.close()
    assert not runner.is_alive()


# ---------------------------------------------------------------------------- faults and lifecycle


def test_server_killed_mid_stream(no_thread_leak: None) -> None:
    proc = subprocess.Popen(helper_argv("remote_agent", "http"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
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
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def test_idle_connections_are_closed(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent, agent.serve_http(idle_timeout=0.3) as server, httpx.Client(timeout=WAIT) as wire:
        cid = wire.post(server.url, json=INIT).headers[CONNECTION_ID_HEADER]
        (handle,) = server.connections
        assert handle.wait_closed(WAIT)  # no stream was opened, nothing was posted
        listing = {"jsonrpc": "2.0", "id": 2, "method": "session/list", "params": {}}
        assert wire.post(server.url, json=listing, headers={CONNECTION_ID_HEADER: cid}).status_code == 404
        # A connection with an open stream is not idle.
        with SyncClient.builder().connect(server.url).build() as client:
            client.initialize()
            (handle,) = server.connections
            assert not handle.wait_closed(1.0)
            client.list_sessions()


def test_websocket_profile_limits_and_idle_timeout(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent, agent.serve_http(max_message_bytes=4096, idle_timeout=0.3) as server:
        with SyncClient.builder().connect(server.ws_url).build() as client:
            client.initialize()
            sid = client.new_session(cwd="/work").session_id
            with pytest.raises(ConnectionClosedError):
                client.prompt(sid, "x" * 10_000)
        with SyncClient.builder().connect(server.ws_url).build() as client:
            client.initialize()
            (handle,) = server.connections
            assert handle.wait_closed(WAIT)  # nothing either way for 0.3 s
            with pytest.raises(ConnectionClosedError):
                client.list_sessions()


def test_closing_the_server_answers_turns_in_flight(no_thread_leak: None) -> None:
    agent, _ = build_agent(grace=30.0)
    updates = Updates()
    server = agent.serve_http()
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
            connect_http(server.url, open_timeout=WAIT)
    finally:
        server.close()
        agent.close()


def test_a_refused_request_fails_its_caller_not_the_connection(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent, agent.serve_http(max_message_bytes=4096) as server:
        with SyncClient.builder().connect(server.url).build() as client:
            client.initialize()
            with pytest.raises(acp.RequestError) as refused:
                client.ext_request("_demo/echo", {"x": "y" * 10_000})
            assert refused.value.data == {"httpStatus": 413}
            assert client.ext_request("_demo/echo", {"x": 1}) == {"echo": {"x": 1}}


def test_transport_contract(served: tuple[HttpServer, DemoAgent]) -> None:
    server, _ = served
    transport = connect_http(server.url)
    assert transport.connection_id is None
    transport.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
                    b'{"jsonrpc":"2.0","id":2,"method":"session/list","params":{}}\n')
    assert transport.connection_id
    received = b""
    while received.count(b"\n") < 2:
        data = transport.read()
        assert data
        received += data
    assert [json.loads(line)["id"] for line in received.splitlines()] == [1, 2]
    reader_result: list[bytes] = []
    reader = threading.Thread(target=lambda: reader_result.append(transport.read()))
    reader.start()
    transport.close()  # DELETE; the stream ends; the blocked read returns
    reader.join(WAIT)
    assert reader_result == [b""]
    with pytest.raises(ConnectionClosedError):
        transport.write(b"{}\n")
    transport.close()
    assert server.connections == [] or all(c.wait_closed(WAIT) for c in server.connections)


def test_sse_parser() -> None:
    parser = SseParser(max_event_bytes=100)
    assert parser.feed(b": comment\n\ndata: {\"a\":") == []
    assert parser.feed(b"1}\n\nevent: message\r\ndata: [1,\r\ndata: 2]\r\n\r\n") == [b'{"a":1}\n', b"[1, 2]\n"]
    assert parser.feed(b"id: 7\nretry: 10\n\n") == []
    with pytest.raises(ValueError):
        parser.feed(b"data: " + b"x" * 200)


def test_importing_acp_never_imports_httpx_or_uvicorn() -> None:
    code = (
        "import sys, acp, acp.transport, acp.client, acp.agent\n"
        "acp.SyncClient.builder().connect('http://127.0.0.1:1/acp')\n"
        "acp.SyncAgent.builder().build().asgi_app()\n"
        "bad = {'httpx', 'uvicorn', 'websockets', 'asyncio'} & set(sys.modules)\n"
        "assert not bad - {'asyncio'}, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=WAIT)


def test_asgi_app_refuses_bad_options() -> None:
    agent, _ = build_agent()
    with agent:
        for bad in ({"max_connections": 0}, {"max_message_bytes": 0}, {"idle_timeout": 0}, {"keepalive": 0}):
            with pytest.raises(ValueError):
                AcpAsgiApp(agent, **bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            AcpAsgiApp(agent, origins="https://one.example")


@pytest.mark.parametrize("profile", ["http", "ws"])
def test_the_scenario_agent_served_remotely_passes_the_conformance_check(profile: str, no_thread_leak: None) -> None:
    # acp check drives the raw wire: garbage bodies, invalid requests, unknown methods, a
    # session/cancel in flight. Over HTTP the server's 400 bodies are the JSON-RPC errors.
    from acp.client.settings import AgentSettings
    from acp.conformance import run_checks
    from acp.examples.scenario_agent import build_agent as build_scenario_agent

    agent = build_scenario_agent()
    with agent, agent.serve_http() as server:
        url = server.url if profile == "http" else server.ws_url
        report = run_checks(AgentSettings(url=url), cancel_prompt="wait_for_cancel", timeout=WAIT)
    # Advisory warnings (the scenario agent's SHOULDs) are allowed; nothing else may fail or warn.
    failed = [(r.name, r.status, r.detail) for r in report.results
              if r.status == "FAIL" or (r.status == "WARN" and r.tier != "advisory")]
    assert {r.name for r in report.results if r.status == "PASS"} >= {
        "robust.garbage_line", "robust.invalid_request", "prompt.cancel", "prompt.no_updates_after_cancel"
    }
    assert report.conforming and failed == [], failed


def test_fuzzed_posts_never_take_the_server_down(served: tuple[HttpServer, DemoAgent]) -> None:
    """Random bodies, content types and headers on POST /acp: every one gets an HTTP answer
    (202 or 4xx/5xx, never a dropped connection), and a real client still works afterwards."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    server, _ = served
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=12,
    )
    messages = st.fixed_dictionaries(
        {},
        optional={
            "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
            "id": st.one_of(st.integers(), st.text(max_size=5), st.none(), st.lists(st.integers(), max_size=2)),
            "method": st.one_of(st.sampled_from(["initialize", "session/new", "session/prompt", "session/cancel", "x"]), st.integers()),
            "params": json_values,
            "result": json_values,
        },
    )
    bodies = st.one_of(st.binary(max_size=300), messages.map(lambda m: json.dumps(m).encode()))
    with httpx.Client(timeout=WAIT) as wire:
        cid = wire.post(server.url, json=INIT).headers[CONNECTION_ID_HEADER]

        @settings(max_examples=int(os.environ.get("ACP_HTTP_FUZZ", "150")), deadline=None, suppress_health_check=list(HealthCheck))
        @given(
            body=bodies,
            content_type=st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain", ""]),
            with_cid=st.sampled_from([cid, None, "bogus"]),
            session=st.sampled_from([None, "s1", "zz"]),
        )
        def post(body: bytes, content_type: str, with_cid: str | None, session: str | None) -> None:
            headers = {"Content-Type": content_type} if content_type else {}
            if with_cid is not None:
                headers[CONNECTION_ID_HEADER] = with_cid
            if session is not None:
                headers[SESSION_ID_HEADER] = session
            status = wire.post(server.url, content=body, headers=headers).status_code
            assert status in (200, 202, 400, 404, 415, 501, 503), status

        post()
        assert wire.delete(server.url, headers={CONNECTION_ID_HEADER: cid}).status_code == 202
    with SyncClient.builder().connect(server.url).build() as client:
        client.initialize()
        assert client.new_session(cwd="/w").session_id
