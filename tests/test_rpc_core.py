"""The sans-I/O core alone (``acp.rpc``: Scheduler and Endpoint): no threads, no pipes, no clock.

Every rule the runtimes carry out is decided here, so it is checked here once, with a
deterministic step driver (tests/helpers/core_driver.py): ids and pending calls, refusals,
``$/cancel_request``, bad input and its rate-limited log, answer-once on every path, the
ordering rule (nothing acted on ahead of an earlier notification of its order), the deadlock
rule, lanes and the gate, backpressure, batched writes, deadlines, end of input, graceful and
plain close; then hypothesis-generated interleavings of all of it.
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp import rpc
from acp.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    ConnectionClosedError,
    RequestCancelledError,
    RequestError,
    RequestTimeoutError,
)
from acp.rpc import scheduler as sched
from tests.helpers.core_driver import (
    DRAIN,
    EOF,
    GATE,
    Side,
    cancel,
    line,
    note,
    request,
    result,
    wire,
)


class Point(msgspec.Struct):
    x: int
    y: int = 0


def echo(params: Any, call: Any) -> Any:
    return params


def noop(params: Any) -> None:
    return None


def error_of(msg: dict[str, Any]) -> tuple[Any, int, str]:
    return msg["id"], msg["error"]["code"], msg["error"]["message"]


# ---------------------------------------------------------------------- a round trip


def test_a_request_goes_and_its_answer_comes_back() -> None:
    client, agent = Side("client"), Side("agent")
    agent.sched.on_request("echo", echo, Point)
    pending = client.call("echo", Point(1, 2), Point)
    assert client.sched.endpoint.pending == {pending.id: pending}
    agent.receive(bytes(client.out))
    [start] = agent.started
    call, handler, _raw, params = start
    assert (call.id, call.method, params) == (pending.id, "echo", rpc.UNDECODED)
    fn, args = agent.sched.endpoint.request_params(start)
    assert fn is echo and args == (Point(1, 2), call)
    assert agent.answer(start, fn(*args))
    client.receive(bytes(agent.out))
    assert client.completed == [pending] and client.sched.endpoint.pending == {}
    assert rpc.Endpoint.outcome(pending) == Point(1, 2) and call.is_answered


def test_an_error_answer_raises_in_the_caller_with_code_message_data() -> None:
    client = Side()
    pending = client.call("fail")
    client.receive(line({"id": pending.id, "error": {"code": -32001, "message": "nope", "data": {"why": 1}}}))
    with pytest.raises(RequestError) as info:
        rpc.Endpoint.outcome(pending)
    assert (info.value.code, info.value.message, info.value.data) == (-32001, "nope", {"why": 1})


def test_ids_count_up_from_one_and_are_never_reused() -> None:
    side = Side()
    calls = [side.call("m", {"a": 1}) for _ in range(3)]
    assert [p.id for p in calls] == [1, 2, 3]
    side.sched.abandon(calls[1], RequestTimeoutError("x"))
    side.receive(result(3, {}))
    assert side.call("m").id == 4
    assert side.written()[0] == {"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"a": 1}}


@pytest.mark.parametrize("msg_id", ['"1"', "null", "1.0", "true"])
def test_an_answer_naming_no_int_id_completes_nothing(msg_id: str) -> None:
    side = Side()
    side.call("m")
    side.receive(b'{"jsonrpc":"2.0","id":' + msg_id.encode() + b',"result":{}}\n')
    assert side.completed == [] and list(side.sched.endpoint.pending) == [1]


def test_params_that_cannot_be_encoded_leave_nothing_pending() -> None:
    side = Side()
    with pytest.raises(TypeError):
        side.call("m", {"x": object()})
    assert side.sched.endpoint.pending == {}


def test_a_late_answer_to_an_abandoned_call_is_dropped() -> None:
    side = Side()
    pending = side.call("slow")
    side.take_written()
    data = side.sched.abandon(pending, RequestTimeoutError("late"))
    assert data is not None and wire(data) == [{"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}}]
    assert side.sched.abandon(pending, RequestTimeoutError("again")) is None  # already done
    side.receive(result(pending.id, {"late": True}))
    assert side.completed == [] and isinstance(pending.error, RequestTimeoutError) and pending.raw is None


# ---------------------------------------------------------------------- refusals and bad input


def test_a_duplicate_id_is_refused_while_the_first_runs() -> None:
    side = Side()
    side.sched.on_request("m", echo)
    side.receive(request(1, "m") + request(1, "m"))
    [start] = side.started
    assert [error_of(m) for m in side.take_written()] == [(1, INVALID_REQUEST, "Invalid request")]
    assert side.sched.endpoint.inbound == {1: start[0]}
    side.answer(start, {})
    side.receive(request(1, "m"))  # answered: the id is free again
    assert len(side.started) == 2


@pytest.mark.parametrize("register", ["nothing", "notification"])
def test_an_unknown_method_is_refused(register: str) -> None:
    side = Side()
    if register == "notification":
        side.sched.on_notification("m", noop)  # a notification method called as a request
    side.receive(request(3, "m"))
    [refusal] = side.written()
    assert refusal["error"] == {"code": METHOD_NOT_FOUND, "message": "Method not found", "data": {"method": "m"}}
    assert side.sched.endpoint.inbound == {} and side.started == []


def test_the_fallback_takes_unknown_requests_with_their_method() -> None:
    side = Side()
    fallback = lambda method, params, call: None  # noqa: E731
    side.sched.on_unknown_request(fallback)
    side.receive(request(3, "ext/x", {"a": [1]}))
    [start] = side.started
    assert side.sched.endpoint.request_params(start) == (fallback, ("ext/x", {"a": [1]}, start[0]))


def test_bad_params_found_when_the_handler_starts_raise_the_error_to_answer() -> None:
    side = Side()
    side.sched.on_request("m", echo, Point)
    side.sched.on_unknown_request(lambda method, params, call: None)
    side.receive(request(1, "m", {"y": 1}) + b'{"jsonrpc":"2.0","id":2,"method":"m","params":{"x":"\xff"}}\n'
                 + b'{"jsonrpc":"2.0","id":3,"method":"other","params":{"x":"\xff"}}\n')
    codes = []
    for start in side.started:
        with pytest.raises(RequestError) as info:
            side.sched.endpoint.request_params(start)
        codes.append(info.value.code)
        assert side.sched.request_failed(start[0], info.value) is not None
    assert codes == [INVALID_PARAMS, PARSE_ERROR, PARSE_ERROR] and side.sched.endpoint.inbound == {}


def test_other_invalid_lines_are_answered_and_malformed_answers_fail_their_caller() -> None:
    side = Side()
    pending = side.call("m")
    side.take_written()
    side.receive(b"{not json\n" + line({"id": 4, "method": 5})
                 + line({"id": pending.id, "result": 1, "error": {"code": 1, "message": "both"}})
                 + line({"id": "s", "result": 1, "error": {"code": 1, "message": "x"}}))
    parse, invalid = side.written()  # the malformed answers are never answered back
    assert error_of(parse) == (None, PARSE_ERROR, "Parse error")
    assert error_of(invalid) == (4, INVALID_REQUEST, "Invalid request") and invalid["error"]["data"]["reason"]
    assert side.completed == [pending]
    with pytest.raises(RequestError, match="malformed answer from the peer") as info:
        rpc.Endpoint.outcome(pending)
    assert info.value.code == INTERNAL_ERROR


def test_notification_params_that_do_not_decode_are_dropped_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    side = Side()
    side.sched.on_notification("n", noop, Point)
    with caplog.at_level(logging.WARNING, "acp.rpc"):
        side.receive(note("n", {"x": "no"}) + note("unknown") + note("n", {"x": 1}))
    side.drain()
    assert side.handled == [("n", Point(1))] and side.written() == []
    assert "n notification with invalid params" in caplog.text
    unknown: list[Any] = []
    side.sched.on_unknown_notification(lambda method, params: unknown.append((method, params)))
    side.receive(note("ext/n", [1]))
    side.drain()
    assert side.handled[-1] == ("ext/n", [1])


_ANSWER = b'{"jsonrpc":"2.0","id":1,"result":{"a":1}}'


@pytest.mark.parametrize(
    "reads",
    [
        [_ANSWER + b"\n"],
        [_ANSWER + b"\r\n"],
        [_ANSWER + b" \n"],
        [b'{"jsonrpc":"2.0","method":"n","params":{"i":1}}\n'],
        [b'{"jsonrpc":"2.0","id":"x","method":"m","params":{}}\n'],
        [b"{nonsense\n"],
        [b"{}\n"],
        [_ANSWER[:20], _ANSWER[20:] + b"\n"],
        # The tail of a held line that looks like a line of its own.
        [b'{"jsonrpc":"2.0","id":1,"result":', b'{"a":1}}\n'],
        [_ANSWER + b"\n" + _ANSWER + b"\n"],
        [b"\x1b[0m" + _ANSWER + b"\n"],
        # Over the cap (60 bytes here): reported, never decoded.
        [b'{"jsonrpc":"2.0","method":"n","params":{"pad":"' + b"x" * 60 + b'"}}\n', _ANSWER + b"\n"],
        # Exactly at the cap with the newline, and one byte under.
        [_ANSWER.replace(b'"a":1', b'"a":"' + b"y" * (60 - len(_ANSWER) - 4) + b'"') + b"\n"],
        [_ANSWER.replace(b'"a":1', b'"a":"' + b"y" * (60 - len(_ANSWER) - 3) + b'"') + b"\n"],
        [b"", _ANSWER + b"\n"],
    ],
)
def test_a_read_of_one_line_decodes_as_its_framed_line(reads: list[bytes]) -> None:
    """decode_read takes a read of exactly one whole line as it is, without framing it: what it
    gives is what framing the read and decoding its lines gives, read after read."""
    shortcut = rpc.Scheduler(max_line_bytes=60)
    framed = rpc.Scheduler(max_line_bytes=60)
    shortcut.on_notification("n", noop)
    shortcut.on_request("m", noop)
    framed.endpoint.handlers = shortcut.endpoint.handlers  # (Decoded items name their handler)
    for data in reads:
        assert shortcut.decode_read(data) == framed.decode_lines(framed.frame(data)), data
    assert shortcut.decode_read(b"") == framed.decode_lines(framed.frame(b""))


def test_an_over_long_line_is_reported_in_its_place(caplog: pytest.LogCaptureFixture) -> None:
    side = Side(max_line_bytes=80)
    side.sched.on_notification("n", noop)
    with caplog.at_level(logging.WARNING, "acp.rpc"):
        side.receive(note("n", {"i": 1}) + note("n", {"pad": "x" * 100}) + note("n", {"i": 2}))
    side.drain()
    assert side.handled == [("n", {"i": 1}), ("n", {"i": 2})]
    assert "over the limit" in caplog.text


def test_bad_input_is_logged_in_full_then_counted(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 22.6: a misbehaving peer cannot flood the log; every line is still answered."""
    side = Side()
    with caplog.at_level(logging.WARNING, "acp.rpc"):
        side.receive(b"nonsense\n" * 1500)
        side.eof()
    assert len(side.written()) == 1500
    records = [r.getMessage() for r in caplog.records]
    assert sum("invalid message" in m for m in records) == 10
    assert len(records) <= 16, records  # 10, the switch to counts, at 100 and 1,000, and the end
    assert records[-1].endswith("(1500 in all)")


def test_an_arrival_hook_sees_decoded_params_and_its_refusal_answers() -> None:
    side = Side()
    hooked: list[Any] = []

    def arrived(params: Point, call: Any) -> None:
        hooked.append(params)
        if params.x == 9:
            raise RequestError(-32002, "no such thing", {"x": 9})
        if params.x == 8:
            raise ValueError("a bug")

    side.sched.on_request("m", echo, Point, on_arrival=arrived)
    side.receive(request(1, "m", {"x": "not an int"}) + b'{"jsonrpc":"2.0","id":2,"method":"m","params":{"x":"\xff"}}\n'
                 + request(3, "m", {"x": 9}) + request(4, "m", {"x": 8}) + request(5, "m", {"x": 1}))
    assert hooked == [Point(9), Point(8), Point(1)]  # bad params never reach the hook
    assert [error_of(m)[:2] for m in side.written()] == [
        (1, INVALID_PARAMS), (2, PARSE_ERROR), (3, -32002), (4, INTERNAL_ERROR)]
    [start] = side.started
    assert start[0].id == 5 and start[3] == Point(1)  # decoded once, for the hook and the handler


def test_no_handler_for_cancel_request() -> None:
    with pytest.raises(ValueError, match="handled by the connection itself"):
        rpc.Scheduler().on_notification(rpc.CANCEL_REQUEST, noop)


# ---------------------------------------------------------------------- $/cancel_request and answer once


@pytest.mark.parametrize("call_id", [7, "seven"])
def test_cancel_answers_minus_32800_once_and_names_the_call(call_id: Any) -> None:
    side = Side()
    side.sched.on_request("m", echo)
    side.receive(request(call_id, "m"))
    [start] = side.started
    side.receive(cancel(call_id) + cancel(call_id))
    assert side.cancelled == [start[0]] and start[0].is_answered
    assert [error_of(m) for m in side.take_written()] == [(call_id, REQUEST_CANCELLED, "Request cancelled")]
    assert not side.answer(start, {"late": 1})  # the handler's late answer is dropped


@pytest.mark.parametrize("params", [None, {}, {"requestId": [1]}, {"requestId": {"a": 1}}, {"requestId": 1.0},
                                    {"requestId": True}, {"requestId": None}, [1], {"requestId": 99}])
def test_a_malformed_or_unknown_cancel_is_ignored(params: Any) -> None:
    side = Side()
    side.sched.on_request("m", echo)
    side.receive(request(1, "m") + note(rpc.CANCEL_REQUEST, params))
    assert side.cancelled == [] and side.written() == [] and 1 in side.sched.endpoint.inbound


def test_a_cancel_for_a_queued_request_keeps_it_from_starting() -> None:
    side = Side()
    side.sched.on_request("m", echo)
    side.sched.on_notification("n", noop)
    side.receive(note("n") + request(1, "m") + cancel(1))
    assert side.started == [] and [error_of(m)[1] for m in side.written()] == [REQUEST_CANCELLED]
    side.drain()
    assert side.started == []


def _answer(side: Side, call: Any) -> bytes | None:
    return side.sched.answer(call, {"r": 1})


def _cancel(side: Side, call: Any) -> bytes | None:
    before = len(side.out)
    side.receive(cancel(call.id))
    return bytes(side.out[before:]) or None


PATHS: dict[str, Any] = {
    "answer": _answer,
    "answer_error": lambda side, call: side.sched.answer_error(call, -32001, "x"),
    "request_failed": lambda side, call: side.sched.request_failed(call, KeyError("bug")),
    "cancelled_task": lambda side, call: side.sched.request_cancelled(call, False),
    "cancel": _cancel,
    "close": lambda side, call: side.sched.close() and None,
}


@pytest.mark.parametrize("first", list(PATHS))
@pytest.mark.parametrize("second", list(PATHS))
def test_only_the_first_path_to_claim_a_call_answers_it(first: str, second: str, caplog: pytest.LogCaptureFixture) -> None:
    side = Side()
    side.sched.on_request("m", echo)
    side.receive(request(1, "m"))
    call = side.started[0][0]
    out = [PATHS[first](side, call), PATHS[second](side, call)]
    assert call.is_answered and side.sched.endpoint.inbound == {}
    assert out[1] is None
    assert (out[0] is None) == (first == "close")


# ---------------------------------------------------------------------- ordering, connection-wide


def test_an_answer_waits_for_the_notifications_read_before_it() -> None:
    side = Side()
    side.sched.on_notification("n", noop)
    first = side.call("a")
    second = side.call("b")
    side.receive(result(first.id, 1))
    assert side.completed == [first]  # nothing ahead: completed by the reader itself
    side.receive(note("n", {"i": 1}) + result(second.id, 2))
    assert side.completed == [first] and list(side.drainers) == [GATE]
    side.step(GATE)  # takes the batch
    side.step(GATE)  # handles the notification
    assert side.handled == [("n", {"i": 1})] and side.completed == [first]
    side.step(GATE)  # then delivers the answer
    assert side.completed == [first, second]
    side.drain()
    assert side.drainers == {}


def test_a_request_starts_after_the_notifications_read_before_it() -> None:
    side = Side()
    side.sched.on_notification("n", noop)
    side.sched.on_request("m", echo)
    side.receive(request(1, "m"))
    assert len(side.started) == 1  # nothing ahead: started at once
    side.receive(note("n") + request(2, "m"))
    assert len(side.started) == 1
    side.drain()
    assert [s[0].id for s in side.started] == [1, 2] and side.handled == [("n", None)]


def test_while_a_drainer_is_mid_batch_everything_new_queues_behind_it() -> None:
    side = Side()
    side.sched.on_notification("n", noop)
    pending = side.call("a")
    side.receive(note("n", {"i": 1}))
    side.step(GATE)  # batch taken, not handled yet
    side.receive(result(pending.id, 1))  # the gate is busy: queued
    assert side.completed == []
    side.drain()
    assert side.handled == [("n", {"i": 1})] and side.completed == [pending]


def test_the_deadlock_rule_completes_a_serial_call_at_once() -> None:
    side = Side()
    side.sched.on_notification("n", noop)
    side.receive(note("n"))
    side.step(GATE)
    serial = side.call("ask", serial=True)  # made while handling that notification
    plain = side.call("other")
    side.receive(note("n") + result(plain.id, 1) + result(serial.id, 2))
    assert side.completed == [serial]  # not behind the notification its caller is handling
    side.drain()
    assert side.completed == [serial, plain]


def test_an_immediate_notification_runs_in_its_place() -> None:
    side = Side()
    order: list[str] = []
    side.sched.on_notification("n", lambda p: order.append("queued"))
    side.sched.on_notification("now", lambda p: order.append("immediate"), immediate=True)
    side.sched.on_request("m", echo, on_arrival=lambda p, call: order.append("arrival"))
    side.receive(note("n") + request(1, "m") + note("now") + request(2, "m"))
    assert order == ["arrival", "immediate", "arrival"]  # each at its place in the read
    side.drain()
    assert order[-1] == "queued"


def test_one_read_of_updates_is_one_queued_item() -> None:
    from acp import schema
    from tests.helpers.one_go import chunk_line

    side = Side()
    side.sched.on_notification("session/update", noop, schema.SessionNotification)
    side.receive(b"".join(chunk_line("s", str(i)) for i in range(50)))
    assert side.sched.queued == 50 and len(side.sched.gate) == 1
    side.drain()
    assert [p.update.content.text for _, p in side.handled] == [str(i) for i in range(50)]
    assert side.sched.queued == 0


# ---------------------------------------------------------------------- ordering by session


def by_session() -> Side:
    side = Side(ordering="session")
    side.sched.on_notification("n", noop)
    side.sched.on_request("m", echo)
    return side


def test_sessions_get_lanes_drained_apart_in_their_own_order() -> None:
    side = by_session()
    side.receive(note("n", {"sessionId": "a", "i": 1}) + note("n", {"sessionId": "b", "i": 1})
                 + note("n", {"sessionId": "a", "i": 2}))
    assert set(side.drainers) == {"a", "b"}
    while side.step("b"):
        pass
    assert side.handled == [("n", {"sessionId": "b", "i": 1})]  # b never waited for a
    side.drain()
    a = [p["i"] for _, p in side.handled if p["sessionId"] == "a"]
    assert a == [1, 2]


def test_an_answer_is_ordered_with_its_requests_session() -> None:
    side = by_session()
    in_a = side.call("x", {"sessionId": "a"})
    in_b = side.call("x", {"sessionId": "b"})
    side.receive(note("n", {"sessionId": "a"}) + result(in_b.id, 1) + result(in_a.id, 2))
    assert side.completed == [in_b]  # b has nothing queued: at once; a's waits for a's note
    side.drain()
    assert side.completed == [in_b, in_a]


def test_a_session_less_message_waits_for_every_lane_and_holds_what_follows() -> None:
    side = by_session()
    side.receive(note("n", {"sessionId": "a"}) + request(1, "m") + note("n", {"sessionId": "b"}))
    assert side.started == [] and set(side.drainers) == {"a"}  # the request and b wait in the gate
    side.drain()
    assert [s[0].id for s in side.started] == [1]
    assert [p["sessionId"] for _, p in side.handled] == ["a", "b"]


def test_a_request_of_an_idle_session_starts_at_once() -> None:
    side = by_session()
    side.receive(note("n", {"sessionId": "a"}) + request(1, "m", {"sessionId": "b"}))
    assert [s[0].id for s in side.started] == [1]


# ---------------------------------------------------------------------- backpressure


def test_backpressure_pauses_at_the_limit_and_resumes_at_half() -> None:
    side = Side(max_queued=10)
    side.sched.on_notification("n", noop)
    side.receive(b"".join(note("n", {"i": i}) for i in range(10)))
    assert side.sched.paused
    while side.sched.paused:
        side.step(GATE)
    assert side.sched.queued < 5
    side.drain()
    assert len(side.handled) == 10


def test_backpressure_never_holds_the_reader_while_a_drainer_waits_for_an_answer() -> None:
    side = Side(max_queued=4)
    side.sched.on_notification("n", noop)
    side.receive(note("n"))
    side.step(GATE)
    side.call("ask", serial=True)
    side.receive(b"".join(note("n", {"i": i}) for i in range(10)))
    assert not side.sched.paused  # only the reader can bring the answer in
    side.receive(note("n"))
    assert not side.sched.paused


# ---------------------------------------------------------------------- writes


def test_notifications_are_batched_and_written_before_the_next_request_or_answer() -> None:
    side = Side()
    side.sched.on_request("m", echo)
    assert side.sched.notify("a", {}) == sched.FLUSH_SOON  # the first of a batch
    assert side.sched.notify("b", {}) == sched.FLUSH_LATER
    side.receive(request(1, "m"))
    side.answer(side.started[0], {})
    assert [m.get("method", m.get("id")) for m in wire(bytes(side.out))] == ["a", "b", 1]
    side.out.clear()
    side.sched.notify("c", {})
    side.call("x")
    assert [m["method"] for m in wire(bytes(side.out))] == ["c", "x"]


def test_a_big_batch_is_written_at_once() -> None:
    side = Side()
    hints = [side.sched.notify("n", {"pad": "x" * 1000}) for _ in range(70)]
    assert sched.FLUSH_NOW in hints and len(side.sched.data_to_send()) > 0


def test_a_batch_of_a_mib_or_more_is_handed_over_uncopied_and_the_next_one_starts_afresh() -> None:
    side = Side()
    side.sched.on_request("m", echo)
    side.sched.notify("small", {})
    small = side.sched.data_to_send()
    assert type(small) is bytes and wire(small)[0]["method"] == "small"  # a copy: the buffer stays ours
    pad = "x" * sched.HAND_OVER_BYTES
    assert side.sched.notify("big", {"pad": pad}) == sched.FLUSH_NOW
    big = side.sched.data_to_send()
    assert type(big) is bytearray  # the buffer itself: a copy would hold the message twice
    kept = bytes(big)
    side.sched.notify("next", {})
    side.receive(request(1, "m"))
    # The answer after a big batch goes out with it, handed over too.
    side.sched.notify("big2", {"pad": pad})
    answer = side.sched.answer(side.started[0][0], {"ok": True})
    assert type(answer) is bytearray
    assert big == kept  # later batches never touched the one handed over
    assert [m.get("method", m.get("id")) for m in wire(bytes(big))] == ["big"]
    assert [m.get("method", m.get("id")) for m in wire(bytes(answer))] == ["next", "big2", 1]
    assert side.sched.data_to_send() == b""


def test_results_that_cannot_be_encoded_answer_internal_error() -> None:
    side = Side()
    side.sched.on_request("m", echo)
    side.receive(request(1, "m") + request(2, "m") + request(3, "m"))
    one, two, three = (s[0] for s in side.started)
    out = (side.sched.answer(one, {"x": object()}) or b"") + (side.sched.answer_error(two, -1, "x", {"x": object()}) or b"")
    out += side.sched.answer(three, None) or b""
    assert [m.get("error", m.get("result")) for m in wire(out)] == [
        {"code": INTERNAL_ERROR, "message": "Internal error"}, {"code": INTERNAL_ERROR, "message": "Internal error"}, {}]


def test_notify_after_close_raises() -> None:
    side = Side()
    side.sched.close()
    with pytest.raises(ConnectionClosedError):
        side.sched.notify("n", {})


# ---------------------------------------------------------------------- deadlines


def test_deadlines_expire_in_order_with_their_cancel_lines() -> None:
    side = Side()
    long = side.call("long", timeout=30, now=100.0)
    shorts = [side.call("short", timeout=0.05, now=100.0 + i) for i in range(3)]
    side.take_written()
    assert side.sched.next_deadline() == 100.05
    assert side.sched.expire(100.04) == []
    assert side.sched.expire(101.05) == shorts[:2]
    assert [m["params"]["requestId"] for m in side.take_written()] == [2, 3]
    assert all(isinstance(p.error, RequestTimeoutError) for p in shorts[:2])
    side.receive(result(shorts[2].id, 1))  # answered in time: no longer timed
    assert side.sched.next_deadline() == 130.0
    side.receive(result(long.id, 1))
    assert side.sched.next_deadline() is None and side.completed == [shorts[2], long]


def test_abandoning_a_call_gives_its_error_and_cancel_line_once() -> None:
    side = Side()
    pending = side.call("slow")
    side.take_written()
    data = side.sched.abandon(pending, side.sched.cancelled_error(pending))
    assert data is not None and wire(data)[0]["method"] == "$/cancel_request"
    assert isinstance(pending.error, RequestCancelledError)
    side.sched.close()
    other = Side()
    later = other.call("x")
    other.sched.close()  # failed by the close: nothing left to abandon
    assert other.sched.abandon(later, RequestTimeoutError("x")) is None


# ---------------------------------------------------------------------- the end


def test_end_of_input_fails_pending_calls_behind_what_was_read_before_it() -> None:
    # The end of input answers a pending call in order, as an error answer would: after the
    # notifications read before it (an agent's last update before it crashed).
    side = Side()
    side.sched.on_notification("n", noop)
    side.sched.on_request("m", echo)
    pending = side.call("m")
    side.receive(request(1, "m") + note("n"))
    assert side.eof() == [] and pending.error is None
    assert side.marks == []
    side.drain()
    assert side.handled == [("n", None)] and side.marks == [EOF]
    assert side.completed == [pending] and str(pending.error) == "connection closed by peer"
    assert side.sched.answer(side.started[0][0], {}) is not None  # still answerable
    with pytest.raises(ConnectionClosedError, match="connection closed by peer"):
        side.call("m")


def test_end_of_input_fails_a_call_at_once_with_nothing_queued_and_a_serial_call_always() -> None:
    side = Side()
    alone = side.call("m")
    assert side.eof() == [alone] and str(alone.error) == "connection closed by peer"
    # A call made by an ordered notification's handler fails at once even behind queued
    # notifications: its drainer waits for it (the deadlock rule).
    other = Side()
    other.sched.on_notification("n", noop)
    waiting, serial = other.call("m"), other.call("s", serial=True)
    other.receive(note("n"))
    assert other.eof() == [serial] and isinstance(serial.error, ConnectionClosedError)
    other.drain()
    assert other.completed == [waiting] and isinstance(waiting.error, ConnectionClosedError)


def test_graceful_close_fails_unanswered_calls_and_drains_what_arrived() -> None:
    """Issue 22.6: every call pending when a close starts fails with ConnectionClosedError,
    whatever the peer does next; an answer that had already arrived is still delivered."""
    side = Side()
    side.sched.on_notification("n", noop)
    side.sched.on_request("m", echo)
    answered, waiting = side.call("a"), side.call("b")
    side.receive(request(1, "m") + note("n") + result(answered.id, 1))
    failed, calls = side.sched.start_closing()
    assert failed == [waiting] and isinstance(waiting.error, ConnectionClosedError)
    assert [c.id for c in calls] == [1]
    side._wake()
    side.receive(result(waiting.id, 2) + request(2, "m"))  # too late; and refused
    side.drain()
    assert side.completed == [answered] and side.marks == [DRAIN]
    assert error_of(side.written()[-1]) == (2, INTERNAL_ERROR, "Connection closing")
    during = side.call("cleanup")  # a running handler's own calls still work
    side.receive(result(during.id, 3))
    assert side.completed == [answered, during]


def test_close_takes_every_call_in_both_directions_and_drops_the_queue() -> None:
    side = Side()
    side.sched.on_notification("n", noop)
    side.sched.on_request("m", echo)
    out = side.call("out")
    side.receive(request(1, "m") + note("n") + request("two", "m"))
    failed, inbound = side.sched.close()
    assert failed == [out] and str(out.error) == "connection closed"
    assert sorted(str(c.id) for c in inbound) == ["1", "two"] and all(c.is_answered for c in inbound)
    assert side.sched.take(GATE) is None and side.sched.queued == 0
    with pytest.raises(ConnectionClosedError, match="^connection closed$"):
        side.call("m")


# ---------------------------------------------------------------------- interleavings


ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("note"), st.sampled_from([None, "a", "b"])),
        st.tuples(st.just("request"), st.sampled_from([None, "a", "b"])),
        st.tuples(st.just("call"), st.sampled_from([None, "a", "b"])),
        st.tuples(st.just("answer_call"), st.integers(0, 20)),
        st.tuples(st.just("answer_inbound"), st.integers(0, 20)),
        st.tuples(st.just("peer_cancel"), st.integers(0, 20)),
        st.tuples(st.just("abandon"), st.integers(0, 20)),
        st.tuples(st.just("step"), st.integers(0, 3)),
        st.tuples(st.just("serial_call"), st.sampled_from([None, "a"])),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ordering=st.sampled_from(["connection", "session"]), actions=ACTIONS, close_at=st.integers(0, 80),
       graceful=st.booleans())
def test_any_interleaving_keeps_order_answers_once_and_loses_nothing(
    ordering: str, actions: list[tuple[str, Any]], close_at: int, graceful: bool
) -> None:
    """Arrivals, drainer steps, answers, cancels, timeouts and a close in any order: each
    session's notifications are handled in arrival order (all of them, connection-wide); an
    answer completes its caller, and a request starts, only after every earlier notification
    of its order was handled (unless the deadlock rule says at once); every inbound request is
    answered at most once on the wire; and at the end nothing is lost."""
    side = Side(ordering=ordering, max_queued=8)  # type: ignore[arg-type]
    sched_ = side.sched
    arrivals: list[tuple[Any, int]] = []  # (session, index) of each notification, arrival order
    seen_at: dict[int, int] = {}  # our call id -> how many notifications had arrived before its answer
    start_seen: dict[Any, int] = {}  # inbound id -> notifications arrived before it
    key_of_call: dict[int, Any] = {}
    key_of_request: dict[Any, Any] = {}
    calls: list[rpc.Pending] = []
    answered_by_peer: set[int] = set()
    next_id = [1]

    def order_key(session: Any) -> Any:
        return session if ordering == "session" else None

    sched_.on_notification("n", noop)
    sched_.on_request("m", echo)
    closed = False

    def check_done_before(key: Any, count: int) -> None:
        """Every notification of ``key``'s order among the first ``count`` arrivals was handled."""
        handled = {p["i"] for _, p in side.handled}
        for session, index in arrivals[:count]:
            if key is None or session is None or order_key(session) == key:
                assert index in handled, f"acted on before notification {index} ({session}) was handled"

    completed_checked = 0
    started_checked = 0
    for step, (kind, arg) in enumerate(actions):
        if step == close_at and not closed:
            closed = True
            if graceful:
                failed, _ = sched_.start_closing()
                side._wake()
            else:
                failed, _ = sched_.close()
                side.drainers.clear()
            assert all(isinstance(p.error, ConnectionClosedError) for p in failed)
        if kind == "note":
            params: dict[str, Any] = {"i": len(arrivals)}
            if arg is not None:
                params["sessionId"] = arg
            arrivals.append((arg, len(arrivals)))
            side.receive(note("n", params))
        elif kind == "request":
            call_id = f"r{next_id[0]}"
            next_id[0] += 1
            start_seen[call_id] = len(arrivals)
            key_of_request[call_id] = order_key(arg)
            side.receive(request(call_id, "m", {"sessionId": arg} if arg else None))
        elif kind in ("call", "serial_call"):
            if sched_.is_closed:
                continue
            pending = side.call("x", {"sessionId": arg} if arg else None, serial=kind == "serial_call")
            calls.append(pending)
            key_of_call[pending.id] = "now" if kind == "serial_call" else order_key(arg)
        elif kind == "answer_call" and calls:
            pending = calls[arg % len(calls)]
            if pending.id not in answered_by_peer:
                answered_by_peer.add(pending.id)
                seen_at[pending.id] = len(arrivals)
                side.receive(result(pending.id, pending.id))
        elif kind == "answer_inbound" and side.started:
            side.answer(side.started[arg % len(side.started)], {})
        elif kind == "peer_cancel" and start_seen:
            ids = list(start_seen)
            side.receive(cancel(ids[arg % len(ids)]))
        elif kind == "abandon" and calls:
            sched_.abandon(calls[arg % len(calls)], RequestTimeoutError("t"))
        elif kind == "step" and side.drainers:
            keys = list(side.drainers)
            side.step(keys[arg % len(keys)])
        # Check what was acted on since the last step.
        for pending in side.completed[completed_checked:]:
            key = key_of_call[pending.id]
            if key != "now":
                check_done_before(key, seen_at[pending.id])
        completed_checked = len(side.completed)
        for start in side.started[started_checked:]:
            check_done_before(key_of_request[start[0].id], start_seen[start[0].id])
        started_checked = len(side.started)
    # The end: drain everything that is left, answer what runs.
    side.drain()
    for start in side.started:
        side.answer(start, {})
    # Each session's notifications in arrival order; all of them unless a plain close dropped them.
    handled = [p for _, p in side.handled]
    # A notification is handled only after every earlier one of its order: all of them
    # connection-wide; by session, the earlier ones of its session and every session-less one
    # (which holds everything after it), and a session-less one after everything before it.
    position = {p["i"]: n for n, p in enumerate(handled)}
    for later in handled:
        for session, index in arrivals[: later["i"]]:
            mine = later.get("sessionId")
            if ordering == "connection" or session is None or mine is None or session == mine:
                assert index in position and position[index] < position[later["i"]], (index, later)
    if not (closed and not graceful):
        assert sorted(p["i"] for p in handled) == list(range(len(arrivals)))
    # Answer once: at most one answer per inbound id on the wire; every started one answered.
    answers: dict[Any, int] = {}
    for msg in side.written():
        if "id" in msg and "method" not in msg:
            answers[msg["id"]] = answers.get(msg["id"], 0) + 1
    assert all(n == 1 for n in answers.values()), answers
    if not closed:
        assert {s[0].id for s in side.started} <= set(answers)
    # Every call ended exactly once: completed (answer), abandoned, or failed by the end.
    assert len(side.completed) == len({p.id for p in side.completed})
    for pending in calls:
        done = pending in side.completed or pending.error is not None
        assert done or pending.id in sched_.endpoint.pending
        assert not (pending in side.completed and pending.id in sched_.endpoint.pending)


# ---------------------------------------------------------------------- payloads and one pass


def test_results_decode_as_the_call_asked() -> None:
    side = Side()
    typed, plain = side.call("m", None, Point), side.call("m")
    assert rpc.Endpoint.decode_result(typed, msgspec.Raw(b'{"x": 2}')) == Point(2)
    assert rpc.Endpoint.decode_result(plain, msgspec.Raw(b'{"x": 2}')) == {"x": 2}
    with pytest.raises(RequestError, match="m: malformed result") as info:
        rpc.Endpoint.decode_result(typed, msgspec.Raw(b'{"x": "no"}'))
    assert info.value.code == INTERNAL_ERROR
    assert rpc.decoder_for(Point) is rpc.decoder_for(Point) and rpc.decoder_for(None) is rpc.ANY_DECODER


def test_typed_decode_keeps_the_lenient_rebuild_and_the_empty_payloads() -> None:
    from acp import schema

    handler = rpc.Handler(print, schema.SessionNotification, True)
    update = b'{"sessionUpdate":"tool_call","toolCallId":"t","title":"x","status":7}'
    value = handler.decode(msgspec.Raw(b'{"sessionId":"s","update":' + update + b"}"))
    assert isinstance(value.update, schema.ToolCall) and value.update.status is None  # default-on-error
    empty = rpc.Handler(print, schema.ListSessionsRequest, False)
    for raw in (b"", b"{}", b"null"):
        assert empty.decode(msgspec.Raw(raw)) == schema.ListSessionsRequest()
    with pytest.raises(msgspec.ValidationError):
        handler.decode(msgspec.Raw(b'{"sessionId":5}'))
    side = Side()
    pending = side.call("session/new", None, schema.NewSessionResponse)
    assert rpc.Endpoint.decode_result(pending, msgspec.Raw(b'{"sessionId":"s","modes":7}')).session_id == "s"


def test_the_hot_notification_gets_a_one_pass_decode_only_with_a_typed_handler() -> None:
    from acp import schema

    ep = rpc.Scheduler().endpoint
    assert ep.one_pass is None
    ep.on_notification(rpc.HOT_NOTIFICATION, print)  # untyped: nothing to fuse
    assert ep.one_pass is None
    ep.on_notification(rpc.HOT_NOTIFICATION, print, schema.SessionNotification, immediate=True)
    assert ep.one_pass is None
    ep.on_notification("other", print, schema.SessionNotification)
    assert ep.one_pass is None
    ep.on_notification(rpc.HOT_NOTIFICATION, print, schema.SessionNotification)
    assert ep.one_pass is not None and ep.one_pass.handler is ep.handlers[rpc.HOT_NOTIFICATION]
    ep.on_request(rpc.HOT_NOTIFICATION, print)  # replaced by a request handler
    assert ep.one_pass is None


def test_one_pass_decodes_what_the_general_path_would_and_misses_the_rest() -> None:
    from acp import schema

    ep = rpc.Scheduler().endpoint
    ep.on_notification(rpc.HOT_NOTIFICATION, print, schema.SessionNotification)
    one_pass = ep.one_pass
    assert one_pass is not None
    update = b'{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}'
    good = b'{"jsonrpc":"2.0","method":"session/update","params":' + update + b"}"
    assert good.startswith(one_pass.prefix)
    general = rpc.decode_line(good)
    assert isinstance(general, rpc.Notification)
    assert one_pass.decode(good) == ep.handlers[rpc.HOT_NOTIFICATION].decode(general.params)
    lenient = b'{"sessionUpdate":"tool_call","toolCallId":"t","title":"x","status":7}'
    misses = [
        b'{"jsonrpc":"2.0","method":"session/update","params":' + update + b',"id":1}',  # a request
        b'{"jsonrpc":"2.0","method":"session/update","params":' + update + b',"extra":1}',
        b'{"jsonrpc":"2.0","method":"session/update","params":' + update + b',"jsonrpc":"1.0"}',
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":' + lenient + b"}}",
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":5}}',
        b'{"jsonrpc":"2.0","method":"session/update","params":null}',
        b'{"jsonrpc":"2.0","method":"session/update"}',
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s",',  # not JSON
        b'{"jsonrpc":"2.0","method":"session/update","params":' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"jsonrpc":"2.0","method":"session/update","params":' + update + b',"method":"other"}',
    ]
    for bad in misses:
        assert one_pass.decode(bad) is rpc.MISS, bad[:120]
    assert one_pass.decode_lines([good, good, good]) == [one_pass.decode(good)] * 3
    for bad in misses:
        assert one_pass.decode_lines([good, bad, good]) is rpc.MISS, bad[:120]
    assert one_pass.decode_lines([good, rpc.LineTooLong(10**9), good]) is rpc.MISS
    answer = b'{"jsonrpc":"2.0","id":1,"result":{}}'
    assert one_pass.decode_read([good, good]) == [one_pass.decode(good)] * 2
    for read in ([], [answer], [good, answer], [answer, good], [rpc.LineTooLong(5), good], [good, rpc.LineTooLong(5)]):
        assert one_pass.decode_read(read) is rpc.MISS, read
    rebuilt = ep.handlers[rpc.HOT_NOTIFICATION].decode(rpc.decode_line(misses[3]).params)  # type: ignore[union-attr]
    assert isinstance(rebuilt.update, schema.ToolCall) and rebuilt.update.status is None


# ---------------------------------------------------------------------- layering


FORBIDDEN = ("threading", "asyncio", "socket", "selectors", "time", "subprocess", "concurrent",
             "acp.transport", "acp.connection", "acp.aio")


def _imports(path: Path, package: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def test_the_rpc_layer_imports_no_runtime() -> None:
    root = Path(rpc.__file__).parent
    modules = sorted(root.glob("*.py"))
    assert {p.name for p in modules} >= {"__init__.py", "endpoint.py", "framing.py", "messages.py", "scheduler.py"}
    for path in modules:
        for name in _imports(path, "acp.rpc"):
            bad = [f for f in FORBIDDEN if name == f or name.startswith(f + ".")]
            assert not bad, f"{path.name} imports {name}: acp/rpc must stay sans-I/O"


def test_the_layering_check_resolves_relative_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from ..transport import base\nfrom . import framing\nimport time\n")
    names = _imports(module, "acp.rpc")
    assert {"acp.transport", "acp.transport.base", "acp.rpc", "acp.rpc.framing", "time"} <= names


@pytest.mark.parametrize("runtime", ["threads", "asyncio"])
def test_each_runtime_call_sets_every_field_of_an_inbound_request(runtime: str) -> None:
    """Both runtimes' calls set the core's fields themselves (one __init__ call less per
    request): a field added to rpc.InboundRequest must be added to them too."""
    from acp.aio import AsyncInboundCall
    from acp.inbound import InboundCall

    owner: Any = object()
    call = InboundCall(owner, 7, "m") if runtime == "threads" else AsyncInboundCall(owner, 7, "m")
    base = rpc.InboundRequest(7, "m")
    fields = [name for name in rpc.InboundRequest.__slots__ if name != "__weakref__"]
    assert fields and all(getattr(call, name) == getattr(base, name) for name in fields)
