"""The asyncio remote transports (acp.aio.transport.websocket / http_client) over real loopback
sockets, against the sync servers (SyncAgent.serve_websocket, and the ASGI endpoint under
uvicorn): raw lines both ways, the refusals and their statuses, cookies, limits, a server that
goes away, and close. Each test runs its own event loop (asyncio.run); servers run in their
background threads as in test_transport_websocket.py / test_transport_http.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.cookiejar import CookieJar
from typing import Any, TypeVar

import pytest

if not os.environ.get("CI"):  # in CI the extras must be there
    for extra in ("httpx", "uvicorn", "websockets"):
        pytest.importorskip(extra, reason="the ws and http extras are not installed")

import httpx
from websockets.asyncio.server import serve as ws_serve

from acp.agent import SyncAgent
from acp.aio import AsyncConnection
from acp.aio.transport import connect_http, connect_websocket
from acp.aio.transport.http_client import AsyncHttpTransport
from acp.aio.transport.websocket import AsyncWebSocketTransport
from acp.client import LocalFiles, SyncClient
from acp.errors import ConnectionClosedError
from acp.transport._remote import CONNECTION_ID_HEADER, RemoteConnectionError
from acp.transport.http_server import AcpAsgiApp, HttpServer
from acp.transport.websocket import RefuseConnection, WebSocketServer

from .conftest import helper_argv
from .helpers.agent_full import build_agent
from .helpers.aio_echo_agent import AsyncEchoAgent
from .helpers.client_support import texts
from .helpers.remote_suite import Updates

WAIT = 20.0
T = TypeVar("T")

INIT = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
LIST = b'{"jsonrpc":"2.0","id":2,"method":"session/list","params":{}}\n'
JSON = {"Content-Type": "application/json"}
NEW = b'{"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}\n'


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a fresh event loop, bounded."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, WAIT * 2)

    return asyncio.run(bounded())


async def read_messages(transport: Any, count: int) -> list[dict[str, Any]]:
    """Read until ``count`` whole lines arrived; each line is one JSON message."""
    received = b""
    while received.count(b"\n") < count:
        data = await asyncio.wait_for(transport.read(), WAIT)
        assert data, f"end of input after {received!r}"
        received += data
    return [json.loads(line) for line in received.splitlines()]


async def wait_for(predicate: Any, what: str) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(poll(), WAIT)
    except asyncio.TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


@pytest.fixture
def demo_agent(no_thread_leak: None) -> Iterator[SyncAgent]:
    agent, _ = build_agent(grace=30.0)
    with agent:
        yield agent


@pytest.fixture
def ws_server(demo_agent: SyncAgent) -> Iterator[WebSocketServer]:
    with demo_agent.serve_websocket() as server:
        yield server


@pytest.fixture
def http_server(demo_agent: SyncAgent) -> Iterator[HttpServer]:
    with demo_agent.serve_http() as server:
        yield server


# ---------------------------------------------------------------------------- WebSocket


@pytest.mark.parametrize("endpoint", ["websocket-server", "asgi"])
def test_websocket_lines_both_ways(endpoint: str, ws_server: WebSocketServer,
                                   http_server: HttpServer) -> None:
    url = ws_server.url if endpoint == "websocket-server" else http_server.ws_url

    async def main() -> None:
        transport = await connect_websocket(url)
        assert isinstance(transport, AsyncWebSocketTransport)
        assert transport.connection_id and "websocket" in transport.description
        transport.write(INIT + LIST)  # two lines in one write: two frames, in order
        await transport.drain()
        assert [m["id"] for m in await read_messages(transport, 2)] == [1, 2]
        # A pending read returns b"" when the transport is closed under it.
        pending = asyncio.ensure_future(transport.read())
        await asyncio.sleep(0)
        await transport.close()
        assert await asyncio.wait_for(pending, WAIT) == b""
        assert await transport.read() == b""
        with pytest.raises(ConnectionClosedError):
            transport.write(LIST)
        await transport.close()  # idempotent

    run(main())


def test_websocket_close_write_ends_the_connection(ws_server: WebSocketServer) -> None:
    server = ws_server

    async def main() -> None:
        transport = await connect_websocket(server.url)
        transport.write(INIT)
        await read_messages(transport, 1)
        (handle,) = server.connections
        transport.close_write()  # no half-close in WebSocket: the whole socket closes
        transport.close_write()
        assert await transport.read() == b""
        with pytest.raises(ConnectionClosedError):
            transport.write(LIST)
        await transport.close()
        assert await asyncio.get_running_loop().run_in_executor(None, handle.wait_closed, WAIT)

    run(main())


def test_websocket_frames_binary_pretty_printed_and_cookies(no_thread_leak: None) -> None:
    """Against a bare websockets server: a binary frame is dropped, a frame with newlines is
    one line, cookies of the jar go with the upgrade and the ones it sets are kept."""
    seen: list[str | None] = []

    async def handler(ws: Any) -> None:
        await ws.send(b"\x00binary")
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "x", "params": {"a": [1, 2]}}, indent=2))
        assert json.loads(await ws.recv()) == {"jsonrpc": "2.0", "method": "y"}
        await ws.close()

    def process_request(conn: Any, request: Any) -> None:
        seen.append(request.headers.get("Cookie"))

    def process_response(conn: Any, request: Any, response: Any) -> None:
        response.headers["Set-Cookie"] = "backend=b7; Path=/"
        response.headers[CONNECTION_ID_HEADER] = "cid-1"

    async def main() -> None:
        async with ws_serve(handler, "127.0.0.1", 0, process_request=process_request,
                            process_response=process_response) as server:
            port = server.sockets[0].getsockname()[1]
            jar = CookieJar()
            url = f"ws://127.0.0.1:{port}/acp"
            for _ in range(2):
                transport = await connect_websocket(url, cookies=jar, headers={"X-Test": "1"})
                assert transport.connection_id == "cid-1"
                line = await transport.read()
                assert line.count(b"\n") == 1 and json.loads(line)["params"] == {"a": [1, 2]}
                transport.write(b'{"jsonrpc":"2.0","method":"y"}\n')
                assert await transport.read() == b""  # the server closed
                await transport.close()
            assert seen == [None, "backend=b7"] and [c.name for c in jar] == ["backend"]

    run(main())


def test_websocket_refusals(no_thread_leak: None) -> None:
    verdicts: dict[str, Any] = {"Bearer good": None, "Bearer banned": RefuseConnection(403, "this token is banned")}

    def authenticate(headers: Any) -> int | None:
        verdict = verdicts.get(headers.get("Authorization", ""), 401)
        if isinstance(verdict, Exception):
            raise verdict
        return verdict  # type: ignore[no-any-return]

    agent, _ = build_agent()
    with agent, agent.serve_websocket(authenticate=authenticate, max_connections=1) as server:

        async def main() -> None:
            with pytest.raises(RemoteConnectionError) as refused:
                await connect_websocket(server.url)
            assert refused.value.status == 401 and "HTTP 401" in str(refused.value)
            with pytest.raises(RemoteConnectionError) as refused:
                await connect_websocket(server.url, headers={"Authorization": "Bearer banned"})
            assert refused.value.status == 403 and "this token is banned" in str(refused.value)
            good = {"Authorization": "Bearer good"}
            with pytest.raises(RemoteConnectionError) as refused:
                await connect_websocket(server.url, headers={**good, "Origin": "https://evil.example"})
            assert refused.value.status == 403 and isinstance(refused.value, ConnectionClosedError)
            with pytest.raises(RemoteConnectionError) as refused:
                await connect_websocket(server.url.replace("/acp", "/other"), headers=good)
            assert refused.value.status == 404
            first = await connect_websocket(server.url, headers=good)
            first.write(INIT)
            await read_messages(first, 1)
            with pytest.raises(RemoteConnectionError) as refused:
                await connect_websocket(server.url, headers=good)
            assert refused.value.status == 503
            await first.close()
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            with pytest.raises(RemoteConnectionError) as refused:
                await connect_websocket(f"ws://127.0.0.1:{port}/acp")
            assert refused.value.status is None and f"ws://127.0.0.1:{port}/acp" in str(refused.value)
            with pytest.raises(ValueError, match="invalid WebSocket URL"):
                await connect_websocket("http://127.0.0.1:1/acp")

        run(main())


def test_websocket_message_over_the_limit_ends_the_connection(ws_server: WebSocketServer) -> None:
    server = ws_server

    async def main() -> None:
        transport = await connect_websocket(server.url, max_message_bytes=200)
        transport.write(INIT)  # its answer is longer than 200 bytes: the client closes with 1009
        assert await asyncio.wait_for(transport.read(), WAIT) == b""
        with pytest.raises(ConnectionClosedError):
            transport.write(LIST)
        await transport.close()

    run(main())


@contextlib.contextmanager
def remote_agent(profile: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The demo agent served over ``profile`` by a subprocess (remote_agent.py), and its URL;
    its threads are not this process's."""
    proc = subprocess.Popen(helper_argv("remote_agent", profile), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        yield proc, proc.stdout.readline().strip()
    finally:
        proc.stdin.close()  # it serves until its stdin ends
        try:
            proc.wait(WAIT)
        finally:
            proc.kill()
            proc.stdout.close()


@pytest.mark.parametrize("profile", ["ws", "http"])
def test_server_killed_mid_stream(profile: str, no_thread_leak: None) -> None:
    with remote_agent(profile) as (proc, url):

        async def main() -> None:
            transport: Any = await (connect_websocket(url) if profile == "ws" else connect_http(url))
            transport.write(INIT + NEW)
            (_, new) = await read_messages(transport, 2)
            sid = new["result"]["sessionId"]
            prompt = {"jsonrpc": "2.0", "id": 4, "method": "session/prompt",
                      "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "stream 100000000"}]}}
            transport.write(json.dumps(prompt).encode() + b"\n")
            await read_messages(transport, 50)  # updates are streaming
            proc.kill()
            while await asyncio.wait_for(transport.read(), WAIT):
                pass  # what was in flight, then the end
            await transport.close()

        run(main())


# ---------------------------------------------------------------------------- Streamable HTTP


def test_http_lines_both_ways(http_server: HttpServer) -> None:
    server = http_server

    async def main() -> None:
        transport = await connect_http(server.url)
        assert isinstance(transport, AsyncHttpTransport) and transport.connection_id is None
        transport.write(INIT + LIST)  # one POST each, in order; never blocks
        await transport.drain()  # waits for initialize's answer
        assert transport.connection_id and transport.connection_id in transport.description
        assert [m["id"] for m in await read_messages(transport, 2)] == [1, 2]
        assert len(server.connections) == 1
        pending = asyncio.ensure_future(transport.read())
        await asyncio.sleep(0)
        await transport.close()  # DELETE; the stream ends; the pending read returns
        assert await asyncio.wait_for(pending, WAIT) == b""
        with pytest.raises(ConnectionClosedError):
            transport.write(LIST)
        await transport.close()
        await wait_for(lambda: server.connections == [], "the server to forget the connection")
        assert transport.error is None

    run(main())


def test_http_close_write_deletes_after_what_was_written(http_server: HttpServer) -> None:
    server = http_server

    async def main() -> None:
        transport = await connect_http(server.url)
        transport.write(INIT)
        await transport.drain()
        transport.write(NEW + LIST)
        transport.close_write()  # the two POSTs still go out, then DELETE
        transport.close_write()
        messages = []
        while True:
            data = await asyncio.wait_for(transport.read(), WAIT)
            if not data:
                break
            messages += [json.loads(line) for line in data.splitlines()]
        ids = [m["id"] for m in messages]  # the agent runs requests concurrently: any order
        assert ids[0] == 1 and sorted(ids) == [1, 2, 3]
        await transport.close()
        await wait_for(lambda: server.connections == [], "the DELETE")

    run(main())


def test_http_refusals(no_thread_leak: None) -> None:
    agent, _ = build_agent()

    def authenticate(headers: Any) -> int | None:
        return None if headers.get("authorization") == "Bearer good" else 401

    good = {"Authorization": "Bearer good"}
    with agent, agent.serve_http(authenticate=authenticate, max_connections=1, max_message_bytes=4096) as server:

        async def main() -> None:
            with pytest.raises(RemoteConnectionError) as refused:  # the probe sees it
                await connect_http(server.url)
            assert refused.value.status == 401
            with pytest.raises(RemoteConnectionError) as refused:
                await connect_http(server.url.replace("/acp", "/nothing"), headers=good)
            assert refused.value.status == 404
            with pytest.raises(RemoteConnectionError) as refused:
                await connect_http("http://127.0.0.1:1/acp", open_timeout=WAIT)
            assert refused.value.status is None
            first = await connect_http(server.url, headers=good)
            first.write(INIT)
            await first.drain()
            # A request the server refuses (413) is answered locally; the connection goes on.
            big = {"jsonrpc": "2.0", "id": 7, "method": "_demo/echo", "params": {"x": "y" * 10_000}}
            first.write(json.dumps(big).encode() + b"\n" + LIST)
            init, refused_answer, listing = await read_messages(first, 3)
            assert refused_answer["id"] == 7 and refused_answer["error"]["data"] == {"httpStatus": 413}
            assert listing["id"] == 2 and "result" in listing
            # Full: initialize is answered 503, raised by drain(), and the reads end.
            second = await connect_http(server.url, headers=good, check=False)
            second.write(INIT)
            with pytest.raises(RemoteConnectionError) as refused:
                await second.drain()
            assert refused.value.status == 503 and second.error is refused.value
            assert await second.read() == b""
            with pytest.raises(RemoteConnectionError):
                second.write(LIST)
            await second.close()
            await first.close()

        run(main())


def test_http_a_connection_the_server_forgot(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    with agent, agent.serve_http(idle_timeout=0.3) as server:

        async def main() -> None:
            transport = await connect_http(server.url)
            transport.write(INIT)
            await read_messages(transport, 1)
            (handle,) = server.connections
            # Reaped as idle only without an open stream: cut ours (the server keeps it open).
            for task in transport._streams:
                task.cancel()
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, handle.wait_closed, WAIT)
            transport.write(LIST)  # answered 404: the connection is lost, for good
            await wait_for(lambda: transport.error is not None, "the 404")
            assert "HTTP 404" in str(transport.error)
            with pytest.raises(ConnectionClosedError, match="HTTP 404"):
                await transport.drain()
            with pytest.raises(ConnectionClosedError, match="HTTP 404"):
                transport.write(LIST)
            assert await transport.read() == b""
            await transport.close()

        run(main())


class StickyBalancer:
    """ASGI middleware that acts as a sticky load balancer in front of ``app``: the first
    answer sets a cookie; every request's method and headers are recorded in ``seen``."""

    def __init__(self, app: AcpAsgiApp) -> None:
        self.app = app
        self.seen: list[tuple[str, dict[bytes, bytes]]] = []

    def __getattr__(self, name: str) -> Any:  # HttpServer reads the app's own attributes
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        self.seen.append((scope.get("method", "WS"), headers))
        pin = [(b"set-cookie", b"backend=b7; Path=/")] if b"cookie" not in headers else []

        async def pinned(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = dict(message, headers=[*message.get("headers", []), *pin])
            await send(message)

        await self.app(scope, receive, pinned)


def test_http_cookies_protocol_version_and_session_streams(no_thread_leak: None) -> None:
    agent, _ = build_agent()
    sticky = StickyBalancer(agent.asgi_app())
    seen = sticky.seen
    with agent, HttpServer(sticky, port=0) as server:  # type: ignore[arg-type]

        async def main() -> None:
            jar = CookieJar()
            transport = await connect_http(server.url, cookies=jar, session_streams=True)
            transport.write(INIT + NEW)
            _, new = await read_messages(transport, 2)
            sid = new["result"]["sessionId"]
            prompt = {"jsonrpc": "2.0", "id": 4, "method": "session/prompt",
                      "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "stream 3"}]}}
            transport.write(json.dumps(prompt).encode() + b"\n")
            messages = await read_messages(transport, 4)
            assert [m.get("id") for m in messages] == [None, None, None, 4]
            await transport.close()
            assert [c.name for c in jar] == ["backend"]

        run(main())
    methods = [method for method, _ in seen]
    assert methods[:2] == ["GET", "POST"] and methods[-1] == "DELETE"  # probe, initialize, ..., end
    assert all(h.get(b"cookie") == b"backend=b7" for _, h in seen[1:])
    assert b"acp-protocol-version" not in seen[1][1]
    assert all(h.get(b"acp-protocol-version") == b"1" for _, h in seen[2:])
    # The session's own stream was opened before the prompt about it was posted.
    session_gets = [i for i, (m, h) in enumerate(seen) if m == "GET" and b"acp-session-id" in h]
    prompt_post = next(i for i, (m, h) in enumerate(seen) if m == "POST" and b"acp-session-id" in h)
    assert session_gets and session_gets[0] < prompt_post


def test_importing_acp_aio_transport_imports_neither_library() -> None:
    code = (
        "import sys, acp.aio.transport\n"
        "bad = {'httpx', 'websockets'} & set(sys.modules)\n"
        "assert not bad, bad\n"
        "from acp.aio.transport import connect_http, connect_websocket\n"
        "assert {'httpx', 'websockets'} <= set(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=WAIT)


@pytest.fixture
def remote_urls() -> Iterator[dict[str, str]]:
    """The demo agent served by two subprocesses (WebSocket, Streamable HTTP)."""
    with remote_agent("ws") as (_, ws_url), remote_agent("http") as (_, http_url):
        yield {"ws": ws_url, "http": http_url}


def test_the_transports_start_no_thread(remote_urls: dict[str, str]) -> None:
    async def main() -> tuple[int, int]:
        before = threading.active_count()
        transports: list[Any] = []
        for _ in range(4):
            transports.append(await connect_websocket(remote_urls["ws"]))
            transports.append(await connect_http(remote_urls["http"]))
        for transport in transports:
            transport.write(INIT + LIST)
        for transport in transports:
            assert [m["id"] for m in await read_messages(transport, 2)] == [1, 2]
        during = threading.active_count()
        await asyncio.gather(*(t.close() for t in transports))
        return before, during

    before, during = run(main())
    assert during == before, f"{during - before} threads for 8 connections"


# ---------------------------------------------------------------------------- AsyncConnection over them


class Collected:
    """session/update notifications an AsyncConnection client received, in order."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, params: Any) -> None:
        update = params["update"]
        if update.get("sessionUpdate") == "agent_message_chunk":
            self.texts.append(update["content"]["text"])


async def async_client(transport: Any, tmp_path: Any) -> tuple[AsyncConnection, Collected]:
    """An AsyncConnection client over ``transport`` that handles updates and fs reads."""
    conn = AsyncConnection(transport, name="aio-client")
    updates = Collected()
    conn.on_notification("session/update", updates)

    async def read_text_file(params: Any, call: Any) -> dict[str, str]:
        return {"content": (tmp_path / params["path"].rsplit("/", 1)[-1]).read_text()}

    conn.on_request("fs/read_text_file", read_text_file)
    conn.start()
    return conn, updates


async def drive(conn: AsyncConnection, updates: Collected, tmp_path: Any, name: str) -> None:
    """initialize, a session, a streamed turn (every update handled before its answer) and a
    turn in which the agent asks the client for a file: both directions."""
    init = await conn.request("initialize", {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True}}})
    assert init["agentInfo"]["name"] == name
    sid = (await conn.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["sessionId"]
    answer = await conn.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "stream 50"}]})
    assert answer == {"stopReason": "end_turn"}
    assert updates.texts == [f"chunk {i}" for i in range(50)]  # all handled before the answer
    (tmp_path / "in.txt").write_text("from the async client")
    await conn.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": f"read {tmp_path}/in.txt"}]})
    assert updates.texts[-1] == "from the async client"


@pytest.mark.parametrize("profile", ["websocket-server", "asgi-ws", "asgi-http", "asgi-http-session-streams"])
def test_an_async_connection_client_drives_a_sync_agent(
    profile: str, ws_server: WebSocketServer, http_server: HttpServer, tmp_path: Any
) -> None:
    async def main() -> None:
        if profile == "websocket-server":
            transport: Any = await connect_websocket(ws_server.url)
        elif profile == "asgi-ws":
            transport = await connect_websocket(http_server.ws_url)
        else:
            transport = await connect_http(http_server.url, session_streams=profile.endswith("streams"))
        conn, updates = await async_client(transport, tmp_path)
        await drive(conn, updates, tmp_path, "demo-agent")
        await conn.close()

    run(main())


@pytest.fixture
def echo_served(no_thread_leak: None) -> Iterator[tuple[HttpServer, AsyncEchoAgent]]:
    """The async echo agent (an AsyncConnectionServer) served by AcpAsgiApp under uvicorn."""
    agent = AsyncEchoAgent()
    with HttpServer(AcpAsgiApp(agent)) as server:
        yield server, agent


@pytest.mark.parametrize("profile", ["ws", "http", "http-session-streams"])
def test_an_async_agent_on_the_asgi_loop_serves_sync_clients(
    profile: str, echo_served: tuple[HttpServer, AsyncEchoAgent], tmp_path: Any
) -> None:
    server, agent = echo_served
    agent.app = server.app
    url = server.ws_url if profile == "ws" else server.url
    options = {"session_streams": True} if profile.endswith("streams") else {}
    (tmp_path / "in.txt").write_text("from the sync client's disk")
    updates = Updates()
    files = LocalFiles([str(tmp_path)])
    with (
        SyncClient.builder().connect(url, **options).session_update_handler(updates)
        .read_text_file_handler(files.read_text_file).build()
    ) as client:
        assert client.initialize().agent_info.name == "async-echo"  # type: ignore[union-attr]
        sid = client.new_session(cwd=str(tmp_path)).session_id
        assert client.prompt(sid, "stream 100").stop_reason == "end_turn"
        assert texts(updates.items) == [f"chunk {i}" for i in range(100)]
        client.prompt(sid, f"read {tmp_path}/in.txt")  # the agent asks the client: both ways
        assert texts(updates.items)[-1] == "from the sync client's disk"
        assert client.prompt(sid, "y" * 200_000).stop_reason == "end_turn"
        assert texts(updates.items)[-1] == "echo: " + "y" * 200_000
        assert len(server.connections) == 1
    agent.wait_for(lambda a: a.closed == 1)  # closing the client ended the agent's connection
    assert server.connections == []
    # Deterministic, not a race: the connection left the list before the agent heard of its end.
    assert agent.listed_at_close == [0]


@pytest.mark.parametrize("profile", ["ws", "http"])
def test_an_async_client_drives_an_async_agent_on_the_asgi_loop(
    profile: str, echo_served: tuple[HttpServer, AsyncEchoAgent], tmp_path: Any
) -> None:
    server, agent = echo_served

    async def main() -> None:
        transport: Any = await (connect_websocket(server.ws_url) if profile == "ws" else connect_http(server.url))
        conn, updates = await async_client(transport, tmp_path)
        await drive(conn, updates, tmp_path, "async-echo")
        await conn.close()

    run(main())
    agent.wait_for(lambda a: a.closed == 1)


def _threads_per_connection(app: AcpAsgiApp, count: int) -> int:
    """Threads this process gains while ``count`` connections (half WebSocket, half HTTP,
    opened by the loop-native client transports, which start none) are open on ``app``."""
    with HttpServer(app) as server:

        async def main() -> int:
            before = threading.active_count()
            transports: list[Any] = []
            for i in range(count):
                transports.append(await (connect_websocket(server.ws_url) if i % 2 else connect_http(server.url)))
            for transport in transports:
                transport.write(INIT + LIST)
            for transport in transports:  # (answers in any order: requests run concurrently)
                assert sorted(m["id"] for m in await read_messages(transport, 2)) == [1, 2]
            grown = threading.active_count() - before
            await asyncio.gather(*(t.close() for t in transports))
            return grown

        return run(main())


def test_no_thread_per_connection_for_an_async_agent(no_thread_leak: None) -> None:
    # The yardstick: a sync agent's connections each get an engine thread or more.
    sync_agent, _ = build_agent()
    with sync_agent:
        assert _threads_per_connection(sync_agent.asgi_app(), 6) >= 6
    echo = AsyncEchoAgent()
    assert _threads_per_connection(AcpAsgiApp(echo), 6) == 0
    echo.wait_for(lambda a: a.opened == 6 and a.closed == 6)


def test_async_agent_connections_close_on_delete_idle_and_shutdown(no_thread_leak: None) -> None:
    agent = AsyncEchoAgent()
    with HttpServer(AcpAsgiApp(agent, idle_timeout=0.3)) as server, httpx.Client(timeout=WAIT) as wire:
        # Idle: initialized, then no stream and no request.
        response = wire.post(server.url, json=json.loads(INIT))
        assert response.status_code == 200 and response.json()["result"]["agentInfo"]["name"] == "async-echo"
        cid = response.headers[CONNECTION_ID_HEADER]
        agent.wait_for(lambda a: a.closed == 1)
        assert wire.post(server.url, content=LIST, headers={CONNECTION_ID_HEADER: cid, **JSON}).status_code == 404
        # DELETE.
        cid = wire.post(server.url, json=json.loads(INIT)).headers[CONNECTION_ID_HEADER]
        assert wire.delete(server.url, headers={CONNECTION_ID_HEADER: cid}).status_code == 202
        agent.wait_for(lambda a: a.closed == 2)
        # Shutdown with a turn in flight on each profile: answered cancelled, then closed.
        updates = [Updates(), Updates()]
        clients = [SyncClient.builder().connect(url).session_update_handler(u).build()
                   for url, u in zip((server.url, server.ws_url), updates, strict=True)]
        try:
            with ThreadPoolExecutor(2) as pool:
                futures = []
                for client, u in zip(clients, updates, strict=True):
                    client.initialize()
                    sid = client.new_session(cwd="/w").session_id
                    futures.append(pool.submit(client.prompt, sid, "wait"))
                    u.wait_for(lambda items: texts(items) == ["waiting"])
                assert len(server.connections) == 2
                server.close(timeout=WAIT)  # from this thread: the connections close on the loop
                assert [f.result(WAIT).stop_reason for f in futures] == ["cancelled", "cancelled"]
        finally:
            for client in clients:
                client.close()
        agent.wait_for(lambda a: a.closed == 4)
        assert server.connections == []


def test_async_agent_refusals_are_the_sync_ones(no_thread_leak: None) -> None:
    def authenticate(headers: Any) -> int | None:
        return None if headers.get("authorization") == "Bearer good" else 401

    good = {"Authorization": "Bearer good"}
    agent = AsyncEchoAgent()
    app = AcpAsgiApp(agent, authenticate=authenticate, max_connections=1)
    with HttpServer(app) as server:
        with pytest.raises(RemoteConnectionError) as refused:
            SyncClient.builder().connect(server.url).build()
        assert refused.value.status == 401
        with pytest.raises(RemoteConnectionError) as refused:
            SyncClient.builder().connect(server.ws_url, headers={**good, "Origin": "https://evil.example"}).build()
        assert refused.value.status == 403
        with SyncClient.builder().connect(server.ws_url, headers=good).build() as first:
            first.initialize()
            for url in (server.url, server.ws_url):
                with pytest.raises(RemoteConnectionError) as refused:
                    with SyncClient.builder().connect(url, headers=good).build() as extra:
                        extra.initialize()
                assert refused.value.status == 503
    assert agent.opened == 1


class GatedEchoAgent(AsyncEchoAgent):
    """Its first connect_async waits for ``gate`` (set from the test's thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()

    async def connect_async(self, transport: Any) -> Any:
        if not self.entered.is_set():
            self.entered.set()
            while not self.gate.is_set():  # a loop-side wait on a thread's event, bounded
                await asyncio.sleep(0.005)
        return await super().connect_async(transport)


@pytest.mark.parametrize("profile", ["ws", "http"])
def test_a_connection_being_made_counts_against_max_connections(profile: str, no_thread_leak: None) -> None:
    agent = GatedEchoAgent()
    with HttpServer(AcpAsgiApp(agent, max_connections=1)) as server, ThreadPoolExecutor(1) as pool:
        url = server.ws_url if profile == "ws" else server.url

        def first() -> str | None:
            with SyncClient.builder().connect(url).build() as client:
                info = client.initialize().agent_info
                return info.name if info is not None else None

        opening = pool.submit(first)
        assert agent.entered.wait(WAIT)  # the first connection is being made, not yet served
        with pytest.raises(RemoteConnectionError) as refused:
            with SyncClient.builder().connect(url).build() as second:
                second.initialize()
        assert refused.value.status == 503
        agent.gate.set()
        assert opening.result(WAIT) == "async-echo"
