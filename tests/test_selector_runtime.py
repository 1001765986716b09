"""A third runtime (tests/helpers/selector_runtime.py: one thread, a ``selectors`` loop, handlers
inline) over the same core, against a real peer process: what the core decides holds there too."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from acp.errors import RequestTimeoutError
from tests.helpers.selector_runtime import SelectorConnection, spawn

PEER = [sys.executable, str(Path(__file__).parent / "helpers" / "conn_peer.py")]


@pytest.fixture
def conn() -> Any:
    connection, proc = spawn(PEER)
    yield connection
    connection.close()
    proc.wait(10)


def test_a_round_trip(conn: SelectorConnection) -> None:
    assert conn.request("echo", {"x": [1, "two"]}) == {"x": [1, "two"]}


def test_the_answer_comes_after_every_notification_read_before_it(conn: SelectorConnection) -> None:
    seen: list[int] = []
    conn.on_notification("chunk", lambda params: seen.append(params["i"]))
    assert conn.request("stream", {"n": 500}) == {"sent": 500}
    assert seen == list(range(500))


def test_a_request_of_the_peer_is_answered_while_ours_waits(conn: SelectorConnection) -> None:
    conn.on_request("ping", lambda params, call: {"pong": params})
    assert conn.request("ask_back", {"method": "ping", "params": {"v": 7}}) == {"pong": {"v": 7}}


def test_the_deadlock_rule_a_notification_handler_makes_a_request(conn: SelectorConnection) -> None:
    answers: list[Any] = []
    conn.on_notification("chunk", lambda params: answers.append(conn.request("echo", params)))
    assert conn.request("stream", {"n": 3}) == {"sent": 3}
    assert answers == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_a_timeout_sends_cancel_request_and_the_connection_goes_on(conn: SelectorConnection) -> None:
    with pytest.raises(RequestTimeoutError):
        conn.request("wait_cancel", {}, timeout=0.2)
    # The peer's handler saw the cancel and its -32800 answer is dropped; the connection goes on.
    assert conn.request("echo", {"after": 1}) == {"after": 1}


def test_bad_input_is_answered_and_the_connection_goes_on() -> None:
    connection, proc = spawn([sys.executable, "-c", _RAW_PEER])
    try:
        connection.on_request("m", lambda params, call: {"ok": params})
        got: list[Any] = []
        connection.on_request("report", lambda params, call: got.append(params) or {})
        connection.run_until(lambda: bool(got))
        answers = got[0]["answers"]
        assert [a.get("error", {}).get("code") for a in answers] == [-32700, -32601, None]
        assert answers[2]["result"] == {"ok": {"x": 1}}
    finally:
        connection.close()
        proc.wait(10)


# A raw peer: sends garbage, an unknown method and a good request, collects what comes back,
# then reports the answers in one request of its own.
_RAW_PEER = r"""
import json, sys
out = sys.stdout.buffer
def send(obj): out.write(json.dumps(obj).encode() + b"\n"); out.flush()
out.write(b"this is not json\n"); out.flush()
send({"jsonrpc": "2.0", "id": 1, "method": "nope"})
send({"jsonrpc": "2.0", "id": 2, "method": "m", "params": {"x": 1}})
answers = [json.loads(sys.stdin.buffer.readline()) for _ in range(3)]
send({"jsonrpc": "2.0", "id": 3, "method": "report", "params": {"answers": answers}})
sys.stdin.buffer.readline()
"""
