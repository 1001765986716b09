"""The one engine hook the agent side needs: ``InboundCall.answer`` / ``answer_error`` answer a
request early, from any thread, exactly once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from acp.connection import Connection, InboundCall
from acp.errors import RequestError
from acp.transport import memory_pair

WAIT = 10.0


@pytest.fixture
def pair(no_thread_leak: None) -> Iterator[tuple[Connection, Connection, list[dict[str, Any]]]]:
    lines: list[dict[str, Any]] = []
    a_side, b_side = memory_pair()
    client = Connection(a_side, name="client", request_timeout=WAIT,
                        wire_tap=lambda d, line: lines.append(json.loads(line)) if d == "in" else None)
    server = Connection(b_side, name="server", request_timeout=WAIT)
    yield client, server, lines
    client.close()
    server.close()


def test_answer_early_then_the_handler_result_is_dropped(pair: Any) -> None:
    client, server, lines = pair
    release = threading.Event()
    tried = threading.Event()
    results: list[bool] = []

    def slow(params: Any, call: InboundCall) -> Any:
        results.append(call.answer({"early": True}))
        results.append(call.answer({"twice": True}))
        results.append(call.answer_error(-32000, "nope"))
        tried.set()
        release.wait(WAIT)
        return {"late": True}

    server.on_request("slow", slow)
    server.on_request("echo", lambda p, call: p)
    client.start()
    server.start()
    assert client.request("slow", {}) == {"early": True}  # while the handler still runs
    assert tried.wait(WAIT)
    assert results == [True, False, False]
    release.set()
    assert client.request("echo", {"n": 1}) == {"n": 1}  # round trip after the late result
    answers = [m for m in lines if "result" in m or "error" in m]
    assert [m.get("result") for m in answers] == [{"early": True}, {"n": 1}]


def test_answer_error_early_and_after_cancel(pair: Any) -> None:
    client, server, _ = pair
    calls: list[InboundCall] = []
    got = threading.Event()
    done = threading.Event()
    outcome: list[bool] = []

    def early_error(params: Any, call: InboundCall) -> Any:
        call.answer_error(-32800, "too slow", {"why": "deadline"})
        return {"ignored": True}

    def held(params: Any, call: InboundCall) -> Any:
        calls.append(call)
        got.set()
        call.cancelled.wait(WAIT)
        outcome.append(call.answer({"after": "cancel"}))
        done.set()
        return None

    server.on_request("early_error", early_error)
    server.on_request("held", held)
    client.start()
    server.start()
    with pytest.raises(RequestError) as info:
        client.request("early_error", {})
    assert (info.value.code, info.value.message, info.value.data) == (-32800, "too slow", {"why": "deadline"})
    future = client.request_future("held", {})
    assert got.wait(WAIT)
    future.cancel()  # $/cancel_request: the engine answers -32800 itself
    assert done.wait(WAIT)
    assert outcome == [False]


def test_a_reused_id_is_never_taken_by_an_old_call(no_thread_leak: None) -> None:
    # A raw peer reuses id 1 once the first request was answered early; the first handler's
    # late return must not consume the second request's entry.
    ours, theirs = memory_pair()
    server = Connection(ours, name="server", request_timeout=WAIT)
    first_running = threading.Event()
    finish_first = threading.Event()
    second_started = threading.Event()
    finish_second = threading.Event()

    def op(params: Any, call: InboundCall) -> Any:
        if params["n"] == 1:
            call.answer({"n": 1, "early": True})
            first_running.set()
            finish_first.wait(WAIT)
            return {"n": 1, "late": True}
        second_started.set()
        finish_second.wait(WAIT)
        return {"n": 2}

    server.on_request("op", op)
    server.start()
    buffer = b""

    def recv() -> dict[str, Any]:
        nonlocal buffer
        while b"\n" not in buffer:
            buffer += theirs.read()
        line, buffer = buffer.split(b"\n", 1)
        result: dict[str, Any] = json.loads(line)
        return result

    theirs.write(b'{"jsonrpc":"2.0","id":1,"method":"op","params":{"n":1}}\n')
    assert recv()["result"] == {"n": 1, "early": True}
    assert first_running.wait(WAIT)
    theirs.write(b'{"jsonrpc":"2.0","id":1,"method":"op","params":{"n":2}}\n')
    assert second_started.wait(WAIT)
    finish_first.set()  # the old call returns while the new one with the same id runs
    finish_second.set()
    assert recv() == {"jsonrpc": "2.0", "id": 1, "result": {"n": 2}}
    server.close()
    theirs.close()
