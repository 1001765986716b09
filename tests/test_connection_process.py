"""The engine against a real child process (tests/helpers/conn_peer.py) over pipes."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from acp.connection import Connection
from acp.errors import ConnectionClosedError
from acp.transport import ProcessTransport

from .conftest import helper_argv

WAIT = 15.0


@pytest.fixture
def peer(no_thread_leak: None) -> Iterator[tuple[Connection, ProcessTransport]]:
    transport = ProcessTransport(helper_argv("conn_peer"))
    conn = Connection(transport, name="client", request_timeout=WAIT)
    yield conn, transport
    conn.close()


def test_ordering_over_a_subprocess(peer: tuple[Connection, ProcessTransport]) -> None:
    conn, _ = peer
    seen: list[int] = []
    first = threading.Event()

    def on_chunk(p: Any) -> None:
        if p["i"] == 0:
            first.wait(0.05)  # a slow consumer: the answer must still come after every chunk
        seen.append(p["i"])

    conn.on_notification("chunk", on_chunk)
    conn.start()
    for n in (1, 10, 1000):
        seen.clear()
        assert conn.request("stream", {"n": n}) == {"sent": n}
        assert seen == list(range(n))


def test_burst_of_10000_notifications_over_a_subprocess(peer: tuple[Connection, ProcessTransport]) -> None:
    conn, _ = peer
    seen: list[int] = []
    conn.on_notification("chunk", lambda p: seen.append(p["i"]))
    conn.start()
    assert conn.request("stream", {"n": 10_000}) == {"sent": 10_000}
    assert seen == list(range(10_000))


def test_peer_calls_back_into_us(peer: tuple[Connection, ProcessTransport]) -> None:
    conn, _ = peer
    conn.on_request("double", lambda p, call: {"v": p["v"] * 2})
    conn.start()
    assert conn.request("ask_back", {"method": "double", "params": {"v": 21}}) == {"v": 42}


def test_notifications_reach_the_peer_in_order(peer: tuple[Connection, ProcessTransport]) -> None:
    conn, _ = peer
    counts: list[int] = []
    got = threading.Event()
    conn.on_notification("count", lambda p: counts.append(p["n"]) or got.set())
    conn.start()
    for k in range(500):
        conn.notify("note", {"k": k})
    conn.notify("report", {})
    assert got.wait(WAIT)
    assert counts == [500]


def test_pending_calls_fail_when_the_child_is_killed(peer: tuple[Connection, ProcessTransport]) -> None:
    conn, transport = peer
    conn.start()
    assert conn.request("echo", {"up": 1}) == {"up": 1}
    futures = [conn.request_future("wait_cancel", {}, timeout=None) for _ in range(3)]
    os.kill(transport.pid, signal.SIGKILL)
    for future in futures:
        with pytest.raises(ConnectionClosedError):
            future.result(WAIT)
    with pytest.raises(ConnectionClosedError):
        conn.request("echo", {})


def test_peer_crash_mid_request(peer: tuple[Connection, ProcessTransport]) -> None:
    conn, _ = peer
    conn.start()
    with pytest.raises(ConnectionClosedError):
        conn.request("crash", {})
