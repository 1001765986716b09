"""docs/deployment.md for real: two ``acp.examples.session_service`` backends sharing one session
directory, behind nginx running the guide's own configuration (its ``deployment-test:
nginx-config`` block, with ports and certificate paths substituted), TLS terminated by nginx
with a throwaway self-signed certificate, bearer-token auth checked by the backends.

What is proven, over WebSocket and over Streamable HTTP:

* a connection sticks to one backend for all its messages, while new connections are spread
  over both (round robin);
* sessions outlive connections and processes: a client that reconnects (and lands on the other
  backend) finds its session with ``session/load`` (history replayed) and continues it;
* over HTTP, the cookie is what makes requests stick: a request of a connection sent without it
  reaches the other backend and is refused (404), and a new connection reusing the cookie jar
  lands on the same backend;
* a backend killed (SIGKILL) mid-turn: the client gets ``ConnectionClosedError`` (no hang),
  reconnects through nginx to the survivor and loads its session there; a reconnect that
  reuses the cookie jar (naming the dead backend) is taken to the survivor by nginx's fallback;
* a backend stopped with SIGTERM answers the turn in flight (``cancelled``) and exits 0.

Needs ``nginx`` and ``openssl``: skipped when missing locally, a failure under CI (``.ci/run``
installs them).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest

import acp
from acp import schema
from acp.errors import ConnectionClosedError, RequestError

from .helpers.interop_node import under_ci

pytest.importorskip("websockets")

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "deployment.md"
WAIT = 20.0
TOKEN = "deploy-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# What the guide's configuration names, and the test replaces.
GUIDE_BACKENDS = ("127.0.0.1:8701", "127.0.0.1:8702")
GUIDE_LISTEN = "listen 443 ssl;"
GUIDE_CERT = "/etc/ssl/acp/fullchain.pem"
GUIDE_KEY = "/etc/ssl/acp/privkey.pem"

pytestmark = pytest.mark.timeout(90)


def _require(tool: str) -> str:
    path = shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")
    if path is None:
        reason = f"{tool} is not installed (Debian: apt-get install {tool})"
        if under_ci():
            pytest.fail(f"deployment tests cannot run under CI: {reason}", pytrace=False)
        pytest.skip(f"deployment tests skipped: {reason} (under CI this is a failure)")
    return path


# ------------------------------------------------------------------------------ the guide


def guide_nginx_config() -> str:
    """The ```nginx block after ``<!-- deployment-test: nginx-config -->`` in the guide."""
    lines = GUIDE.read_text(encoding="utf-8").splitlines()
    marker = lines.index("<!-- deployment-test: nginx-config -->")
    assert lines[marker + 1] == "```nginx", "the marker must sit right before the ```nginx fence"
    end = lines.index("```", marker + 2)
    return "\n".join(lines[marker + 2 : end]) + "\n"


def render_config(backends: list[str], port: int, cert: Path, key: Path) -> str:
    """The guide's configuration for this test's ports and certificate."""
    config = guide_nginx_config()
    for placeholder, real in [
        *zip(GUIDE_BACKENDS, backends, strict=True),
        (GUIDE_LISTEN, f"listen 127.0.0.1:{port} ssl;"),
        (GUIDE_CERT, str(cert)),
        (GUIDE_KEY, str(key)),
    ]:
        assert placeholder in config, f"docs/deployment.md's nginx config no longer mentions {placeholder}"
        config = config.replace(placeholder, real)
    return config


def test_guide_config_is_what_this_test_substitutes() -> None:
    config = guide_nginx_config()
    assert "proxy_buffering off;" in config and "proxy_http_version 1.1;" in config
    for placeholder in (*GUIDE_BACKENDS, GUIDE_LISTEN, GUIDE_CERT, GUIDE_KEY):
        assert placeholder in config


# ------------------------------------------------------------------------------ processes


class Proc:
    """A child process whose stdout and stderr lines are collected by reader threads, so a
    test can wait for a line (with a timeout) instead of sleeping."""

    def __init__(self, name: str, argv: list[str], cwd: Path) -> None:
        self.name = name
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.popen = subprocess.Popen(
            argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self._readers = [
            threading.Thread(target=self._read, args=(pipe,), name=f"{name}-reader", daemon=True)
            for pipe in (self.popen.stdout, self.popen.stderr)
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, pipe: Any) -> None:
        for line in pipe:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = WAIT) -> re.Match[str]:
        """The first output line matching ``pattern``; fails if the process exits or the time
        runs out first."""
        regex = re.compile(pattern)
        found: list[re.Match[str]] = []

        def seen() -> bool:
            found[:] = [m for m in map(regex.search, self.lines) if m]
            return bool(found) or self.popen.poll() is not None and not any(r.is_alive() for r in self._readers)

        with self._cond:
            self._cond.wait_for(seen, timeout)
        assert found, f"{self.name}: no line matching {pattern!r}; output:\n" + "\n".join(self.lines)
        return found[0]

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        for reader in self._readers:
            reader.join(10)

    def returncode(self, timeout: float = WAIT) -> int:
        return self.popen.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: no goodbye to anyone."""
        self.popen.kill()
        self.popen.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A throwaway self-signed certificate for 127.0.0.1 (cert, key)."""
    openssl = _require("openssl")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


class Deployment:
    """Two backends (``b1``, ``b2``) on one session directory, behind nginx with TLS."""

    def __init__(self, transport: str, tmp: Path, cert: Path, key: Path, stack: ExitStack) -> None:
        nginx = _require("nginx")
        self.transport = transport
        self.sessions = tmp / "sessions"
        self.backends: dict[str, Proc] = {}
        self.addresses: dict[str, str] = {}
        for name in ("b1", "b2"):
            proc = Proc(name, [
                sys.executable, "-m", "acp.examples.session_service", "--port", "0", "--name", name,
                "--sessions-dir", str(self.sessions), "--transport", transport, "--token", TOKEN,
            ], cwd=tmp)
            stack.callback(proc.stop)
            url = proc.wait_for(r"^listening (\S+)$").group(1)
            self.backends[name] = proc
            self.addresses[name] = re.sub(r"^\w+://([^/]+)/.*$", r"\1", url)

        prefix = tmp / "nginx"
        prefix.mkdir()
        (prefix / "acp.conf").write_text(
            render_config([self.addresses["b1"], self.addresses["b2"]], port := _free_port(), cert, key)
        )
        # What Debian's /etc/nginx/nginx.conf provides around conf.d/*.conf, minus everything
        # that needs root: every path inside the prefix, errors on stderr, one worker (so the
        # round robin is deterministic). As root, the worker keeps root's rights (nginx would
        # otherwise switch to "nobody", who cannot enter pytest's private temporary folders).
        (prefix / "nginx.conf").write_text(
            ("user root;\n" if os.geteuid() == 0 else "")
            + f"""worker_processes 1;
pid {prefix}/nginx.pid;
error_log stderr notice;
events {{ worker_connections 256; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    include {prefix}/acp.conf;
}}
"""
        )
        self.nginx = Proc("nginx", [nginx, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"],
                          cwd=prefix)
        stack.callback(self.nginx.stop)
        self.nginx.wait_for("start worker process")
        scheme = "wss" if transport == "ws" else "https"
        self.url = f"{scheme}://127.0.0.1:{port}/acp"
        self.ssl = ssl.create_default_context(cafile=str(cert))
        # How each client trusts the certificate: websockets takes `ssl`, httpx `verify`.
        self.tls: dict[str, Any] = {"ssl": self.ssl} if transport == "ws" else {"verify": self.ssl}

    def other(self, name: str) -> str:
        return "b2" if name == "b1" else "b1"


@pytest.fixture
def deploy(certificate: tuple[Path, Path], tmp_path: Path) -> Iterator[Callable[[str], Deployment]]:
    with ExitStack() as stack:
        yield lambda transport: Deployment(transport, tmp_path, *certificate, stack)


# ------------------------------------------------------------------------------ clients


class Chat:
    """A client through nginx that records the conversation it sees (prompts it sent, replies,
    replayed history) as ``(role, text)`` pairs."""

    def __init__(self, deployment: Deployment, **options: Any) -> None:
        self.seen: list[tuple[str, str]] = []
        self._cond = threading.Condition()
        builder = acp.SyncClient.builder().connect(
            deployment.url, headers=AUTH, open_timeout=WAIT, **deployment.tls, **options
        )
        self.client = builder.request_timeout(WAIT).session_update_handler(self._on_update).build()
        self.client.initialize()

    def _on_update(self, note: schema.SessionNotification) -> None:
        update = note.update
        if isinstance(update, (schema.UserMessageChunk, schema.AgentMessageChunk)):
            assert isinstance(update.content, schema.TextContent)
            role = "user" if isinstance(update, schema.UserMessageChunk) else "agent"
            with self._cond:
                self.seen.append((role, update.content.text))
                self._cond.notify_all()

    def say(self, session_id: str, text: str) -> str:
        """Prompt; the name of the backend that answered."""
        self.seen.clear()
        assert self.client.prompt(session_id, text).stop_reason == "end_turn"
        (role, reply), = self.seen
        match = re.fullmatch(r"\[(b\d)\] you said: (.*)", reply)
        assert role == "agent" and match and match.group(2) == text, reply
        return match.group(1)

    def wait_for(self, entry: tuple[str, str]) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: entry in self.seen, WAIT), self.seen

    def load(self, session_id: str, cwd: str) -> list[tuple[str, str]]:
        """session/load; the history it replayed."""
        self.seen.clear()
        self.client.load_session(session_id, cwd=cwd)
        return list(self.seen)

    def close(self) -> None:
        self.client.close()


def conversation(*turns: tuple[str, str]) -> list[tuple[str, str]]:
    """The history of prompts ``text`` answered by backend ``name``: ``(name, text)`` pairs."""
    return [entry for name, text in turns for entry in (("user", text), ("agent", f"[{name}] you said: {text}"))]


# ------------------------------------------------------------------------------ both transports


def _sticks_and_reconnects(d: Deployment, cwd: str, **options: Any) -> None:
    # One connection, many prompts: every one served by the backend the connection landed on.
    chat = Chat(d, **options)
    session_id = chat.client.new_session(cwd=cwd).session_id
    home = chat.say(session_id, "prompt 0")
    assert [chat.say(session_id, f"prompt {i}") for i in range(1, 12)] == [home] * 11
    history = [(home, f"prompt {i}") for i in range(12)]
    chat.close()

    # Several connections open at once: spread over both backends, each one sticking to its own.
    chats = [Chat(d, **options) for _ in range(4)]
    try:
        homes = []
        for i, other in enumerate(chats):
            sid = other.client.new_session(cwd=cwd).session_id
            served = {other.say(sid, f"connection {i} prompt {j}") for j in range(4)}
            assert len(served) == 1, f"connection {i} was served by {served}"
            homes.append(served.pop())
        assert set(homes) == {"b1", "b2"}, homes
    finally:
        for other in chats:
            other.close()

    # Reconnect until a new connection lands on the other backend: it finds the session (the
    # same history replayed) and continues it; nothing of it was lost with the old connection.
    for attempt in range(4):
        chat = Chat(d, **options)
        try:
            assert chat.load(session_id, cwd) == conversation(*history)
            served = chat.say(session_id, f"after reconnect {attempt}")
            history.append((served, f"after reconnect {attempt}"))
        finally:
            chat.close()
        if served != home:
            break
    else:
        pytest.fail(f"four reconnections all landed on {home}")

    chat = Chat(d, **options)
    try:
        assert chat.load(session_id, cwd) == conversation(*history)
        sessions = {s.session_id: s for s in chat.client.iter_sessions(cwd=cwd)}
        assert sessions[session_id].title == "prompt 0" and len(sessions) == 5
        chat.seen.clear()
        chat.client.resume_session(session_id, cwd=cwd)  # reattach without replay
        assert chat.seen == []
        with pytest.raises(RequestError):
            chat.client.load_session("0" * 32, cwd=cwd)
    finally:
        chat.close()


def _backend_killed_mid_turn(d: Deployment, cwd: str, **options: Any) -> str:
    """Kill the backend of a connection in the middle of a turn; the survivor's name."""
    chat = Chat(d, **options)
    session_id = chat.client.new_session(cwd=cwd).session_id
    home = chat.say(session_id, "before the crash")
    with ThreadPoolExecutor(1) as pool:
        turn = pool.submit(chat.client.prompt, session_id, "wait for me")
        chat.wait_for(("agent", f"[{home}] waiting"))
        d.backends[home].kill()
        with pytest.raises(ConnectionClosedError):
            turn.result(WAIT)
    with pytest.raises(ConnectionClosedError):
        chat.client.prompt(session_id, "anyone there?")
    chat.close()

    survivor = d.other(home)
    chat = Chat(d, **options)
    try:
        # The prompt of the lost turn is in the history; its answer never came.
        assert chat.load(session_id, cwd) == [*conversation((home, "before the crash")), ("user", "wait for me")]
        assert chat.say(session_id, "after the crash") == survivor
    finally:
        chat.close()
    if "cookies" in options:
        # The cookie named the dead backend: nginx tried it, then fell back to the pool.
        d.nginx.wait_for(rf'connect\(\) failed .* upstream: "http://{re.escape(d.addresses[home])}/acp"')
    return survivor


def test_websocket_sticks_and_a_reconnect_finds_the_session(
    deploy: Callable[[str], Deployment], tmp_path: Path
) -> None:
    _sticks_and_reconnects(deploy("ws"), str(tmp_path))


def test_websocket_backend_killed_mid_turn(deploy: Callable[[str], Deployment], tmp_path: Path) -> None:
    _backend_killed_mid_turn(deploy("ws"), str(tmp_path))


def test_websocket_backend_killed_reconnect_with_its_cookie(
    deploy: Callable[[str], Deployment], tmp_path: Path
) -> None:
    # The WebSocket client keeps the cookie of the upgrade's answer too; reusing the jar, the
    # reconnect first goes to the dead backend, and nginx's fallback takes it to the survivor.
    d = deploy("ws")
    jar = CookieJar()
    survivor = _backend_killed_mid_turn(d, str(tmp_path), cookies=jar)
    assert _sticky_cookie(jar) == d.addresses[survivor]


def test_auth_is_checked_by_the_backends_through_nginx(deploy: Callable[[str], Deployment]) -> None:
    from acp.transport.websocket import RemoteConnectionError

    d = deploy("ws")
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        with pytest.raises(RemoteConnectionError) as refused:
            acp.SyncClient.builder().connect(d.url, headers=headers, ssl=d.ssl).build()
        assert refused.value.status == 401
    with pytest.raises(RemoteConnectionError):  # TLS: a client that does not trust the certificate
        acp.SyncClient.builder().connect(d.url, headers=AUTH).build()


# ------------------------------------------------------------------------------ Streamable HTTP


@pytest.fixture
def http_deployment(deploy: Callable[[str], Deployment]) -> Deployment:
    pytest.importorskip("acp.transport.http_server")
    pytest.importorskip("uvicorn")
    pytest.importorskip("httpx")
    return deploy("http")


def test_http_sticks_and_a_reconnect_finds_the_session(http_deployment: Deployment, tmp_path: Path) -> None:
    _sticks_and_reconnects(http_deployment, str(tmp_path))


def test_http_backend_killed_mid_turn(http_deployment: Deployment, tmp_path: Path) -> None:
    # The reconnect reuses the cookie jar, whose cookie names the dead backend: nginx's
    # fallback (error_page -> the pool) must route it to the survivor, and re-point the cookie.
    jar = CookieJar()
    survivor = _backend_killed_mid_turn(http_deployment, str(tmp_path), cookies=jar)
    assert _sticky_cookie(jar) == http_deployment.addresses[survivor]


def _sticky_cookie(jar: CookieJar) -> str:
    values = [c.value for c in jar if c.name == "acp_backend"]
    assert len(values) == 1 and values[0] is not None, values
    return values[0]


def test_http_the_cookie_is_what_sticks(http_deployment: Deployment, tmp_path: Path) -> None:
    d = http_deployment
    # A new connection reusing the jar lands where the cookie says, every time (without it,
    # new connections alternate between the backends, as the test above shows).
    jar = CookieJar()
    homes = []
    for i in range(4):
        chat = Chat(d, cookies=jar)
        try:
            homes.append(chat.say(chat.client.new_session(cwd=str(tmp_path)).session_id, f"visit {i}"))
        finally:
            chat.close()
    assert homes == [homes[0]] * 4
    assert _sticky_cookie(jar) == d.addresses[homes[0]]

    # The same by hand: one connection's requests without the cookie go round robin, and the
    # backend that does not hold the connection answers 404; with the cookie, every one is taken.
    import httpx

    with httpx.Client(verify=d.ssl, headers=AUTH, timeout=WAIT) as http:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": 1, "clientCapabilities": {}}}
        answer = http.post(d.url, json=init)
        assert answer.status_code == 200, answer.text
        connection = {"Acp-Connection-Id": answer.headers["Acp-Connection-Id"]}
        cookie = {"Cookie": f"acp_backend={answer.cookies['acp_backend']}"}
        http.cookies.clear()  # this client sends the cookie only when told to
        listing = [{"jsonrpc": "2.0", "id": i, "method": "session/list", "params": {}} for i in range(1, 9)]
        without = [http.post(d.url, json=m, headers=connection).status_code for m in listing[:4]]
        with_cookie = [http.post(d.url, json=m, headers={**connection, **cookie}).status_code for m in listing[4:]]
        assert 404 in without and set(without) <= {202, 404}, without
        assert with_cookie == [202] * 4
        assert http.delete(d.url, headers={**connection, **cookie}).status_code == 202


# ------------------------------------------------------------------------------ the service alone


def test_service_deletes_sessions_and_unknown_ones_silently(tmp_path: Path) -> None:
    """The service alone: ``session/delete`` removes a session, and deleting one that does not
    exist (any more) succeeds, as the spec advises."""
    backend = Proc("b1", [
        sys.executable, "-m", "acp.examples.session_service", "--port", "0", "--name", "b1",
        "--sessions-dir", str(tmp_path / "sessions"),
    ], cwd=tmp_path)
    try:
        url = backend.wait_for(r"^listening (\S+)$").group(1)
        with acp.SyncClient.builder().connect(url).build() as client:
            client.initialize()
            assert client.capabilities.supports_delete_session()
            kept = client.new_session(cwd=str(tmp_path)).session_id
            gone = client.new_session(cwd=str(tmp_path)).session_id
            client.delete_session(gone)
            assert [s.session_id for s in client.list_sessions().sessions] == [kept]
            client.delete_session(gone)  # already deleted: still a success
            client.delete_session("0" * 32)  # never existed
            client.delete_session("../not-an-id")  # cannot exist
            with pytest.raises(RequestError) as info:
                client.load_session(gone, cwd=str(tmp_path))
            assert info.value.code == -32002
        assert backend.popen.poll() is None
    finally:
        backend.stop()


@pytest.mark.parametrize("transport", ["ws", "http"])
def test_sigterm_answers_the_turn_in_flight_then_exits(transport: str, tmp_path: Path) -> None:
    if transport == "http":
        pytest.importorskip("acp.transport.http_server")
        pytest.importorskip("uvicorn")
        pytest.importorskip("httpx")
    backend = Proc("b1", [
        sys.executable, "-m", "acp.examples.session_service", "--port", "0", "--name", "b1",
        "--sessions-dir", str(tmp_path / "sessions"), "--transport", transport,
    ], cwd=tmp_path)
    try:
        url = backend.wait_for(r"^listening (\S+)$").group(1)
        seen: list[str] = []
        waiting = threading.Event()

        def on_update(note: schema.SessionNotification) -> None:
            if isinstance(note.update, schema.AgentMessageChunk) and isinstance(note.update.content, schema.TextContent):
                seen.append(note.update.content.text)
                waiting.set()

        with acp.SyncClient.builder().connect(url).session_update_handler(on_update).build() as client:
            client.initialize()
            session_id = client.new_session(cwd=str(tmp_path)).session_id
            with ThreadPoolExecutor(1) as pool:
                turn = pool.submit(client.prompt, session_id, "wait")
                assert waiting.wait(WAIT) and seen == ["[b1] waiting"]
                backend.popen.send_signal(signal.SIGTERM)
                assert turn.result(WAIT).stop_reason == "cancelled"
        assert backend.returncode() == 0
    finally:
        backend.stop()
