"""The engine's promises, written once, run on every runtime they apply to: the threaded one
(``acp.Connection``), the asyncio one (``acp.aio.AsyncConnection``) and the single-threaded
``selectors`` loop of the test suite, all over the same core. The peer is the test itself, on
real OS pipes (tests/behaviour/harness.py).
"""

from __future__ import annotations

import gc
import logging
import threading
import warnings
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import msgspec
import pytest

import acp.rpc.scheduler as rpc_scheduler
from acp.effects import Send
from acp.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    ConnectionClosedError,
    RequestError,
    RequestTimeoutError,
)
from tests.behaviour.harness import WAIT, Wait

CONCURRENT = pytest.mark.runtimes("threads", "asyncio")


class Point(msgspec.Struct):
    x: int


def answer_of(peer: Any, msg_id: Any) -> dict[str, Any]:
    return peer.recv_until(lambda m: m.get("id") == msg_id and "method" not in m)  # type: ignore[no-any-return]


# ---------------------------------------------------------------------- ordering


def test_an_answer_completes_its_caller_after_every_notification_before_it(make: Any) -> None:
    rt, peer = make()
    seen: list[int] = []
    rt.on_notification("n", lambda p: seen.append(p["i"]))
    rt.start()
    # The peer answers our request only after 200 notifications; the call returns after them.
    result: list[Any] = []

    def respond() -> None:
        request = peer.recv()
        peer.send(*({"method": "n", "params": {"i": i}} for i in range(200)),
                  {"id": request["id"], "result": {"seen_when_sent": 200}})

    responder = threading.Thread(target=respond)
    responder.start()
    result.append(rt.request("ask", {}))
    responder.join(WAIT)
    assert result == [{"seen_when_sent": 200}]
    assert seen == list(range(200))


@CONCURRENT
def test_notifications_are_handled_one_at_a_time_in_order_and_a_request_after_them(make: Any) -> None:
    rt, peer = make()
    gate = threading.Event()
    log: list[str] = []
    inside = threading.Lock()

    def slow(params: Any) -> Any:
        assert inside.acquire(False), "two notification handlers at once"
        log.append(f"start {params['i']}")
        if params["i"] == 0:
            yield Wait(gate)
        log.append(f"end {params['i']}")
        inside.release()

    rt.on_notification("n", slow)
    rt.on_request("m", lambda p, call: log.append("request") or {})
    rt.start()
    peer.send(*({"method": "n", "params": {"i": i}} for i in range(3)), {"id": 1, "method": "m"})
    assert peer.nothing_more(0.3)  # the request waits behind the blocked notification
    gate.set()
    assert answer_of(peer, 1)["result"] == {}
    assert log == ["start 0", "end 0", "start 1", "end 1", "start 2", "end 2", "request"]


def test_the_deadlock_rule_a_notification_handler_waits_for_its_own_answer(make: Any) -> None:
    rt, peer = make()
    got: list[Any] = []

    def ask_back(params: Any) -> Any:
        got.append((yield Send("back", {"i": params["i"]}, None)))

    rt.on_notification("n", ask_back)
    rt.on_request("done", lambda p, call: {"got": len(got)})
    rt.start()
    peer.send({"method": "n", "params": {"i": 1}}, {"method": "n", "params": {"i": 2}})
    for _ in range(2):
        request = peer.recv()
        assert request["method"] == "back"
        peer.send({"id": request["id"], "result": request["params"]})
    peer.send({"id": 7, "method": "done"})
    assert answer_of(peer, 7)["result"] == {"got": 2}
    assert got == [{"i": 1}, {"i": 2}]


@CONCURRENT
def test_by_session_sessions_run_apart_and_a_session_less_message_waits_for_all(make: Any) -> None:
    rt, peer = make(ordering="session")
    gate = threading.Event()
    log: list[str] = []

    def note(params: Any) -> Any:
        if params.get("block"):
            yield Wait(gate)
        log.append(f"{params.get('sessionId')}:{params['i']}")

    rt.on_notification("n", note)
    rt.on_request("m", lambda p, call: log.append(f"request {(p or {}).get('sessionId')}") or {})
    rt.start()
    peer.send({"method": "n", "params": {"sessionId": "a", "i": 1, "block": True}},
              {"method": "n", "params": {"sessionId": "a", "i": 2}},
              {"method": "n", "params": {"sessionId": "b", "i": 1}},
              {"id": 1, "method": "m", "params": {"sessionId": "b"}},
              {"id": 2, "method": "m"},  # session-less: waits for a's lane
              {"method": "n", "params": {"sessionId": "b", "i": 2}})  # behind the gate
    assert answer_of(peer, 1)["result"] == {}  # b never waited for a
    assert log == ["b:1", "request b"]
    assert peer.nothing_more(0.3)
    gate.set()
    assert answer_of(peer, 2)["result"] == {}
    peer.send({"id": 3, "method": "m"})  # session-less again: after b:2, which followed 2
    answer_of(peer, 3)
    assert log == ["b:1", "request b", "a:1", "a:2", "request None", "b:2", "request None"]


@CONCURRENT
def test_backpressure_stops_reading_and_loses_nothing(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rpc_scheduler, "MAX_QUEUED_MESSAGES", 50)
    rt, peer = make()
    gate = threading.Event()
    seen: list[int] = []

    def note(params: Any) -> Any:
        if params["i"] == 0:
            yield Wait(gate)
        seen.append(params["i"])

    rt.on_notification("n", note)
    rt.on_request("m", lambda p, call: {"seen": len(seen)})
    rt.start()
    import os

    os.set_blocking(peer.write_fd, False)
    line = b'{"jsonrpc":"2.0","method":"n","params":{"i":%d,"pad":"' + b"x" * 200 + b'"}}\n'
    sent = 0
    try:  # the runtime stops reading: the pipe fills up and our writes would block
        while sent < 100_000:
            os.write(peer.write_fd, line % sent)
            sent += 1
    except BlockingIOError:
        pass
    assert sent < 100_000, "the runtime kept reading while its handler was blocked"
    os.set_blocking(peer.write_fd, True)
    gate.set()
    peer.send({"id": 1, "method": "m"})
    assert answer_of(peer, 1)["result"] == {"seen": sent}
    assert seen == list(range(sent))


@CONCURRENT
def test_the_deadlock_rule_wins_over_backpressure(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rpc_scheduler, "MAX_QUEUED_MESSAGES", 4)
    rt, peer = make()
    got: list[Any] = []

    def note(params: Any) -> Any:
        if params["i"] == 0:
            got.append((yield Send("back", {}, None)))
        got.append(params["i"])

    rt.on_notification("n", note)
    rt.on_request("m", lambda p, call: {"got": list(got)})
    rt.start()
    peer.send(*({"method": "n", "params": {"i": i}} for i in range(20)))
    request = peer.recv()
    peer.send({"id": request["id"], "result": "answer"}, {"id": 1, "method": "m"})
    assert answer_of(peer, 1)["result"] == {"got": ["answer", *range(20)]}


# ---------------------------------------------------------------------- timeouts and cancels


def test_a_timeout_sends_cancel_request_and_drops_the_late_answer(make: Any) -> None:
    rt, peer = make()
    rt.start()
    with pytest.raises(RequestTimeoutError):
        rt.request("slow", {}, timeout=0.2)
    slow = peer.recv()
    cancel = peer.recv()
    assert cancel == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": slow["id"]}}
    peer.send({"id": slow["id"], "result": "late"})

    def respond() -> None:
        request = peer.recv()
        peer.send({"id": request["id"], "result": "fresh"})

    responder = threading.Thread(target=respond)
    responder.start()
    assert rt.request("next", {}) == "fresh"
    responder.join(WAIT)


@CONCURRENT
def test_an_inbound_cancel_request_cancels_the_handler_and_answers_once(make: Any) -> None:
    rt, peer = make()
    cancelled = threading.Event()

    def waits(params: Any, call: Any) -> Any:
        call.on_cancel(cancelled.set)
        yield Wait(cancelled)
        return {"late": True}

    rt.on_request("wait", waits)
    rt.start()
    peer.send({"id": "w", "method": "wait"}, {"method": "$/cancel_request", "params": {"requestId": "w"}})
    answer = answer_of(peer, "w")
    assert answer["error"]["code"] == REQUEST_CANCELLED
    assert cancelled.wait(WAIT)
    assert peer.nothing_more()  # the handler's late result is never sent


@CONCURRENT
def test_a_request_and_its_cancel_in_one_read_leave_no_coroutine_unawaited(make: Any) -> None:
    """Issue 22.6: on CPython 3.10 and 3.11 an async handler cancelled before it started left
    its coroutine never awaited (a RuntimeWarning)."""
    rt, peer = make()

    async def handler(params: Any, call: Any) -> Any:
        return {}

    if rt.name == "asyncio":
        rt.conn.on_request("m", handler)  # an async def, as AsyncAgent registers its own
    else:
        rt.on_request("m", lambda p, call: {})
    rt.start()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        peer.send({"id": 1, "method": "m"}, {"method": "$/cancel_request", "params": {"requestId": 1}})
        answer = answer_of(peer, 1)
        peer.send({"id": 2, "method": "m"})
        answer_of(peer, 2)
        gc.collect()
    assert "error" in answer or "result" in answer
    assert not [w for w in caught if "never awaited" in str(w.message)]


# ---------------------------------------------------------------------- close


@CONCURRENT
def test_close_fails_pending_calls_cancels_handlers_and_stops_threads(make: Any) -> None:
    rt, peer = make()
    entered, cancelled = threading.Event(), threading.Event()

    def waits(params: Any, call: Any) -> Any:
        call.on_cancel(cancelled.set)
        entered.set()
        yield Wait(cancelled)
        return {}

    rt.on_request("wait", waits)
    rt.start()
    pending = rt.request_later("never", {}, timeout=None)
    peer.send({"id": 1, "method": "wait"})
    assert entered.wait(WAIT)
    rt.close()
    with pytest.raises(ConnectionClosedError):
        pending.result(WAIT)
    assert cancelled.is_set()


def test_the_end_of_input_fails_a_pending_call_after_the_notifications_before_it(make: Any) -> None:
    # An agent's last updates before it crashes reach their handler before the caller of the
    # turn sees ConnectionClosedError, as an error answer would (tests/test_client_process.py
    # saw the update missing under load).
    rt, peer = make()
    seen: list[int] = []
    rt.on_notification("n", lambda p: seen.append(p["i"]))
    rt.start()
    pending = rt.request_later("ask", {}, timeout=None)
    at_failure: list[int] = []
    pending.add_done_callback(lambda f: at_failure.append(len(seen)))
    peer.recv()
    peer.send(*({"method": "n", "params": {"i": i}} for i in range(50)))
    peer.close_write()  # the peer is gone
    with pytest.raises(ConnectionClosedError, match="closed by peer"):
        pending.result(WAIT)
    assert at_failure == [50] and seen == list(range(50))


@CONCURRENT
def test_the_end_of_input_waits_for_a_notification_handler_still_running(make: Any) -> None:
    rt, peer = make()
    entered, go = threading.Event(), threading.Event()
    seen: list[int] = []

    def on_note(params: Any) -> Any:
        if params["i"] == 0:
            entered.set()
            yield Wait(go)
        seen.append(params["i"])

    rt.on_notification("n", on_note)
    rt.start()
    pending = rt.request_later("ask", {}, timeout=None)
    peer.recv()
    peer.send(*({"method": "n", "params": {"i": i}} for i in range(3)))
    peer.close_write()
    assert entered.wait(WAIT)
    with pytest.raises(FutureTimeout):  # read, the end waits behind the handler
        pending.result(0.3)
    go.set()
    with pytest.raises(ConnectionClosedError):
        pending.result(WAIT)
    assert seen == [0, 1, 2]


@CONCURRENT
def test_a_graceful_close_fails_pending_calls_at_once_even_if_the_peer_answers_later(make: Any) -> None:
    """Issue 22.6: every call pending when close() starts fails with ConnectionClosedError,
    deterministically. The case seen: a client's request handler blocked mid-prompt; close()
    cancels it, its answer goes out, the agent ends the turn and answers the prompt; the
    pending prompt() must still fail, not return that answer."""
    rt, peer = make()
    entered, cancelled, other_done = threading.Event(), threading.Event(), threading.Event()

    def permission(params: Any, call: Any) -> Any:
        call.on_cancel(cancelled.set)
        entered.set()
        yield Wait(cancelled)
        return {"outcome": "cancelled"}

    def other(params: Any, call: Any) -> Any:  # keeps the graceful close waiting meanwhile
        yield Wait(other_done)
        return {}

    rt.on_request("permission", permission)
    rt.on_request("other", other)
    rt.start()
    pending = rt.request_later("prompt", {}, timeout=None)
    prompt = peer.recv()
    peer.send({"id": "other", "method": "other"}, {"id": "perm", "method": "permission"})
    assert entered.wait(WAIT)
    closer = threading.Thread(target=rt.close, kwargs={"graceful": True})
    closer.start()
    assert answer_of(peer, "perm")["result"] == {"outcome": "cancelled"}  # sent once close began
    peer.send({"id": prompt["id"], "result": {"stopReason": "end_turn"}})  # the agent ends the turn
    with pytest.raises(ConnectionClosedError):
        pending.result(WAIT)
    other_done.set()
    closer.join(WAIT * 2)


@CONCURRENT
def test_a_graceful_close_drains_what_was_queued_and_lets_handlers_answer(make: Any) -> None:
    read = threading.Semaphore(0)
    rt, peer = make(wire_tap=lambda direction, line: read.release() if direction == "in" else None)
    gate = threading.Event()
    seen: list[int] = []

    def note(params: Any) -> Any:
        if params["i"] == 0:
            yield Wait(gate)
        seen.append(params["i"])

    def slow(params: Any, call: Any) -> Any:
        yield Wait(gate)
        return {"done": True}

    rt.on_notification("n", note)
    rt.on_request("slow", slow)
    rt.start()
    peer.send({"id": 1, "method": "slow"}, *({"method": "n", "params": {"i": i}} for i in range(20)))
    peer.send({"id": 2, "method": "slow"})  # queued behind the notifications
    for _ in range(22):  # every line was read (and so queued) before the close begins
        assert read.acquire(timeout=WAIT)
    closer = threading.Thread(target=rt.close, kwargs={"graceful": True})
    closer.start()
    gate.set()
    closer.join(WAIT * 2)
    assert not closer.is_alive()
    assert seen == list(range(20))
    answers = {m["id"]: m for m in (peer.recv(), peer.recv())}
    assert answers[1]["result"] == {"done": True}


# ---------------------------------------------------------------------- bad input


def test_bad_input_is_answered_and_the_connection_goes_on(make: Any, caplog: pytest.LogCaptureFixture) -> None:
    rt, peer = make(max_message_bytes=2000)

    def typed(params: Point, call: Any) -> Any:
        return {"x": params.x}

    def deliberate(params: Any, call: Any) -> Any:
        raise RequestError(-32002, "Resource not found", {"uri": "file:///x"})

    def unexpected(params: Any, call: Any) -> Any:
        raise ValueError("secret detail")

    rt.on_request("typed", typed, Point)
    rt.on_request("deliberate", deliberate)
    rt.on_request("unexpected", unexpected)
    rt.start()
    with caplog.at_level(logging.WARNING):
        peer.send(b"this is not json\n")
        assert peer.recv() == {"jsonrpc": "2.0", "id": None,
                               "error": {"code": PARSE_ERROR, "message": "Parse error", "data": peer_reason(peer)}}
    cases = [
        ({"id": 1, "method": 5}, INVALID_REQUEST),
        ({"id": 2, "method": "nope"}, METHOD_NOT_FOUND),
        ({"id": 3, "method": "typed", "params": {"x": "not an int"}}, INVALID_PARAMS),
        ({"id": 4, "method": "deliberate"}, -32002),
        ({"id": 5, "method": "unexpected"}, INTERNAL_ERROR),
    ]
    for message, code in cases:
        peer.send({"method": "_unknown/notification"}, message)
        answer = answer_of(peer, message["id"])
        assert answer["error"]["code"] == code, answer
    assert "secret detail" not in str(answer)
    peer.send(b'{"jsonrpc":"2.0","id":6,"method":"typed","params":{"pad":"' + b"x" * 5000 + b'"}}\n')
    peer.send({"id": 7, "method": "typed", "params": {"x": 7}})
    assert peer.recv() == {"jsonrpc": "2.0", "id": 7, "result": {"x": 7}}  # the long line: dropped


def peer_reason(peer: Any) -> Any:
    """The parse error's data is the decoder's reason: anything, as long as it says why."""
    class Anything:
        def __eq__(self, other: object) -> bool:
            return isinstance(other, dict) and bool(other.get("reason"))

    return Anything()


def test_bad_input_is_logged_ten_times_then_counted(make: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 22.6: a misbehaving peer cannot flood the log."""
    rt, peer = make()
    rt.on_request("m", lambda p, call: {})
    rt.start()
    with caplog.at_level(logging.WARNING, "acp.rpc"):
        peer.send(b"garbage\n" * 500, {"id": 1, "method": "m"})
        answer_of(peer, 1)
    bad = [r for r in caplog.records if "invalid message" in r.getMessage()]
    assert len(bad) == 10
    assert len([r for r in caplog.records if r.name == "acp.rpc"]) <= 13


@CONCURRENT
def test_system_exit_in_a_handler_is_answered_and_the_connection_goes_on(make: Any) -> None:
    rt, peer = make()

    def exits(params: Any, call: Any) -> Any:
        raise SystemExit(3)

    def exits_note(params: Any) -> Any:
        raise KeyboardInterrupt

    rt.on_request("exit", exits)
    rt.on_notification("interrupt", exits_note)
    rt.on_request("ok", lambda p, call: {"ok": True})
    rt.start()
    peer.send({"id": 1, "method": "exit"}, {"method": "interrupt"}, {"id": 2, "method": "ok"})
    assert answer_of(peer, 1)["error"]["code"] == INTERNAL_ERROR
    assert answer_of(peer, 2)["result"] == {"ok": True}


# ---------------------------------------------------------------------- answer once


@CONCURRENT
def test_a_message_of_a_mib_or_more_goes_out_whole_in_order_and_tapped_as_bytes(make: Any) -> None:
    # A batch this big is handed to the transport uncopied (the asyncio one keeps it queued
    # while the pipe is full): what is batched next must never change it.
    tapped: list[tuple[type, int]] = []
    rt, peer = make(wire_tap=lambda direction, line: tapped.append((type(line), len(line))) if direction == "out" else None)
    rt.start()
    pad = "x" * rpc_scheduler.HAND_OVER_BYTES
    rt.notify("big", {"pad": pad})
    rt.notify("small", {"i": 1})
    asked = rt.request_later("ask", {"i": 2})
    assert peer.recv() == {"jsonrpc": "2.0", "method": "big", "params": {"pad": pad}}
    assert peer.recv() == {"jsonrpc": "2.0", "method": "small", "params": {"i": 1}}
    request = peer.recv()
    assert (request["method"], request["params"]) == ("ask", {"i": 2})
    peer.send({"id": request["id"], "result": {"ok": True}})
    assert asked.result(WAIT) == {"ok": True}
    assert [t for t, _ in tapped] == [bytes, bytes, bytes] and tapped[0][1] > rpc_scheduler.HAND_OVER_BYTES


@CONCURRENT
def test_a_call_answered_early_is_answered_once(make: Any) -> None:
    rt, peer = make()

    def early(params: Any, call: Any) -> Any:
        assert call.answer({"early": True})
        assert not call.answer({"again": True})
        return {"late": True}

    rt.on_request("early", early)
    rt.start()
    peer.send({"id": 1, "method": "early"})
    assert answer_of(peer, 1)["result"] == {"early": True}
    peer.send({"method": "$/cancel_request", "params": {"requestId": 1}})
    assert peer.nothing_more()
